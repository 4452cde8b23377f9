"""ListPartitionReassignments (key 46), version 0.

Behaviour (KIP-455): the partitions being reassigned, with their current replicas and the replicas
being added and removed, from ZooKeeper's `/brokers/topics/T` (cluster mode; topics null = all,
otherwise only the named partitions that are being reassigned). A single node never reassigns: the
answer is empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.wire._generated.list_partition_reassignments_response import (
    ListPartitionReassignmentsResponse,
)
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.list_partition_reassignments_request import (
        ListPartitionReassignmentsRequest,
    )

API_KEY = ApiKey.LIST_PARTITION_REASSIGNMENTS
MIN_VERSION = 0
MAX_VERSION = 0

Topic = ListPartitionReassignmentsResponse.OngoingTopicReassignment
Partition = ListPartitionReassignmentsResponse.OngoingPartitionReassignment


async def handle(
    ctx: RequestContext, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    ongoing = ctx.broker.replicas.reassignments()
    if request.topics is not None:
        wanted = {(t.name, p) for t in request.topics for p in t.partition_indexes}
        ongoing = {k: v for k, v in ongoing.items() if k in wanted}
    by_topic: dict[str, list[Any]] = {}
    for (name, partition), (replicas, adding, removing) in sorted(ongoing.items()):
        by_topic.setdefault(name, []).append(
            Partition(
                partition_index=partition,
                replicas=replicas,
                adding_replicas=adding,
                removing_replicas=removing,
            )
        )
    return ListPartitionReassignmentsResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        topics=[Topic(name=name, partitions=parts) for name, parts in by_topic.items()],
    )
