"""ListGroups (key 16), versions 0-5.

Behaviour: every group of this coordinator with its protocol type; v4+ filter by state and report it,
v5+ filter by type and report it (every group here is "classic"). Filters match case-insensitively;
an empty filter means all. While __consumer_offsets is still loading the answer is
COORDINATOR_LOAD_IN_PROGRESS with the groups already loaded, as Kafka answers.
With an authorizer: every group for DESCRIBE on the cluster, else the groups the principal may DESCRIBE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed, cluster_allowed
from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.groups import api
from kafkacompat.wire._generated.list_groups_response import ListGroupsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.list_groups_request import ListGroupsRequest

API_KEY = ApiKey.LIST_GROUPS
MIN_VERSION = 0
MAX_VERSION = 5

Listed = ListGroupsResponse.ListedGroup


async def handle(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    version = ctx.api_version
    states = list(request.states_filter or ()) if version >= 4 else []
    types = list(request.types_filter or ()) if version >= 5 else []
    runtime = runtime_of(ctx.broker)
    if runtime is None:
        return ListGroupsResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, groups=[])
    try:
        result: api.ListGroupsResponse = await runtime.call(
            lambda now: runtime.core.list_groups(now, states, types), may_write=False
        )
    except KafkaError as exc:
        return ListGroupsResponse(error_code=exc.code, groups=[])
    # all groups with DESCRIBE on the cluster, else only those the principal may DESCRIBE (as Kafka)
    listed = result.groups
    if ctx.broker.authorizer is not None and not cluster_allowed(ctx, Op.DESCRIBE):
        listed = [g for g in listed if allowed(ctx, Op.DESCRIBE, Resource.GROUP, g.group_id)]
    return ListGroupsResponse(
        error_code=result.error_code,
        groups=[
            Listed(
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.state,
                group_type=g.group_type,
            )
            for g in listed
        ],
    )
