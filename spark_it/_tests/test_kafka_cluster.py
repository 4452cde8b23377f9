"""Spark's Kafka connector against a 3-broker kafkacompat cluster (cluster mode, ZooKeeper): a streaming
query reads a topic of replication factor 3 (min.insync.replicas 2) while the partition's leader is
killed with SIGKILL; the connector's consumers find the new leader through their own metadata refresh
and every record, produced before and after the failover by an idempotent acks=all producer, is read
exactly once.

Needs the connector (spark_it.session) and ZooKeeper (Debian's `zookeeper`); skips with the reason
otherwise. The cluster is the suite's own (child processes), so it is marked `restarts_broker`.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from kafkacompat.local_brokers import LocalCluster
from spark_it.kafka_options import source_options

WAIT = 120.0  # generous: three brokers, ZooKeeper and a Spark JVM on two shared cores


def wait_for(what: str, ready: Callable[[], Any], query: Any = None, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if query is not None and not query.isActive:
            raise AssertionError(f"query stopped while waiting for {what}: {query.exception()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    """Idempotent, acks=all: acknowledged means in the ISR (two replicas at least)."""
    from confluent_kafka import Producer

    failed: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120000,
        }
    )
    for value in values:
        producer.produce(topic, value.encode(), partition=0, on_delivery=lambda e, _m: e and failed.append(e))
    assert producer.flush(150) == 0
    assert not failed, failed[:3]


def leader_of(bootstrap: str, topic: str) -> tuple[int, list[int]]:
    """(leader, ISR) of partition 0, as a broker of `bootstrap` reports it now."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        state = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    except KafkaException:  # the broker asked was just killed; the caller asks again
        return -1, []
    partition = state.partitions.get(0)
    return (-1, []) if partition is None else (partition.leader, list(partition.isrs))


@pytest.mark.restarts_broker
def test_streaming_read_of_a_replicated_topic_through_a_leader_failover(
    kafka_spark: Any, kafkacompat_cluster: LocalCluster
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = kafkacompat_cluster
    bootstrap = cluster.bootstrap
    topic = f"replicated-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    leader, _ = wait_for(
        "a leader and a full ISR", lambda: (s := leader_of(bootstrap, topic))[0] > 0 and len(s[1]) == 3 and s
    )

    before = [f"v{i:05d}" for i in range(300)]
    after = [f"v{i:05d}" for i in range(300, 600)]
    produce(bootstrap, topic, before)
    # the connector's own defaults, except that the driver's offset lookups retry for longer than a
    # failover takes (zookeeper.session.timeout.ms is 6 s in test clusters) and give up sooner on one
    # that is stuck: the Java Admin client's listOffsets, which mapped the partition to the killed leader,
    # waits "for a node assignment" once that broker has left the metadata, until default.api.timeout.ms
    # (60 s; the same against Kafka), and only the connector's retry asks again
    options = {
        **source_options(bootstrap, streaming=True, subscribe=topic, starting_offsets="earliest"),
        "fetchOffset.numRetries": "20",
        "fetchOffset.retryIntervalMs": "1000",
        "kafka.default.api.timeout.ms": "15000",
        "kafka.request.timeout.ms": "15000",  # the Admin client wants it no larger than the one above
    }
    stream = kafka_spark.readStream.format("kafka").options(**options).load()
    name = f"failover_{uuid.uuid4().hex[:8]}"
    query = (
        stream.selectExpr("offset", "CAST(value AS STRING) AS value")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:

        def rows() -> list[tuple[int, str]]:
            return [(r["offset"], r["value"]) for r in kafka_spark.table(name).collect()]

        wait_for("the rows before the failover", lambda: len(rows()) >= 300, query)
        cluster.kill(leader)  # SIGKILL: no controlled shutdown, the session has to expire
        survivors = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != leader)
        produce(survivors, topic, after)  # acks=all: waits through the election
        new_leader, _ = wait_for(
            "a new leader", lambda: (s := leader_of(survivors, topic))[0] not in (-1, leader) and s
        )
        assert new_leader != leader
        wait_for("the rows after the failover", lambda: len(rows()) >= 600, query)
        time.sleep(2)  # a few more triggers: nothing may arrive twice after the last record
        read = rows()
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
    counts = Counter(value for _, value in read)
    assert sorted(counts) == before + after, "a record is missing"
    assert [v for v, n in counts.items() if n > 1] == [], "a record was read twice"
    # each at the offset the partition has for it: 0..599 in production order
    assert sorted(read) == list(enumerate(before + after))
