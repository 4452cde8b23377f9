"""Heartbeat (key 12), versions 0-4.

Behaviour: keeps a member's session alive; REBALANCE_IN_PROGRESS tells a member of a stable
generation to rejoin; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / FENCED_INSTANCE_ID (v3+ static
members) as Kafka's classic coordinator answers. A group whose partition is still loading gets NONE.
With an authorizer, a heartbeat needs READ on the group (else GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.groups import api
from kafkacompat.wire._generated.heartbeat_response import HeartbeatResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.heartbeat_request import HeartbeatRequest

API_KEY = ApiKey.HEARTBEAT
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    runtime = runtime_of(ctx.broker)
    if runtime is None:
        return HeartbeatResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    req = api.HeartbeatRequest(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if ctx.api_version >= 3 else None,
    )
    try:
        error = await runtime.call(lambda now: runtime.core.heartbeat(req, now), key=req.group_id)
    except KafkaError as exc:
        error = exc.code
    return HeartbeatResponse(error_code=error)
