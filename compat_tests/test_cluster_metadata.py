"""Cluster mode's metadata with real clients: what an idle cluster costs, and what every broker knows
right after a topic is created or deleted.

- an idle 3-broker cluster holding 600 partitions of replication factor 3 makes ZooKeeper no requests
  but its sessions' pings (brokers read ZooKeeper only for what a watch names), the same over a short
  and a long window, and each broker uses little CPU;
- creating a topic in it is quick, and right after CreateTopics succeeds every broker answers Metadata
  for it with every partition led, and accepts IncrementalAlterConfigs on it; right after DeleteTopics
  succeeds no broker lists it.

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


def test_the_tool_runs(tmp_path: Path) -> None:
    """tools/cluster_idle.py (the 10,000-partition figure is a run of it) imports and parses."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tools" / "cluster_idle.py"
    spec = importlib.util.spec_from_file_location("cluster_idle", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.main) and module.cpu_seconds(__import__("os").getpid()) > 0
