"""WriteTxnMarkers (key 27), versions 0-1.

Behaviour: what a transaction coordinator sends to partition leaders: for each marker, a COMMIT
(`transaction_result` true) or ABORT control batch with the producer id, epoch and coordinator epoch
is appended to each listed partition of this broker (for `__consumer_offsets`, the group coordinator
settles the producer's pending transactional offsets). This broker's own coordinator writes the
markers of partitions it leads directly (txn_runtime.LocalMarkerWriter, the same path) and sends this
request to the leaders of the others in cluster mode; admin tools send it too (abortTransaction). In
cluster mode each marker is answered once the ISR has it (acks=all), NOT_LEADER_OR_FOLLOWER on a
broker that does not lead the partition. Errors per partition: UNKNOWN_TOPIC_OR_PARTITION,
INVALID_PRODUCER_EPOCH (a marker older than the partition's producer epoch),
TRANSACTION_COORDINATOR_FENCED (a coordinator epoch older than the one of the producer's last marker;
-1, an admin abort, is not checked), KAFKA_STORAGE_ERROR.
With an authorizer, needs CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.txn_runtime import LocalMarkerWriter
from kafkacompat.wire._generated.write_txn_markers_response import WriteTxnMarkersResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.write_txn_markers_request import WriteTxnMarkersRequest

API_KEY = ApiKey.WRITE_TXN_MARKERS
MIN_VERSION = 0
MAX_VERSION = 1

MarkerResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
TopicResult = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
PartitionResult = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult


async def handle(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    writer = LocalMarkerWriter(ctx.broker)
    cluster_action = cluster_allowed(ctx, Op.CLUSTER_ACTION)  # a broker-to-broker API, as in Kafka
    results = []
    turn = Turn()  # many markers or partitions: other clients run in between (fairness.py)
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                await turn.spend()
                code = ErrorCode.NONE
                info = ctx.broker.metadata.topic(topic.name)
                try:
                    if not cluster_action:
                        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                    if info is None or not 0 <= index < info.partitions:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    await writer.write_one(
                        topic.name,
                        index,
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.coordinator_epoch,
                        bool(marker.transaction_result),
                    )
                except KafkaError as exc:
                    code = exc.code
                partitions.append(PartitionResult(partition_index=index, error_code=code))
            topics.append(TopicResult(name=topic.name, partitions=partitions))
        results.append(MarkerResult(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=results)
