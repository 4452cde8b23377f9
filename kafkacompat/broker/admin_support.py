"""Shared pieces of the admin handlers: config descriptions, config changes, partition additions.

Theory of operation
-------------------
Configs are described the way Kafka's config helper does it. A topic config's value is the topic's
effective `LogConfig` value; its synonym chain is the topic override (DYNAMIC_TOPIC_CONFIG), if any,
then the chain of its broker-level synonym (`DynamicBrokerConfigs.config_synonyms`: per-broker dynamic,
cluster-wide dynamic default, static, built-in default, each listing the synonyms set in it, starting at
the synonym's own name; so `retention.ms` shows `log.retention.ms` where it is set, and not a static
`log.retention.hours`, exactly as Kafka). Its source is the head of that chain, else DEFAULT_CONFIG.
Broker configs are described from the effective `BrokerConfig` (dynamic layers included): every option
with its value and the same chain, read-only unless this broker changes it at run time. The empty
resource name describes the cluster-wide dynamic defaults that are set, and nothing else.

BROKER_LOGGER resources are this process's `logging` loggers (see the section at the end).

Changes to broker configs (BROKER resources) go to `BrokerState.alter_broker_configs`.
Changes to a topic's configs (AlterConfigs, IncrementalAlterConfigs) and partition additions
(CreatePartitions) are checked here under the broker's metadata lock, then written where the broker's
`topic_admin` keeps topics (`state.LocalTopicAdmin`: persisted through `LocalMetadata` in a worker
thread before the caller answers, then applied to the live logs; `state.ZooKeeperTopicAdmin`: written
to ZooKeeper).

These are free functions rather than methods because the classes they would belong to are owned by
another part of the tree: `apply_topic_configs` and `add_partitions` belong on `BrokerState` next to
`create_topic`; `describe_*_configs` could live with the config tables.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.lock_wait import holding
from kafkacompat.broker.state import (
    check_partition_limit,
)
from kafkacompat.config import OPTIONS_BY_NAME, TOPIC_CONFIG_SOURCES
from kafkacompat.dynamic_config import (
    DYNAMIC_HERE,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    broker_config_synonyms,
    listener_base_name,
    render,
)
from kafkacompat.log.config import TOPIC_CONFIG_DEFS_BY_NAME, LogConfig
from kafkacompat.replication.metadata import validate_topic_name
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.replication.metadata import TopicInfo

__all__ = [
    "ALL_CLUSTER_OPERATIONS",
    "ALL_TOPIC_OPERATIONS",
    "AUTHORIZED_OPERATIONS_OMITTED",
    "RESOURCE_BROKER",
    "RESOURCE_TOPIC",
    "ROOT_LOGGER",
    "ConfigEntry",
    "add_partitions",
    "apply_topic_configs",
    "broker_config_entries",
    "default_broker_config_entries",
    "describe_loggers",
    "new_broker_configs",
    "parse_broker_resource",
    "require_topic",
    "set_logger_levels",
    "topic_config_entries",
]

# ConfigResource types (Kafka's ConfigResource.Type ids)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32
RESOURCE_NAMES = {
    RESOURCE_TOPIC: "TOPIC",
    RESOURCE_BROKER: "BROKER",
    RESOURCE_BROKER_LOGGER: "BROKER_LOGGER",
    RESOURCE_CLIENT_METRICS: "CLIENT_METRICS",
    RESOURCE_GROUP: "GROUP",
}

# IncrementalAlterConfigs operations
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

# DescribeConfigs config sources
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = SOURCE_DYNAMIC_DEFAULT_BROKER
SOURCE_DYNAMIC_BROKER_LOGGER = 6
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# DescribeConfigs config types
CONFIG_TYPES = {
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "class": 8,
    "password": 9,
}

# ACL operation codes, as 32-bit fields of "allowed" bits; without an authorizer everything is allowed
_OPS = {
    "CREATE": 5,
    "READ": 3,
    "WRITE": 4,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
}


def _bits(*names: str) -> int:
    value = 0
    for name in names:
        value |= 1 << _OPS[name]
    return value


AUTHORIZED_OPERATIONS_OMITTED = -2147483648
ALL_CLUSTER_OPERATIONS = _bits(
    "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"
)
ALL_TOPIC_OPERATIONS = _bits(
    "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"
)

# topic config -> the most specific broker setting providing its default
TOPIC_TO_BROKER: dict[str, str] = {
    **TOPIC_CONFIG_SOURCES,
    "retention.ms": "log.retention.ms",
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "flush.ms": "log.flush.interval.ms",
    "message.format.version": "log.message.format.version",
}


class ConfigEntry:
    """One described config, independent of the response class that carries it."""

    __slots__ = ("config_type", "name", "read_only", "sensitive", "source", "synonyms", "value")

    def __init__(
        self,
        name: str,
        value: str | None,
        source: int,
        synonyms: list[tuple[str, str | None, int]],
        config_type: int,
        read_only: bool,
        sensitive: bool = False,
    ) -> None:
        self.name = name
        self.value = value
        self.source = source
        self.synonyms = synonyms
        self.config_type = config_type
        self.read_only = read_only
        self.sensitive = sensitive

    def __repr__(self) -> str:
        return f"ConfigEntry({self.name}={self.value!r}, source={self.source})"


def render_option_value(value: Any) -> str | None:
    return render(value)


def _wanted(names: Iterable[str], keys: Sequence[str] | None) -> list[str]:
    if keys is None:
        return list(names)
    keep = set(keys)
    return [name for name in names if name in keep]


def topic_config_entries(
    broker: BrokerState, topic: TopicInfo, keys: Sequence[str] | None = None
) -> list[ConfigEntry]:
    """Every topic config (or those named in `keys`) with value, source and synonym chain."""
    log_config = broker.topic_log_config(topic)
    values = dict(log_config.items())
    entries = []
    for name in _wanted(values, keys):
        chain: list[tuple[str, str | None, int]] = []
        if name in topic.configs:
            chain.append((name, values[name], SOURCE_DYNAMIC_TOPIC))
        broker_name = TOPIC_TO_BROKER.get(name)
        if broker_name is not None and broker_name in OPTIONS_BY_NAME:
            chain.extend(broker.dynamic.config_synonyms(broker_name, broker_config_synonyms(broker_name)))
        definition = TOPIC_CONFIG_DEFS_BY_NAME[name]
        entries.append(
            ConfigEntry(
                name,
                values[name],
                chain[0][2] if chain else SOURCE_DEFAULT,
                chain,
                CONFIG_TYPES.get(definition.type, 0),
                read_only=False,
            )
        )
    return entries


def broker_config_entries(broker: BrokerState, keys: Sequence[str] | None = None) -> list[ConfigEntry]:
    """Every broker setting (or those in `keys`) of this node: effective value, synonym chain over the
    dynamic, static and default layers; read-only unless it can change at run time here."""
    config = broker.config
    entries = []
    for name in _wanted(OPTIONS_BY_NAME, keys):
        option = OPTIONS_BY_NAME[name]
        sensitive = option.type == "password"
        chain = broker.dynamic.config_synonyms(name, broker_config_synonyms(name), sensitive=sensitive)
        entries.append(
            ConfigEntry(
                name,
                None if sensitive else render(config[name]),
                chain[0][2] if chain else SOURCE_DEFAULT,
                chain,
                CONFIG_TYPES.get(option.type, 0),
                read_only=name not in DYNAMIC_HERE,
                sensitive=sensitive,
            )
        )
    # listener-prefixed settings (listener.name.<l>.<option>), static or dynamic, as Kafka lists them:
    # each with its option as the next synonym
    dynamic = broker.dynamic
    prefixed = {*dynamic.static_strings(), *dynamic.cluster_default, *dynamic.per_broker}
    effective = config.listener_settings
    for name in _wanted(sorted(n for n in prefixed if listener_base_name(n) is not None), keys):
        base = listener_base_name(name)
        assert base is not None
        option = OPTIONS_BY_NAME[base]
        sensitive = option.type == "password"
        chain = dynamic.config_synonyms(name, broker_config_synonyms(name), sensitive=sensitive)
        entries.append(
            ConfigEntry(
                name,
                None if sensitive else effective.get(name),
                chain[0][2] if chain else SOURCE_DEFAULT,
                chain,
                CONFIG_TYPES.get(option.type, 0),
                read_only=base not in DYNAMIC_HERE,
                sensitive=sensitive,
            )
        )
    return entries


def default_broker_config_entries(
    broker: BrokerState, keys: Sequence[str] | None = None
) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults that are set (the empty BROKER resource name), as Kafka lists
    them: each with its DYNAMIC_DEFAULT_BROKER_CONFIG synonyms only."""
    defaults = broker.dynamic.cluster_default
    entries = []
    for name in _wanted(sorted(defaults), keys):
        option = OPTIONS_BY_NAME.get(name)
        sensitive = option is not None and option.type == "password"
        everywhere = broker.dynamic.config_synonyms(name, broker_config_synonyms(name), sensitive=sensitive)
        chain = [entry for entry in everywhere if entry[2] == SOURCE_DYNAMIC_DEFAULT_BROKER]
        entries.append(
            ConfigEntry(
                name,
                None if sensitive else defaults[name],
                chain[0][2] if chain else SOURCE_DEFAULT,
                chain,
                CONFIG_TYPES.get(option.type, 0) if option is not None else 0,
                read_only=name not in DYNAMIC_HERE,
                sensitive=sensitive,
            )
        )
    return entries


