"""DescribeClientQuotas (key 48), versions 0-1.

Behaviour: the configured quotas (kafkacompat.security.quotas) whose entity matches the filter, as
Kafka's KIP-546 filter reads: each component names an entity type ("user", "client-id") and matches an
exact name (0), the default (1) or any entity naming that type, default included (2); `strict` keeps
only entities with no other types. Needs DESCRIBE_CONFIGS on the cluster
(CLUSTER_AUTHORIZATION_FAILED); an unknown or repeated entity type is INVALID_REQUEST. "ip" entities
(connection rates) stand alone, so a filter mixing "ip" with "user" or "client-id" matches nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.security.quotas import CLIENT_ID, DEFAULT, IP, USER, Entity
from kafkacompat.wire._generated.describe_client_quotas_response import (
    DescribeClientQuotasResponse,
    EntityData,
    EntryData,
    ValueData,
)
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.describe_client_quotas_request import DescribeClientQuotasRequest

API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS
MIN_VERSION = 0
MAX_VERSION = 1

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _side(entity: Entity, entity_type: str) -> Any:
    return entity.user if entity_type == USER else entity.client_id if entity_type == CLIENT_ID else entity.ip


def _matches(entity: Entity, components: list[Any], strict: bool) -> bool:
    named = {kind for kind in (USER, CLIENT_ID, IP) if _side(entity, kind) is not None}
    wanted = set()
    for component in components:
        wanted.add(component.entity_type)
        value = _side(entity, component.entity_type)
        if value is None:
            return False
        if component.match_type == MATCH_EXACT and value != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and value is not DEFAULT:
            return False
    return not strict or named == wanted


def entity_data(entity: Entity) -> list[EntityData]:
    return [
        EntityData(entity_type=entity_type, entity_name=None if value is DEFAULT else value)
        for entity_type, value in ((USER, entity.user), (CLIENT_ID, entity.client_id), (IP, entity.ip))
        if value is not None
    ]


def _refused(error: int, message: str | None) -> DescribeClientQuotasResponse:
    return DescribeClientQuotasResponse(error_code=error, error_message=message, entries=None)


async def handle(ctx: RequestContext, request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    if not cluster_allowed(ctx, Op.DESCRIBE_CONFIGS):
        return _refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    seen: set[str] = set()
    for component in request.components:
        if component.entity_type not in (USER, CLIENT_ID, IP):
            return _refused(
                ErrorCode.INVALID_REQUEST, f"Custom entity type '{component.entity_type}' not supported"
            )
        if component.entity_type in seen:
            return _refused(
                ErrorCode.INVALID_REQUEST, f"Duplicate {component.entity_type} filter component entity type"
            )
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return _refused(ErrorCode.INVALID_REQUEST, f"Unknown match type {component.match_type}")
        if component.match_type == MATCH_EXACT and component.match is None:
            return _refused(ErrorCode.INVALID_REQUEST, "An exact match needs a name")
        seen.add(component.entity_type)
    entries = [
        EntryData(
            entity=entity_data(entity),
            values=[ValueData(key=key, value=float(value)) for key, value in sorted(values.items())],
        )
        for entity, values in ctx.broker.quotas.store.quotas.items()
        if _matches(entity, request.components, request.strict)
    ]
    return DescribeClientQuotasResponse(error_code=ErrorCode.NONE, error_message=None, entries=entries)
