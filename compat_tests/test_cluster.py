"""Cluster mode (zookeeper.connect) with real clients: three brokers and a ZooKeeper server in child
processes (`kafkacompat_cluster`), a topic with replication factor 3 and min.insync.replicas=2.

- an idempotent acks=all confluent-kafka producer keeps producing while the partition leader is killed
  with SIGKILL; every acknowledged record is read back exactly once and in order, and the killed broker,
  restarted, truncates/catches up and rejoins the ISR, and a preferred-leader election (ElectLeaders)
  gives it its leadership back;
- a consumer group keeps consuming through a coordinator move (the coordinator killed), and no
  committed offset is lost;
- every broker reports its own replicas, followers included, to the Java Admin's describeLogDirs, and
  describeTopics (DescribeTopicPartitions) gives the same leader, replicas and ISR through every broker;
- brokers learn leadership from the controller's LeaderAndIsr (a kafka-python acks=all producer then
  writes to the new leader), refuse a controller request with a stale controller epoch, change ISRs
  through AlterPartition (a SIGSTOPped follower leaves the ISR and comes back, in ZooKeeper and
  Metadata), and a leader SIGSTOPped past its ZooKeeper session refuses produce once resumed.

The suite starts its own cluster, so these tests are skipped with `--bootstrap`.
"""

from __future__ import annotations

import re
import signal
import time
import uuid
from typing import Any

import pytest

from compat_tests.clients import wait_until

pytestmark = pytest.mark.restarts_broker

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkacompat.local_brokers import LocalCluster  # noqa: E402


def create_replicated_topic(cluster: LocalCluster, partitions: int = 1) -> str:
    name = f"cluster-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])
    futures[name].result(30)

    def fully_replicated() -> bool:
        metadata = admin.list_topics(name, timeout=10).topics[name]
        return bool(metadata.partitions) and all(
            p.leader >= 0 and len(p.isrs) == 3 for p in metadata.partitions.values()
        )

    wait_until(fully_replicated, 30, "leaders and a full ISR")
    return name


