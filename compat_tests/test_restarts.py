"""Broker restarts and crashes with real clients: acknowledged data survives, clients carry on."""

from __future__ import annotations

import time
from typing import Any

import pytest

from compat_tests.clients import ck_consume_partitions, create_topic, kp_consume_all
from kafkacompat.local_brokers import BrokerProcess

pytestmark = pytest.mark.restarts_broker


def _send_all(producer: Any, topic: str, values: list[bytes]) -> list[int]:
    futures = [producer.send(topic, value=value, partition=0) for value in values]
    producer.flush(30)
    return [future.get(30).offset for future in futures]


def test_restart_mid_stream(kafkacompat_broker_process: BrokerProcess) -> None:
    from kafka import KafkaProducer

    broker = kafkacompat_broker_process
    create_topic(broker.bootstrap, "restart-mid-stream", partitions=1)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        acks="all",
        enable_idempotence=True,
        retries=50,
        retry_backoff_ms=50,
        request_timeout_ms=5000,
    )
    try:
        first = _send_all(producer, "restart-mid-stream", [f"a{i}".encode() for i in range(100)])
        broker.restart()  # SIGTERM: orderly shutdown, same port and data dir
        second = _send_all(producer, "restart-mid-stream", [f"b{i}".encode() for i in range(100)])
    finally:
        producer.close(5)
    assert first + second == list(range(200))
    records = kp_consume_all(broker.bootstrap, "restart-mid-stream", 0, 200)
    assert [r.value for r in records] == [f"a{i}".encode() for i in range(100)] + [
        f"b{i}".encode() for i in range(100)
    ]
    assert (broker.data_dir / ".kafka_cleanshutdown").exists() is False  # removed again after loading


def test_kill9_keeps_acknowledged_data(kafkacompat_broker_process: BrokerProcess) -> None:
    from confluent_kafka import Producer

    broker = kafkacompat_broker_process
    create_topic(broker.bootstrap, "crash", partitions=2)
    acknowledged: list[tuple[int, int, bytes]] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acknowledged.append((msg.partition(), msg.offset(), msg.value()))

    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 1}
    )
    for i in range(400):
        producer.produce("crash", value=f"v{i}".encode(), partition=i % 2, on_delivery=report)
        if i % 50 == 0:
            producer.poll(0)
    assert producer.flush(15) == 0
    broker.kill()  # SIGKILL: no flush, no checkpoints, no clean-shutdown marker
    assert not (broker.data_dir / ".kafka_cleanshutdown").exists()
    broker.start()
    expected = {
        partition: sorted((o, v) for p, o, v in acknowledged if p == partition) for partition in (0, 1)
    }
    got = ck_consume_partitions(broker.bootstrap, "crash", {p: len(e) for p, e in expected.items()})
    assert {p: [(m.offset(), m.value()) for m in messages] for p, messages in got.items()} == expected
    # the producer reconnects and keeps going after the crash
    for i in range(400, 420):
        producer.produce("crash", value=f"v{i}".encode(), partition=0, on_delivery=report)
    assert producer.flush(30) == 0
    assert len(acknowledged) == 420


def test_topics_and_producer_ids_survive_restart(kafkacompat_broker_process: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaProducer

    broker = kafkacompat_broker_process
    create_topic(broker.bootstrap, "survivor", partitions=3, configs={"retention.ms": "12345"})
    ids_before = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
    producer.send("survivor", value=b"x", partition=0).get(10)
    first_id = producer._transaction_manager.producer_id_and_epoch.producer_id
    producer.close(5)
    broker.kill()
    broker.start()
    deadline = time.monotonic() + 10
    topics: dict[str, Any] = {}
    while "survivor" not in topics and time.monotonic() < deadline:
        topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
    assert len(topics["survivor"].partitions) == 3
    assert len(ids_before["survivor"].partitions) == 3
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
    try:
        producer.send("survivor", value=b"y", partition=0).get(10)
        second_id = producer._transaction_manager.producer_id_and_epoch.producer_id
    finally:
        producer.close(5)
    assert second_id != first_id and second_id >= 0
    records = kp_consume_all(broker.bootstrap, "survivor", 0, 2)
    assert [r.value for r in records] == [b"x", b"y"]
