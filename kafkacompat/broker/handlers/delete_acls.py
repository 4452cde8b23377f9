"""DeleteAcls (key 31), versions 0-3.

Behaviour: removes every ACL matching each filter (Kafka's filter semantics) and lists them per filter;
needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED per filter); SECURITY_DISABLED without an
authorizer; a filter with an UNKNOWN type gets INVALID_REQUEST. The ACL file is persisted before the
answer (in cluster mode: the bindings leave ZooKeeper's /kafka-acl znodes). v0 filters are LITERAL.
Each filter is matched against every ACL, so 1,000 filters over a few thousand ACLs held the event loop
for most of a second: the filters are taken under a `fairness.Turn`, each one's match and removal whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.handlers.describe_acls import acl_filter
from kafkacompat.security.acls import AclStore
from kafkacompat.wire._generated.delete_acls_response import (
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsResponse,
)
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.delete_acls_request import DeleteAclsRequest

API_KEY = ApiKey.DELETE_ACLS
MIN_VERSION = 0
MAX_VERSION = 3


def _failed(code: int, message: str | None) -> DeleteAclsFilterResult:
    return DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[])


async def handle(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    authorizer = ctx.broker.authorizer
    filters = list(request.filters)
    if authorizer is None:
        message = "No Authorizer is configured on the broker"
        return DeleteAclsResponse(
            filter_results=[_failed(ErrorCode.SECURITY_DISABLED, message) for _ in filters]
        )
    if not cluster_allowed(ctx, Op.ALTER):
        return DeleteAclsResponse(
            filter_results=[_failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) for _ in filters]
        )
    store = authorizer.store
    sync = ctx.broker.config_sync
    if sync is not None:
        await sync.refresh()  # match the filters against what ZooKeeper holds now
    results = []
    removed = False
    gone = []
    turn = Turn()
    for item in filters:
        await turn.spend()
        wanted = acl_filter(item, ctx.api_version)
        problem = wanted.invalid()
        if problem is not None:
            results.append(_failed(ErrorCode.INVALID_REQUEST, problem))
            continue
        matching = store.matching(wanted)
        gone.extend(matching)
        if sync is None:
            store.remove(matching)
        removed = removed or bool(matching)
        results.append(
            DeleteAclsFilterResult(
                error_code=ErrorCode.NONE,
                error_message=None,
                matching_acls=[
                    DeleteAclsMatchingAcl(
                        error_code=ErrorCode.NONE, error_message=None, resource_type=acl.resource_type,
                        resource_name=acl.name, pattern_type=acl.pattern_type, principal=acl.principal,
                        host=acl.host, operation=acl.operation, permission_type=acl.permission,
                    )
                    for acl in matching
                ],
            )
        )  # fmt: skip
    if removed and sync is not None:
        await sync.change_acls([], gone)
        await sync.refresh()
    elif removed and store.path is not None:
        async with ctx.broker.acl_write_lock:
            await trio.to_thread.run_sync(AclStore.write, store.path, store.snapshot())
    return DeleteAclsResponse(filter_results=results)
