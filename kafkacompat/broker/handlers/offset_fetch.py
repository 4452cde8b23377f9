"""OffsetFetch (key 9), versions 0-9.

Behaviour: v0-7 ask for one group, v8+ for several (one answer per group). A null topic list (v2+)
means every partition the group has committed. Partitions without a committed offset answer offset -1,
leader epoch -1 and empty metadata with NONE, as Kafka does. v0/v1 have no top-level error field, so a
group error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...) goes into every partition; v2-7 carry
it at the top level too. `require_stable` (v7+) changes nothing: without TxnOffsetCommit there are no
pending transactional offsets, so every committed offset is stable. v9's member id / epoch only apply
to the new consumer protocol, which is not served; they are ignored for classic groups.
With an authorizer: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED); topics the principal may not
DESCRIBE get TOPIC_AUTHORIZATION_FAILED when named and are left out of an all-topics answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.groups import api
from kafkacompat.wire._generated.offset_fetch_response import OffsetFetchResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.offset_fetch_request import OffsetFetchRequest

API_KEY = ApiKey.OFFSET_FETCH
MIN_VERSION = 0
MAX_VERSION = 9

W = OffsetFetchResponse


async def fetch_group(
    ctx: RequestContext, group_id: str, topics: list[Any] | None, require_stable: bool
) -> api.OffsetFetchResponse:
    partitions = None
    if topics is not None:
        partitions = [(t.name, int(p)) for t in topics for p in t.partition_indexes]
    if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return api.OffsetFetchResponse(
            error, [api.OffsetFetchPartition(t, p, -1, -1, "", error) for t, p in partitions or ()]
        )
    result = await _fetch_group(ctx, group_id, partitions, require_stable)
    if ctx.broker.authorizer is not None:
        # topics the principal may not DESCRIBE: refused when named, left out of an all-topics answer
        kept = []
        for entry in result.partitions:
            if allowed(ctx, Op.DESCRIBE, Resource.TOPIC, entry.topic):
                kept.append(entry)
            elif partitions is not None:
                refused = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                kept.append(api.OffsetFetchPartition(entry.topic, entry.partition, -1, -1, "", refused))
        result.partitions = kept
    return result


async def _fetch_group(
    ctx: RequestContext, group_id: str, partitions: list[tuple[str, int]] | None, require_stable: bool
) -> api.OffsetFetchResponse:
    runtime = runtime_of(ctx.broker)
    if runtime is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return api.OffsetFetchResponse(
            error, [api.OffsetFetchPartition(t, p, -1, -1, "", error) for t, p in partitions or ()]
        )
    try:
        return await runtime.call(
            lambda now: runtime.core.offset_fetch(group_id, partitions, now, require_stable),
            key=group_id,
            may_write=False,
        )
    except KafkaError as exc:
        error = exc.code
        return api.OffsetFetchResponse(
            error, [api.OffsetFetchPartition(t, p, -1, -1, "", error) for t, p in partitions or ()]
        )


async def _by_topic(
    result: api.OffsetFetchResponse, topic_cls: Any, partition_cls: Any, version: int, turn: Turn
) -> list[Any]:
    topics: dict[str, list[Any]] = {}
    for p in result.partitions:
        await turn.spend()
        error = p.error_code
        if version <= 1 and error == ErrorCode.NONE:
            error = result.error_code
        topics.setdefault(p.topic, []).append(
            partition_cls(
                partition_index=p.partition,
                committed_offset=p.offset,
                committed_leader_epoch=p.leader_epoch,
                metadata=p.metadata,
                error_code=error,
            )
        )
    return [topic_cls(name=name, partitions=parts) for name, parts in topics.items()]


async def handle(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    version = ctx.api_version
    require_stable = bool(request.require_stable) if version >= 7 else False
    if version >= 8:
        groups = []
        # the loop given back between groups once the share is used (fairness.py): the coordinator's
        # call does not yield when its lock is free, so 1,000 groups were one task step of ~10 ms
        turn = Turn()
        for group in request.groups:
            await turn.spend()
            result = await fetch_group(ctx, group.group_id, group.topics, require_stable)
            groups.append(
                W.OffsetFetchResponseGroup(
                    group_id=group.group_id,
                    topics=await _by_topic(
                        result, W.OffsetFetchResponseTopics, W.OffsetFetchResponsePartitions, version, turn
                    ),
                    error_code=result.error_code,
                )
            )
        return OffsetFetchResponse(groups=groups)
    topics = request.topics if version >= 2 else (request.topics or [])
    result = await fetch_group(ctx, request.group_id, topics, require_stable)
    return OffsetFetchResponse(
        topics=await _by_topic(
            result, W.OffsetFetchResponseTopic, W.OffsetFetchResponsePartition, version, Turn()
        ),
        error_code=result.error_code,
    )
