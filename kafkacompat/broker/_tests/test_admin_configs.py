"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs against a real BrokerState."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kafkacompat.broker._tests.test_admin_harness import AdminHarness
from kafkacompat.broker.handlers import (
    alter_configs,
    create_topics,
    describe_configs,
    incremental_alter_configs,
)
from kafkacompat.log.config import TOPIC_CONFIG_DEFS
from kafkacompat.wire._generated.alter_configs_request import AlterableConfig, AlterConfigsResource
from kafkacompat.wire._generated.create_topics_request import CreatableTopic, CreatableTopicConfig
from kafkacompat.wire._generated.describe_configs_request import DescribeConfigsResource
from kafkacompat.wire._generated.incremental_alter_configs_request import (
    AlterableConfig as IncrementalConfig,
)
from kafkacompat.wire._generated.incremental_alter_configs_request import (
    AlterConfigsResource as IncrementalResource,
)
from kafkacompat.wire.errors import ErrorCode

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = 1, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture
def harness(tmp_path: Path):
    h = AdminHarness(tmp_path / "data")
    yield h
    h.close()


async def create(h: AdminHarness, name: str, partitions: int = 1, **configs: str) -> None:
    topic = CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=1,
        configs=[CreatableTopicConfig(name=k.replace("_", "."), value=v) for k, v in configs.items()],
    )
    response = await h.call(create_topics, 7, topics=[topic], timeout_ms=1000, validate_only=False)
    assert response.topics[0].error_code == ErrorCode.NONE


async def describe(h: AdminHarness, version: int, resource_type: int, name: str, keys=None, synonyms=True):
    response = await h.call(
        describe_configs,
        version,
        resources=[
            DescribeConfigsResource(resource_type=resource_type, resource_name=name, configuration_keys=keys)
        ],
        include_synonyms=synonyms,
        include_documentation=True,
    )
    [result] = response.results
    return result


def by_name(result) -> dict:
    return {entry.name: entry for entry in result.configs}


@pytest.mark.parametrize("version", range(0, 5))
async def test_describe_topic_lists_every_config_with_sources(harness: AdminHarness, version: int) -> None:
    await create(harness, "t", retention_ms="1000")
    result = await describe(harness, version, TOPIC, "t")
    assert result.error_code == ErrorCode.NONE
    entries = by_name(result)
    assert set(entries) == {d.name for d in TOPIC_CONFIG_DEFS}
    retention = entries["retention.ms"]
    assert retention.value == "1000"
    assert not retention.read_only and not retention.is_sensitive
    segment = entries["segment.bytes"]
    assert segment.value == "1073741824"
    if version == 0:
        assert retention.is_default is False and segment.is_default is True
    else:
        assert retention.config_source == DYNAMIC_TOPIC
        assert segment.config_source == DEFAULT
        # the override, then the chain of log.retention.ms, which is set nowhere (Kafka lists the
        # synonyms from the broker setting's own name on, so the default log.retention.hours is not shown)
        assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
            ("retention.ms", "1000", DYNAMIC_TOPIC),
        ]
        assert [(s.name, s.source) for s in segment.synonyms] == [("log.segment.bytes", DEFAULT)]
    if version >= 3:
        assert retention.config_type == 5  # LONG
        assert entries["cleanup.policy"].config_type == 7  # LIST
        assert entries["preallocate"].config_type == 1  # BOOLEAN
        assert retention.documentation is None


async def test_describe_without_synonyms_and_filtered(harness: AdminHarness) -> None:
    await create(harness, "t")
    result = await describe(harness, 4, TOPIC, "t", keys=["cleanup.policy", "no.such.config"], synonyms=False)
    assert [(e.name, e.value, e.synonyms) for e in result.configs] == [("cleanup.policy", "delete", [])]


async def test_static_broker_setting_is_the_topic_default(tmp_path: Path) -> None:
    h = AdminHarness(tmp_path / "data", ("log.retention.hours=24", "log.cleanup.policy=compact"))
    try:
        await create(h, "t")
        entries = by_name(await describe(h, 4, TOPIC, "t"))
        retention = entries["retention.ms"]
        assert retention.value == str(24 * 3_600_000)
        # Kafka's quirk, kept: the chain of retention.ms starts at log.retention.ms, so a static
        # log.retention.hours gives the value but not the source
        assert retention.config_source == DEFAULT
        assert retention.synonyms == []
        assert entries["cleanup.policy"].value == "compact"
        assert entries["cleanup.policy"].config_source == STATIC_BROKER
    finally:
        h.close()


