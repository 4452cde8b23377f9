"""kafka-python KafkaAdminClient: partitions, configs, records, cluster, log dirs, producers, epochs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType  # noqa: E402
from kafka.errors import InvalidPartitionsError, KafkaError, UnknownTopicOrPartitionError  # noqa: E402

from compat_tests.clients import kp_consume_all, wait_for_topic  # noqa: E402


@pytest.fixture
def admin(bootstrap: str, kp_closing: Callable[[Any], Any]) -> KafkaAdminClient:
    return kp_closing(KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000))


def _produce(bootstrap: str, topic: str, partition: int, count: int, **config: Any) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    try:
        for i in range(count):
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
        producer.flush(15)
    finally:
        producer.close()


def test_create_partitions(admin: KafkaAdminClient, bootstrap: str, make_topic: Callable[..., str]) -> None:
    name = make_topic(2)
    response = admin.create_partitions({name: 4})
    assert [r.error_code for r in response.results] == [0]
    wait_for_topic(bootstrap, name, 4)
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({name: 3})
    admin.create_partitions({name: 6}, validate_only=True)
    [described] = admin.describe_topics([name])
    assert len(described["partitions"]) == 4
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.create_partitions({name + "-missing": 2})


def test_describe_and_alter_topic_configs(admin: KafkaAdminClient, make_topic: Callable[..., str]) -> None:
    name = make_topic(1, {"retention.ms": "3600000"})
    described = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name)], include_synonyms=True
    )
    modified = described["topic"][name]
    assert set(modified) == {"retention.ms"}  # the client's default filter: modified (dynamic) configs
    entry = modified["retention.ms"]
    assert (entry["value"], entry["config_source"], entry["read_only"]) == (
        "3600000",
        "DYNAMIC_TOPIC_CONFIG",
        False,
    )
    assert entry["synonyms"][0] == {
        "name": "retention.ms",
        "value": "3600000",
        "source": "DYNAMIC_TOPIC_CONFIG",
    }
    everything = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all")
    configs = everything["topic"][name]
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    assert configs["segment.bytes"]["config_type"] == "INT"

    assert admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name, {"max.message.bytes": "2048"})]
    )
    after = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])["topic"][name]
    assert after["max.message.bytes"]["value"] == "2048"
    refused = admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name, {"max.message.bytes": "lots"})]
    )
    assert "InvalidConfigurationError" in str(refused["topic"][name])
    unchanged = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])["topic"][name]
    assert unchanged["max.message.bytes"]["value"] == "2048"


def test_describe_broker_configs(admin: KafkaAdminClient) -> None:
    node = admin.describe_cluster()["brokers"][0]["broker_id"]
    described = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, str(node))], config_filter="all"
    )
    configs = next(iter(described["broker"].values()))
    assert configs["num.partitions"]["value"].isdigit()
    assert "log.retention.hours" in configs


def test_describe_cluster(admin: KafkaAdminClient, bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    cluster = admin.describe_cluster()
    assert cluster["cluster_id"]
    brokers = {b["broker_id"]: (b["host"], b["port"]) for b in cluster["brokers"]}
    assert cluster["controller_id"] in brokers
    # the same brokers as librdkafka's Metadata lists (one, or three with `--cluster`), every bootstrap
    # address among them
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert brokers == {b.id: (b.host, b.port) for b in metadata.brokers.values()}
    assert {int(a.rsplit(":", 1)[1]) for a in bootstrap.split(",")} <= {p for _, p in brokers.values()}


def test_delete_records_then_consume(
    admin: KafkaAdminClient, bootstrap: str, make_topic: Callable[..., str]
) -> None:
    name = make_topic(1)
    _produce(bootstrap, name, 0, 10)
    tp = TopicPartition(name, 0)
    result = admin.delete_records({tp: 6})
    assert result[tp]["low_watermark"] == 6
    records = kp_consume_all(bootstrap, name, 0, 4)  # seek_to_beginning lands on the new log start
    assert [r.offset for r in records] == [6, 7, 8, 9]
    assert admin.delete_records({tp: -1})[tp]["low_watermark"] == 10
    with pytest.raises(KafkaError):
        admin.delete_records({tp: 11})


def test_log_dirs_producers_and_partitions(
    admin: KafkaAdminClient, bootstrap: str, make_topic: Callable[..., str]
) -> None:
    name = make_topic(3)
    _produce(bootstrap, name, 1, 5, enable_idempotence=True)
    # one answer per broker (one, or three with `--cluster`); a partition's largest replica is its leader's
    sizes: dict[int, int] = {}
    for per_broker in admin.describe_log_dirs({name: [0, 1, 2]}):
        for log_dir in per_broker["log_dirs"]:
            for t in log_dir["topics"]:
                if t["name"] == name:
                    for p in t["partitions"]:
                        index = p["partition_index"]
                        sizes[index] = max(sizes.get(index, 0), p["partition_size"])
    assert sorted(sizes) == [0, 1, 2] and sizes[1] > 0 and sizes[0] == 0
    producers = admin.describe_producers([TopicPartition(name, 1)])[TopicPartition(name, 1)].active_producers
    assert len(producers) == 1 and producers[0].last_sequence == 4
    described = admin.describe_topic_partitions([name], response_partition_limit=2)
    assert [p["partition_index"] for p in described["topics"][0]["partitions"]] == [0, 1]
    assert described["next_cursor"] is not None


def test_broker_logger_levels(admin: KafkaAdminClient) -> None:
    node = str(admin.describe_cluster()["brokers"][0]["broker_id"])
    resource = ConfigResource(ConfigResourceType.BROKER_LOGGER, node)
    loggers = admin.describe_configs([resource], config_filter="all")["broker_logger"][node]
    assert "root" in loggers
    name = next(n for n in sorted(loggers) if n != "root")
    original = loggers[name]["value"]
    changed = "ERROR" if original != "ERROR" else "WARN"
    try:
        result = admin.alter_configs(
            [ConfigResource(ConfigResourceType.BROKER_LOGGER, node, {name: changed})]
        )
        assert result["broker_logger"][node] == "OK"
        after = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, node, {name: None})])
        assert after["broker_logger"][node][name]["value"] == changed
    finally:
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.BROKER_LOGGER, node, {name: ("DELETE", None)})]
        )
