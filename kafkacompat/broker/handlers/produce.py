"""Produce (key 0), versions 0-11. Behaviour: acks must be 0, 1 or -1 (else INVALID_REQUIRED_ACKS for every
partition). With an authorizer, a transactional id the principal may not WRITE fails every partition with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a topic it may not WRITE each of its partitions with
TOPIC_AUTHORIZATION_FAILED (checked before existence, as Kafka does). Each partition's record set is
validated and appended by its PartitionLog as opaque bytes: offsets are patched in place, records are never
decoded. Errors are per partition: UNKNOWN_TOPIC_OR_PARTITION (no auto-creation here; as in Kafka, producers
create topics through Metadata), INVALID_TOPIC_EXCEPTION for internal topics (only the broker writes
`__consumer_offsets`), CORRUPT_MESSAGE, INVALID_RECORD (including message format v0/v1, which this broker
never converts, and a partition without any batch), MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
INVALID_TIMESTAMP, idempotence errors (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH; a retried
duplicate batch gets its original offsets), KAFKA_STORAGE_ERROR; acks=-1 while the ISR is smaller than the
topic's min.insync.replicas gets NOT_ENOUGH_REPLICAS before anything is written (on a single node the ISR is
this node alone). Transactional batches (KIP-890 part 1, with `transaction.partition.verification.enable`):
the first batch of a producer's transaction in a partition is checked against the transaction coordinator: a
partition not added to the producer's ongoing transaction gets INVALID_TXN_STATE, a stale epoch
INVALID_PRODUCER_EPOCH, so no hanging transaction can hold back the last stable offset. Produce v3+ must
carry exactly one magic-2 batch per partition (INVALID_RECORD; zstd only from v7,
UNSUPPORTED_COMPRESSION_TYPE before), checked as Kafka's ProduceRequest.validateRecords checks it, after
authorization and existence; bytes after that batch that do not form a whole one are dropped. In v8+ a batch
refused by Kafka's per-record checks (a key missing on a compacted topic, a timestamp out of range:
log/record_validator.py) carries `record_errors` naming each refused record by its index in the batch
(KIP-467) and an error message, worded as Kafka words them, so clients report per-record errors; the KIP-890
refusals carry Kafka's message; every other error, a structurally broken batch included, gets the code alone
with a null error message, as from Kafka. Older versions get the code alone. Every append goes through the
broker's replica manager (replication/replica_manager.py). acks=-1 is answered once the ISR holds the append
(cluster mode; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile,
REQUEST_TIMED_OUT after the request's timeout); on a single node acks=1 and acks=-1 are the same: the high
watermark moves with the append, then parked fetches on the partition are woken. When the topic's
flush.messages/flush.ms is due, the append is fsynced (in a worker thread) before the answer, as Kafka
flushes in its append path. acks=0 gets no response at all; if any partition failed, the connection is
closed instead, as Kafka does, so the client notices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.errors import CloseConnection
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.state import is_internal_topic
from kafkacompat.broker.txn_runtime import runtime_of as txn_runtime_of
from kafkacompat.log.record_validator import InvalidRecords
from kafkacompat.wire._generated.produce_response import ProduceResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import BATCH_HEADER, validate_produce_records

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.replication.metadata import TopicInfo
    from kafkacompat.wire._generated.produce_request import ProduceRequest

API_KEY = ApiKey.PRODUCE
MIN_VERSION = 0
MAX_VERSION = 11

UNKNOWN_PARTITION = "This server does not host this topic-partition."

TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = ProduceResponse.PartitionProduceResponse


def _error(
    index: int, code: int, message: str | None, version: int, record_errors: list[Any] | None = None
) -> Any:
    return PartitionResponse(
        index=index,
        error_code=code,
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=record_errors if version >= 8 else None,
        error_message=message if version >= 8 else None,
    )


class _VerificationRefused(KafkaError):
    """A KIP-890 verification failure Kafka answers with a message of its own."""


def _refusal(exc: KafkaError, topic: str, index: int) -> tuple[str | None, list[Any] | None]:
    """The error message and KIP-467 record errors answered for a refused partition.

    Kafka's LogAppendResult carries a message only when `hasCustomErrorMessage`: for its per-record
    checks (keys, timestamps: RecordValidationException, which also names the records) and for the
    transaction verification errors ReplicaManager rewords; every other error, a structurally broken
    batch included, is answered with the code alone."""
    if isinstance(exc, _VerificationRefused):
        return exc.message, None
    if not isinstance(exc, InvalidRecords):
        return None, None
    if not exc.per_record:
        return None, None
    message, errors = exc.located(f"{topic}-{index}")
    return message, [
        ProduceResponse.BatchIndexAndErrorMessage(batch_index=batch_index, batch_index_error_message=text)
        for batch_index, text in errors
    ]


async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    broker = ctx.broker
    version = ctx.api_version
    acks = request.acks
    responses = []
    transactional_id = getattr(request, "transactional_id", None)
    # authorization (kafkacompat.broker.authorization): WRITE on the transactional id, then on each topic
    refused_everything = transactional_id is not None and not allowed(
        ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, transactional_id
    )
    required: dict[tuple[str, int], int] = {}  # the offset each append is committed at (acks=-1 waits)
    turn = Turn()  # a produce of many partitions lets other clients run between appends (fairness.py)
    for topic_data in request.topic_data:
        partitions: list[PartitionResponse] = []
        responses.append(TopicResponse(name=topic_data.name, partition_responses=partitions))
        refusal = (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            if refused_everything
            else ErrorCode.INVALID_REQUIRED_ACKS
            if acks not in (0, 1, -1)
            else None
            if allowed(ctx, Op.WRITE, Resource.TOPIC, topic_data.name)
            else ErrorCode.TOPIC_AUTHORIZATION_FAILED
        )
        if refusal is not None:
            for data in topic_data.partition_data:
                partitions.append(_error(data.index, refusal, None, version))
            continue
        topic = broker.metadata.topic(topic_data.name)
        for data in topic_data.partition_data:
            await turn.spend()
            try:
                partitions.append(
                    await _append(broker, topic, data, acks, required, transactional_id, version)
                )
            except KafkaError as exc:
                message, record_errors = _refusal(exc, topic_data.name, data.index)
                partitions.append(_error(data.index, exc.code, message, version, record_errors))
    if acks == -1:
        await _await_replicas(ctx, request, responses, required)
    node_endpoints = _leader_hints(ctx, responses) if version >= 10 else None
    if acks == 0:
        failed = [
            (t.name, p.index, p.error_code) for t in responses for p in t.partition_responses if p.error_code
        ]
        if failed:
            # the client hears of nothing otherwise; Kafka closes the connection so that it refreshes
            # its metadata and notices
            raise CloseConnection(f"acks=0 produce failed: {failed[:5]}")
        return None
    response = ProduceResponse(responses=responses)
    if node_endpoints:
        response.node_endpoints = node_endpoints
    return response


_TRANSACTIONAL = 0x10
_CONTROL = 0x20


async def _verify_transactional(
    broker: BrokerState,
    partition_log: Any,
    topic: str,
    index: int,
    records: Any,
    transactional_id: str | None,
) -> None:
    """KIP-890: a transaction's first batch in a partition must come after AddPartitionsToTxn."""
    if len(records) < 61 or records[16] != 2:
        return  # not a magic-2 batch: validation rejects it
    _, _, _, _, _, attributes, _, _, _, producer_id, epoch, _, _ = BATCH_HEADER.unpack_from(records, 0)
    if not attributes & _TRANSACTIONAL or attributes & _CONTROL:
        return
    entry = partition_log.producer_state.producers.get(producer_id)
    if entry is not None and entry.current_txn_first_offset >= 0 and entry.epoch == epoch:
        return  # this transaction already wrote here: verified with its first batch
    transactions = txn_runtime_of(broker)
    if transactions is None or not broker.config["transaction.partition.verification.enable"]:
        return
    # asked of the transactional id's coordinator (another broker in cluster mode)
    code = await transactions.verify_in_transaction(transactional_id, producer_id, epoch, (topic, index))
    if code == ErrorCode.INVALID_TXN_STATE:
        raise _VerificationRefused(code, "Partition was not added to the transaction")
    if code == ErrorCode.NOT_ENOUGH_REPLICAS:  # the runtime's stand-in for a coordinator that cannot answer
        raise _VerificationRefused(code, "Unable to verify the partition has been added to the transaction.")
    if code != ErrorCode.NONE:
        raise KafkaError(
            code, f"transactional batch of producer {producer_id} epoch {epoch} is not in its transaction"
        )


