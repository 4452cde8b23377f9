"""DescribeAcls (key 29), versions 0-3.

Behaviour: the ACLs matching the filter (Kafka's filter semantics: ANY, MATCH, null = any; see
kafkacompat.security.acls), grouped by resource pattern. Needs DESCRIBE on the cluster
(CLUSTER_AUTHORIZATION_FAILED); SECURITY_DISABLED without an authorizer; an UNKNOWN type in the filter
is INVALID_REQUEST. v0 filters are LITERAL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.security.acls import AclFilter, Pattern
from kafkacompat.wire._generated.describe_acls_response import (
    AclDescription,
    DescribeAclsResource,
    DescribeAclsResponse,
)
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.describe_acls_request import DescribeAclsRequest

API_KEY = ApiKey.DESCRIBE_ACLS
MIN_VERSION = 0
MAX_VERSION = 3
#: ACLs matched between two looks at the clock
_SLICE = 256


def acl_filter(request: Any, version: int) -> AclFilter:
    return AclFilter(
        request.resource_type_filter,
        request.resource_name_filter,
        request.pattern_type_filter if version >= 1 else Pattern.LITERAL,
        request.principal_filter,
        request.host_filter,
        request.operation,
        request.permission_type,
    )


async def handle(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return DescribeAclsResponse(
            error_code=ErrorCode.SECURITY_DISABLED, error_message="No Authorizer is configured on the broker",
            resources=[],
        )  # fmt: skip
    if not cluster_allowed(ctx, Op.DESCRIBE):
        return DescribeAclsResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None, resources=[]
        )
    wanted = acl_filter(request, ctx.api_version)
    problem = wanted.invalid()
    if problem is not None:
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=problem, resources=[])
    grouped: dict[tuple[int, str, int], list[AclDescription]] = {}
    # the ACLs as they are now, matched a slice at a time with the loop given back between slices: over
    # 10,000 ACLs one match took 20 ms of the event loop (fairness.py)
    snapshot = list(authorizer.store)
    turn = Turn()
    for start in range(0, len(snapshot), _SLICE):
        await turn.spend()
        for acl in snapshot[start : start + _SLICE]:
            if not wanted.matches(acl):
                continue
            grouped.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(
                AclDescription(principal=acl.principal, host=acl.host, operation=acl.operation,
                               permission_type=acl.permission)
            )  # fmt: skip
    resources = []
    for (rtype, name, pattern), acls in grouped.items():
        await turn.spend()
        resources.append(
            DescribeAclsResource(resource_type=rtype, resource_name=name, pattern_type=pattern, acls=acls)
        )
    return DescribeAclsResponse(error_code=ErrorCode.NONE, error_message=None, resources=resources)
