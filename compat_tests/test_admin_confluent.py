"""confluent-kafka (librdkafka) AdminClient: partitions, configs (legacy and incremental), records,
cluster and offsets against the broker."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    OffsetSpec,
    ResourceType,
)

from compat_tests.clients import kp_consume_all, wait_for_topic, wait_for_topic_config  # noqa: E402

# alter_configs is deprecated in the client but still what tools built on it send (AlterConfigs)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
    assert producer.flush(15) == 0


def _error_code(future: object) -> int:
    with pytest.raises(KafkaException) as info:
        future.result(10)  # type: ignore[attr-defined]
    return info.value.args[0].code()


def test_create_partitions(admin: AdminClient, bootstrap: str, make_topic: Callable[..., str]) -> None:
    name = make_topic(1)
    admin.create_partitions([NewPartitions(name, 3)])[name].result(10)
    wait_for_topic(bootstrap, name, 3)
    assert (
        _error_code(admin.create_partitions([NewPartitions(name, 2)])[name]) == KafkaError.INVALID_PARTITIONS
    )
    only = admin.create_partitions([NewPartitions(name, 5)], validate_only=True)
    only[name].result(10)
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 3
    wrong_broker = admin.create_partitions([NewPartitions(name, 4, replica_assignment=[[99]])])[name]
    assert _error_code(wrong_broker) == KafkaError.INVALID_REPLICA_ASSIGNMENT


def _describe(admin: AdminClient, resource: ConfigResource) -> dict:
    return admin.describe_configs([resource])[resource].result(10)


def test_describe_configs_topic_and_broker(admin: AdminClient, make_topic: Callable[..., str]) -> None:
    name = make_topic(1, {"retention.ms": "120000", "cleanup.policy": "compact"})
    configs = _describe(admin, ConfigResource(ResourceType.TOPIC, name))
    retention = configs["retention.ms"]
    assert retention.value == "120000"
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not retention.is_default and not retention.is_read_only and not retention.is_sensitive
    # Kafka lists the chain of log.retention.ms, which is set nowhere: the override alone
    assert list(retention.synonyms) == ["retention.ms"]
    assert list(configs["segment.bytes"].synonyms) == ["log.segment.bytes"]
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].is_default
    missing = ConfigResource(ResourceType.TOPIC, name + "-missing")
    assert _error_code(admin.describe_configs([missing])[missing]) == KafkaError.UNKNOWN_TOPIC_OR_PART

    node = admin.describe_cluster().result(10).nodes[0].id
    broker = _describe(admin, ConfigResource(ResourceType.BROKER, str(node)))
    assert broker["num.partitions"].value.isdigit()
    assert broker["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert broker["num.partitions"].is_read_only


def test_alter_configs_replaces_overrides(
    admin: AdminClient, bootstrap: str, make_topic: Callable[..., str]
) -> None:
    name = make_topic(1, {"retention.ms": "120000"})
    resource = ConfigResource(ResourceType.TOPIC, name, set_config={"segment.bytes": "1048576"})
    admin.alter_configs([resource])[resource].result(10)
    # every broker of a cluster learns a change moments after the controller commits it
    wait_for_topic_config(bootstrap, name, "segment.bytes", "1048576")
    configs = _describe(admin, ConfigResource(ResourceType.TOPIC, name))
    assert configs["segment.bytes"].value == "1048576"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value  # replace-all semantics
    bad = ConfigResource(ResourceType.TOPIC, name, set_config={"no.such.config": "1"})
    assert _error_code(admin.alter_configs([bad])[bad]) == KafkaError.INVALID_CONFIG
    node = admin.describe_cluster().result(10).nodes[0].id
    broker = ConfigResource(ResourceType.BROKER, str(node), set_config={"log.retention.hours": "1"})
    assert _error_code(admin.alter_configs([broker])[broker]) == KafkaError.INVALID_REQUEST


def test_incremental_alter_configs(
    admin: AdminClient, bootstrap: str, make_topic: Callable[..., str]
) -> None:
    name = make_topic(1, {"retention.ms": "120000"})

    def change(*entries: ConfigEntry) -> object:
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=list(entries))
        return admin.incremental_alter_configs([resource])[resource]

    change(
        ConfigEntry("max.message.bytes", "4096", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ).result(10)
    # every broker of a cluster learns a change moments after the controller commits it
    wait_for_topic_config(bootstrap, name, "max.message.bytes", "4096")
    configs = _describe(admin, ConfigResource(ResourceType.TOPIC, name))
    assert configs["max.message.bytes"].value == "4096"
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].value == "120000"  # untouched, unlike AlterConfigs
    change(
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
    ).result(10)
    wait_for_topic_config(bootstrap, name, "cleanup.policy", "compact")
    configs = _describe(admin, ConfigResource(ResourceType.TOPIC, name))
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "compact"
    appended = change(ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND))
    assert _error_code(appended) == KafkaError.INVALID_CONFIG


def test_delete_records_and_list_offsets(
    admin: AdminClient, bootstrap: str, make_topic: Callable[..., str]
) -> None:
    name = make_topic(2)
    _produce(bootstrap, name, 0, 8)
    [deleted] = admin.delete_records([TopicPartition(name, 0, 5)]).values()
    assert deleted.result(10).low_watermark == 5
    earliest = admin.list_offsets({TopicPartition(name, 0): OffsetSpec.earliest()})
    assert next(iter(earliest.values())).result(10).offset == 5
    latest = admin.list_offsets({TopicPartition(name, 0): OffsetSpec.latest()})
    assert next(iter(latest.values())).result(10).offset == 8
    assert [r.offset for r in kp_consume_all(bootstrap, name, 0, 3)] == [5, 6, 7]
    [beyond] = admin.delete_records([TopicPartition(name, 1, 3)]).values()
    assert _error_code(beyond) == KafkaError.OFFSET_OUT_OF_RANGE


def test_describe_cluster(admin: AdminClient, bootstrap: str) -> None:
    # librdkafka answers describe_cluster from a Metadata request (see FINDINGS.md, "Admin APIs")
    cluster = admin.describe_cluster().result(10)
    assert cluster.cluster_id
    nodes = {node.id: node.port for node in cluster.nodes}
    assert cluster.controller.id in nodes and len(nodes) == len(cluster.nodes)
    # every bootstrap address is one of them (one broker, or three with `--cluster`)
    assert {int(a.rsplit(":", 1)[1]) for a in bootstrap.split(",")} <= set(nodes.values())


def test_assign_with_leader_epoch_validates_the_position(
    bootstrap: str, make_topic: Callable[..., str]
) -> None:
    """librdkafka checks an assigned position that carries a leader epoch with OffsetForLeaderEpoch
    before it fetches; the answer (end offset of epoch 0 = log end) lets it read from there."""
    from confluent_kafka import Consumer

    name = make_topic(1)
    _produce(bootstrap, name, 0, 10)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "compat-admin-epoch", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(name, 0, 4, leader_epoch=0)])
        got: list[tuple[int, int | None]] = []
        deadline = time.monotonic() + 15
        while len(got) < 6 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.offset(), message.leader_epoch()))
    finally:
        consumer.close()
    assert got == [(offset, 0) for offset in range(4, 10)]
