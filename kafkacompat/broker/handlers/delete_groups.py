"""DeleteGroups (key 42), versions 0-2.

Behaviour: an Empty group is deleted with all its committed offsets (tombstones written to
__consumer_offsets before the answer); a group with members gets NON_EMPTY_GROUP; an unknown (or Dead)
group GROUP_ID_NOT_FOUND; a group of a partition still loading COORDINATOR_LOAD_IN_PROGRESS.
With an authorizer, groups the principal may not DELETE get GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.groups import api
from kafkacompat.wire._generated.delete_groups_response import DeleteGroupsResponse
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.dispatch import RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2

Result = DeleteGroupsResponse.DeletableGroupResult


async def handle(ctx: RequestContext, request: Any) -> DeleteGroupsResponse:
    requested = list(request.groups_names)
    refused = [g for g in requested if not allowed(ctx, Op.DELETE, Resource.GROUP, g)]
    group_ids = [g for g in requested if g not in refused]
    runtime = runtime_of(ctx.broker)
    results: list[api.DeleteGroupsResult] = [
        api.DeleteGroupsResult(g, ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in refused
    ]
    if not group_ids:
        pass
    elif runtime is None:
        results += [api.DeleteGroupsResult(g, ErrorCode.COORDINATOR_NOT_AVAILABLE) for g in group_ids]
    else:
        try:
            results += await runtime.call(lambda now: runtime.core.delete_groups(group_ids, now))
        except KafkaError as exc:
            results += [api.DeleteGroupsResult(g, exc.code) for g in group_ids]
    return DeleteGroupsResponse(
        results=[Result(group_id=r.group_id, error_code=r.error_code) for r in results]
    )
