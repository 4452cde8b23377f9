"""AddPartitionsToTxn (key 24), versions 0-5.

Behaviour: v0-3 (clients) add partitions to the caller's transaction; the transaction coordinator
(kafkacompat/txn) answers every partition with one code: NONE, INVALID_PRODUCER_ID_MAPPING (unknown
transactional id or producer id), PRODUCER_FENCED (a stale epoch; INVALID_PRODUCER_EPOCH before v2),
CONCURRENT_TRANSACTIONS (markers of the previous transaction pending), COORDINATOR_LOAD_IN_PROGRESS.
Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED,
and nothing is added, as in Kafka. v4+ (sent by brokers, KIP-890) batch several transactions; with
`verify_only` nothing is added and each partition says whether it is already in the ongoing
transaction (INVALID_TXN_STATE when not).
With an authorizer: WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on
each topic (else TOPIC_AUTHORIZATION_FAILED, the other partitions OPERATION_NOT_ATTEMPTED), as Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.txn_runtime import runtime_of, version_error
from kafkacompat.txn.coordinator import TxnOutcome
from kafkacompat.wire._generated.add_partitions_to_txn_response import AddPartitionsToTxnResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.add_partitions_to_txn_request import AddPartitionsToTxnRequest

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
MIN_VERSION = 0
MAX_VERSION = 5

PRODUCER_FENCED_SINCE = 2

TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult
TxnResult = AddPartitionsToTxnResponse.AddPartitionsToTxnResult


def _results(errors: dict[tuple[str, int], int]) -> list[Any]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append(
            PartitionResult(partition_index=partition, partition_error_code=code)
        )
    return [TopicResult(name=name, results_by_partition=parts) for name, parts in by_topic.items()]


async def _one(
    ctx: RequestContext, tid: str, producer_id: int, epoch: int, topics: list[Any], verify_only: bool
) -> dict[tuple[str, int], int]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    if not allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, tid):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    refused = {t for t, _ in wanted if not allowed(ctx, Op.WRITE, Resource.TOPIC, t)}
    if refused:
        topic_refused, not_attempted = ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.OPERATION_NOT_ATTEMPTED
        return {(t, p): topic_refused if t in refused else not_attempted for t, p in wanted}
    metadata = ctx.broker.metadata
    unknown = set()
    for topic, partition in wanted:
        info = metadata.topic(topic)
        if info is None or not 0 <= partition < info.partitions:
            unknown.add((topic, partition))
    if unknown and not verify_only:
        return {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    runtime = runtime_of(ctx.broker)
    if runtime is None:
        return dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    try:
        if verify_only:
            return await runtime.call(
                lambda now: TxnOutcome(runtime.core.verify_partitions(tid, producer_id, epoch, wanted)),
                key=tid,
                may_write=False,
            )
        code = await runtime.call(
            lambda now: runtime.core.add_partitions(tid, producer_id, epoch, wanted, now), key=tid
        )
    except KafkaError as exc:
        code = exc.code
    return dict.fromkeys(wanted, code)


async def handle(ctx: RequestContext, request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    version = ctx.api_version
    if version <= 3:
        errors = await _one(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            False,
        )
        errors = {tp: version_error(code, version, PRODUCER_FENCED_SINCE) for tp, code in errors.items()}
        return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=_results(errors))
    results = []
    # one transaction at a time, the loop given back between them once the share is used (fairness.py):
    # the coordinator's call does not yield when its lock is free (1,000 transactions: one 11 ms step)
    turn = Turn()
    for txn in request.transactions:
        await turn.spend()
        errors = await _one(
            ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics, bool(txn.verify_only)
        )
        results.append(TxnResult(transactional_id=txn.transactional_id, topic_results=_results(errors)))
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, results_by_transaction=results
    )