async def _append(
    broker: BrokerState,
    topic: TopicInfo | None,
    data: Any,
    acks: int,
    required: dict[tuple[str, int], int],
    transactional_id: str | None,
    version: int,
) -> Any:
    if topic is None or not 0 <= data.index < topic.partitions:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_PARTITION)
    records = data.records
    if version >= 3 and records is not None:
        # exactly one magic-2 batch (Kafka's ProduceRequest.validateRecords, before the log is asked);
        # bytes after it that do not form a whole batch are dropped, as Kafka's append trims them
        records = validate_produce_records(version, records).buffer
    if is_internal_topic(topic.name):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic.name}")
    broker.check_leader(topic.name, data.index)
    partition_log = broker.partition_log(topic.name, data.index)
    if partition_log is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_PARTITION)
    if records is None or len(records) == 0:
        raise KafkaError(
            ErrorCode.INVALID_RECORD, "Produce requests must have at least one record batch per partition"
        )
    await _verify_transactional(broker, partition_log, topic.name, data.index, records, transactional_id)
    # after the verification (which may ask another broker): the seam checks leadership and the ISR with
    # nothing awaited between its check and the append
    now = broker.now_ms()
    result, required[(topic.name, data.index)] = broker.replicas.append_as_leader(
        topic.name, data.index, partition_log, records, now, required_acks=acks
    )
    if not result.duplicate and partition_log.flush_needed(now):
        await trio.to_thread.run_sync(partition_log.flush, now)
    return PartitionResponse(
        index=data.index,
        error_code=ErrorCode.NONE,
        base_offset=result.base_offset,
        log_append_time_ms=result.log_append_time,
        log_start_offset=result.log_start_offset,
    )


