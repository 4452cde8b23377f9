"""JoinGroup (key 11), versions 0-9.

Behaviour: the request becomes a `groups.api.JoinGroupRequest` (client id from the request header,
host as Kafka prints it, "/ip") and goes to the group coordinator core through the runtime; the answer
may wait (parked) until the rebalance completes. v0 has no rebalance timeout (the session timeout
serves for both); v4+ gets MEMBER_ID_REQUIRED on a first join without member id; v5+ static membership;
v7+ protocol type/name (null on errors); v9 skip_assignment for a static leader rejoining. Protocol
metadata passes through untouched.
With an authorizer, joining needs READ on the group (else GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.group_runtime import client_host, runtime_of
from kafkacompat.groups import api
from kafkacompat.wire._generated.join_group_response import JoinGroupResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.join_group_request import JoinGroupRequest

API_KEY = ApiKey.JOIN_GROUP
MIN_VERSION = 0
MAX_VERSION = 9

Member = JoinGroupResponse.JoinGroupResponseMember


def to_wire(result: api.JoinGroupResponse, version: int) -> JoinGroupResponse:
    def name(value: str | None) -> str | None:
        return value if version >= 7 else (value or "")

    return JoinGroupResponse(
        error_code=result.error_code,
        generation_id=result.generation_id,
        protocol_type=name(result.protocol_type),
        protocol_name=name(result.protocol_name),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            Member(member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
            for m in result.members
        ],
    )


async def handle(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    version = ctx.api_version
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        refused = api.JoinGroupResponse(ErrorCode.GROUP_AUTHORIZATION_FAILED, request.member_id)
        return to_wire(refused, version)
    runtime = runtime_of(ctx.broker)
    if runtime is None:
        return to_wire(api.JoinGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, request.member_id), version)
    req = api.JoinGroupRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else -1,
        group_instance_id=request.group_instance_id if version >= 5 else None,
        reason=request.reason if version >= 8 else None,
        client_id=ctx.client_id or "",
        client_host=client_host(ctx.connection.peer),
        api_version=version,
    )
    try:
        # parked until the rebalance completes: holds no request slot
        result = await runtime.call(
            lambda now: runtime.core.join_group(req, now), key=req.group_id, park=ctx.park
        )
    except KafkaError as exc:
        result = api.JoinGroupResponse(exc.code, request.member_id)
    return to_wire(result, version)