def partition_state(cluster: LocalCluster, topic: str, partition: int = 0) -> Any:
    """The partition as a broker reports it; a broker that has not seen the topic yet (its view of
    ZooKeeper is moments behind, as a Kafka broker's metadata cache can be) is asked again."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def known() -> Any:
        try:
            return admin.list_topics(topic, timeout=10).topics[topic].partitions.get(partition)
        except KafkaException as error:
            # a bootstrap broker this test just killed fails the request it was asked; ask again
            if error.args[0].code() != KafkaError._TRANSPORT:
                raise
            return None

    return wait_until(known, 30, f"{topic}-{partition} in the metadata")


def read_all(bootstrap: str, topic: str, partition: int, end_offset: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every record below `end_offset`, read without a group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    records: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while (not records or records[-1][0] < end_offset - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            records.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return records


def test_acknowledged_records_survive_a_killed_leader(kafkacompat_cluster: LocalCluster) -> None:
    cluster = kafkacompat_cluster
    topic = create_replicated_topic(cluster)
    acknowledged: list[tuple[int, bytes]] = []
    failed: list[Any] = []

    def on_delivery(error: Any, message: Any) -> None:
        if error is None:
            acknowledged.append((message.offset(), message.value()))
        else:
            failed.append(error)

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 90000,
        }
    )
    sequence = 0

    def produce(count: int) -> None:
        nonlocal sequence
        for _ in range(count):
            producer.produce(topic, f"{sequence:08d}".encode(), partition=0, on_delivery=on_delivery)
            sequence += 1
            producer.poll(0)

    produce(300)
    assert producer.flush(60) == 0
    old_leader = partition_state(cluster, topic).leader
    produce(100)  # in flight while the leader dies
    cluster.kill(old_leader)
    produce(200)
    assert producer.flush(120) == 0
    survivors = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != old_leader)
    new_state = wait_until(
        lambda: (s := partition_state(cluster, topic)).leader not in (-1, old_leader) and s,
        30,
        "a new leader",
    )
    assert old_leader not in new_state.isrs

    # the new leader took its role from the controller's LeaderAndIsr, not from reading ZooKeeper
    new_log = cluster.brokers[new_state.leader].log_path.read_text()
    assert re.search(
        rf"leads {topic}-0 at epoch [1-9][0-9]* \(from LeaderAndIsr of controller [0-9]+\)", new_log
    ), "the new leadership did not come from a LeaderAndIsr request"
    # kafka-python's acks=all producer finds the new leader too
    from kafka import KafkaProducer

    python_producer = KafkaProducer(bootstrap_servers=survivors, acks="all", retries=10)
    try:
        futures = [python_producer.send(topic, f"py-{i:04d}".encode(), partition=0) for i in range(50)]
        python_acked = [(f.get(timeout=60).offset, f"py-{i:04d}".encode()) for i, f in enumerate(futures)]
    finally:
        python_producer.close()
    acknowledged += python_acked

    assert len(acknowledged) == 650, f"{len(acknowledged)} acknowledged, failures: {failed[:3]}"
    end = max(offset for offset, _ in acknowledged) + 1
    records = read_all(survivors, topic, 0, end)
    values = [value for _, value in records]
    assert len(values) == len(set(values)), "a record was stored twice"
    ours = [v for v in values if not v.startswith(b"py-")]
    assert ours == sorted(ours) and values[-50:] == [v for _, v in python_acked], "records out of order"
    assert {v for _, v in acknowledged} <= set(values), "an acknowledged record is missing"
    assert dict(acknowledged) == {o: v for o, v in records if o in dict(acknowledged)}

    # the killed broker comes back, truncates to the leader's epoch boundary if needed, catches up
    # and is taken back into the ISR
    cluster.start_broker(old_leader)
    wait_until(
        lambda: old_leader in partition_state(cluster, topic).isrs, 60, "the old leader back in the ISR"
    )

    # it was the preferred replica (first in the assignment): a preferred election moves leadership back
    from confluent_kafka import ElectionType

    assert partition_state(cluster, topic).replicas[0] == old_leader
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    assert list(elected.values()) == [None]
    wait_until(lambda: partition_state(cluster, topic).leader == old_leader, 30, "the preferred leader")
    again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    assert [e.name() for e in again.values()] == ["ELECTION_NOT_NEEDED"]


def test_a_group_keeps_consuming_through_a_coordinator_move(kafkacompat_cluster: LocalCluster) -> None:
    cluster = kafkacompat_cluster
    topic = create_replicated_topic(cluster)
    group = f"group-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for index in range(200):
        producer.produce(topic, f"{index:04d}".encode(), partition=0)
    assert producer.flush(60) == 0

    settings = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 30000,
    }
    consumer = Consumer(settings)
    consumer.subscribe([topic])
    seen: list[bytes] = []

    def consume_until(count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(seen) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            seen.append(message.value())
            if len(seen) % 50 == 0:
                consumer.commit(message=message, asynchronous=False)

    consume_until(100, 60)
    assert len(seen) == 100
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(30)
    coordinator = description.coordinator.id
    cluster.kill(coordinator)

    # a fresh client finds the new coordinator, which loaded the group from the replicated log
    survivors = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != coordinator)
    checker = Consumer({**settings, "bootstrap.servers": survivors})
    try:

        def committed_offsets() -> list[Any]:
            try:
                offsets = checker.committed([TopicPartition(topic, 0)], timeout=10)
            except KafkaException:  # the coordinator is moving: librdkafka gives up after its timeout
                return []
            return [tp for tp in offsets if tp.offset >= 0]

        committed = wait_until(committed_offsets, 90, "the committed offset from the new coordinator")
        assert committed[0].offset == 100
    finally:
        checker.close()

    consume_until(200, 90)
    consumer.close()
    assert seen == [f"{i:04d}".encode() for i in range(200)][: len(seen)]
    assert len(seen) >= 200 and len(set(seen)) == 200


def test_cluster_up_runs_zookeeper_and_brokers_until_interrupted(tmp_path: Any) -> None:
    """The command and the brokers it starts run where `import pytest` fails, as in an install without
    test dependencies."""
    import signal
    import subprocess
    import sys

    from kafkacompat.client import KafkaClient
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable, find_zookeeper_classpath
    from kafkacompat.testing import env_without_pytest

    try:
        find_zookeeper_classpath()
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"cluster mode needs ZooKeeper: {exc}")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kafkacompat",
            "cluster",
            "up",
            "--brokers",
            "2",
            "--dir",
            str(tmp_path / "c"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env_without_pytest(tmp_path / "no-pytest"),
    )
    try:
        bootstrap = ""
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("bootstrap: "):
                bootstrap = line.split(": ", 1)[1].strip()
                break
        assert bootstrap.count(",") == 1
        # `cluster up` names the bootstrap once each broker lists both and knows the controller (a
        # broker answers controller_id -1 until it learns who won the election, as Kafka's do)
        for address in bootstrap.split(","):
            with KafkaClient(address) as client:
                metadata = client.metadata([])
            assert sorted(b.node_id for b in metadata.brokers) == [1, 2] and metadata.controller_id in (1, 2)
        # and what a user does next, with a real client and no wait: a topic on both brokers, a record
        # acknowledged by both (librdkafka's CreateTopics right after start-up is what missed the
        # controller before the clusters waited)
        topic = f"up-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a dropped one cancels its futures
        admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        delivered: list[Any] = []
        producer.produce(topic, b"after cluster up", on_delivery=lambda err, msg: delivered.append(err))
        try:
            assert producer.flush(30) == 0
        finally:
            producer.close()
        assert delivered == [None]
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not [p for p in (tmp_path / "c").glob("broker-*/broker.log") if "Traceback" in p.read_text()]


def test_admin_and_leadership_across_the_cluster(kafkacompat_cluster: LocalCluster) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class
    from kafkacompat.wire.records import build_batch

    cluster = kafkacompat_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    name = f"cluster-admin-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 2, 2)])[name].result(30)
    wait_until(
        lambda: (
            len(parts := admin.list_topics(name, timeout=10).topics[name].partitions) == 2
            and all(p.leader >= 0 for p in parts.values())
        ),
        30,
        "leaders",
    )
    state = partition_state(cluster, name)
    assert len(state.replicas) == 2 and sorted(state.isrs) == sorted(state.replicas)

    # a broker that does not lead the partition refuses it (the client then refreshes its metadata)
    outsider = next(b for b in cluster.brokers if b != state.leader)
    cls = request_class(2)  # ListOffsets
    request = cls(
        replica_id=-1,
        isolation_level=0,
        topics=[
            cls.ListOffsetsTopic(
                name=name,
                partitions=[
                    cls.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)
                ],
            )
        ],
    )
    with KafkaClient(cluster.brokers[outsider].bootstrap) as client:
        # NOT_LEADER_OR_FOLLOWER (6), once that broker's view of ZooKeeper has the topic
        wait_until(
            lambda: client.send(2, request).topics[0].partitions[0].error_code == 6,
            30,
            "NOT_LEADER_OR_FOLLOWER",
        )
        # Produce v10+ names the leader and its endpoint (KIP-951)
        produce = request_class(0)
        batch = build_batch([(b"k", b"v", (), int(time.time() * 1000))])
        produced = client.send(
            0,
            produce(
                transactional_id=None,
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    produce.TopicProduceData(
                        name=name, partition_data=[produce.PartitionProduceData(index=0, records=batch)]
                    )
                ],
            ),
            version=11,
        )
    refused = produced.responses[0].partition_responses[0]
    assert refused.error_code == 6
    assert (refused.current_leader.leader_id, refused.current_leader.leader_epoch) == (state.leader, 0)
    leader_port = int(cluster.brokers[state.leader].bootstrap.rsplit(":", 1)[1])
    assert [(e.node_id, e.port) for e in produced.node_endpoints] == [(state.leader, leader_port)]

    # CreatePartitions and topic configs go through ZooKeeper: every broker sees them
    admin.create_partitions([NewPartitions(name, 4)])[name].result(30)
    wait_until(
        lambda: (
            len(admin.list_topics(name, timeout=10).topics[name].partitions) == 4
            and all(
                p.leader >= 0 and len(p.replicas) == 2
                for p in admin.list_topics(name, timeout=10).topics[name].partitions.values()
            )
        ),
        30,
        "four replicated partitions",
    )
    change = ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[change])
    admin.incremental_alter_configs([resource])[resource].result(30)
    for broker in cluster.brokers.values():
        single = AdminClient({"bootstrap.servers": broker.bootstrap})

        def retention(single: Any = single) -> bool:
            described = single.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)])
            entries = next(iter(described.values())).result(10)
            return entries["retention.ms"].value == "123456"

        wait_until(retention, 30, f"the config on {broker.bootstrap}")

    # an orderly stop (SIGTERM) moves the broker's leaderships away first (ControlledShutdown)
    leader = partition_state(cluster, name).leader
    stopping = cluster.brokers[leader]
    stopping.stop()
    assert f"controlled shutdown of broker {leader} complete" in stopping.log_path.read_text()
    wait_until(
        lambda: (s := partition_state(cluster, name)).leader not in (-1, leader) and leader not in s.isrs,
        30,
        "a new leader, and the stopped broker out of the ISR",
    )


def test_min_insync_replicas_refuses_acks_all_until_a_replica_is_back(
    kafkacompat_cluster: LocalCluster,
) -> None:
    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class
    from kafkacompat.wire.records import build_batch

    cluster = kafkacompat_cluster
    topic = create_replicated_topic(cluster)
    leader = partition_state(cluster, topic).leader
    followers = [b for b in cluster.brokers if b != leader]
    for broker_id in followers:
        cluster.kill(broker_id)
    # the controller takes the dead followers out of the ISR once their sessions end
    wait_until(
        lambda: list(partition_state(cluster, topic).isrs) == [leader], 60, "an ISR of the leader alone"
    )
    produce = request_class(0)

    def send(acks: int) -> int:
        batch = build_batch([(b"k", b"v", (), int(time.time() * 1000))])
        request = produce(
            transactional_id=None,
            acks=acks,
            timeout_ms=5000,
            topic_data=[
                produce.TopicProduceData(
                    name=topic, partition_data=[produce.PartitionProduceData(index=0, records=batch)]
                )
            ],
        )
        with KafkaClient(cluster.brokers[leader].bootstrap) as client:
            answer = client.send(0, request, version=9)
        return int(answer.responses[0].partition_responses[0].error_code)

    assert send(-1) == 19  # NOT_ENOUGH_REPLICAS: the ISR (1) is below min.insync.replicas (2)
    assert send(1) == 0  # acks=1 does not need the ISR
    cluster.start_broker(followers[0])
    wait_until(lambda: len(partition_state(cluster, topic).isrs) == 2, 60, "a follower back in the ISR")
    assert send(-1) == 0


def test_partition_reassignment_copies_the_data_before_dropping_old_replicas(
    kafkacompat_cluster: LocalCluster,
) -> None:
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient

    cluster = kafkacompat_cluster
    name = f"cluster-move-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    [origin] = partition_state(cluster, name).replicas
    targets = [b for b in cluster.brokers if b != origin]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for index in range(500):
        producer.produce(name, f"{index:04d}".encode(), partition=0)
    assert producer.flush(60) == 0

    kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        partition = KafkaTopicPartition(name, 0)
        assert kafka_admin.alter_partition_reassignments({partition: targets}) == {partition: None}
        wait_until(
            lambda: (
                sorted(partition_state(cluster, name).replicas) == sorted(targets)
                and not kafka_admin.list_partition_reassignments([partition])
            ),
            60,
            "the reassignment to complete",
        )
        state = partition_state(cluster, name)
        assert state.leader in targets and sorted(state.isrs) == sorted(targets)
        # nothing to cancel any more
        cancelled = kafka_admin.alter_partition_reassignments({partition: None})
        assert cancelled[partition].__name__ == "NoReassignmentInProgressError"
    finally:
        kafka_admin.close()
    # the data moved with the partition; the old replica's files are gone (renamed for deletion)
    assert [v for _, v in read_all(cluster.bootstrap, name, 0, 500)] == [
        f"{i:04d}".encode() for i in range(500)
    ]
    old_dir = cluster.brokers[origin].data_dir / f"{name}-0"
    wait_until(lambda: not old_dir.exists(), 30, "the old replica's log to go")


def test_metrics_report_the_cluster_health(tmp_path: Any) -> None:
    """UnderReplicatedPartitions on the leader, OfflinePartitionsCount and ActiveControllerCount on the
    controller, as a Kafka cluster reports them, read from each broker's Prometheus endpoint."""
    import socket
    import urllib.request

    parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client not installed")
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable

    try:
        cluster = LocalCluster(tmp_path / "cluster")
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"cluster mode needs ZooKeeper: {exc}")
    urls: dict[int, str] = {}
    for broker_id, broker in cluster.brokers.items():
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        broker.overrides.append(f"metrics.listener=http://127.0.0.1:{port}")
        urls[broker_id] = f"http://127.0.0.1:{port}/metrics"

    def health(broker_id: int) -> dict[str, float]:
        with urllib.request.urlopen(urls[broker_id], timeout=10) as answer:
            text = answer.read().decode()
        wanted = {
            "kafka_server_replicamanager_under_replicated_partitions",
            "kafka_controller_kafkacontroller_offline_partitions_count",
            "kafka_controller_kafkacontroller_active_controller_count",
            "kafka_server_replicamanager_leader_count",
        }
        return {
            family.name: family.samples[0].value
            for family in parser.text_string_to_metric_families(text)
            if family.name in wanted
        }

    with cluster:
        topic = create_replicated_topic(cluster, partitions=2)
        wait_until(
            lambda: (
                sum(health(b)["kafka_controller_kafkacontroller_active_controller_count"] for b in urls) == 1
            ),
            30,
            "one active controller",
        )
        assert all(health(b)["kafka_server_replicamanager_under_replicated_partitions"] == 0 for b in urls)
        leader = partition_state(cluster, topic).leader
        controller = next(
            b for b in urls if health(b)["kafka_controller_kafkacontroller_active_controller_count"] == 1
        )
        victim = next(b for b in urls if b not in (leader, controller))
        cluster.kill(victim)
        # once the victim's session ends it leaves the ISR, and every partition it held is under-replicated
        # on its leader
        wait_until(
            lambda: len(partition_state(cluster, topic).isrs) == 2, 60, "the killed broker out of the ISR"
        )
        wait_until(
            lambda: health(leader)["kafka_server_replicamanager_under_replicated_partitions"] >= 1,
            30,
            "an under-replicated partition on the leader",
        )
        assert health(controller)["kafka_controller_kafkacontroller_offline_partitions_count"] == 0


