"""SyncGroup (key 14), versions 0-5.

Behaviour: followers wait (parked) until the leader's SyncGroup brings the assignment; the leader's
assignments are stored with the group and persisted before anyone is answered. v3+ static membership;
v5+ protocol type/name are checked against the group's (INCONSISTENT_GROUP_PROTOCOL) and returned.
With an authorizer, syncing needs READ on the group (else GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.groups import api
from kafkacompat.wire._generated.sync_group_response import SyncGroupResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.sync_group_request import SyncGroupRequest

API_KEY = ApiKey.SYNC_GROUP
MIN_VERSION = 0
MAX_VERSION = 5


def to_wire(result: api.SyncGroupResponse) -> SyncGroupResponse:
    return SyncGroupResponse(
        error_code=result.error_code,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def handle(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    version = ctx.api_version
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        return to_wire(api.SyncGroupResponse(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    runtime = runtime_of(ctx.broker)
    if runtime is None:
        return to_wire(api.SyncGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    req = api.SyncGroupRequest(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        assignments=[(a.member_id, bytes(a.assignment)) for a in request.assignments],
        group_instance_id=request.group_instance_id if version >= 3 else None,
        protocol_type=request.protocol_type if version >= 5 else None,
        protocol_name=request.protocol_name if version >= 5 else None,
    )
    try:
        # parked until the rebalance (or the leader's assignment) completes: holds no request slot
        result = await runtime.call(
            lambda now: runtime.core.sync_group(req, now), key=req.group_id, park=ctx.park
        )
    except KafkaError as exc:
        result = api.SyncGroupResponse(exc.code)
    return to_wire(result)