async def test_describe_missing_and_illegal_topics(harness: AdminHarness) -> None:
    missing = await describe(harness, 4, TOPIC, "nope")
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and missing.configs == []
    illegal = await describe(harness, 4, TOPIC, "bad/name")
    assert illegal.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


async def test_describe_broker_by_node_id(harness: AdminHarness) -> None:
    node = str(harness.state.node_id)
    result = await describe(harness, 4, BROKER, node)
    assert result.error_code == ErrorCode.NONE
    entries = by_name(result)
    assert entries["num.partitions"].value == "1"
    assert entries["num.partitions"].config_source == DEFAULT
    assert entries["log.dirs"].config_source == STATIC_BROKER
    assert entries["log.dirs"].value == str(harness.data_dir)
    assert entries["num.partitions"].read_only and entries["log.retention.hours"].read_only
    assert not entries["log.retention.ms"].read_only and not entries["message.max.bytes"].read_only
    assert entries["log.retention.ms"].value is None
    assert entries["log.retention.ms"].synonyms == []
    assert [(s.name, s.value, s.source) for s in entries["log.retention.hours"].synonyms] == [
        ("log.retention.hours", "168", DEFAULT)
    ]
    assert (await describe(harness, 4, BROKER, "")).configs == []
    for other in ("99", "x"):
        assert (await describe(harness, 4, BROKER, other)).error_code == ErrorCode.INVALID_REQUEST
    assert (await describe(harness, 4, 16, node)).error_code == ErrorCode.INVALID_REQUEST  # client metrics


async def alter(h: AdminHarness, version: int, name: str, configs: dict, validate_only=False, rtype=TOPIC):
    resource = AlterConfigsResource(
        resource_type=rtype,
        resource_name=name,
        configs=[AlterableConfig(name=k, value=v) for k, v in configs.items()],
    )
    response = await h.call(alter_configs, version, resources=[resource], validate_only=validate_only)
    [result] = response.responses
    return result


@pytest.mark.parametrize("version", range(0, 3))
async def test_alter_configs_replaces_all_overrides(harness: AdminHarness, version: int) -> None:
    await create(harness, "t", retention_ms="1000")
    result = await alter(
        harness, version, "t", {"segment.bytes": "100000", "cleanup.policy": "compact, delete"}
    )
    assert (result.error_code, result.resource_name, result.resource_type) == (ErrorCode.NONE, "t", TOPIC)
    entries = by_name(await describe(harness, 4, TOPIC, "t"))
    assert entries["segment.bytes"].config_source == DYNAMIC_TOPIC
    assert entries["cleanup.policy"].value == "compact,delete"
    assert entries["retention.ms"].config_source == DEFAULT  # not named -> back to the default
    assert entries["retention.ms"].value == "604800000"
    partition_log = harness.state.partition_log("t", 0)
    assert partition_log.config.segment_bytes == 100000
    assert partition_log.config.retention_ms == 604800000


async def test_alter_configs_validation(harness: AdminHarness) -> None:
    await create(harness, "t", retention_ms="1000")
    assert (
        await alter(harness, 1, "t", {"retention.ms": "5"}, validate_only=True)
    ).error_code == ErrorCode.NONE
    assert harness.state.metadata.topic("t").configs == {"retention.ms": "1000"}
    assert (await alter(harness, 1, "t", {"no.such": "1"})).error_code == ErrorCode.INVALID_CONFIG
    soon = await alter(harness, 1, "t", {"retention.ms": "soon"})
    assert soon.error_code == ErrorCode.INVALID_CONFIG
    assert soon.error_message == (
        "Invalid value soon for configuration retention.ms: Not a number of type LONG"
    )
    assert (await alter(harness, 1, "t", {"segment.bytes": "1"})).error_code == ErrorCode.INVALID_CONFIG
    assert (await alter(harness, 1, "t", {"retention.ms": None})).error_code == ErrorCode.INVALID_REQUEST
    assert (
        await alter(harness, 1, "gone", {"retention.ms": "1"})
    ).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert harness.state.metadata.topic("t").configs == {"retention.ms": "1000"}
    broker = await alter(harness, 1, str(harness.state.node_id), {"log.retention.hours": "1"}, rtype=BROKER)
    assert broker.error_code == ErrorCode.INVALID_REQUEST
    assert broker.error_message == "Cannot update these configs dynamically: Set(log.retention.hours)"
    assert (
        await alter(harness, 1, str(harness.state.node_id), {}, rtype=BROKER)
    ).error_code == ErrorCode.NONE
    duplicated = AlterConfigsResource(resource_type=TOPIC, resource_name="t", configs=[])
    response = await harness.call(alter_configs, 2, resources=[duplicated, duplicated], validate_only=False)
    assert [r.error_code for r in response.responses] == [ErrorCode.INVALID_REQUEST] * 2


