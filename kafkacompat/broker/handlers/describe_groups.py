"""DescribeGroups (key 15), versions 0-5.

Behaviour: one entry per requested group: state, protocol type, the chosen protocol (only while
Stable), and the members with client id, host ("/ip"), and their metadata and assignment (both only
while Stable), as Kafka's classic coordinator reports. An unknown group is "Dead" with NONE (the
versions served here predate GROUP_ID_NOT_FOUND for describe). v4+ members carry the group instance
id; v3+ authorized operations stay "not requested" unless asked, then carry the group's operations the
principal may do (all of READ, DESCRIBE, DELETE without an authorizer, as Kafka reports them).
With an authorizer, groups the principal may not DESCRIBE get GROUP_AUTHORIZATION_FAILED; authorized
operations (v3+) are filled in when asked for.

A group id named several times in one request is described once and its one answer repeated: 1,000
copies of a group of 400 members built 400,000 member objects that lived for the whole request, and
every full garbage collection meanwhile walked them (50-170 ms of CPU each in a fuzz run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, Resource, allowed, authorized_operations
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.groups import api
from kafkacompat.wire._generated.describe_groups_response import DescribeGroupsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.describe_groups_request import DescribeGroupsRequest

API_KEY = ApiKey.DESCRIBE_GROUPS
MIN_VERSION = 0
MAX_VERSION = 5

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
_GROUPS_PER_TURN = 50

Group = DescribeGroupsResponse.DescribedGroup
Member = DescribeGroupsResponse.DescribedGroupMember


async def handle(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    requested = list(request.groups)
    distinct = list(dict.fromkeys(requested))
    refused = {g for g in distinct if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, g)}
    group_ids = [g for g in distinct if g not in refused]
    runtime = runtime_of(ctx.broker)
    described: list[api.DescribedGroup]
    if not group_ids:
        described = []
    elif runtime is None:
        described = [
            api.DescribedGroup(ErrorCode.COORDINATOR_NOT_AVAILABLE, g, "", "", "") for g in group_ids
        ]
    else:
        # in chunks: 1,000 groups at once held every other client for a quarter of a second
        # (fairness.py); each chunk is one turn of the group coordinator, with the loop given back
        # between chunks once 2 ms are spent (the coordinator's call does not yield when its lock is
        # free: without the Turn every chunk ran in one step, 50-190 ms in the long fuzz run)
        described = []
        chunks = Turn()
        for start in range(0, len(group_ids), _GROUPS_PER_TURN):
            await chunks.spend()
            chunk = group_ids[start : start + _GROUPS_PER_TURN]
            try:
                # ignore[misc]: mypy cannot type a lambda with a default beyond its context
                described += await runtime.call(
                    lambda now, chunk=chunk: runtime.core.describe_groups(chunk, now), may_write=False  # type: ignore[misc]
                )
            except KafkaError as exc:
                described += [api.DescribedGroup(exc.code, g, "", "", "") for g in chunk]
    error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    described += [api.DescribedGroup(error, g, "", "", "") for g in refused]
    include_operations = ctx.api_version >= 3 and request.include_authorized_operations
    answers: dict[str, Any] = {}  # group id -> its one answer, however often it was named
    turn = Turn()  # groups of many members: other clients run in between (fairness.py)
    for g in described:
        await turn.spend()
        answers[g.group_id] = Group(
            error_code=g.error_code,
            group_id=g.group_id,
            group_state=g.state,
            protocol_type=g.protocol_type,
            protocol_data=g.protocol_data,
            members=[
                Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata,
                    member_assignment=m.assignment,
                )
                for m in g.members
            ],
            authorized_operations=authorized_operations(ctx, Resource.GROUP, g.group_id)
            if include_operations and g.error_code == ErrorCode.NONE
            else AUTHORIZED_OPERATIONS_OMITTED,
        )
    return DescribeGroupsResponse(groups=[answers[g] for g in requested])
