"""TxnOffsetCommit (key 28), versions 0-4.

Behaviour: the group coordinator writes the offsets into the group's `__consumer_offsets` partition in a
transactional batch of the producer (as Kafka does) and keeps them pending: OffsetFetch does not see
them (and answers UNSTABLE_OFFSET_COMMIT for them when `require_stable`) until the transaction's COMMIT
marker lands in that partition; an ABORT marker drops them. Group checks as in Kafka's transactional
commit: COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, INVALID_GROUP_ID, v3+ member id and generation
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID), OFFSET_METADATA_TOO_LARGE per partition.
With `transaction.partition.verification.enable` (KIP-890 part 1) the transaction coordinator is asked
first whether the group's `__consumer_offsets` partition is in the producer's ongoing transaction
(AddOffsetsToTxn put it there): if not, every partition gets INVALID_TXN_STATE, and a fenced producer
(a stale epoch) INVALID_PRODUCER_EPOCH, so a zombie never stages offsets that no marker would settle.
With an authorizer: WRITE on the transactional id, READ on the group and on each topic, each refusal
Kafka's *_AUTHORIZATION_FAILED for the partitions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.group_runtime import OFFSETS_TOPIC, runtime_of
from kafkacompat.broker.txn_runtime import runtime_of as txn_runtime_of
from kafkacompat.groups.api import OffsetCommitPartition, TxnOffsetCommitRequest
from kafkacompat.groups.manager import prepare_offset_commit
from kafkacompat.wire._generated.txn_offset_commit_response import TxnOffsetCommitResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated import txn_offset_commit_request as wire

API_KEY = ApiKey.TXN_OFFSET_COMMIT
MIN_VERSION = 0
MAX_VERSION = 4

TopicResponse = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
PartitionResponse = TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition


async def _verify(ctx: RequestContext, request: wire.TxnOffsetCommitRequest, offsets_partition: int) -> None:
    """KIP-890: the group's partition must be in the producer's ongoing transaction (asked of the
    transaction coordinator, another broker in cluster mode)."""
    transactions = txn_runtime_of(ctx.broker)
    if transactions is None or not ctx.broker.config["transaction.partition.verification.enable"]:
        return
    tp = (OFFSETS_TOPIC, offsets_partition)
    if ctx.broker.cluster is None:  # this broker coordinates every transactional id
        verdict = transactions.core.verify_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, [tp]
        )
        code = verdict[tp]
    else:
        code = await transactions.verify_in_transaction(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            tp,
            retriable_as=ErrorCode.COORDINATOR_NOT_AVAILABLE,
        )
    if code == ErrorCode.PRODUCER_FENCED:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    elif code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
        code = ErrorCode.INVALID_TXN_STATE
    if code != ErrorCode.NONE:
        raise KafkaError(code, "the group's offsets partition is not in the producer's transaction")


async def handle(ctx: RequestContext, request: wire.TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    version = ctx.api_version
    runtime = runtime_of(ctx.broker)
    # Each partition's offset and record are made here, outside the coordinator's lock and with the loop
    # given back between partitions (fairness.Turn), as OffsetCommit does; the core stores them together.
    now_ms = ctx.broker.now_ms()
    turn = Turn()
    partitions: list[OffsetCommitPartition] = []
    # topics the principal may not READ are refused one by one; the others are committed (Kafka's way)
    refused: list[tuple[str, int]] = []
    for t in request.topics:
        topic_allowed = allowed(ctx, Op.READ, Resource.TOPIC, t.name)
        for p in t.partitions:
            await turn.spend()
            if not topic_allowed:
                refused.append((t.name, p.partition_index))
                continue
            partition = OffsetCommitPartition(
                t.name,
                p.partition_index,
                p.committed_offset,
                p.committed_metadata,
                p.committed_leader_epoch if version >= 2 else -1,
            )
            if runtime is not None:
                partition.prepared = prepare_offset_commit(
                    runtime.core.config, request.group_id, partition, -1, now_ms
                )
            partitions.append(partition)
    req = TxnOffsetCommitRequest(
        request.group_id,
        request.producer_id,
        request.producer_epoch,
        partitions,
        request.generation_id if version >= 3 else -1,
        request.member_id if version >= 3 else "",
        request.group_instance_id if version >= 3 else None,
    )
    try:
        # authorization, in Kafka's order: the transactional id (WRITE), the group (READ), each topic (READ)
        if not allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id):
            raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if runtime is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        await runtime.ensure_offsets_topic()
        await _verify(ctx, request, runtime.core.partition_for(request.group_id))
        results = await runtime.call(lambda now: runtime.core.txn_offset_commit(req, now), key=req.group_id)
    except KafkaError as exc:
        results = [((p.topic, p.partition), exc.code) for p in partitions]
    denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    topics: dict[str, list[Any]] = {}
    for tp in refused:
        topics.setdefault(tp[0], []).append(PartitionResponse(partition_index=tp[1], error_code=denied))
    for (topic, index), code in results:
        await turn.spend()
        topics.setdefault(topic, []).append(PartitionResponse(partition_index=index, error_code=code))
    return TxnOffsetCommitResponse(
        throttle_time_ms=0,
        topics=[TopicResponse(name=name, partitions=parts) for name, parts in topics.items()],
    )