def test_every_broker_reports_its_replicas_to_the_java_admin(kafkacompat_cluster: LocalCluster) -> None:
    """DescribeLogDirs (Admin.describeLogDirs, one request per broker) lists on each broker exactly the
    replicas the controller assigned it, followers included, with the leader's size once they caught up;
    DescribeTopicPartitions (Admin.describeTopics) gives every partition's leader, replicas and ISR, the
    same through whichever broker the client bootstraps from."""
    import subprocess
    from pathlib import Path

    from compat_tests.java_probe import java_command, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    command = java_command(Path(__file__).resolve().parent / "java" / "ReplicaStateProbe.java")

    def probe(bootstrap: str, topic: str) -> list[list[str]]:
        ids = [str(b) for b in sorted(cluster.brokers)]
        result = subprocess.run(
            [*command, bootstrap, topic, *ids], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return [line.split(" ") for line in result.stdout.splitlines() if line]

    cluster = kafkacompat_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    name = f"cluster-dirs-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 3, 2)])[name].result(30)

    def assignment() -> dict[int, tuple[int, list[int], list[int]]] | None:
        partitions = admin.list_topics(name, timeout=10).topics[name].partitions
        if len(partitions) != 3 or any(p.leader < 0 or len(p.isrs) != 2 for p in partitions.values()):
            return None
        return {i: (p.leader, sorted(p.replicas), sorted(p.isrs)) for i, p in partitions.items()}

    assigned = wait_until(assignment, 30, "three partitions of two in-sync replicas")
    hosts = {(broker, partition) for partition, (_, replicas, _) in assigned.items() for broker in replicas}
    # replication factor 2 on three brokers: every broker hosts some partitions and lacks others
    assert all(any(b == broker for b, _ in hosts) for broker in cluster.brokers)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for index in range(300):
        producer.produce(name, f"record {index:04d} ".encode() * 8, partition=index % 3)
    assert producer.flush(60) == 0

    def caught_up() -> list[list[str]] | None:
        lines = probe(cluster.bootstrap, name)
        replicas = [f for f in lines if f[0] == "logdir"]
        sizes: dict[int, set[str]] = {}
        for _, _broker, partition, size, _lag, _future in replicas:
            sizes.setdefault(int(partition), set()).add(size)
        settled = all(len(s) == 1 and "0" not in s for s in sizes.values())
        return lines if settled and all(f[4] == "0" for f in replicas) else None

    lines = wait_until(caught_up, 60, "every replica caught up (one size per partition, no lag)")
    assert [f for f in lines if f[0] == "logdir-error"] == []
    reported = {(int(f[1]), int(f[2])) for f in lines if f[0] == "logdir"}
    assert reported == hosts, "each broker reports exactly its own replicas, followers included"
    assert all(f[5] == "false" for f in lines if f[0] == "logdir")

    expected = sorted(
        ["partition", str(p), str(leader), ",".join(map(str, replicas)), ",".join(map(str, isr))]
        for p, (leader, replicas, isr) in assigned.items()
    )

    def normalised(lines: list[list[str]]) -> list[list[str]]:
        out = []
        for fields in lines:
            if fields[0] == "partition":
                ordered = [",".join(sorted(f.split(","), key=int)) for f in fields[3:5]]
                out.append([*fields[:3], *ordered])
        return sorted(out)

    assert normalised(lines) == expected
    for broker in cluster.brokers.values():
        assert normalised(probe(broker.bootstrap, name)) == expected, f"through {broker.bootstrap}"


def test_short_chaos_run(tmp_path: Any) -> None:
    """tools/cluster_chaos.py in short form (the long runs are in docs/RELIABILITY.md): two SIGKILLs of the
    partition leader under confluent-kafka's and (when its jar is there) the Java client's idempotent
    acks=all producers and a committing group; the tool exits 0 only when no acknowledged record is
    lost, duplicated or out of order and no committed offset was lost or went backwards."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from kafkacompat.replication.zk_server import ZooKeeperUnavailable, find_zookeeper_classpath

    try:
        find_zookeeper_classpath()
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"cluster mode needs ZooKeeper: {exc}")
    root = Path(__file__).resolve().parent.parent
    chaos = [str(root / "tools" / "cluster_chaos.py"), "--kills", "2", "--interval", "2"]
    result = subprocess.run(
        [sys.executable, *chaos, "--dir", str(tmp_path / "chaos")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    figures = {
        cells[1].strip(): cells[2].strip()
        for line in result.stdout.splitlines()
        if line.startswith("| ") and len(cells := line.split("|")) == 4
    }
    assert figures["disruptions (leader SIGKILL, then restarted)"] == "2"
    assert int(figures["confluent-kafka: records acknowledged"]) > 0
    assert figures["confluent-kafka: acknowledged records lost"] == "0"
    assert figures["group: reads below a confirmed commit (lost or backwards)"] == "0"


def _produce_request(topic: str, acks: int = -1) -> Any:
    from kafkacompat.wire.messages import request_class
    from kafkacompat.wire.records import build_batch

    produce = request_class(0)
    batch = build_batch([(b"k", b"v", (), int(time.time() * 1000))])
    return produce(
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            produce.TopicProduceData(
                name=topic, partition_data=[produce.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )


def test_controller_requests_are_fenced_by_controller_epoch(kafkacompat_cluster: LocalCluster) -> None:
    """Brokers advertise and serve the controller's requests in cluster mode; one carrying an older
    controller epoch than the broker has seen is refused, and changes nothing; a topic deletion reaches
    the replicas as StopReplica."""
    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class

    cluster = kafkacompat_cluster
    topic = create_replicated_topic(cluster)
    state = partition_state(cluster, topic)
    follower = next(b for b in state.replicas if b != state.leader)
    cls = request_class(4)
    forged = cls(
        controller_id=follower,
        controller_epoch=0,  # every controller of this cluster has epoch >= 1
        broker_epoch=-1,
        topic_states=[
            cls.LeaderAndIsrTopicState(
                topic_name=topic,
                partition_states=[
                    cls.LeaderAndIsrPartitionState(
                        partition_index=0,
                        controller_epoch=0,
                        leader=follower,
                        leader_epoch=99,
                        isr=[follower],
                        partition_epoch=99,
                        replicas=list(state.replicas),
                    )
                ],
            )
        ],
    )
    with KafkaClient(cluster.brokers[follower].bootstrap) as client:
        # the follower knows the topic and its role before the forged request
        wait_until(
            lambda: (
                client.send(0, _produce_request(topic), version=9)
                .responses[0]
                .partition_responses[0]
                .error_code
                == 6
            ),
            30,
            "the follower refusing produce",
        )
        served = client.connection().versions  # negotiated with ApiVersions
        assert served[4] == (0, 7) and served[5] == (0, 4) and served[6] == (0, 8) and served[56] == (0, 3)
        answer = client.send(4, forged, version=7)
        assert answer.error_code == 11  # STALE_CONTROLLER_EPOCH
        assert [p.error_code for t in answer.topics for p in t.partition_errors] == [11]
        # the broker still follows: a produce to it is refused
        refused = client.send(0, _produce_request(topic), version=9)
        assert refused.responses[0].partition_responses[0].error_code == 6
    assert partition_state(cluster, topic).leader == state.leader

    # a topic deletion reaches every replica as StopReplica with deletion
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    for broker in cluster.brokers.values():
        wait_until(lambda b=broker: not (b.data_dir / f"{topic}-0").exists(), 30, "the replica's log to go")
    for broker in cluster.brokers.values():
        assert f"deleted its replica of {topic}-0" in broker.log_path.read_text()


def _zk_partition_state(cluster: LocalCluster, topic: str) -> Any:
    from kafkacompat.replication.zookeeper import ZooKeeperStore

    store = ZooKeeperStore(cluster.zookeeper.connect_string + cluster.chroot)
    store.client.start(timeout=10)
    try:
        return store.partition_state(topic, 0)
    finally:
        store.close()


def test_isr_changes_go_through_alter_partition_and_a_paused_leader_is_fenced(tmp_path: Any) -> None:
    """replica.lag.time.max.ms below the session timeout: a SIGSTOPped follower leaves the ISR through
    the leader's AlterPartition (same leader epoch, new partition epoch in ZooKeeper) and comes back the
    same way once resumed. A leader SIGSTOPped past zookeeper.session.timeout.ms loses its leadership
    to another replica and, once resumed, refuses produce (NOT_LEADER_OR_FOLLOWER) instead of acting on
    its stale leadership, then rejoins as a follower."""
    from kafkacompat.client import KafkaClient
    from kafkacompat.local_brokers import CLUSTER_TEST_OVERRIDES
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable

    overrides = [o for o in CLUSTER_TEST_OVERRIDES if not o.startswith("replica.lag.time.max.ms")]
    try:
        cluster = LocalCluster(tmp_path / "cluster", overrides=[*overrides, "replica.lag.time.max.ms=2000"])
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"cluster mode needs ZooKeeper: {exc}")
    with cluster:
        topic = create_replicated_topic(cluster)
        before = _zk_partition_state(cluster, topic)
        leader = before.leader
        with KafkaClient(cluster.brokers[leader].bootstrap) as client:
            controller = client.metadata([]).controller_id
        # a follower that is not the controller (AlterPartition needs a controller that runs)
        follower = next(b for b in cluster.brokers if b not in (leader, controller))
        paused = cluster.brokers[follower].process
        assert paused is not None
        leader_admin = AdminClient({"bootstrap.servers": cluster.brokers[leader].bootstrap})

        def leader_isr() -> list[int]:
            return list(leader_admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs)

        paused.send_signal(signal.SIGSTOP)
        try:
            shrunk = wait_until(
                lambda: follower not in (s := _zk_partition_state(cluster, topic)).isr and s,
                20,
                "the paused follower out of the ISR",
            )
            wait_until(lambda: follower not in leader_isr(), 10, "the shrunk ISR in Metadata")
        finally:
            paused.send_signal(signal.SIGCONT)
        # an ISR change by the leader: same leader and leader epoch, a new partition epoch (zk version)
        assert (shrunk.leader, shrunk.leader_epoch) == (before.leader, before.leader_epoch)
        assert shrunk.zk_version > before.zk_version
        expanded = wait_until(
            lambda: follower in (s := _zk_partition_state(cluster, topic)).isr and s,
            30,
            "the resumed follower back in the ISR",
        )
        assert expanded.leader_epoch == before.leader_epoch and expanded.zk_version > shrunk.zk_version
        wait_until(lambda: follower in leader_isr(), 10, "the expanded ISR in Metadata")
        controller_logs = "".join(b.log_path.read_text() for b in cluster.brokers.values())
        assert f"{topic}-0 ISR is now" in controller_logs and "(AlterPartition)" in controller_logs

        # a zombie leader: paused past its session, it must not act on its old leadership
        zombie = cluster.brokers[leader]
        assert zombie.process is not None
        with KafkaClient(zombie.bootstrap) as client:
            client.metadata([topic])  # connected before the pause
            zombie.process.send_signal(signal.SIGSTOP)
            try:
                wait_until(
                    lambda: _zk_partition_state(cluster, topic).leader not in (leader, -1),
                    30,
                    "a new leader elected while the old one is paused",
                )
            finally:
                zombie.process.send_signal(signal.SIGCONT)
            answer = client.send(0, _produce_request(topic), version=9)
            assert answer.responses[0].partition_responses[0].error_code == 6  # NOT_LEADER_OR_FOLLOWER
        wait_until(
            lambda: (
                "resigning every leadership" in (noticed := zombie.log_path.read_text())
                or "stood still past the session timeout" in noticed
            ),
            10,
            "the zombie noticing its pause",
        )
        # it registers again with its new session and follows the new leader
        wait_until(
            lambda: leader in partition_state(cluster, topic).isrs, 60, "the old leader back in the ISR"
        )


def test_an_offset_commit_the_isr_did_not_get_is_not_answered_as_done(
    kafkacompat_cluster: LocalCluster,
) -> None:
    """Group records are appended with acks=-1: while both followers of the group's `__consumer_offsets`
    partition are frozen, an OffsetCommit is not answered NONE (that commit could be lost with the
    coordinator's log, as the chaos run once saw during a controlled shutdown) but with a retriable
    coordinator error once offsets.commit.timeout.ms (5 s) passes."""
    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class

    cluster = kafkacompat_cluster
    topic = create_replicated_topic(cluster)
    group = f"isr-commit-{uuid.uuid4().hex[:8]}"
    find = request_class(10)
    commit = request_class(8)
    request = commit(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            commit.OffsetCommitRequestTopic(
                name=topic,
                partitions=[commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=7)],
            )
        ],
    )
    with KafkaClient(cluster.bootstrap) as client:

        def coordinator() -> int | None:
            answer = client.send(10, find(key=group, key_type=0), version=3)
            return int(answer.node_id) if answer.error_code == 0 else None

        coordinator_id = wait_until(coordinator, 60, "a coordinator for the group")
        code = 0
        for _ in range(100):  # the offsets topic's replicas settle first
            answer = client.send(8, request, node_id=coordinator_id, version=8)
            code = answer.topics[0].partitions[0].error_code
            if code == 0:
                break
            time.sleep(0.3)
        assert code == 0
        followers = [b for i, b in cluster.brokers.items() if i != coordinator_id]
        for broker in followers:
            assert broker.process is not None
            broker.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            answer = client.send(8, request, node_id=coordinator_id, version=8)
            waited = time.monotonic() - started
        finally:
            for broker in followers:
                assert broker.process is not None
                broker.process.send_signal(signal.SIGCONT)
    assert answer.topics[0].partitions[0].error_code in (14, 15, 16)  # a coordinator error, not NONE
    assert waited >= 4
