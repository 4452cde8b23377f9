"""OffsetForLeaderEpoch (key 23), versions 0-4.

Behaviour: for each partition, the end offset of the requested leader epoch, from the log's leader
epoch cache: the log end offset for the current epoch, the start offset of the next higher epoch for an
older one, and (-1, -1) for an epoch above the current one or an empty cache with an older epoch.
This node leads every partition at `broker.leader_epoch()`; a Kafka leader records that epoch in its
cache when it takes over, so the current epoch answers the log end offset even before the first append.
`current_leader_epoch` (v2+; -1 = no check) newer than ours -> UNKNOWN_LEADER_EPOCH, older ->
FENCED_LEADER_EPOCH. Missing topic or partition -> UNKNOWN_TOPIC_OR_PARTITION; an offline log ->
KAFKA_STORAGE_ERROR. Consumers (replica id -1, v3+) and followers get the same answer here. v0 answers
carry no epoch.
With an authorizer, topics the principal may not DESCRIBE get TOPIC_AUTHORIZATION_FAILED; a follower's
request (replica id set) needs CLUSTER_ACTION on the cluster instead (else CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, Resource, allowed, cluster_allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.wire._generated.offset_for_leader_epoch_response import OffsetForLeaderEpochResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
MIN_VERSION = 0
MAX_VERSION = 4

UNDEFINED = -1

TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochEndOffset = OffsetForLeaderEpochResponse.EpochEndOffset


def end_offset_for(partition_log: Any, current_epoch: int, requested_epoch: int) -> tuple[int, int]:
    """(epoch, end offset) of `requested_epoch` in a log led at `current_epoch`."""
    if requested_epoch == current_epoch:
        return current_epoch, partition_log.log_end_offset
    return partition_log.end_offset_for_epoch(requested_epoch)


async def handle(ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    broker = ctx.broker
    topics = []
    # a follower's request (a replica id, v3+) needs CLUSTER_ACTION on the cluster, as in Kafka
    replica = getattr(request, "replica_id", -1) >= 0 and broker.authorizer is not None
    follower_refused = replica and not cluster_allowed(ctx, Op.CLUSTER_ACTION)
    turn = Turn()  # many partitions: other clients run in between (fairness.py)
    for wanted_topic in request.topics:
        name = wanted_topic.topic
        partitions: list[EpochEndOffset] = []
        topics.append(TopicResult(topic=name, partitions=partitions))
        topic = broker.metadata.topic(name)
        for wanted in wanted_topic.partitions:
            await turn.spend()
            index = wanted.partition
            answer = EpochEndOffset(
                error_code=ErrorCode.NONE, partition=index, leader_epoch=UNDEFINED, end_offset=UNDEFINED
            )
            partitions.append(answer)
            try:
                if follower_refused:
                    raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                if not replica and not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if topic is None or not 0 <= index < topic.partitions:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                broker.check_leader(name, index)
                partition_log = broker.partition_log(name, index)
                if partition_log is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                current = broker.leader_epoch(name, index)
                fence = getattr(wanted, "current_leader_epoch", UNDEFINED)
                if fence > current:
                    raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
                if 0 <= fence < current:
                    raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
                answer.leader_epoch, answer.end_offset = end_offset_for(
                    partition_log, current, wanted.leader_epoch
                )
            except KafkaError as exc:
                answer.error_code = exc.code
                answer.leader_epoch, answer.end_offset = UNDEFINED, UNDEFINED
    return OffsetForLeaderEpochResponse(topics=topics)
