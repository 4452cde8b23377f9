"""TxnOffsetCommit (key 28), versions 0-4.

Behaviour: the group coordinator writes the offsets into the group's `__consumer_offsets` partition in a
transactional batch of the producer (as Kafka does) and keeps them pending: OffsetFetch does not see
them (and answers UNSTABLE_OFFSET_COMMIT for them when `require_stable`) until the transaction's COMMIT
marker lands in that partition; an ABORT marker drops them. Group checks as in Kafka's transactional
commit: COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, INVALID_GROUP_ID, v3+ member id and generation
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID), OFFSET_METADATA_TOO_LARGE per partition.
The partition's membership in the transaction is not verified here (AddOffsetsToTxn put the group's
partition in it; an offset staged without it is never settled, as with Kafka before KIP-890 part 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.groups.api import OffsetCommitPartition, TxnOffsetCommitRequest
from kafkacompat.wire._generated.txn_offset_commit_response import TxnOffsetCommitResponse
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.dispatch import RequestContext

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4

TopicResponse = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
PartitionResponse = TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition


async def handle(ctx: RequestContext, request: Any) -> TxnOffsetCommitResponse:
    version = ctx.api_version
    partitions = [
        OffsetCommitPartition(
            t.name,
            p.partition_index,
            p.committed_offset,
            p.committed_metadata,
            p.committed_leader_epoch if version >= 2 else -1,
        )
        for t in request.topics
        for p in t.partitions
    ]
    req = TxnOffsetCommitRequest(
        request.group_id,
        request.producer_id,
        request.producer_epoch,
        partitions,
        request.generation_id if version >= 3 else -1,
        request.member_id if version >= 3 else "",
        request.group_instance_id if version >= 3 else None,
    )
    runtime = runtime_of(ctx.broker)
    try:
        if runtime is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        results = await runtime.call(lambda now: runtime.core.txn_offset_commit(req, now))
    except KafkaError as exc:
        results = [((p.topic, p.partition), exc.code) for p in partitions]
    topics: dict[str, list[Any]] = {}
    for (topic, partition), code in results:
        topics.setdefault(topic, []).append(PartitionResponse(partition_index=partition, error_code=code))
    return TxnOffsetCommitResponse(
        throttle_time_ms=0,
        topics=[TopicResponse(name=name, partitions=parts) for name, parts in topics.items()],
    )