async def test_config_changes_survive_a_restart(harness: AdminHarness) -> None:
    await create(harness, "t", 2)
    assert (
        await alter(harness, 2, "t", {"retention.ms": "1234", "max.message.bytes": "2048"})
    ).error_code == 0
    state = harness.reopen()
    assert state.metadata.topic("t").configs == {"retention.ms": "1234", "max.message.bytes": "2048"}
    for index in range(2):
        config = state.partition_log("t", index).config
        assert (config.retention_ms, config.max_message_bytes) == (1234, 2048)
    entries = by_name(await describe(harness, 4, TOPIC, "t"))
    assert entries["retention.ms"].value == "1234" and entries["retention.ms"].config_source == DYNAMIC_TOPIC


async def incremental(h: AdminHarness, name: str, *ops, validate_only=False, rtype=TOPIC, version=1):
    resource = IncrementalResource(
        resource_type=rtype,
        resource_name=name,
        configs=[IncrementalConfig(name=k, config_operation=op, value=v) for k, op, v in ops],
    )
    response = await h.call(
        incremental_alter_configs, version, resources=[resource], validate_only=validate_only
    )
    [result] = response.responses
    return result


@pytest.mark.parametrize("version", [0, 1])
async def test_incremental_operations(harness: AdminHarness, version: int) -> None:
    await create(harness, "t", retention_ms="1000", segment_bytes="100000")
    result = await incremental(
        harness, "t", ("retention.ms", DELETE, None), ("max.message.bytes", SET, "4096"), version=version
    )
    assert result.error_code == ErrorCode.NONE
    assert harness.state.metadata.topic("t").configs == {
        "segment.bytes": "100000",
        "max.message.bytes": "4096",
    }
    assert harness.state.partition_log("t", 0).config.max_message_bytes == 4096
    assert (await incremental(harness, "t", ("cleanup.policy", APPEND, "compact"))).error_code == 0
    assert harness.state.metadata.topic("t").configs["cleanup.policy"] == "delete,compact"
    assert (await incremental(harness, "t", ("cleanup.policy", APPEND, "compact"))).error_code == 0
    assert harness.state.metadata.topic("t").configs["cleanup.policy"] == "delete,compact"
    assert (await incremental(harness, "t", ("cleanup.policy", SUBTRACT, "delete"))).error_code == 0
    assert harness.state.metadata.topic("t").configs["cleanup.policy"] == "compact"
    assert harness.state.partition_log("t", 0).config.cleanup_policy == ["compact"]
    assert (await incremental(harness, "t", ("never.set", DELETE, None))).error_code == ErrorCode.NONE


async def test_incremental_errors(harness: AdminHarness) -> None:
    await create(harness, "t", retention_ms="1000")
    before = dict(harness.state.metadata.topic("t").configs)
    checks = [
        ((("retention.ms", APPEND, "5"),), ErrorCode.INVALID_CONFIG),
        ((("no.such", SET, "5"),), ErrorCode.INVALID_CONFIG),
        ((("retention.ms", SET, "x"),), ErrorCode.INVALID_CONFIG),
        ((("retention.ms", SET, "5"), ("retention.ms", DELETE, None)), ErrorCode.INVALID_REQUEST),
        ((("retention.ms", 9, "5"),), ErrorCode.INVALID_REQUEST),
        ((("retention.ms", SET, None),), ErrorCode.INVALID_REQUEST),
    ]
    for ops, code in checks:
        assert (await incremental(harness, "t", *ops)).error_code == code, ops
    assert (await incremental(harness, "t", ("retention.ms", SET, "5"), validate_only=True)).error_code == 0
    assert (
        await incremental(harness, "gone", ("retention.ms", SET, "5"))
    ).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert harness.state.metadata.topic("t").configs == before
    node = str(harness.state.node_id)
    assert (
        await incremental(harness, node, ("num.partitions", SET, "5"), rtype=BROKER)
    ).error_code == ErrorCode.INVALID_REQUEST