async def answer_each_resource(
    resources: Sequence[Any],
    result_class: Callable[..., Any],
    handle_one: Callable[[Any, Any], Awaitable[None]],
    *,
    refuse_duplicates: bool,
    **result_fields: Callable[[], Any],
) -> list[Any]:
    """The per-resource loop of the config APIs (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs).

    One `result_class` per resource, naming it, error NONE; `handle_one(resource, result)` fills it in,
    and a KafkaError it raises becomes that resource's error code and message. With `refuse_duplicates`
    a resource named twice gets INVALID_REQUEST (Kafka's alter APIs). `result_fields` give further fields
    as factories, so no two results share a mutable default.
    """
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    results = []
    turn = Turn()  # 1,000 resources: other clients run in between (fairness.py)
    for resource in resources:
        await turn.spend()
        result = result_class(
            error_code=ErrorCode.NONE,
            error_message=None,
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            **{name: make() for name, make in result_fields.items()},
        )
        results.append(result)
        try:
            if refuse_duplicates and counts[(resource.resource_type, resource.resource_name)] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate resource in the request.")
            await handle_one(resource, result)
        except KafkaError as exc:
            result.error_code = exc.code
            result.error_message = exc.message
    return results


def parse_broker_resource(broker: BrokerState, resource_name: str | None) -> int | None:
    """The node id a BROKER resource names; None for the empty name (cluster-wide dynamic defaults).

    Raises KafkaError(INVALID_REQUEST) for a malformed id or another broker's id, as Kafka does.
    """
    if not resource_name:
        return None
    try:
        node_id = int(resource_name)
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {resource_name}"
        ) from None
    if node_id != broker.node_id:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {broker.node_id} or empty string, but received {resource_name}",
        )
    return node_id


