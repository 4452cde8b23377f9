"""AlterClientQuotas (key 49), versions 0-1.

Behaviour: sets or removes quotas of (user, client-id) entities (kafkacompat.security.quotas), then
persists them atomically in the log dir before answering (in cluster mode: in the entity's znode under
ZooKeeper's /config/users, /config/clients and /config/ips, which every broker watches);
`validate_only` checks without changing.
Needs ALTER_CONFIGS on the cluster (every entry CLUSTER_AUTHORIZATION_FAILED). Per entry, as Kafka: an
unknown or repeated entity type, or an entity naming neither user nor client-id, is INVALID_REQUEST;
so is an unknown quota key, a non-positive value, or a fractional byte rate. "ip" entities (KIP-612)
stand alone, name an IP address (or the default, a null name) and take `connection_creation_rate`
only, which no other entity takes. `controller_mutation_rate` is accepted and described but not
enforced (no controller mutation is throttled here).
"""

from __future__ import annotations

import ipaddress
import math
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.security.quotas import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    DEFAULT,
    IP,
    QUOTA_KEYS,
    USER,
    Entity,
    QuotaStore,
)
from kafkacompat.wire._generated.alter_client_quotas_response import (
    AlterClientQuotasResponse,
    EntityData,
    EntryData,
)
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.alter_client_quotas_request import AlterClientQuotasRequest

API_KEY = ApiKey.ALTER_CLIENT_QUOTAS
MIN_VERSION = 0
MAX_VERSION = 1


def _entity(entry: Any) -> Entity | str:
    """The entity of a request entry, or why it is invalid."""
    sides: dict[str, Any] = {}
    for item in entry.entity:
        if item.entity_type not in (USER, CLIENT_ID, IP):
            return f"Unsupported quota entity type '{item.entity_type}'"
        if item.entity_type in sides:
            return f"Duplicate {item.entity_type} entity type"
        sides[item.entity_type] = DEFAULT if item.entity_name is None else item.entity_name
    if not sides:
        return "Invalid empty client quota entity"
    if IP in sides:
        if len(sides) > 1:
            return (
                "Invalid quota entity combination, IP entity should not be used with user/client ID entity."
            )
        address = sides[IP]
        if address is not DEFAULT:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                return f"{address} is not a valid IP or resolvable host."
        return Entity(ip=address)
    return Entity(sides.get(USER), sides.get(CLIENT_ID))


def _invalid_op(op: Any, entity: Entity) -> str | None:
    kind = QUOTA_KEYS.get(op.key)
    if kind is None or (op.key == CONNECTION_CREATION_RATE) != (entity.ip is not None):
        return f"Unknown quota key '{op.key}'" if kind is None else f"Invalid configuration key {op.key}"
    if op.remove:
        return None
    if not (op.value > 0 and math.isfinite(op.value)):
        return f"Quota {op.key} must be a positive number, got {op.value}"
    if kind is int and op.value != int(op.value):
        return f"Quota {op.key} must be a whole number of bytes per second, got {op.value}"
    return None


async def handle(ctx: RequestContext, request: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    allowed = cluster_allowed(ctx, Op.ALTER_CONFIGS)
    store = ctx.broker.quotas.store
    results: list[EntryData] = []
    changes: list[tuple[Entity, Any]] = []
    for entry in request.entries:
        echoed = [
            EntityData(entity_type=item.entity_type, entity_name=item.entity_name) for item in entry.entity
        ]
        error, message = ErrorCode.NONE, None
        entity = _entity(entry)
        if not allowed:
            error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        elif isinstance(entity, str):
            error, message = ErrorCode.INVALID_REQUEST, entity
        else:
            problems = [problem for op in entry.ops if (problem := _invalid_op(op, entity)) is not None]
            if problems:
                error, message = ErrorCode.INVALID_REQUEST, problems[0]
            else:
                changes.append((entity, entry.ops))
        results.append(EntryData(error_code=error, error_message=message, entity=echoed))
    sync = ctx.broker.config_sync
    if changes and not request.validate_only and sync is not None:
        # cluster mode: the entity's /config znode in ZooKeeper, which every broker watches
        for entity, ops in changes:
            await sync.alter_quotas(entity, [(op.key, None if op.remove else op.value) for op in ops])
        await sync.refresh()
    elif changes and not request.validate_only:
        async with ctx.broker.quota_write_lock:
            for entity, ops in changes:
                for op in ops:
                    store.alter(entity, op.key, None if op.remove else op.value)
            if store.path is not None:
                await trio.to_thread.run_sync(QuotaStore.write, store.path, store.snapshot())
    return AlterClientQuotasResponse(entries=results)
