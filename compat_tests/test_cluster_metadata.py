"""Cluster mode's metadata with real clients: what an idle cluster costs, and what every broker knows
right after a topic is created or deleted.

- an idle 3-broker cluster holding 600 partitions of replication factor 3 makes ZooKeeper no requests
  but its sessions' pings (brokers read ZooKeeper only for what a watch names), the same over a short
  and a long window, and each broker uses little CPU;
- creating a topic in it is quick, and right after CreateTopics succeeds every broker answers Metadata
  for it with every partition led, and accepts IncrementalAlterConfigs on it; right after DeleteTopics
  succeeds no broker lists it;
- right after CreateTopics answers through one broker, a client that knows only another broker lists
  the topic's offsets (ListOffsets at the leaders, through librdkafka's admin client, and at that
  broker itself) and alters its configs, with no wait in between;
- one CreateTopics of 100 topics x 3 partitions (replication factor 3) answers within 10 s, and every
  topic is usable at every broker at once.

The suite starts its own cluster (`LocalCluster`), so these tests are skipped with `--bootstrap`.
"""

from __future__ import annotations

import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkacompat.client import KafkaClient  # noqa: E402
from kafkacompat.local_brokers import CLUSTER_TEST_OVERRIDES, LocalCluster  # noqa: E402
from kafkacompat.wire.api_keys import ApiKey  # noqa: E402
from kafkacompat.wire.messages import request_class  # noqa: E402

pytestmark = pytest.mark.restarts_broker

PARTITIONS = 600
PER_TOPIC = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable

    try:
        local = LocalCluster(tmp_path_factory.mktemp("metadata-cluster"), 3, CLUSTER_TEST_OVERRIDES)
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"ZooKeeper not installed: {exc}")
    with local:
        local.wait_until_ready(60)
        yield local


def cpu_seconds(pid: int) -> float:
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def zookeeper_received(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"srvr")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return int(next(line for line in answer.decode().splitlines() if line.startswith("Received:")).split()[1])


def led_everywhere(cluster: LocalCluster, names: list[str]) -> bool:
    for broker in cluster.brokers.values():
        with KafkaClient(broker.bootstrap, timeout=30) as client:
            response = client.metadata(names)
        for topic in response.topics:
            if topic.error_code != 0 or not topic.partitions:
                return False
            if any(p.error_code != 0 or p.leader_id < 0 for p in topic.partitions):
                return False
    return True


