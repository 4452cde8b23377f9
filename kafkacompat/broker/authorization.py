"""Authorization checks for handlers: one call per resource, free when no authorizer is configured.

Theory of operation: handlers ask `allowed(ctx, operation, resource_type, name)` (and the helpers
below) before they act on a topic, group, transactional id or the cluster, and put Kafka's error
(TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED) in the answer when refused. The
principal is the connection's (`ctx.connection.principal`), the host its peer address, as Kafka's
RequestContext gives them to the authorizer. Without `authorizer.class.name` every check is True and
costs one attribute read. The decisions themselves are kafkacompat.security.acls.Authorizer's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.security.acls import Op, Resource

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext

__all__ = ["Op", "Resource", "allowed", "authorized_operations", "cluster_allowed", "peer_host"]

# Kafka's "authorized operations not requested" value (INT32 min)
NOT_REQUESTED = -(2**31)


def peer_host(ctx: RequestContext) -> str:
    host = ctx.connection.peer.rpartition(":")[0]
    return host.strip("[]") or ctx.connection.peer


def allowed(ctx: RequestContext, operation: int, resource_type: int, name: str) -> bool:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(ctx.connection.principal, peer_host(ctx), operation, resource_type, name)


def cluster_allowed(ctx: RequestContext, operation: int) -> bool:
    return allowed(ctx, operation, Resource.CLUSTER, Resource.CLUSTER_NAME)


def authorized_operations(ctx: RequestContext, resource_type: int, name: str) -> int:
    """The authorized-operations bit set of a resource (every operation when there is no authorizer)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        from kafkacompat.security.acls import OPERATIONS

        return sum(1 << op for op in OPERATIONS[resource_type])
    return authorizer.authorized_operations(ctx.connection.principal, peer_host(ctx), resource_type, name)


def any_topic_allowed(ctx: RequestContext, operation: int) -> bool:
    """Whether the principal may do `operation` on at least one topic (Kafka's authorizeByResourceType,
    used for idempotent producers): tried on every topic named by an ACL pattern and every existing one."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    names = {acl.name for acl in authorizer.store if acl.resource_type == Resource.TOPIC}
    names.update(topic.name for topic in ctx.broker.metadata.topics())
    return any(allowed(ctx, operation, Resource.TOPIC, name) for name in names)


# DescribeConfigs/AlterConfigs resource types (ConfigResource.Type): topic, broker, broker logger
_CONFIG_TOPIC, _CONFIG_BROKER, _CONFIG_BROKER_LOGGER = 2, 4, 8


def require_config_access(ctx: RequestContext, config_resource_type: int, name: str, operation: int) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on a config resource: the topic's, or the cluster's for brokers
    and broker loggers; raises KafkaError with Kafka's *_AUTHORIZATION_FAILED when refused."""
    from kafkacompat.wire.errors import ErrorCode, KafkaError

    if ctx.broker.authorizer is None:
        return
    if config_resource_type == _CONFIG_TOPIC:
        if not allowed(ctx, operation, Resource.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    elif config_resource_type in (_CONFIG_BROKER, _CONFIG_BROKER_LOGGER):
        if not cluster_allowed(ctx, operation):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
