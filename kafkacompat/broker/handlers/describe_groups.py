"""DescribeGroups (key 15), versions 0-5.

Behaviour: one entry per requested group: state, protocol type, the chosen protocol (only while
Stable), and the members with client id, host ("/ip"), and their metadata and assignment (both only
while Stable), as Kafka's classic coordinator reports. An unknown group is "Dead" with NONE (the
versions served here predate GROUP_ID_NOT_FOUND for describe). v4+ members carry the group instance
id; v3+ authorized operations stay "not requested" unless asked, then report no operations
information (no authorizer: INT32_MIN).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.groups import api
from kafkacompat.wire._generated.describe_groups_response import DescribeGroupsResponse
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.dispatch import RequestContext

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

Group = DescribeGroupsResponse.DescribedGroup
Member = DescribeGroupsResponse.DescribedGroupMember


async def handle(ctx: RequestContext, request: Any) -> DescribeGroupsResponse:
    group_ids = list(request.groups)
    runtime = runtime_of(ctx.broker)
    described: list[api.DescribedGroup]
    if runtime is None:
        described = [
            api.DescribedGroup(ErrorCode.COORDINATOR_NOT_AVAILABLE, g, "", "", "") for g in group_ids
        ]
    else:
        try:
            described = await runtime.call(
                lambda now: runtime.core.describe_groups(group_ids, now), may_write=False
            )
        except KafkaError as exc:
            described = [api.DescribedGroup(exc.code, g, "", "", "") for g in group_ids]
    return DescribeGroupsResponse(
        groups=[
            Group(
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
                authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
            )
            for g in described
        ]
    )
