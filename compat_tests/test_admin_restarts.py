"""Admin changes survive a crash: altered configs, added partitions and a moved log start (SIGKILL)."""

from __future__ import annotations

import time

import pytest

from compat_tests.clients import create_topic, kp_consume_all
from kafkacompat.local_brokers import BrokerProcess

pytestmark = pytest.mark.restarts_broker


def test_admin_changes_survive_kill9(kafkacompat_broker_process: BrokerProcess) -> None:
    from confluent_kafka import KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        NewPartitions,
        ResourceType,
    )

    broker = kafkacompat_broker_process
    create_topic(broker.bootstrap, "kept", partitions=1, configs={"retention.ms": "120000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    change = ConfigResource(
        ResourceType.TOPIC,
        "kept",
        incremental_configs=[
            ConfigEntry("max.message.bytes", "65536", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin.incremental_alter_configs([change])[change].result(10)
    admin.create_partitions([NewPartitions("kept", 2)])["kept"].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        producer.produce("kept", value=b"r%d" % i, partition=0)
    assert producer.flush(15) == 0
    [deleted] = admin.delete_records([TopicPartition("kept", 0, 3)]).values()
    assert deleted.result(10).low_watermark == 3

    broker.kill()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # Wait for the restarted broker to serve the topic: poll what it reports (a metadata request that
    # times out on a loaded machine is one failed poll, not the end of the test), within a bound.
    deadline = time.monotonic() + 30
    topic = None
    while time.monotonic() < deadline:
        try:
            topic = admin.list_topics("kept", timeout=5).topics.get("kept")
        except KafkaException:
            topic = None
        if topic is not None and topic.error is None:
            break
        time.sleep(0.05)
    tail = broker.log_path.read_text(errors="replace")[-2000:]
    assert topic is not None and topic.error is None, f"topic not served after restart; broker log:\n{tail}"
    assert len(topic.partitions) == 2
    resource = ConfigResource(ResourceType.TOPIC, "kept")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["max.message.bytes"].value == "65536"
    assert configs["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert [r.offset for r in kp_consume_all(broker.bootstrap, "kept", 0, 2)] == [3, 4]