def test_an_idle_cluster_reads_nothing_from_zookeeper(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    names = [f"idle-{uuid.uuid4().hex[:6]}-{i}" for i in range(PARTITIONS // PER_TOPIC)]
    futures = admin.create_topics([NewTopic(n, PER_TOPIC, 3) for n in names], operation_timeout=120)
    for future in futures.values():
        future.result(180)
    deadline = time.monotonic() + 120
    while not led_everywhere(cluster, names):
        assert time.monotonic() < deadline, "every partition led at every broker"
        time.sleep(0.5)
    time.sleep(3)  # the followers' first fetches, the ISR settles

    pids = {i: b.process.pid for i, b in cluster.brokers.items() if b.process is not None}
    port = cluster.zookeeper.port
    windows = []
    for seconds in (4.0, 12.0):
        cpu = {i: cpu_seconds(pid) for i, pid in pids.items()}
        received = zookeeper_received(port)
        started = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - started
        received = zookeeper_received(port) - received - 1  # our own srvr
        busy = {i: (cpu_seconds(pid) - cpu[i]) / elapsed for i, pid in pids.items()}
        windows.append((elapsed, received, busy))
        print(f"idle {elapsed:.1f} s: ZooKeeper received {received} requests; CPU {busy}", file=sys.stderr)
    # pings only: each session pings about every third of its timeout (6 s here), 3 brokers; a broker
    # reading the tree (30 topics, 600 partition states) would make hundreds a second
    for elapsed, received, busy in windows:
        assert received <= 3 * elapsed, f"{received} ZooKeeper requests in {elapsed:.1f} s of idle"
        # what is left is mostly the followers' fetches (400 partitions each, replica.fetch.wait.max.ms
        # =200, full fetch requests), a few percent of a core
        assert max(busy.values()) < 0.15, f"idle CPU per broker {busy}"


def incremental_alter_configs(client: KafkaClient, topic: str) -> int:
    cls = request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS)
    request = cls(
        resources=[
            cls.AlterConfigsResource(
                resource_type=2,
                resource_name=topic,
                configs=[cls.AlterableConfig(name="retention.ms", config_operation=0, value="3600000")],
            )
        ],
        validate_only=False,
    )
    response: Any = client.send(ApiKey.INCREMENTAL_ALTER_CONFIGS, request)
    return int(response.responses[0].error_code)


def test_every_broker_knows_a_topic_once_created_and_forgets_it_once_deleted(cluster: LocalCluster) -> None:
    first = next(iter(cluster.brokers.values()))
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    for attempt in range(3):
        name = f"fresh-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        admin.create_topics([NewTopic(name, 4, 3)], operation_timeout=30)[name].result(60)
        created = time.monotonic() - started
        for broker in cluster.brokers.values():
            with KafkaClient(broker.bootstrap, timeout=30) as client:
                metadata = client.metadata([name])
                topic = metadata.topics[0]
                assert topic.error_code == 0, f"broker at {broker.bootstrap}: {topic.error_code}"
                assert sorted(p.partition_index for p in topic.partitions) == [0, 1, 2, 3]
                assert all(p.leader_id >= 0 for p in topic.partitions)
                assert incremental_alter_configs(client, name) == 0
        assert created < 5, f"CreateTopics took {created:.2f} s"

        admin.delete_topics([name], operation_timeout=30)[name].result(60)
        for broker in cluster.brokers.values():
            with KafkaClient(broker.bootstrap, timeout=30) as client:
                listed = {t.name for t in client.metadata(None).topics}
            assert name not in listed, f"broker at {broker.bootstrap} still lists {name} (attempt {attempt})"


def list_offsets_here(client: KafkaClient, topic: str, partitions: int) -> list[int]:
    """ListOffsets (earliest) sent to the client's one broker: the error code of each partition."""
    cls = request_class(ApiKey.LIST_OFFSETS)
    request = cls(
        replica_id=-1,
        isolation_level=0,
        topics=[
            cls.ListOffsetsTopic(
                name=topic,
                partitions=[
                    cls.ListOffsetsPartition(partition_index=p, timestamp=-2) for p in range(partitions)
                ],
            )
        ],
    )
    response: Any = client.send(ApiKey.LIST_OFFSETS, request)
    return [p.error_code for t in response.topics for p in t.partitions]


def usable_at(broker_bootstrap: str, names: list[str], partitions: int) -> None:
    """What a client knowing only this broker does first with new topics, asserted to work at once:
    librdkafka's ListOffsets (earliest, sent to each partition's leader as the broker names it), the
    same request sent to this broker itself (led partitions answer, the others NOT_LEADER_OR_FOLLOWER,
    none UNKNOWN_TOPIC_OR_PARTITION), and IncrementalAlterConfigs here."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = AdminClient({"bootstrap.servers": broker_bootstrap})
    wanted = {TopicPartition(n, p): OffsetSpec.earliest() for n in names for p in range(partitions)}
    for tp, future in admin.list_offsets(wanted, request_timeout=30).items():
        assert future.result(30).offset == 0, f"{broker_bootstrap}: {tp}"
    with KafkaClient(broker_bootstrap, timeout=30) as client:
        for name in names:
            codes = list_offsets_here(client, name, partitions)
            assert set(codes) <= {0, 6}, f"{broker_bootstrap}: ListOffsets of {name}: {codes}"
            assert incremental_alter_configs(client, name) == 0, f"{broker_bootstrap}: {name}"


def test_a_created_topic_is_usable_through_every_other_broker_at_once(cluster: LocalCluster) -> None:
    first, *others = cluster.brokers.values()
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    # connected before the topic exists, so each first request follows the answer within a millisecond
    clients = [KafkaClient(broker.bootstrap, timeout=30) for broker in others]
    try:
        for _attempt in range(4):
            name = f"usable-{uuid.uuid4().hex[:8]}"
            admin.create_topics([NewTopic(name, 4, 3)], operation_timeout=30)[name].result(60)
            # no waiting loop: the success promised this
            for client, broker in zip(clients, others, strict=True):
                codes = list_offsets_here(client, name, 4)
                assert set(codes) <= {0, 6}, f"{broker.bootstrap}: ListOffsets of {name}: {codes}"
                assert incremental_alter_configs(client, name) == 0, f"{broker.bootstrap}: {name}"
            for broker in others:
                usable_at(broker.bootstrap, [name], 4)
    finally:
        for client in clients:
            client.close()


def test_a_deleted_topic_is_gone_from_every_broker_at_once(cluster: LocalCluster) -> None:
    import kafka.admin

    first = next(iter(cluster.brokers.values()))
    names = [f"doomed-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]
    admin = kafka.admin.KafkaAdminClient(bootstrap_servers=first.bootstrap)
    try:
        admin.create_topics(
            {n: {"num_partitions": 2, "replication_factor": 3} for n in names}, timeout_ms=30_000
        )
        admin.delete_topics(names, timeout_ms=30_000)  # raises on any error
    finally:
        admin.close()
    for broker in cluster.brokers.values():
        with KafkaClient(broker.bootstrap, timeout=30) as client:
            listed = {t.name for t in client.metadata(None).topics}
        assert not listed & set(names), f"broker at {broker.bootstrap} still lists {listed & set(names)}"


def test_a_hundred_topics_in_one_request(cluster: LocalCluster) -> None:
    first, *others = cluster.brokers.values()
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    prefix = f"hundred-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{i}" for i in range(100)]
    started = time.monotonic()
    futures = admin.create_topics([NewTopic(n, 3, 3) for n in names], operation_timeout=30)
    for future in futures.values():
        future.result(60)
    took = time.monotonic() - started
    print(f"CreateTopics of 100 topics x 3 partitions, RF 3: {took:.2f} s", file=sys.stderr)
    assert took < 10, f"CreateTopics of 100 topics took {took:.2f} s"
    assert led_everywhere(cluster, names)
    for broker in others:
        usable_at(broker.bootstrap, names[::10], 3)
    for future in admin.delete_topics(names, operation_timeout=30).values():
        future.result(60)


def test_the_tool_runs(tmp_path: Path) -> None:
    """tools/cluster_idle.py (the 10,000-partition figure is a run of it) imports and parses."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tools" / "cluster_idle.py"
    spec = importlib.util.spec_from_file_location("cluster_idle", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.main) and module.cpu_seconds(__import__("os").getpid()) > 0
