"""Transactions in cluster mode with real clients: three brokers and ZooKeeper (`kafkacompat_cluster`).

- confluent-kafka and the Java client commit and abort transactions over a replication-factor-3 topic
  whose partitions are led by several brokers: the coordinator writes its markers to the other leaders
  with WriteTxnMarkers, the leaders verify the transaction's first batches with the coordinator
  (KIP-890), and a read_committed consumer sees exactly the committed records;
- the broker coordinating a transactional id is killed with SIGKILL in the middle of a transaction: the
  producer finds the new coordinator (the new leader of the id's `__transaction_state` partition, which
  loaded its replicated state), finishes the transaction as Kafka would, and goes on; nothing
  committed is lost and nothing aborted is seen.

The suite starts its own cluster, so these tests are skipped with `--bootstrap`.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from compat_tests.clients import wait_until
from compat_tests.test_java_client import JavaProbe, _lines, java  # noqa: F401  (the session fixture)
from compat_tests.test_transactions import values

pytestmark = pytest.mark.restarts_broker

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkacompat.local_brokers import LocalCluster  # noqa: E402

PARTITIONS = 6


@pytest.fixture
def java_or_none(request: pytest.FixtureRequest) -> JavaProbe | None:
    """The Java probe when a JDK and the client are here (the cluster tests run without them too)."""
    from compat_tests.java_probe import unavailable_reason

    if unavailable_reason() is not None:
        return None
    return request.getfixturevalue("java")  # type: ignore[no-any-return]



def replicated_topic(cluster: LocalCluster, partitions: int = PARTITIONS) -> str:
    """A topic of replication factor 3 (min.insync.replicas=2) whose leaders are on several brokers."""
    name = f"txn-cluster-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])[name].result(30)

    def led_everywhere() -> set[int] | None:
        parts = admin.list_topics(name, timeout=10).topics[name].partitions
        if len(parts) == partitions and all(p.leader >= 0 and len(p.isrs) == 3 for p in parts.values()):
            return {p.leader for p in parts.values()}
        return None

    leaders = wait_until(led_everywhere, 30, "leaders and full ISRs")
    assert len(leaders) >= 2, f"every partition led by {leaders}"
    return name


def transactional_producer(bootstrap: str, tid: str) -> Any:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "transaction.timeout.ms": 60000,
            "message.timeout.ms": 60000,
        }
    )
    producer.init_transactions(60)
    return producer


def read_committed(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> list[Any]:
    """(partition, offset, value) of everything a read_committed consumer sees up to the end of each
    partition (its last stable offset). Errors of brokers that are gone are retried by the client."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        seen: list[Any] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                elif message.error().fatal():
                    raise AssertionError(f"consumer error: {message.error()}")
                continue
            at_end.discard(message.partition())
            seen.append((message.partition(), message.offset(), message.value()))
        assert len(at_end) == partitions, "the consumer did not reach the end of every partition"
        return seen
    finally:
        consumer.close()


def coordinator_of(bootstrap: str, transactional_id: str) -> int:
    """The node id FindCoordinator names for a transactional id."""
    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class

    cls = request_class(10)
    with KafkaClient(bootstrap) as client:
        answer = client.send(10, cls(key_type=1, coordinator_keys=[transactional_id]), version=4)
    [entry] = answer.coordinators
    assert entry.error_code == 0, entry
    return int(entry.node_id)


def test_commit_and_abort_across_leaders(kafkacompat_cluster: LocalCluster, java_or_none: Any) -> None:
    cluster = kafkacompat_cluster
    topic = replicated_topic(cluster)
    producer = transactional_producer(cluster.bootstrap, f"cluster-ck-{uuid.uuid4().hex[:8]}")
    committed: list[bytes] = []
    for txn in range(6):
        producer.begin_transaction()
        batch = [f"txn{txn}-{i:02d}".encode() for i in range(2 * PARTITIONS)]
        for i, value in enumerate(batch):
            producer.produce(topic, value, partition=i % PARTITIONS)
        if txn % 3 == 2:
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
            committed.extend(batch)
    # the next transaction starts at once: the markers of the last one may still be pending, and the
    # producer retries through CONCURRENT_TRANSACTIONS
    producer.begin_transaction()
    producer.produce(topic, b"last", partition=0)
    producer.commit_transaction(60)
    committed.append(b"last")

    seen = read_committed(cluster.bootstrap, topic)
    assert values(seen) == sorted(committed)
    assert len({(p, o) for p, o, _ in seen}) == len(seen)

    # the Java client (kafka-clients 3.9.2) on the same cluster: 2 partitions led by different brokers
    if java_or_none is not None:
        java_topic = replicated_topic(cluster, 2)
        out = java_or_none(
            "txn", cluster.bootstrap, java_topic, f"cluster-java-{uuid.uuid4().hex[:8]}", "lz4"
        )
        assert _lines(out, "produced") == [[]]
        expected = sorted([f"commit-{i}" for i in range(10)] + ["commit-last"])
        assert sorted(value for _, value in _lines(out, "rc")) == expected
        assert values(read_committed(cluster.bootstrap, java_topic, 2)) == sorted(
            v.encode() for v in expected
        )


def test_killed_coordinator_mid_transaction(kafkacompat_cluster: LocalCluster) -> None:
    cluster = kafkacompat_cluster
    topic = replicated_topic(cluster)
    tid = f"cluster-kill-{uuid.uuid4().hex[:8]}"
    producer = transactional_producer(cluster.bootstrap, tid)
    committed: list[bytes] = []

    def write(label: str) -> list[bytes]:
        batch = [f"{label}-{i:02d}".encode() for i in range(2 * PARTITIONS)]
        for i, value in enumerate(batch):
            producer.produce(topic, value, partition=i % PARTITIONS)
        return batch

    producer.begin_transaction()
    committed.extend(write("before"))
    producer.commit_transaction(60)

    producer.begin_transaction()
    open_batch = write("open")
    assert producer.flush(60) == 0  # acknowledged by the ISR of every partition
    coordinator = coordinator_of(cluster.bootstrap, tid)
    cluster.kill(coordinator)
    survivors = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != coordinator)

    # Kafka's outcome: the new coordinator loaded the Ongoing transaction and commits it, unless the
    # producer hears an abortable error first (then it aborts); either way it then goes on.
    outcome = None
    deadline = time.monotonic() + 120
    while outcome is None:
        try:
            producer.commit_transaction(30)
            outcome = "committed"
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(60)
                outcome = "aborted"
            elif not error.retriable() or time.monotonic() > deadline:
                raise
    if outcome == "committed":
        committed.extend(open_batch)
    new_coordinator = wait_until(
        lambda: (c := coordinator_of(survivors, tid)) != coordinator and c, 60, "a new coordinator"
    )
    assert new_coordinator in cluster.brokers

    producer.begin_transaction()
    committed.extend(write("after"))
    producer.commit_transaction(60)
    producer.begin_transaction()
    write("aborted")
    producer.abort_transaction(60)

    seen = read_committed(survivors, topic)
    assert values(seen) == sorted(committed), f"outcome {outcome}"