async def _await_replicas(
    ctx: RequestContext, request: ProduceRequest, responses: list[Any], required: dict[tuple[str, int], int]
) -> None:
    """acks=-1: answer each appended partition once the ISR holds it (Kafka's delayed produce),
    NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas meanwhile,
    REQUEST_TIMED_OUT after the request's timeout (a single node's appends are committed at once)."""
    deadline = trio.current_time() + max(request.timeout_ms, 0) / 1000
    # `required` holds exactly the partitions appended to
    failed = await ctx.broker.replicas.wait_for_commits(required, deadline, ctx.park)
    if not failed:
        return
    for topic_response in responses:
        for partition in topic_response.partition_responses:
            error = failed.get((topic_response.name, partition.index))
            if error is not None and partition.error_code == ErrorCode.NONE:
                partition.error_code = error


def _leader_hints(ctx: RequestContext, responses: list[Any]) -> list[Any]:
    """KIP-951 (v10+): a NOT_LEADER_OR_FOLLOWER partition names the current leader and epoch, and the
    response carries that leader's endpoint, so the client need not wait for a metadata refresh."""
    replicas = ctx.broker.replicas
    leaders: set[int] = set()
    for topic_response in responses:
        for partition in topic_response.partition_responses:
            if partition.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                leader, epoch, *_ = replicas.partition_metadata(topic_response.name, partition.index)
                partition.current_leader = ProduceResponse.LeaderIdAndEpoch(
                    leader_id=leader, leader_epoch=epoch
                )
                if leader >= 0:
                    leaders.add(leader)
    if not leaders:
        return []
    return [
        ProduceResponse.NodeEndpoint(node_id=node, host=host, port=port, rack=rack)
        for node, host, port, rack in replicas.broker_endpoints(ctx.connection.listener_name)
        if node in leaders
    ]
