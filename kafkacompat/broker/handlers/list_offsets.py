"""ListOffsets (key 2), versions 0-9.

Behaviour: timestamp -1 = latest (the high watermark for consumers; with isolation READ_COMMITTED (v2+)
the last stable offset, below the first offset of the oldest open transaction), -2 =
earliest (log start offset), -3 (v7+) = the record with the largest timestamp, -4 (v8+) = earliest
local (the log start offset: no tiered storage), -5 (v9+) = earliest pending upload (none: offset and
timestamp -1). Any other timestamp finds the first record at or after it below the high watermark
(the last stable offset for READ_COMMITTED; offset -1 when there is none). Errors per partition:
UNKNOWN_TOPIC_OR_PARTITION, a partition named
twice -> INVALID_REQUEST, a current leader epoch newer than ours -> UNKNOWN_LEADER_EPOCH, older ->
FENCED_LEADER_EPOCH, KAFKA_STORAGE_ERROR. v0 answers in `old_style_offsets` (at most one offset).
The leader epoch of every answer (v4+) is the partition's leader epoch (always 0 on a single node).
With an authorizer, topics the principal may not DESCRIBE get TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.wire._generated.list_offsets_response import ListOffsetsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.list_offsets_request import ListOffsetsRequest

API_KEY = ApiKey.LIST_OFFSETS
MIN_VERSION = 0
MAX_VERSION = 9

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
EARLIEST_PENDING_UPLOAD = -5
READ_COMMITTED = 1

TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
PartitionResponse = ListOffsetsResponse.ListOffsetsPartitionResponse


async def handle(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    broker = ctx.broker
    version = ctx.api_version
    counts = Counter((t.name, p.partition_index) for t in request.topics for p in t.partitions)
    topics = []
    turn = Turn()  # many partitions: other clients run in between (fairness.py)
    for wanted_topic in request.topics:
        partitions: list[PartitionResponse] = []
        topics.append(TopicResponse(name=wanted_topic.name, partitions=partitions))
        topic = broker.metadata.topic(wanted_topic.name)
        for wanted in wanted_topic.partitions:
            await turn.spend()
            index = wanted.partition_index
            answer = PartitionResponse(
                partition_index=index, error_code=ErrorCode.NONE, timestamp=-1, offset=-1
            )
            partitions.append(answer)
            try:
                if counts[(wanted_topic.name, index)] > 1:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "partition listed twice")
                if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, wanted_topic.name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if topic is None or not 0 <= index < topic.partitions:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                broker.check_leader(wanted_topic.name, index)
                partition_log = broker.partition_log(wanted_topic.name, index)
                if partition_log is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                broker.check_leader_epoch(wanted_topic.name, index, wanted.current_leader_epoch)
                read_committed = version >= 2 and request.isolation_level == READ_COMMITTED
                offset, timestamp = _lookup(partition_log, wanted.timestamp, version, read_committed)
                answer.offset, answer.timestamp = offset, timestamp
                answer.leader_epoch = broker.leader_epoch(wanted_topic.name, index) if offset >= 0 else -1
                if version == 0:
                    answer.old_style_offsets = [offset] if offset >= 0 else []
            except KafkaError as exc:
                answer.error_code = exc.code
    return ListOffsetsResponse(topics=topics)


def _lookup(partition_log: Any, timestamp: int, version: int, read_committed: bool) -> tuple[int, int]:
    # the highest offset this isolation level may see (Kafka's "last fetchable offset")
    high_watermark = partition_log.last_stable_offset if read_committed else partition_log.high_watermark
    if timestamp == LATEST:
        return high_watermark, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return partition_log.log_start_offset, -1
    if timestamp == EARLIEST_PENDING_UPLOAD:
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = partition_log.max_timestamp_offset()
        if found is None:
            return -1, -1
        return found
    if timestamp < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
    found = partition_log.offset_for_timestamp(timestamp, high_watermark)
    if found is None:
        return -1, -1
    return found
