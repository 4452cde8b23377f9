"""Dynamic broker configs through the admin handlers, against a real BrokerState (and its log dir)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from kafkacompat.broker._tests.test_admin_configs import alter, by_name, create, describe, incremental
from kafkacompat.broker._tests.test_admin_harness import AdminHarness
from kafkacompat.broker._tests.wire_client import RawClient, request, start_broker
from kafkacompat.broker.server import ConnectionRate
from kafkacompat.config import INT_MAX
from kafkacompat.dynamic_config import FILE_NAME
from kafkacompat.wire.errors import ErrorCode

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC_BROKER, DEFAULT = 1, 2, 3, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture
def harness(tmp_path: Path):
    h = AdminHarness(tmp_path / "data")
    yield h
    h.close()


def chain(entry) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


async def test_cluster_default_applies_to_running_topics_and_new_ones(harness: AdminHarness) -> None:
    await create(harness, "old")
    await create(harness, "pinned", retention_ms="1000")
    result = await incremental(harness, "", ("log.retention.ms", SET, "60000"), rtype=BROKER)
    assert result.error_code == ErrorCode.NONE, result.error_message
    await create(harness, "new")

    for name in ("old", "new"):
        assert harness.state.partition_log(name, 0).config.retention_ms == 60000
        retention = by_name(await describe(harness, 4, TOPIC, name))["retention.ms"]
        assert (retention.value, retention.config_source) == ("60000", DYNAMIC_DEFAULT)
        # Kafka's chain: from log.retention.ms's own entry on, the synonyms set in each layer
        assert chain(retention) == [
            ("log.retention.ms", "60000", DYNAMIC_DEFAULT),
            ("log.retention.hours", "168", DEFAULT),
        ]
    assert harness.state.partition_log("pinned", 0).config.retention_ms == 1000  # its override wins
    pinned = by_name(await describe(harness, 4, TOPIC, "pinned"))["retention.ms"]
    assert chain(pinned) == [
        ("retention.ms", "1000", DYNAMIC_TOPIC),
        ("log.retention.ms", "60000", DYNAMIC_DEFAULT),
        ("log.retention.hours", "168", DEFAULT),
    ]

    defaults = await describe(harness, 4, BROKER, "")
    assert [(e.name, e.value, e.config_source, e.read_only) for e in defaults.configs] == [
        ("log.retention.ms", "60000", DYNAMIC_DEFAULT, False)
    ]
    node = by_name(await describe(harness, 4, BROKER, str(harness.state.node_id)))
    assert (node["log.retention.ms"].value, node["log.retention.ms"].config_source) == (
        "60000",
        DYNAMIC_DEFAULT,
    )


async def test_per_broker_value_wins_over_the_cluster_default(harness: AdminHarness) -> None:
    node = str(harness.state.node_id)
    await create(harness, "t")
    assert (await alter(harness, 2, "", {"message.max.bytes": "2000000"}, rtype=BROKER)).error_code == 0
    assert (await alter(harness, 2, node, {"message.max.bytes": "3000000"}, rtype=BROKER)).error_code == 0
    assert harness.state.partition_log("t", 0).config.max_message_bytes == 3000000
    entry = by_name(await describe(harness, 4, BROKER, node))["message.max.bytes"]
    assert (entry.value, entry.config_source) == ("3000000", DYNAMIC_BROKER)
    assert chain(entry) == [
        ("message.max.bytes", "3000000", DYNAMIC_BROKER),
        ("message.max.bytes", "2000000", DYNAMIC_DEFAULT),
        ("message.max.bytes", "1048588", DEFAULT),
    ]
    topic = by_name(await describe(harness, 4, TOPIC, "t"))["max.message.bytes"]
    assert (topic.value, topic.config_source) == ("3000000", DYNAMIC_BROKER)
    # the default entity lists its own layer only
    [default] = (await describe(harness, 4, BROKER, "")).configs
    assert chain(default) == [("message.max.bytes", "2000000", DYNAMIC_DEFAULT)]
    # AlterConfigs replaces the entity's whole set: the broker value goes, the default applies again
    assert (await alter(harness, 2, node, {}, rtype=BROKER)).error_code == 0
    assert harness.state.partition_log("t", 0).config.max_message_bytes == 2000000
    assert harness.state.dynamic.per_broker == {}


async def test_changes_survive_a_restart(harness: AdminHarness) -> None:
    node = str(harness.state.node_id)
    await create(harness, "t")
    await incremental(harness, "", ("log.segment.bytes", SET, "1048576"), rtype=BROKER)
    await incremental(
        harness, node, ("log.retention.bytes", SET, "5000"), ("num.io.threads", SET, "4"), rtype=BROKER
    )
    stored = json.loads((harness.data_dir / FILE_NAME).read_text())
    assert stored == {
        "version": 1,
        "brokers": {
            "<default>": {"log.segment.bytes": "1048576"},
            node: {"log.retention.bytes": "5000", "num.io.threads": "4"},
        },
    }
    state = harness.reopen()
    assert state.config["num.io.threads"] == 4
    assert state.partition_log("t", 0).config.segment_bytes == 1048576
    assert state.partition_log("t", 0).config.retention_bytes == 5000
    entries = by_name(await describe(harness, 4, BROKER, node))
    assert entries["num.io.threads"].config_source == DYNAMIC_BROKER
    assert entries["log.segment.bytes"].config_source == DYNAMIC_DEFAULT
    # DELETE of the last key of an entity removes the entity from the file
    await incremental(
        harness, node, ("log.retention.bytes", DELETE, None), ("num.io.threads", DELETE, None), rtype=BROKER
    )
    assert node not in json.loads((harness.data_dir / FILE_NAME).read_text())["brokers"]
    assert harness.state.partition_log("t", 0).config.retention_bytes == -1


async def test_validate_only_changes_nothing(harness: AdminHarness) -> None:
    await create(harness, "t")
    result = await incremental(harness, "", ("log.retention.ms", SET, "1"), rtype=BROKER, validate_only=True)
    assert result.error_code == ErrorCode.NONE
    assert not (harness.data_dir / FILE_NAME).exists()
    assert harness.state.partition_log("t", 0).config.retention_ms == 604800000
    bad = await incremental(harness, "", ("log.retention.hours", SET, "1"), rtype=BROKER, validate_only=True)
    assert bad.error_code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize(
    ("entity", "configs", "message"),
    [
        (
            "node",
            {"log.retention.hours": "1"},
            "Cannot update these configs dynamically: Set(log.retention.hours)",
        ),
        (
            "node",
            {"num.partitions": "3", "log.dirs": "/x"},
            "Cannot update these configs dynamically: Set(log.dirs, num.partitions)",
        ),
        (
            "node",
            {"ssl.keystore.location": "/k.jks"},
            "These security configs can be dynamically updated only per-listener using the listener prefix: "
            "Set(ssl.keystore.location)",
        ),
        (
            "",
            {"listeners": "PLAINTEXT://:9093"},
            "Cannot update these configs at default cluster level, broker id must be specified: "
            "Set(listeners)",
        ),
        ("node", {"listeners": "PLAINTEXT://:9093"}, "listeners are bound once at start-up here"),
        ("node", {"advertised.listeners": "PLAINTEXT://:9093"}, "listeners are bound once at start-up here"),
        (
            "",
            {"listener.name.plaintext.ssl.keystore.location": "/k.pem"},
            "Cannot update these configs at default cluster level, broker id must be specified: "
            "Set(listener.name.plaintext.ssl.keystore.location)",
        ),
        (
            "node",
            {"listener.name.plaintext.no.such.thing": "1"},
            "Unknown broker configs: Set(listener.name.plaintext.no.such.thing)",
        ),
        (
            "node",
            {"sasl.kerberos.min.time.before.relogin": "soon"},
            "Invalid value soon for configuration sasl.kerberos.min.time.before.relogin: "
            "Not a number of type LONG",
        ),
        ("node", {"no.such.thing": "1"}, "Unknown broker configs: Set(no.such.thing)"),
        (
            "node",
            {"log.retention.ms": "soon"},
            "Invalid value soon for configuration log.retention.ms: Not a number of type LONG",
        ),
        (
            "node",
            {"log.segment.bytes": "1"},
            "Invalid value 1 for configuration log.segment.bytes: value must be at least 14",
        ),
        (
            "node",
            {"log.cleanup.policy": "forever"},
            "Invalid value forever for configuration log.cleanup.policy",
        ),
        (
            "node",
            {"num.io.threads": "100"},
            "Dynamic thread count update validation failed for num.io.threads=100, value should not be "
            "greater than double the current value 8",
        ),
        ("node", {"num.io.threads": "1"}, "value should be at least half the current value 8"),
        ("node", {"log.cleaner.threads": "0"}, "Log cleaner threads should be at least 1"),
    ],
)
async def test_refusals_read_like_kafka(
    harness: AdminHarness, entity: str, configs: dict, message: str
) -> None:
    name = str(harness.state.node_id) if entity == "node" else entity
    result = await alter(harness, 2, name, configs, rtype=BROKER)
    assert result.error_code == ErrorCode.INVALID_REQUEST
    assert message in result.error_message
    assert harness.state.dynamic.per_broker == {} and harness.state.dynamic.cluster_default == {}
    assert not (harness.data_dir / FILE_NAME).exists()


async def test_other_broker_ids_and_incremental_list_operations(harness: AdminHarness) -> None:
    other = await incremental(harness, "99", ("log.retention.ms", SET, "1"), rtype=BROKER)
    assert other.error_code == ErrorCode.INVALID_REQUEST
    assert other.error_message.startswith("Unexpected broker id")
    appended = await incremental(harness, "", ("log.cleanup.policy", APPEND, "compact"), rtype=BROKER)
    assert appended.error_code == ErrorCode.NONE
    assert harness.state.dynamic.cluster_default == {"log.cleanup.policy": "delete,compact"}
    await incremental(harness, "", ("log.cleanup.policy", SUBTRACT, "delete"), rtype=BROKER)
    assert harness.state.dynamic.cluster_default == {"log.cleanup.policy": "compact"}
    await create(harness, "t")
    assert harness.state.partition_log("t", 0).config.compacted
    not_a_list = await incremental(harness, "", ("log.retention.ms", APPEND, "5"), rtype=BROKER)
    assert not_a_list.error_code == ErrorCode.INVALID_CONFIG


async def test_a_dynamic_value_hides_its_static_synonyms(tmp_path: Path) -> None:
    h = AdminHarness(tmp_path / "data", ("log.retention.hours=24",))
    try:
        await create(h, "t")
        assert h.state.partition_log("t", 0).config.retention_ms == 24 * 3_600_000
        assert (await incremental(h, "", ("log.retention.ms", SET, "5000"), rtype=BROKER)).error_code == 0
        assert h.state.partition_log("t", 0).config.retention_ms == 5000
        entries = by_name(await describe(h, 4, BROKER, str(h.state.node_id)))
        assert chain(entries["log.retention.hours"]) == [
            ("log.retention.hours", "24", STATIC_BROKER),
            ("log.retention.hours", "168", DEFAULT),
        ]
        assert chain(entries["log.retention.ms"]) == [
            ("log.retention.ms", "5000", DYNAMIC_DEFAULT),
            ("log.retention.hours", "24", STATIC_BROKER),
            ("log.retention.hours", "168", DEFAULT),
        ]
    finally:
        h.close()


async def test_stored_values_that_no_longer_validate_are_dropped(harness: AdminHarness) -> None:
    node = str(harness.state.node_id)
    (harness.data_dir / FILE_NAME).write_text(
        json.dumps(
            {
                "version": 1,
                "brokers": {
                    "<default>": {
                        "log.retention.ms": "soon",
                        "num.partitions": "7",
                        "log.segment.bytes": "2048",
                    },
                    node: {"message.max.bytes": "5000"},
                    "42": {"message.max.bytes": "1"},
                },
            }
        )
    )
    state = harness.reopen()
    assert state.dynamic.cluster_default == {"log.segment.bytes": "2048"}
    assert state.config["message.max.bytes"] == 5000
    assert state.config["num.partitions"] == 1
    await incremental(harness, node, ("message.max.bytes", SET, "6000"), rtype=BROKER)
    assert json.loads((harness.data_dir / FILE_NAME).read_text())["brokers"]["42"] == {
        "message.max.bytes": "1"
    }


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"version": 9, "brokers": {}}'])
async def test_an_unreadable_file_stops_the_start(harness: AdminHarness, text: str) -> None:
    from kafkacompat.config import ConfigError

    harness.close()
    (harness.data_dir / FILE_NAME).write_text(text)
    with pytest.raises(ConfigError, match=FILE_NAME):
        harness.state = harness._open()
    (harness.data_dir / FILE_NAME).unlink()
    harness.state = harness._open()


async def test_cleaner_reads_its_backoff_live(harness: AdminHarness) -> None:
    from kafkacompat.broker.cleaner_task import LogCleanerTask

    cleaner = LogCleanerTask(harness.state)
    assert cleaner.backoff_ms == 15000
    await incremental(harness, "", ("log.cleaner.backoff.ms", SET, "250"), rtype=BROKER)
    assert cleaner.backoff_ms == 250


def test_connection_rate_limits_accepts_per_second() -> None:
    rate = ConnectionRate()
    assert rate.delay(INT_MAX, 0.0) == 0.0
    for now in (10.0, 10.1):
        assert rate.delay(2, now) == 0.0
        rate.record(now)
    assert rate.delay(2, 10.2) == pytest.approx(0.8)  # the first of the two leaves the window at 11.0
    assert rate.delay(2, 11.05) == 0.0
    assert rate.delay(0, 11.05) > 0  # a rate of 0 admits nobody


async def test_sensitive_values_are_never_described(harness: AdminHarness) -> None:
    # no broker option is a password yet (the listener key store passwords will be): the chain of a
    # sensitive setting keeps its names and sources and drops every value
    await incremental(harness, "", ("message.max.bytes", SET, "2000000"), rtype=BROKER)
    dynamic = harness.state.dynamic
    assert dynamic.config_synonyms("message.max.bytes", ["message.max.bytes"], sensitive=True) == [
        ("message.max.bytes", None, DYNAMIC_DEFAULT),
        ("message.max.bytes", None, DEFAULT),
    ]


# --- connection limits on a running broker (raw wire client) --------------------------------------------


async def _set_broker_config(client: RawClient, name: str, value: str) -> None:
    cls = request(44, resources=[], validate_only=False).__class__
    body = cls(
        resources=[
            cls.AlterConfigsResource(
                resource_type=BROKER,
                resource_name="",
                configs=[cls.AlterableConfig(name=name, config_operation=SET, value=value)],
            )
        ],
        validate_only=False,
    )
    [result] = (await client.call(44, 1, body)).responses
    assert result.error_code == ErrorCode.NONE, result.error_message


async def test_connection_caps_follow_dynamic_changes(nursery: trio.Nursery, tmp_path: Path) -> None:
    hello = request(18, client_software_name="raw-test", client_software_version="1.0")
    broker = await start_broker(nursery, tmp_path, "max.connections=1")
    first = await RawClient.connect(broker.port)
    await first.call(18, 3, hello)
    second = await RawClient.connect(broker.port)
    waiting = await second.send(18, 3, hello)
    with trio.move_on_after(0.3):
        await second.receive(18, 3)
        raise AssertionError("a connection beyond max.connections was served")
    # raising the cap lets the waiting client in, without the first one leaving
    await _set_broker_config(first, "max.connections", "10")
    correlation_id, response = await second.receive(18, 3, timeout=5)
    assert (correlation_id, response.error_code) == (waiting, ErrorCode.NONE)
    # lowering the per-address cap closes new connections at once (open ones stay)
    await _set_broker_config(first, "max.connections.per.ip", "2")
    third = await RawClient.connect(broker.port)
    assert await third.is_closed()
    assert (await second.call(18, 3, hello)).error_code == ErrorCode.NONE


async def test_connection_creation_rate_delays_accepts(nursery: trio.Nursery, tmp_path: Path) -> None:
    hello = request(18, client_software_name="raw-test", client_software_version="1.0")
    broker = await start_broker(nursery, tmp_path)
    admin = await RawClient.connect(broker.port)
    await _set_broker_config(admin, "max.connection.creation.rate", "2")
    started = trio.current_time()
    for _ in range(3):  # within one second only two new connections are accepted
        client = await RawClient.connect(broker.port)
        assert (await client.call(18, 3, hello)).error_code == ErrorCode.NONE
    assert trio.current_time() - started >= 0.5
