"""OffsetDelete (key 47), version 0.

Behaviour: removes committed offsets of a group (tombstones persisted before the answer). Partitions
the cluster does not know get UNKNOWN_TOPIC_OR_PARTITION; a partition of a topic the group's
consumers still subscribe to GROUP_SUBSCRIBED_TO_TOPIC; a non-consumer group with members
NON_EMPTY_GROUP (top level); an unknown group GROUP_ID_NOT_FOUND (top level). An Empty group left with
no offsets is removed, as in Kafka.
With an authorizer: DELETE on the group (else GROUP_AUTHORIZATION_FAILED) and READ on each topic (else
TOPIC_AUTHORIZATION_FAILED for its partitions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.broker.handlers.offset_commit import partition_exists
from kafkacompat.wire._generated.offset_delete_response import OffsetDeleteResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.offset_delete_request import OffsetDeleteRequest

API_KEY = ApiKey.OFFSET_DELETE
MIN_VERSION = 0
MAX_VERSION = 0

Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
Partition = OffsetDeleteResponse.OffsetDeleteResponsePartition


async def handle(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    results: dict[tuple[str, int], int] = {}
    known: list[tuple[str, int]] = []
    if not allowed(ctx, Op.DELETE, Resource.GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    turn = Turn()  # many topics: other clients run in between (the group's own call stays whole)
    for topic in request.topics:
        await turn.spend()
        topic_allowed = allowed(ctx, Op.READ, Resource.TOPIC, topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if not topic_allowed:
                results[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition_exists(ctx, *tp):
                known.append(tp)
            else:
                results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    runtime = runtime_of(ctx.broker)
    group_id = request.group_id
    if runtime is None:
        return OffsetDeleteResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    try:
        error, per_partition = await runtime.call(
            lambda now: runtime.core.offset_delete(group_id, known, now), key=group_id
        )
    except KafkaError as exc:
        return OffsetDeleteResponse(error_code=exc.code)
    if error != ErrorCode.NONE:
        return OffsetDeleteResponse(error_code=error)
    results.update(per_partition)
    topics = []
    for topic in request.topics:
        await turn.spend()
        partitions = [
            Partition(
                partition_index=p.partition_index,
                error_code=results.get((topic.name, p.partition_index), ErrorCode.NONE),
            )
            for p in topic.partitions
        ]
        topics.append(Topic(name=topic.name, partitions=partitions))
    return OffsetDeleteResponse(error_code=ErrorCode.NONE, topics=topics)
