"""AlterPartitionReassignments (key 45), version 0.

Behaviour (KIP-455): for each partition, a target replica list starts a reassignment, a null one cancels
the reassignment in progress. Cluster mode (on the controller): the assignment in ZooKeeper becomes
target + original replicas with `adding_replicas`/`removing_replicas` recorded; the new replicas copy
the data as followers of the current leader, and once all of them are in the ISR the controller makes
the target the assignment (moving leadership into it if needed, leader epoch + 1) and the removed
replicas drop their logs. Errors per partition: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT
(empty, duplicate or non-live brokers), NO_REASSIGNMENT_IN_PROGRESS (cancel without one); any other
broker answers NOT_CONTROLLER (top level). Single node: this broker is the only possible replica, so a
target of exactly [this broker] is accepted and changes nothing, any other is
INVALID_REPLICA_ASSIGNMENT, and a cancel is NO_REASSIGNMENT_IN_PROGRESS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.wire._generated.alter_partition_reassignments_response import (
    AlterPartitionReassignmentsResponse,
)
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.alter_partition_reassignments_request import (
        AlterPartitionReassignmentsRequest,
    )

API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS
MIN_VERSION = 0
MAX_VERSION = 0

TopicResponse = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
PartitionResponse = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse


async def handle(
    ctx: RequestContext, request: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse:
    broker = ctx.broker
    wanted: dict[tuple[str, int], list[int] | None] = {
        (topic.name, p.partition_index): (None if p.replicas is None else list(p.replicas))
        for topic in request.topics
        for p in topic.partitions
    }
    try:
        results = await broker.replicas.alter_reassignments(wanted)
    except KafkaError as exc:
        return AlterPartitionReassignmentsResponse(
            error_code=exc.code, error_message=exc.message, responses=[]
        )
    by_topic: dict[str, list[Any]] = {}
    for (name, partition), (code, message) in results.items():
        by_topic.setdefault(name, []).append(
            PartitionResponse(partition_index=partition, error_code=code, error_message=message)
        )
    return AlterPartitionReassignmentsResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        responses=[TopicResponse(name=name, partitions=parts) for name, parts in by_topic.items()],
    )
