"""Consumer groups across broker restarts (a broker process the test owns): committed offsets and group
membership come back from __consumer_offsets, after an orderly stop and after SIGKILL."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import create_topic
from kafkacompat.local_brokers import BrokerProcess

pytestmark = pytest.mark.restarts_broker

OVERRIDES = ["group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=4"]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        yield process
    finally:
        process.stop()


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=str(i).encode(), partition=0)
    assert producer.flush(15) == 0


def consumer(bootstrap: str, group: str, topic: str, assigned: list[Any] | None = None) -> Any:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
        }
    )
    if assigned is None:
        c.subscribe([topic])
    else:
        c.subscribe([topic], on_assign=lambda _, tps: assigned.append(sorted(tp.partition for tp in tps)))
    return c


def read(c: Any, count: int, timeout: float = 30) -> list[int]:
    values: list[int] = []
    deadline = time.monotonic() + timeout
    while len(values) < count and time.monotonic() < deadline:
        message = c.poll(0.1)
        if message is not None and not message.error():
            values.append(int(message.value()))
    return values


def committed(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 20
    while True:
        try:
            result = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]
            )[group].result()
            return int(result.topic_partitions[0].offset)
        except Exception:
            # COORDINATOR_LOAD_IN_PROGRESS / not available right after a start is retriable
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_member_rides_through_orderly_restart(broker: BrokerProcess) -> None:
    topic, group = f"restart-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 0, 10)
    assigned: list[Any] = []
    c = consumer(broker.bootstrap, group, topic, assigned)
    try:
        assert read(c, 10) == list(range(10))
        assert assigned == [[0]]
        c.commit(asynchronous=False)
        broker.restart()
        produce(broker.bootstrap, topic, 10, 5)
        # The member keeps its position and its membership (the group was reloaded as Stable).
        assert read(c, 5) == list(range(10, 15))
        assert assigned == [[0]]  # no rebalance
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert committed(broker.bootstrap, group, topic) == 15


def test_committed_offsets_survive_sigkill(broker: BrokerProcess) -> None:
    topic, group = f"kill-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 0, 20)
    c = consumer(broker.bootstrap, group, topic)
    try:
        assert read(c, 12) == list(range(12))
        from confluent_kafka import TopicPartition

        c.commit(offsets=[TopicPartition(topic, 0, 12)], asynchronous=False)
    finally:
        c.close()
    broker.kill()
    broker.start()
    assert committed(broker.bootstrap, group, topic) == 12
    again = consumer(broker.bootstrap, group, topic)
    try:
        assert read(again, 8) == list(range(12, 20))
    finally:
        again.close()
