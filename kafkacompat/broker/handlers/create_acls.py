"""CreateAcls (key 30), versions 0-3.

Behaviour: needs ALTER on the cluster (else every creation gets CLUSTER_AUTHORIZATION_FAILED); without
an authorizer (`authorizer.class.name` unset) every creation gets SECURITY_DISABLED, as Kafka answers.
Each creation is validated as Kafka does (INVALID_REQUEST with its message: unknown resource, pattern,
operation or permission type, an unparsable principal, a CLUSTER name other than kafka-cluster, an
operation the resource type does not have); v0 creations are LITERAL. The valid ones are added and the
ACL file persisted before the answer (in cluster mode: written to ZooKeeper's /kafka-acl znodes, which
every broker watches); creating an existing binding again is a success.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.security.acls import AclBinding, AclStore, Pattern, validate
from kafkacompat.wire._generated.create_acls_response import AclCreationResult, CreateAclsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.create_acls_request import CreateAclsRequest

API_KEY = ApiKey.CREATE_ACLS
MIN_VERSION = 0
MAX_VERSION = 3


def _result(code: int, message: str | None = None) -> AclCreationResult:
    return AclCreationResult(error_code=code, error_message=message)


async def handle(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    authorizer = ctx.broker.authorizer
    creations = list(request.creations)
    if authorizer is None:
        message = "No Authorizer is configured on the broker"
        return CreateAclsResponse(results=[_result(ErrorCode.SECURITY_DISABLED, message) for _ in creations])
    if not cluster_allowed(ctx, Op.ALTER):
        return CreateAclsResponse(
            results=[_result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED) for _ in creations]
        )
    results = []
    added = False
    new_bindings: list[AclBinding] = []
    for creation in creations:
        binding = AclBinding(
            creation.resource_type,
            creation.resource_name,
            creation.resource_pattern_type if ctx.api_version >= 1 else Pattern.LITERAL,
            creation.principal,
            creation.host,
            creation.operation,
            creation.permission_type,
        )
        problem = validate(binding)
        if problem is not None:
            results.append(_result(ErrorCode.INVALID_REQUEST, problem))
            continue
        new_bindings.append(binding)
        added = True
        results.append(_result(ErrorCode.NONE))
    store = authorizer.store
    sync = ctx.broker.config_sync
    if sync is not None:
        # cluster mode: into ZooKeeper's /kafka-acl znodes first (every broker applies the change)
        if new_bindings:
            await sync.change_acls(new_bindings, [])
            await sync.refresh()
        return CreateAclsResponse(results=results)
    for binding in new_bindings:
        store.add(binding)
    if added and store.path is not None:
        async with ctx.broker.acl_write_lock:
            await trio.to_thread.run_sync(AclStore.write, store.path, store.snapshot())
    return CreateAclsResponse(results=results)
