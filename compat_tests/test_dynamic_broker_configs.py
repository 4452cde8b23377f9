"""Dynamic broker configs through every client's admin API: alter, describe the new source, see the effect.

The session's broker is shared by every test, so each test here changes only settings that cannot hurt
the others while set (larger limits, a longer retention, a slower cleaner) and removes its change in a
`finally`. The effects that need harsher values (a retention that deletes segments) and the survival of
a restart run on a broker of their own (`restarts_broker`). Every assertion must hold against Kafka too.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from compat_tests.clients import ck_incremental_alter, create_topic, run_async
from compat_tests.java_probe import probe_command, unavailable_reason
from kafkacompat.local_brokers import BrokerProcess

BIG = 1_500_000  # above the default message.max.bytes (1048588)


def _node_id(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until its future is done
    return str(admin.describe_cluster().result(10).nodes[0].id)


def _ck_set(bootstrap: str, name: str, configs: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs on BROKER `name` with confluent-kafka: SET values, DELETE Nones."""
    ck_incremental_alter(bootstrap, "broker", name, configs, timeout=10)


def _ck_describe(bootstrap: str, name: str) -> dict:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.BROKER, name)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_configs([resource])[resource].result(10)


def _produce_big(bootstrap: str, topic: str) -> object:
    """Produce one BIG record; returns None on success, else the delivery error."""
    from confluent_kafka import Producer

    outcome: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 4_000_000, "acks": "all"})
    producer.produce(topic, value=b"x" * BIG, on_delivery=lambda err, _msg: outcome.append(err))
    assert producer.flush(30) == 0
    return outcome[0]


@pytest.fixture
def node(bootstrap: str) -> Iterator[str]:
    """This broker's id; its dynamic configs are emptied again after the test."""
    node_id = _node_id(bootstrap)
    yield node_id
    touched = _ck_describe(bootstrap, node_id)
    leftovers = {k: None for k, e in touched.items() if e.source in (2,)}  # DYNAMIC_BROKER_CONFIG
    if leftovers:
        _ck_set(bootstrap, node_id, leftovers)


