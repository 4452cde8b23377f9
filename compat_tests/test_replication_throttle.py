"""Replication throttles (KIP-73) in cluster mode: a replica catching up is held to the throttled rate.

Two brokers and a ZooKeeper server in child processes (`LocalCluster`, replication quota window 2 x 1 s
so that the first window lets one second's worth through rather than ten; replica fetches of 100 kB).
A topic's only partition lives on brokers 1 (leader) and 2. Three times, broker 2 is stopped (a
controlled shutdown: it leaves the ISR at once), 5 MB are produced to broker 1 with confluent-kafka,
and broker 2 is started again; the time until it is back in the ISR is measured: with no throttle (the
baseline), with `leader.replication.throttled.rate` 400 kB/s on broker 1 and
`leader.replication.throttled.replicas=0:1` on the topic, and with `follower.replication.throttled.rate`
400 kB/s on broker 2 (set while it runs, so it comes back from its dynamic configs) and
`follower.replication.throttled.replicas=0:2`. Throttled, the catch-up takes most of the time the 4.6 MB
beyond the first window's allowance need at 400 kB/s (a sampled rate overshoots a little at window
edges). All settings go through confluent-kafka's IncrementalAlterConfigs. The suite starts its own
cluster: skipped with --bootstrap.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.clients import ck_incremental_alter, wait_until
from kafkacompat.local_brokers import CLUSTER_TEST_OVERRIDES, LocalCluster

pytestmark = pytest.mark.restarts_broker

RATE = 400_000  # bytes per second: a 5 MB copy takes 11 s or more, far above an unthrottled copy
VOLUME = 5_000_000  # produced while the follower is away
RECORD = 10_000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable

    overrides = [
        *CLUSTER_TEST_OVERRIDES,
        "replication.quota.window.num=2",
        "default.replication.factor=2",
        # fetches of 100 kB (Kafka's default is 1 MB): beyond the window's allowance a throttle lets
        # about one fetch through, which at 5 MB would otherwise be a fifth of the copy
        "replica.fetch.max.bytes=100000",
    ]
    try:
        local = LocalCluster(tmp_path / "cluster", brokers=2, overrides=overrides)
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"cluster mode needs ZooKeeper: {exc}")
    try:
        local.start().wait_until_ready()
        yield local
    finally:
        local.stop()



def isr(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=5)
    except KafkaException:
        return []
    partition = metadata.topics[topic].partitions.get(0)
    return sorted(partition.isrs) if partition is not None else []


def alter(bootstrap: str, kind: str, name: str, configs: dict[str, str | None]) -> None:
    ck_incremental_alter(bootstrap, kind, name, configs)


def catch_up_seconds(cluster: LocalCluster, topic: str) -> float:
    """Stop broker 2, produce VOLUME to broker 1, start broker 2: seconds until it is in the ISR again."""
    from confluent_kafka import Producer

    leader = cluster.brokers[1].bootstrap
    # a controlled shutdown takes broker 2 out of the ISR at once (after a SIGKILL the ISR shrinks only
    # once its ZooKeeper session or replica.lag.time.max.ms runs out); how it left does not change the
    # catch-up measured
    cluster.brokers[2].stop()
    wait_until(lambda: isr(leader, topic) == [1], 60, "broker 2 out of the ISR")
    producer = Producer({"bootstrap.servers": leader, "acks": 1, "linger.ms": 20,
                         "compression.type": "none"})  # fmt: skip
    for _ in range(VOLUME // RECORD):
        while True:
            try:
                producer.produce(topic, os.urandom(RECORD), partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    producer.close()
    began = time.monotonic()
    cluster.start_broker(2)
    wait_until(lambda: isr(leader, topic) == [1, 2], 120, "broker 2 back in the ISR")
    return time.monotonic() - began


def test_throttled_replica_catches_up_at_the_throttled_rate(cluster: LocalCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    leader = cluster.brokers[1].bootstrap
    topic = f"throttled-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": leader})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]])])[topic].result(30)
    wait_until(lambda: isr(leader, topic) == [1, 2], 60, "both replicas in the ISR")

    baseline = catch_up_seconds(cluster, topic)
    # The first window lets one second's worth through, and a sampled rate overshoots a little at
    # window edges: a throttled copy takes at least most of (VOLUME - RATE) / RATE seconds.
    least = 0.8 * (VOLUME - RATE) / RATE

    alter(leader, "topic", topic, {"leader.replication.throttled.replicas": "0:1"})
    alter(leader, "broker", "1", {"leader.replication.throttled.rate": str(RATE)})
    leader_throttled = catch_up_seconds(cluster, topic)
    assert leader_throttled >= least, (baseline, leader_throttled)

    alter(leader, "broker", "1", {"leader.replication.throttled.rate": None})
    alter(leader, "topic", topic, {"leader.replication.throttled.replicas": None,
                                   "follower.replication.throttled.replicas": "0:2"})  # fmt: skip
    follower = cluster.brokers[2].bootstrap
    alter(follower, "broker", "2", {"follower.replication.throttled.rate": str(RATE)})
    follower_throttled = catch_up_seconds(cluster, topic)
    assert follower_throttled >= least, (baseline, follower_throttled)
    print(f"catch-up of {VOLUME} B: {baseline:.1f} s unthrottled, {leader_throttled:.1f} s leader-throttled, "
          f"{follower_throttled:.1f} s follower-throttled at {RATE} B/s")  # fmt: skip
    assert baseline < least  # the limits are what slowed the copies down
