"""DeleteRecords (key 21), versions 0-2.

Behaviour: moves each partition's log start offset up to the given offset (-1 = the high watermark);
segments wholly below it are deleted (after `file.delete.delay.ms`, as retention does) and the answer
carries the new low watermark (the log start offset; a lower offset than the current start leaves it
unchanged). An offset beyond the high watermark or below -1 -> OFFSET_OUT_OF_RANGE; an unknown topic or
partition -> UNKNOWN_TOPIC_OR_PARTITION; an internal topic -> INVALID_TOPIC_EXCEPTION, as Kafka
refuses it; an offline log -> KAFKA_STORAGE_ERROR. Low watermark -1 on any error. With one replica there
is nothing to wait for, so `timeout_ms` is not used. The log-start-offset checkpoint is written before
the answer, so the move survives a crash (if that write fails the answer still goes out and the
periodic checkpoint catches up, as in Kafka, which only checkpoints periodically).
With an authorizer, deleting records needs DELETE on the topic (else TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.state import is_internal_topic
from kafkacompat.wire._generated.delete_records_response import DeleteRecordsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.delete_records_request import DeleteRecordsRequest

log = logging.getLogger("kafkacompat.broker")

API_KEY = ApiKey.DELETE_RECORDS
MIN_VERSION = 0
MAX_VERSION = 2

TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult


async def handle(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    broker = ctx.broker
    now = broker.now_ms()
    moved = False
    topics = []
    turn = Turn()  # many partitions: other clients run in between (fairness.py)
    for wanted_topic in request.topics:
        name = wanted_topic.name
        partitions: list[PartitionResult] = []
        topics.append(TopicResult(name=name, partitions=partitions))
        topic = broker.metadata.topic(name)
        for wanted in wanted_topic.partitions:
            await turn.spend()
            answer = PartitionResult(partition_index=wanted.partition_index, low_watermark=-1, error_code=0)
            partitions.append(answer)
            try:
                if not allowed(ctx, Op.DELETE, Resource.TOPIC, name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if topic is None or not 0 <= wanted.partition_index < topic.partitions:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                if is_internal_topic(name):
                    raise KafkaError(
                        ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete records of internal topic {name}"
                    )
                broker.check_leader(name, wanted.partition_index)
                partition_log = broker.partition_log(name, wanted.partition_index)
                if partition_log is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                before = partition_log.log_start_offset
                answer.low_watermark = partition_log.delete_records_before(wanted.offset, now)
                moved = moved or answer.low_watermark != before
            except KafkaError as exc:
                answer.error_code = exc.code
                answer.low_watermark = -1
    if moved:
        try:
            await broker.write_checkpoints()
        except (OSError, RuntimeError, KafkaError) as exc:
            # the moves are done in memory and answered; the periodic checkpoint task writes them later
            log.warning("could not checkpoint log start offsets after DeleteRecords: %s", exc)
    return DeleteRecordsResponse(topics=topics)