def require_topic(broker: BrokerState, name: str | None) -> TopicInfo:
    """The named topic; KafkaError INVALID_TOPIC_EXCEPTION / UNKNOWN_TOPIC_OR_PARTITION otherwise."""
    validate_topic_name(name)
    assert name is not None
    topic = broker.metadata.topic(name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
    return topic


def validate_topic_overrides(broker: BrokerState, overrides: dict[str, str]) -> LogConfig:
    """Raise KafkaError(INVALID_CONFIG) unless every override is a known topic config with a valid value."""
    for name, raw in overrides.items():
        definition = TOPIC_CONFIG_DEFS_BY_NAME.get(name)
        if definition is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        try:
            definition.parse(str(raw))
        except ValueError:
            kind = (
                "a boolean" if definition.type == "boolean" else f"a number of type {definition.type.upper()}"
            )
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {name}: Not {kind}"
            ) from None
    return broker.validate_topic_configs(overrides)


async def apply_topic_configs(
    broker: BrokerState,
    name: str,
    overrides: dict[str, str] | Callable[[], dict[str, str]],
    *,
    validate_only: bool = False,
) -> None:
    """Replace the topic's config overrides: validate, persist, then apply to its live partition logs.

    `overrides` is the new set, or a function computing it from the current state (called under the
    metadata lock, so concurrent incremental changes do not lose each other's updates).
    Raises KafkaError (UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG). Nothing changes with `validate_only`.
    """
    async with holding(broker.metadata_lock):
        topic = require_topic(broker, name)
        if callable(overrides):
            await broker.topic_admin.refresh_topic_configs(name)
        new = overrides() if callable(overrides) else dict(overrides)
        validate_topic_overrides(broker, new)
        if validate_only:
            return
        await broker.topic_admin.write_topic_configs(topic, new)


async def add_partitions(
    broker: BrokerState,
    name: str,
    total: int,
    *,
    validate_only: bool = False,
    assignment: dict[int, list[int]] | None = None,
) -> TopicInfo:
    """Grow the topic to `total` partitions (logs created, table persisted), the new ones on the
    brokers `assignment` names (partition -> replicas, checked by the caller; None: assigned as for a
    new topic). Raises KafkaError."""
    async with holding(broker.metadata_lock):
        topic = require_topic(broker, name)
        current = topic.partitions
        if total < current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than the requested {total}.",
            )
        if total == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
        check_partition_limit(total)
        if validate_only:
            return topic
        await broker.topic_admin.add_partitions(topic, total, assignment)
        return topic


