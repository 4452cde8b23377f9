"""AlterConfigs (key 33), versions 0-2.

Behaviour: the legacy, replace-all form. For a TOPIC resource the given configs become the topic's
complete set of overrides (anything not named reverts to its default); a null value gets
INVALID_REQUEST, an unknown name or a bad value INVALID_CONFIG, a missing topic
UNKNOWN_TOPIC_OR_PARTITION; the change is persisted in the metadata file and applied to the live
partition logs before the answer. `validate_only` runs every check and changes nothing. BROKER
resources (this node's id, or "" for the cluster-wide default): the given configs become that entity's
complete set of dynamic broker configs (validated, persisted, applied at once; see
kafkacompat.dynamic_config); a setting Kafka does not change at run time, or this broker cannot, gets
INVALID_REQUEST ("Cannot update these configs dynamically: ..."), as does another node's id. A
resource named twice gets INVALID_REQUEST for every copy; other resource types INVALID_REQUEST.
With an authorizer: ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or, for brokers, on the
cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.admin_support import (
    RESOURCE_BROKER,
    RESOURCE_NAMES,
    RESOURCE_TOPIC,
    answer_each_resource,
    apply_topic_configs,
    parse_broker_resource,
)
from kafkacompat.broker.authorization import Op, require_config_access
from kafkacompat.wire._generated.alter_configs_response import AlterConfigsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.alter_configs_request import AlterConfigsRequest

API_KEY = ApiKey.ALTER_CONFIGS
MIN_VERSION = 0
MAX_VERSION = 2

Result = AlterConfigsResponse.AlterConfigsResourceResponse


async def handle(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    broker = ctx.broker

    async def alter(resource: Any, _result: Any) -> None:
        require_config_access(ctx, resource.resource_type, resource.resource_name, Op.ALTER_CONFIGS)
        nulls = [c.name for c in resource.configs if c.value is None]
        if nulls:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")
        configs = {c.name: c.value for c in resource.configs}
        if resource.resource_type == RESOURCE_TOPIC:
            await apply_topic_configs(
                broker, resource.resource_name, configs, validate_only=bool(request.validate_only)
            )
        elif resource.resource_type == RESOURCE_BROKER:
            node_id = parse_broker_resource(broker, resource.resource_name)
            await broker.alter_broker_configs(
                node_id, lambda _current: configs, validate_only=bool(request.validate_only)
            )
        else:
            kind = RESOURCE_NAMES.get(resource.resource_type, str(resource.resource_type))
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"AlterConfigs is only supported for topics and brokers, but resource type is {kind}",
            )

    results = await answer_each_resource(request.resources, Result, alter, refuse_duplicates=True)
    return AlterConfigsResponse(responses=results)