BROKER_LOGGER = 8


@pytest.fixture
def restore_levels():
    loggers = [logging.getLogger(), logging.getLogger("kafkacompat"), logging.getLogger("kafkacompat.broker")]
    saved = [logger.level for logger in loggers]
    yield
    for logger, level in zip(loggers, saved, strict=True):
        logger.setLevel(level)


async def test_broker_loggers(harness: AdminHarness, restore_levels: None) -> None:
    node = str(harness.state.node_id)
    logging.getLogger("kafkacompat").setLevel(logging.INFO)
    logging.getLogger("kafkacompat.broker").setLevel(logging.NOTSET)
    described = by_name(await describe(harness, 4, BROKER_LOGGER, node))
    assert {"root", "kafkacompat", "kafkacompat.broker"} <= set(described)
    assert described["kafkacompat.broker"].value == "INFO"  # effective: inherited from kafkacompat
    assert described["kafkacompat.broker"].config_source == 6  # DYNAMIC_BROKER_LOGGER_CONFIG

    changed = await incremental(harness, node, ("kafkacompat.broker", SET, "debug"), rtype=BROKER_LOGGER)
    assert changed.error_code == ErrorCode.NONE
    assert logging.getLogger("kafkacompat.broker").level == logging.DEBUG
    only = await describe(harness, 4, BROKER_LOGGER, node, keys=["kafkacompat.broker"])
    assert [(e.name, e.value) for e in only.configs] == [("kafkacompat.broker", "DEBUG")]
    assert (
        await incremental(harness, node, ("kafkacompat.broker", DELETE, None), rtype=BROKER_LOGGER)
    ).error_code == 0
    assert logging.getLogger("kafkacompat.broker").level == logging.NOTSET

    refused = [
        (("kafkacompat.broker", SET, "LOUD"), ErrorCode.INVALID_CONFIG),
        (("no.such.logger", SET, "INFO"), ErrorCode.INVALID_CONFIG),
        (("root", DELETE, None), ErrorCode.INVALID_REQUEST),
        (("kafkacompat.broker", APPEND, "INFO"), ErrorCode.INVALID_REQUEST),
    ]
    for op, code in refused:
        assert (await incremental(harness, node, op, rtype=BROKER_LOGGER)).error_code == code, op
    checked = await incremental(
        harness, node, ("kafkacompat.broker", SET, "ERROR"), rtype=BROKER_LOGGER, validate_only=True
    )
    assert checked.error_code == ErrorCode.NONE
    assert logging.getLogger("kafkacompat.broker").level == logging.NOTSET
    assert (await describe(harness, 4, BROKER_LOGGER, "")).error_code == ErrorCode.INVALID_REQUEST
    assert (
        await alter(harness, 2, node, {"root": "INFO"}, rtype=BROKER_LOGGER)
    ).error_code == ErrorCode.INVALID_REQUEST


INVALID = "Invalid value {value} for configuration {name}: "


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("segment.bytes", "abc", INVALID + "Not a number of type INT"),
        ("segment.bytes", "1_000_000", INVALID + "Not a number of type INT"),
        ("segment.bytes", "99999999999", INVALID + "Not a number of type INT"),
        ("retention.ms", "soon", INVALID + "Not a number of type LONG"),
        ("min.cleanable.dirty.ratio", "half", INVALID + "Not a number of type DOUBLE"),
        ("preallocate", "yes", INVALID + "Expected value to be either true or false"),
        ("segment.bytes", "5", INVALID + "Value must be at least 14"),
        ("no.such.config", "1", "Unknown topic config name: {name}"),
    ],
)
async def test_create_topics_config_errors_read_like_kafka(
    harness: AdminHarness, name: str, value: str, message: str
) -> None:
    topic = CreatableTopic(
        name="t",
        num_partitions=1,
        replication_factor=1,
        configs=[CreatableTopicConfig(name=name, value=value)],
    )
    response = await harness.call(create_topics, 7, topics=[topic], timeout_ms=1000, validate_only=False)
    assert response.topics[0].error_code == ErrorCode.INVALID_CONFIG
    assert response.topics[0].error_message == message.format(name=name, value=value)