def test_confluent_message_max_bytes_takes_effect_at_once(
    bootstrap: str, node: str, make_topic: Callable[..., str]
) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ConfigSource

    topic = make_topic()
    assert _produce_big(bootstrap, topic).code() == KafkaError.MSG_SIZE_TOO_LARGE
    _ck_set(bootstrap, node, {"message.max.bytes": "2000000"})
    try:
        entry = _ck_describe(bootstrap, node)["message.max.bytes"]
        assert (entry.value, entry.source) == ("2000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert not entry.is_read_only
        assert _produce_big(bootstrap, topic) is None  # the topic has no override: the new default applies
    finally:
        _ck_set(bootstrap, node, {"message.max.bytes": None})
    entry = _ck_describe(bootstrap, node)["message.max.bytes"]
    assert entry.source in (ConfigSource.DEFAULT_CONFIG.value, ConfigSource.STATIC_BROKER_CONFIG.value)
    assert _produce_big(bootstrap, topic).code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_confluent_refusals(bootstrap: str, node: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for configs in ({"log.retention.hours": "1"}, {"num.partitions": "3"}):
        resource = ConfigResource(ResourceType.BROKER, node, set_config=configs)
        with pytest.raises(KafkaException) as refused:
            admin.alter_configs([resource])[resource].result(10)
        assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
        assert "Cannot update these configs dynamically" in refused.value.args[0].str()
    # validate-only checks a dynamic change and keeps nothing
    resource = ConfigResource(ResourceType.BROKER, node, set_config={"log.cleaner.backoff.ms": "20000"})
    admin.alter_configs([resource], validate_only=True)[resource].result(10)
    assert _ck_describe(bootstrap, node)["log.cleaner.backoff.ms"].source != 2


def test_confluent_sets_kafkas_other_dynamic_names(bootstrap: str, node: str) -> None:
    """Names Kafka changes at run time that this broker only keeps (README: "accepted"), set as
    librdkafka's own admin tests set them: legacy AlterConfigs, then IncrementalAlterConfigs."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    legacy = {"sasl.kerberos.min.time.before.relogin": "58000", "background.threads": "12"}
    resource = ConfigResource(ResourceType.BROKER, node, set_config=legacy)
    admin.alter_configs([resource])[resource].result(10)
    described = _ck_describe(bootstrap, node)
    for name, value in legacy.items():
        entry = described[name]
        assert (entry.value, entry.source) == (value, ConfigSource.DYNAMIC_BROKER_CONFIG.value), name
        assert not entry.is_read_only
    _ck_set(bootstrap, node, {"sasl.kerberos.min.time.before.relogin": "59000", "background.threads": None,
                              "sasl.login.refresh.buffer.seconds": "200"})  # fmt: skip
    described = _ck_describe(bootstrap, node)
    assert described["sasl.kerberos.min.time.before.relogin"].value == "59000"
    assert described["sasl.login.refresh.buffer.seconds"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert (described["background.threads"].value, described["background.threads"].source) == (
        "10",
        ConfigSource.DEFAULT_CONFIG.value,
    )


def test_kafka_python_alters_and_resets_a_broker_config(bootstrap: str, node: str) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.alter_configs(
            [ConfigResource(ConfigResourceType.BROKER, node, {"log.cleaner.backoff.ms": "20000"})]
        )
        assert result == {"broker": {node: "OK"}}
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, node)], include_synonyms=True
        )["broker"][node]
        entry = described["log.cleaner.backoff.ms"]  # the default filter lists the modified ones
        assert (entry["value"], entry["config_source"], entry["read_only"]) == (
            "20000",
            "DYNAMIC_BROKER_CONFIG",
            False,
        )
        assert entry["synonyms"][0] == {
            "name": "log.cleaner.backoff.ms",
            "value": "20000",
            "source": "DYNAMIC_BROKER_CONFIG",
        }
        admin.reset_configs([ConfigResource(ConfigResourceType.BROKER, node, ["log.cleaner.backoff.ms"])])
        after = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, node)], config_filter="all")
        assert after["broker"][node]["log.cleaner.backoff.ms"]["config_source"] != "DYNAMIC_BROKER_CONFIG"
    finally:
        admin.close()


def test_aiokafka_alter_configs_on_a_broker(bootstrap: str, node: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async def scenario() -> tuple[list, list, list]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            resource = ConfigResource(ConfigResourceType.BROKER, node, {"max.connections.per.ip": "5000"})
            altered = await admin.alter_configs([resource])
            described = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, node)], include_synonyms=True
            )
            # AlterConfigs replaces the whole set of the broker's dynamic configs: none left
            cleared = await admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, node, {})])
            return altered, described, cleared
        finally:
            await admin.close()

    altered, described, cleared = run_async(scenario())
    assert [r[0] for response in altered for r in response.resources] == [0]  # error codes
    [config] = [
        entry
        for response in described
        for result in response.resources
        for entry in result[4]
        if entry[0] == "max.connections.per.ip"
    ]
    # (name, value, read_only, config_source, is_sensitive, synonyms, ...)
    assert config[1:4] == ("5000", False, 2)
    assert [r[0] for response in cleared for r in response.resources] == [0]
    assert _ck_describe(bootstrap, node)["max.connections.per.ip"].source != 2


@pytest.fixture(scope="module")
def java_probe() -> Callable[..., list[list[str]]]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    command = probe_command()

    def run(*args: str) -> list[list[str]]:
        result = subprocess.run([*command, *args], capture_output=True, text=True, timeout=90)
        assert result.returncode == 0, f"java probe failed:\n{result.stdout[-2000:]}{result.stderr[-4000:]}"
        return [line.split(" ") for line in result.stdout.splitlines() if line]

    return run


def test_java_cluster_wide_default_reaches_topics(
    bootstrap: str, topic_name: str, java_probe: Callable[..., list[list[str]]]
) -> None:
    eight_days = str(8 * 24 * 3_600_000)  # longer than the default: no other test's data expires
    out = java_probe("broker-configs", bootstrap, topic_name, "log.retention.ms", eight_days)
    lines = {fields[0]: fields[1:] for fields in out}
    assert lines["validate-only-left"] == ["0"]
    source = "DYNAMIC_DEFAULT_BROKER_CONFIG"
    assert lines["default"] == [
        "log.retention.ms",
        eight_days,
        source,
        "false",
        f"{source}:log.retention.ms={eight_days}",
    ]
    assert lines["broker"][:4] == ["log.retention.ms", eight_days, source, "false"]
    assert lines["broker"][4].startswith(f"{source}:log.retention.ms={eight_days}")
    assert lines["topic"][:3] == ["retention.ms", eight_days, source]
    assert lines["topic"][4].startswith(f"{source}:log.retention.ms={eight_days}")
    refused = lines["refused"]
    assert refused[0] == "InvalidRequestException"
    assert "Cannot update these configs dynamically" in " ".join(refused[1:])
    assert lines["after-delete"] == ["0"]
    assert lines["broker-after"][2] == "DEFAULT_CONFIG"


def test_cli_configs_alter_brokers(bootstrap: str, node: str) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "kafkacompat", "configs", *args, "--bootstrap-server", bootstrap]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    set_default = cli(
        "alter",
        "--entity-type",
        "brokers",
        "--entity-default",
        "--add-config",
        "log.cleaner.backoff.ms=30000",
    )
    try:
        assert set_default.returncode == 0, set_default.stderr
        assert set_default.stdout.strip() == "Completed updating default config for brokers in the cluster."
        # without --all a broker lists its own dynamic configs, not the cluster-wide ones it inherits
        inherited = cli("describe", "--entity-type", "brokers", "--entity-name", node).stdout.splitlines()
        assert inherited == [f"Dynamic configs for broker {node} are:"]
        set_node = cli(
            "alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            node,
            "--add-config",
            "log.cleaner.backoff.ms=25000",
        )
        assert set_node.stdout.strip() == f"Completed updating config for broker {node}."
        described = cli("describe", "--entity-type", "brokers", "--entity-name", node).stdout.splitlines()
        assert described == [
            f"Dynamic configs for broker {node} are:",
            "  log.cleaner.backoff.ms=25000 sensitive=false synonyms={"
            "DYNAMIC_BROKER_CONFIG:log.cleaner.backoff.ms=25000, "
            "DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.backoff.ms=30000, "
            "DEFAULT_CONFIG:log.cleaner.backoff.ms=15000}",
        ]
        defaults = cli("describe", "--entity-type", "brokers", "--entity-default").stdout.splitlines()
        assert defaults == [
            "Default configs for brokers in the cluster are:",
            "  log.cleaner.backoff.ms=30000 sensitive=false "
            "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.backoff.ms=30000}",
        ]
        refused = cli(
            "alter", "--entity-type", "brokers", "--entity-default", "--add-config", "log.dirs=/tmp/x"
        )
        assert refused.returncode == 1
        assert "Cannot update these configs dynamically: Set(log.dirs)" in refused.stderr
    finally:
        cli(
            "alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            node,
            "--delete-config",
            "log.cleaner.backoff.ms",
        )
        cli(
            "alter",
            "--entity-type",
            "brokers",
            "--entity-default",
            "--delete-config",
            "log.cleaner.backoff.ms",
        )
    assert cli("describe", "--entity-type", "brokers", "--entity-default").stdout.splitlines() == [
        "Default configs for brokers in the cluster are:"
    ]


def _earliest(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return low
    finally:
        consumer.close()


@pytest.mark.restarts_broker
def test_retention_change_deletes_old_segments_and_survives_a_restart(tmp_path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import ConfigSource

    # a quick retention check, so that a broker-wide retention change shows within the test
    broker = BrokerProcess(tmp_path / "data", ["log.retention.check.interval.ms=100"]).start()
    try:
        create_topic(broker.bootstrap, "aged", 1, {"segment.bytes": "1024"})  # no retention override
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for i in range(20):
            producer.produce("aged", value=b"%03d" % i + b"." * 300)
            producer.flush(10)
        assert _earliest(broker.bootstrap, "aged") == 0
        node_id = _node_id(broker.bootstrap)

        # the cluster-wide default (confluent-kafka's Python API refuses an empty resource name)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "kafkacompat",
                "configs",
                "alter",
                "--bootstrap-server",
                broker.bootstrap,
                "--entity-type",
                "brokers",
                "--entity-default",
                "--add-config",
                "log.retention.bytes=2000",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 20
        while _earliest(broker.bootstrap, "aged") == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        by_size = _earliest(broker.bootstrap, "aged")
        assert by_size > 0, "a broker-wide retention.bytes did not delete old segments"
        _ck_set(broker.bootstrap, node_id, {"log.retention.ms": "1", "message.max.bytes": "2000000"})
        deadline = time.monotonic() + 20
        while _earliest(broker.bootstrap, "aged") <= by_size and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _earliest(broker.bootstrap, "aged") > by_size, "a broker retention.ms did not delete segments"

        broker.stop()
        broker.start()
        described = _ck_describe(broker.bootstrap, node_id)
        assert described["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert described["log.retention.bytes"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        assert described["message.max.bytes"].value == "2000000"
        create_topic(broker.bootstrap, "after-restart", 1)
        assert _produce_big(broker.bootstrap, "after-restart") is None
        from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

        resource = ConfigResource(ResourceType.TOPIC, "after-restart")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # referenced until answered
        topic = admin.describe_configs([resource])[resource].result(10)
        assert (topic["retention.ms"].value, topic["retention.ms"].source) == (
            "1",
            ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        )
        assert topic["retention.bytes"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    finally:
        broker.stop()
