"""DescribeConfigs (key 32), versions 0-4.

Behaviour: TOPIC resources list every topic-level config with its effective value (override, else the
broker's `log.*` derived default), its source (DYNAMIC_TOPIC_CONFIG / STATIC_BROKER_CONFIG /
DEFAULT_CONFIG, the head of its synonym chain), read_only=false, is_sensitive=false, the synonym chain
when `include_synonyms` (v1+), the config type (v3+) and documentation=null; a missing topic gets
UNKNOWN_TOPIC_OR_PARTITION, an illegal name INVALID_TOPIC_EXCEPTION. BROKER resources name this node
by id: every broker setting with its effective value and source (DYNAMIC_BROKER_CONFIG,
DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG or DEFAULT_CONFIG), read-only unless it changes at
run time here, sensitive values null; the empty name describes the cluster-wide dynamic defaults that
are set (none: an empty list); another node's id or a non-numeric id gets INVALID_REQUEST.
`configuration_keys` filters (null = all).
BROKER_LOGGER resources (by node id) list the root logger and every `kafkacompat` logger with its
effective level in log4j names (source DYNAMIC_BROKER_LOGGER_CONFIG). v0 carries `is_default` instead of
a source: true for DEFAULT_CONFIG. Other resource types (client metrics, groups) get INVALID_REQUEST:
this broker does not keep them.
With an authorizer: DESCRIBE_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or, for brokers and
broker loggers, on the cluster (CLUSTER_AUTHORIZATION_FAILED).
A resource named several times in one request (same type, name and keys) is described once and its
entries shared by each of its results: 1,000 copies of one topic built ~200,000 entry and synonym
objects that lived for the whole request, walked by every full garbage collection meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.admin_support import (
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_NAMES,
    RESOURCE_TOPIC,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER_LOGGER,
    ConfigEntry,
    answer_each_resource,
    broker_config_entries,
    default_broker_config_entries,
    describe_loggers,
    parse_broker_resource,
    require_topic,
    topic_config_entries,
)
from kafkacompat.broker.authorization import Op, require_config_access
from kafkacompat.wire._generated.describe_configs_response import DescribeConfigsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.describe_configs_request import DescribeConfigsRequest

API_KEY = ApiKey.DESCRIBE_CONFIGS
MIN_VERSION = 0
MAX_VERSION = 4

CONFIG_TYPE_STRING = 2

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


def _entry(config: ConfigEntry, include_synonyms: bool) -> Any:
    synonyms = []
    if include_synonyms:
        synonyms = [Synonym(name=name, value=value, source=source) for name, value, source in config.synonyms]
    return Entry(
        name=config.name,
        value=config.value,
        read_only=config.read_only,
        is_default=config.source == SOURCE_DEFAULT,
        config_source=config.source,
        is_sensitive=config.sensitive,
        synonyms=synonyms,
        config_type=config.config_type,
        documentation=None,
    )


async def handle(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    broker = ctx.broker
    include_synonyms = ctx.api_version >= 1 and bool(request.include_synonyms)
    described: dict[tuple[Any, ...], list[Any]] = {}  # (type, name, keys) -> its entries, described once

    async def describe(resource: Any, result: Any) -> None:
        require_config_access(ctx, resource.resource_type, resource.resource_name, Op.DESCRIBE_CONFIGS)
        keys = resource.configuration_keys
        seen = (resource.resource_type, resource.resource_name, None if keys is None else tuple(keys))
        if seen in described:
            result.configs = described[seen]
            return
        if resource.resource_type == RESOURCE_TOPIC:
            topic = require_topic(broker, resource.resource_name)
            entries = topic_config_entries(broker, topic, keys)
        elif resource.resource_type == RESOURCE_BROKER:
            node_id = parse_broker_resource(broker, resource.resource_name)
            if node_id is None:
                entries = default_broker_config_entries(broker, keys)
            else:
                entries = broker_config_entries(broker, keys)
        elif resource.resource_type == RESOURCE_BROKER_LOGGER:
            if parse_broker_resource(broker, resource.resource_name) is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker loggers are described by broker id")
            entries = [
                ConfigEntry(
                    name, level, SOURCE_DYNAMIC_BROKER_LOGGER, [], CONFIG_TYPE_STRING, read_only=False
                )
                for name, level in describe_loggers(keys)
            ]
        else:
            kind = RESOURCE_NAMES.get(resource.resource_type, str(resource.resource_type))
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {kind}")
        result.configs = described[seen] = [_entry(entry, include_synonyms) for entry in entries]

    results = await answer_each_resource(
        request.resources, Result, describe, refuse_duplicates=False, configs=list
    )
    return DescribeConfigsResponse(results=results)
