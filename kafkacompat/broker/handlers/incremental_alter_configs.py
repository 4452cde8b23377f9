"""IncrementalAlterConfigs (key 44), versions 0-1.

Behaviour: each config carries an operation applied to the topic's current overrides: SET (0) sets a
value, DELETE (1) removes the override (a no-op when there is none), APPEND (2) and SUBTRACT (3) add or
remove comma-separated items of a list-typed config, starting from its current effective value (Kafka
starts from the override or the config's built-in default; with the broker's `log.*` defaults unchanged
the two agree). APPEND/SUBTRACT on a non-list config or any unknown name or bad resulting value ->
INVALID_CONFIG; a key named twice in one resource, an unknown operation or a SET with a null value ->
INVALID_REQUEST; a missing topic -> UNKNOWN_TOPIC_OR_PARTITION. The result is persisted and applied to
the live partition logs before the answer; `validate_only` changes nothing. BROKER resources (this
node's id, or "" for the cluster-wide default) apply the same operations to that entity's dynamic
broker configs (APPEND/SUBTRACT from its value, else the built-in default), then validate, persist and
apply the result at once (kafkacompat.dynamic_config); settings that are not dynamic get
INVALID_REQUEST, as Kafka refuses them.
BROKER_LOGGER resources (by node id) SET a logger's level (log4j names: TRACE, DEBUG, INFO, WARN, ERROR,
FATAL, OFF; anything else or an unknown logger -> INVALID_CONFIG) or DELETE it (the logger follows its
parent again; not allowed for "root"); APPEND/SUBTRACT -> INVALID_REQUEST. Level changes are not
persisted, as in Kafka. A resource named twice gets INVALID_REQUEST; other resource types INVALID_REQUEST.
With an authorizer: ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or, for brokers and broker
loggers, on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import TYPE_CHECKING, Any

from kafkacompat.broker.admin_support import (
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_NAMES,
    RESOURCE_TOPIC,
    answer_each_resource,
    apply_topic_configs,
    new_broker_configs,
    parse_broker_resource,
    require_topic,
    set_logger_levels,
)
from kafkacompat.broker.authorization import Op, require_config_access
from kafkacompat.log.config import TOPIC_CONFIG_DEFS_BY_NAME
from kafkacompat.wire._generated.incremental_alter_configs_response import IncrementalAlterConfigsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.wire._generated.incremental_alter_configs_request import IncrementalAlterConfigsRequest

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
MIN_VERSION = 0
MAX_VERSION = 1

SET = 0
DELETE = 1
APPEND = 2
SUBTRACT = 3
_OPERATION_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def new_topic_overrides(broker: BrokerState, name: str, operations: list[Any]) -> dict[str, str]:
    """The topic's overrides after applying `operations` (not yet validated as values). Raises KafkaError."""
    topic = require_topic(broker, name)
    overrides = dict(topic.configs)
    effective = dict(broker.topic_log_config(topic).items())
    for op in operations:
        key, operation, value = op.name, op.config_operation, op.value
        if operation not in _OPERATION_NAMES:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {operation} for {key}")
        definition = TOPIC_CONFIG_DEFS_BY_NAME.get(key)
        if operation == DELETE:
            overrides.pop(key, None)
            continue
        if definition is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {key}")
        if value is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {key}")
        if operation == SET:
            overrides[key] = value
            continue
        if definition.type != "list":
            verb = "append" if operation == APPEND else "subtract"
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {key}"
            )
        current = _items(overrides.get(key, effective.get(key, "")))
        change = _items(value)
        if operation == APPEND:
            current += [item for item in change if item not in current]
        else:
            current = [item for item in current if item not in change]
        overrides[key] = ",".join(current)
    return overrides


async def handle(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    broker = ctx.broker

    async def alter(resource: Any, _result: Any) -> None:
        require_config_access(ctx, resource.resource_type, resource.resource_name, Op.ALTER_CONFIGS)
        keys = Counter(c.name for c in resource.configs)
        duplicates = sorted(k for k, n in keys.items() if n > 1)
        if duplicates:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {', '.join(duplicates)}"
            )
        if resource.resource_type == RESOURCE_TOPIC:
            name = resource.resource_name
            await apply_topic_configs(
                broker,
                name,
                functools.partial(new_topic_overrides, broker, name, resource.configs),
                validate_only=bool(request.validate_only),
            )
        elif resource.resource_type == RESOURCE_BROKER:
            node_id = parse_broker_resource(broker, resource.resource_name)
            operations = [(c.name, c.config_operation, c.value) for c in resource.configs]
            await broker.alter_broker_configs(
                node_id,
                functools.partial(new_broker_configs, operations=operations),
                validate_only=bool(request.validate_only),
            )
        elif resource.resource_type == RESOURCE_BROKER_LOGGER:
            if parse_broker_resource(broker, resource.resource_name) is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker loggers are changed by broker id")
            set_logger_levels(
                [(c.name, c.config_operation, c.value) for c in resource.configs],
                validate_only=bool(request.validate_only),
            )
        else:
            kind = RESOURCE_NAMES.get(resource.resource_type, str(resource.resource_type))
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {kind}")

    results = await answer_each_resource(request.resources, Result, alter, refuse_duplicates=True)
    return IncrementalAlterConfigsResponse(responses=results)
