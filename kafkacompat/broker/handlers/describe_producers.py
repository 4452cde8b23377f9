"""DescribeProducers (key 61), version 0.

Behaviour: for each requested partition, the producers its log's producer state knows (idempotent and
transactional producers whose batches are still tracked): producer id and epoch, the last sequence
written (-1 when none is cached), the timestamp of its last batch (-1 when none), the coordinator
epoch and the first offset of its open transaction (-1 when none). A missing topic or partition ->
UNKNOWN_TOPIC_OR_PARTITION; an offline log -> KAFKA_STORAGE_ERROR. Producers are listed by id.
With an authorizer, topics the principal may not READ get TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.wire._generated.describe_producers_response import DescribeProducersResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.describe_producers_request import DescribeProducersRequest

API_KEY = ApiKey.DESCRIBE_PRODUCERS
MIN_VERSION = 0
MAX_VERSION = 0

TopicResponse = DescribeProducersResponse.TopicResponse
PartitionResponse = DescribeProducersResponse.PartitionResponse
ProducerState = DescribeProducersResponse.ProducerState


def active_producers(partition_log: Any) -> list[Any]:
    """The producer state of one partition log as DescribeProducers reports it."""
    states = []
    for producer_id, entry in sorted(partition_log.producer_state.producers.items()):
        last_batch = entry.batches[-1] if entry.batches else None
        states.append(
            ProducerState(
                producer_id=producer_id,
                producer_epoch=entry.epoch,
                last_sequence=entry.last_seq,
                last_timestamp=last_batch.timestamp if last_batch is not None else -1,
                coordinator_epoch=entry.coordinator_epoch,
                current_txn_start_offset=entry.current_txn_first_offset,
            )
        )
    return states


async def handle(ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse:
    broker = ctx.broker
    topics = []
    turn = Turn()  # many partitions: other clients run in between (fairness.py)
    for wanted in request.topics:
        partitions: list[PartitionResponse] = []
        topics.append(TopicResponse(name=wanted.name, partitions=partitions))
        topic = broker.metadata.topic(wanted.name)
        for index in wanted.partition_indexes:
            await turn.spend()
            answer = PartitionResponse(partition_index=index, error_code=ErrorCode.NONE, error_message=None)
            partitions.append(answer)
            try:
                if not allowed(ctx, Op.READ, Resource.TOPIC, wanted.name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if topic is None or not 0 <= index < topic.partitions:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                broker.check_leader(wanted.name, index)
                partition_log = broker.partition_log(wanted.name, index)
                if partition_log is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                answer.active_producers = active_producers(partition_log)
            except KafkaError as exc:
                answer.error_code = exc.code
                answer.error_message = exc.message
    return DescribeProducersResponse(topics=topics)
