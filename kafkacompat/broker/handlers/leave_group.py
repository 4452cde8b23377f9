"""LeaveGroup (key 13), versions 0-5.

Behaviour: v0-2 carry one member id; v3+ a batch of members (by member id, or by group instance id
alone for an administrative removal of a static member) with a result each; v5 a reason per member.
The v0-2 top-level error is the group error if any, else that of the single member. A member that
leaves a stable group starts a rebalance for the others.
With an authorizer, leaving needs READ on the group (else GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.groups import api
from kafkacompat.wire._generated.leave_group_response import LeaveGroupResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.leave_group_request import LeaveGroupRequest

API_KEY = ApiKey.LEAVE_GROUP
MIN_VERSION = 0
MAX_VERSION = 5

MemberResponse = LeaveGroupResponse.MemberResponse


async def handle(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    version = ctx.api_version
    if version >= 3:
        members = [
            api.LeaveGroupMember(m.member_id, m.group_instance_id, m.reason if version >= 5 else None)
            for m in request.members
        ]
    else:
        members = [api.LeaveGroupMember(request.member_id)]
    runtime = runtime_of(ctx.broker)
    req = api.LeaveGroupRequest(group_id=request.group_id, members=members)
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        result = api.LeaveGroupResponse(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    elif runtime is None:
        result = api.LeaveGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    else:
        try:
            result = await runtime.call(lambda now: runtime.core.leave_group(req, now), key=req.group_id)
        except KafkaError as exc:
            result = api.LeaveGroupResponse(exc.code)
    if version < 3:
        error = result.error_code
        if error == ErrorCode.NONE and result.members:
            error = result.members[0].error_code
        return LeaveGroupResponse(error_code=error)
    return LeaveGroupResponse(
        error_code=result.error_code,
        members=[
            MemberResponse(
                member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=m.error_code
            )
            for m in result.members
        ],
    )
