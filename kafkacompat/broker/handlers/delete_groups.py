"""DeleteGroups (key 42), versions 0-2.

Behaviour: an Empty group is deleted with all its committed offsets (tombstones written to
__consumer_offsets before the answer); a group with members gets NON_EMPTY_GROUP; an unknown (or Dead)
group GROUP_ID_NOT_FOUND; a group of a partition still loading COORDINATOR_LOAD_IN_PROGRESS.
With an authorizer, groups the principal may not DELETE get GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.groups import api
from kafkacompat.wire._generated.delete_groups_response import DeleteGroupsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.delete_groups_request import DeleteGroupsRequest

API_KEY = ApiKey.DELETE_GROUPS
MIN_VERSION = 0
MAX_VERSION = 2

Result = DeleteGroupsResponse.DeletableGroupResult
#: groups deleted per coordinator call
_GROUPS_PER_CALL = 50


async def handle(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    requested = list(request.groups_names)
    refused_ids = {g for g in requested if not allowed(ctx, Op.DELETE, Resource.GROUP, g)}
    refused = [g for g in requested if g in refused_ids]
    group_ids = [g for g in requested if g not in refused_ids]
    runtime = runtime_of(ctx.broker)
    results: list[api.DeleteGroupsResult] = [
        api.DeleteGroupsResult(g, ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in refused
    ]
    if not group_ids:
        pass
    elif runtime is None:
        results += [api.DeleteGroupsResult(g, ErrorCode.COORDINATOR_NOT_AVAILABLE) for g in group_ids]
    else:
        # in chunks, one coordinator call each, the loop given back between them once the share is
        # used (fairness.py): the call does not yield when its lock is free
        turn = Turn()
        for start in range(0, len(group_ids), _GROUPS_PER_CALL):
            await turn.spend()
            chunk = group_ids[start : start + _GROUPS_PER_CALL]
            try:
                # ignore[misc]: mypy cannot type a lambda with a default beyond its context
                results += await runtime.call(lambda now, chunk=chunk: runtime.core.delete_groups(chunk, now))  # type: ignore[misc]
            except KafkaError as exc:
                results += [api.DeleteGroupsResult(g, exc.code) for g in chunk]
    return DeleteGroupsResponse(
        results=[Result(group_id=r.group_id, error_code=r.error_code) for r in results]
    )
