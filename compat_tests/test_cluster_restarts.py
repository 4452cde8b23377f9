"""Cluster mode (zookeeper.connect) through stops and restarts, with real processes and real clients:
three brokers and a ZooKeeper server in child processes (`LocalCluster`), each test its own cluster.

- a broker killed with SIGKILL and started again at once (a supervisor's restart) finds its previous
  process's registration still in ZooKeeper: it waits for that session to expire, then registers,
  rejoins the ISR, and a client produces and consumes through it;
- with ZooKeeper stopped, a SIGTERM still stops a broker, within the bound of the controlled.shutdown.*
  settings, with exit status 0 and one line saying the controlled shutdown was skipped;
- CreatePartitions with explicit replica lists naming the cluster's brokers is accepted (confluent-kafka's
  AdminClient), and one naming an unknown broker is refused with INVALID_REPLICA_ASSIGNMENT.

The suite starts its own clusters, so these tests are skipped with `--bootstrap` and `--cluster`.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import wait_until

pytestmark = pytest.mark.restarts_broker

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402

from kafkacompat.local_brokers import CLUSTER_TEST_OVERRIDES, LocalCluster  # noqa: E402

#: zookeeper.session.timeout.ms of these clusters (CLUSTER_TEST_OVERRIDES): how long a dead broker's
#: registration outlives it
SESSION_TIMEOUT_S = 6
#: how long a test waits for a stopped broker to exit; it must take far less (the assertions say how much)
STOP_WAIT_S = 30


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable

    try:
        local = LocalCluster(tmp_path / "cluster", 3, CLUSTER_TEST_OVERRIDES)
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"cluster mode needs ZooKeeper: {exc}")
    try:
        local.start().wait_until_ready()
        yield local
    finally:
        for broker in local.brokers.values():  # whatever the test left running, stopped at once
            broker.kill()
        local.zookeeper.stop()


def partition(admin: AdminClient, topic: str, index: int = 0) -> Any:
    def known() -> Any:
        try:
            return admin.list_topics(topic, timeout=10).topics[topic].partitions.get(index)
        except KafkaException:
            return None  # a broker of the bootstrap list is down; ask again

    return wait_until(known, 30, f"{topic}-{index} in the metadata")


def test_a_broker_restarted_right_after_a_crash_registers_once_its_old_session_expires(
    cluster: LocalCluster,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    # broker 1 is the preferred leader; min.insync.replicas=3: an acks=all write needs it in the ISR
    admin.create_topics(
        [NewTopic(topic, 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "3"})]
    )[topic].result(30)
    wait_until(lambda: len(partition(admin, topic).isrs) == 3, 30, "a full ISR")
    broker = cluster.brokers[1]
    log_start = broker.log_path.stat().st_size

    cluster.kill(1)
    started = time.monotonic()
    cluster.start_broker(1)  # at once: its registration of a moment ago is still in ZooKeeper
    waited = time.monotonic() - started
    log = broker.log_path.read_text()[log_start:]
    assert "Traceback" not in log and "already registered" not in log
    assert "still holds the registration of broker id 1" in log and "this broker's own address" in log
    assert waited < SESSION_TIMEOUT_S + 10

    wait_until(lambda: 1 in partition(admin, topic).isrs, 60, "broker 1 back in the ISR")
    assert admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    wait_until(lambda: partition(admin, topic).leader == 1, 30, "broker 1 leading again")

    # a client that knows only broker 1 writes through it (acks=all: the whole ISR) and reads back
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    delivered: list[Any] = []
    for n in range(10):
        producer.produce(topic, f"after-restart-{n}".encode(), on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(30) == 0
    assert delivered == [None] * 10
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [f"after-restart-{n}".encode() for n in range(10)]


def test_sigterm_stops_a_broker_while_zookeeper_is_unreachable(cluster: LocalCluster) -> None:
    controller = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).controller_id
    cluster.zookeeper.stop()
    # one broker the controller, one not: neither waits for ZooKeeper
    for broker_id in (controller, next(b for b in cluster.brokers if b != controller)):
        broker = cluster.brokers[broker_id]
        assert broker.process is not None
        log_start = broker.log_path.stat().st_size
        started = time.monotonic()
        broker.process.send_signal(signal.SIGTERM)
        try:
            status = broker.process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"broker {broker_id} still running {STOP_WAIT_S} s after SIGTERM")
        took = time.monotonic() - started
        broker.process = None
        log = broker.log_path.read_text()[log_start:]
        assert status == 0, log[-2000:]
        assert log.count("is unreachable: controlled shutdown skipped") == 1, log[-2000:]
        assert "Traceback" not in log and "broker stopped" in log
        assert took < 10, f"broker {broker_id} took {took:.1f} s to stop"


def test_create_partitions_with_explicit_replica_lists(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"grow-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    partition(admin, topic)

    refused = admin.create_partitions([NewPartitions(topic, 2, replica_assignment=[[4, 1, 2]])])[topic]
    with pytest.raises(KafkaException) as error:
        refused.result(30)
    assert error.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT"
    refused = admin.create_partitions([NewPartitions(topic, 2, replica_assignment=[[1, 2]])])[topic]
    with pytest.raises(KafkaException) as error:  # the topic's replication factor is 3
        refused.result(30)
    assert error.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT"

    admin.create_partitions([NewPartitions(topic, 3, replica_assignment=[[3, 1, 2], [2, 3, 1]])])[
        topic
    ].result(30)
    wait_until(
        lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3,
        30,
        "three partitions",
    )
    # placed as asked, in the order asked (the first is the preferred leader), as Kafka does
    assert list(partition(admin, topic, 1).replicas) == [3, 1, 2]
    assert list(partition(admin, topic, 2).replicas) == [2, 3, 1]