def new_broker_configs(
    current: dict[str, str], operations: Sequence[tuple[str, int, str | None]]
) -> dict[str, str]:
    """A broker entity's dynamic configs after IncrementalAlterConfigs operations (values not yet
    validated). APPEND/SUBTRACT start from the entity's value, else the option's built-in default (as
    Kafka's controller does). Raises KafkaError."""
    configs = dict(current)
    for name, operation, value in operations:
        if operation == OP_DELETE:
            configs.pop(name, None)
            continue
        if operation not in (OP_SET, OP_APPEND, OP_SUBTRACT):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {operation} for {name}")
        if value is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}")
        if operation == OP_SET:
            configs[name] = value
            continue
        option = OPTIONS_BY_NAME.get(name)
        if option is None or option.type != "list":
            verb = "append" if operation == OP_APPEND else "subtract"
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}"
            )
        base = configs.get(name, render(option.default) or "")
        items = [item.strip() for item in base.split(",") if item.strip()]
        change = [item.strip() for item in value.split(",") if item.strip()]
        if operation == OP_APPEND:
            items += [item for item in change if item not in items]
        else:
            items = [item for item in items if item not in change]
        configs[name] = ",".join(items)
    return configs


# --- BROKER_LOGGER resources -------------------------------------------------------------------------
# Kafka lets DescribeConfigs list a broker's loggers (resource type BROKER_LOGGER, named by broker id) with
# their effective levels and IncrementalAlterConfigs change them at run time (SET a level, DELETE to fall
# back to the parent's). Here they are Python's `logging` loggers under `kafkacompat` plus the root logger,
# which Kafka calls "root"; levels use log4j's names mapped onto Python's (TRACE below DEBUG, WARN is
# WARNING, FATAL is CRITICAL, OFF silences). As in Kafka, changes last until the process restarts.

ROOT_LOGGER = "root"
LOGGER_PREFIX = "kafkacompat"
LEVEL_TRACE = 5
LEVEL_OFF = logging.CRITICAL + 10
LEVELS: dict[str, int] = {
    "TRACE": LEVEL_TRACE,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "OFF": LEVEL_OFF,
}


def level_name(level: int) -> str:
    """The log4j name of a Python level (the nearest named level at or below it)."""
    best = "TRACE"
    for name, value in sorted(LEVELS.items(), key=lambda item: item[1]):
        if value <= level:
            best = name
    return best


def _python_logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)


def logger_names() -> list[str]:
    """The root logger and every `kafkacompat` logger that exists, sorted."""
    known = [
        name
        for name, item in logging.root.manager.loggerDict.items()
        if isinstance(item, logging.Logger)
        and (name == LOGGER_PREFIX or name.startswith(LOGGER_PREFIX + "."))
    ]
    return [ROOT_LOGGER, *sorted(known)]


def describe_loggers(keys: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """(logger name, effective level name) for every logger, or only those named in `keys`."""
    names = logger_names()
    if keys is not None:
        wanted = set(keys)
        names = [name for name in names if name in wanted]
    return [(name, level_name(_python_logger(name).getEffectiveLevel())) for name in names]


def set_logger_levels(
    operations: Sequence[tuple[str, int, str | None]], *, validate_only: bool = False
) -> None:
    """Apply (logger, operation, level) changes; all are checked before any is applied. Raises KafkaError."""
    existing = set(logger_names())
    planned: list[tuple[logging.Logger, int]] = []
    for name, operation, value in operations:
        if operation in (OP_APPEND, OP_SUBTRACT):
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"{name}: APPEND and SUBTRACT do not apply to logger levels"
            )
        if operation not in (OP_SET, OP_DELETE):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {operation} for {name}")
        if name not in existing:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist")
        if operation == OP_DELETE:
            if name == ROOT_LOGGER:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST, "Removing the log level of the root logger is not allowed"
                )
            planned.append((_python_logger(name), logging.NOTSET))
            continue
        level = LEVELS.get((value or "").strip().upper())
        if level is None:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Cannot set the log level of {name} to {value} as it is not a supported log level. "
                f"Valid log levels are {', '.join(LEVELS)}",
            )
        planned.append((_python_logger(name), level))
    if validate_only:
        return
    for logger, level in planned:
        logger.setLevel(level)
