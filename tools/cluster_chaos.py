"""Chaos run of cluster mode: kill partition leaders while an idempotent acks=all producer writes.

Theory of operation: `LocalCluster` (3 brokers + ZooKeeper in child processes) holds one topic with
replication factor 3 and min.insync.replicas=2. A confluent-kafka producer (idempotent, acks=all) writes
numbered records to partition 0 without pause, recording each acknowledgement (offset, value, time). The
chaos loop repeats `--kills` times: wait `--interval` seconds, SIGKILL the partition's current leader,
wait until another broker leads, restart the killed one (`--stop` instead freezes the leader with
SIGSTOP until another broker leads, then resumes it with SIGCONT: a zombie leader). `--zk-restart` also
restarts ZooKeeper once in the middle. Then the producer is flushed and a checker reads the partition
from the start and asserts every acknowledged record is present exactly once, at its acknowledged offset
and in order. The figures (failovers, records acknowledged, lost, duplicated, and the unavailability
window of each failover: the longest pause between acknowledgements after the kill) are printed as a
Markdown table for docs/RELIABILITY.md.

    PYTHONPATH=. .venv/bin/python tools/cluster_chaos.py --kills 20
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkacompat.testing import LocalCluster


def leader_of(cluster: LocalCluster, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    return int(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader)


def wait_for(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:  # a broker going away mid-request: ask again
            pass
        time.sleep(0.1)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--interval", type=float, default=3.0, help="seconds of traffic between kills")
    parser.add_argument(
        "--stop", action="store_true", help="SIGSTOP the leader past the session timeout first"
    )
    parser.add_argument("--zk-restart", action="store_true", help="restart ZooKeeper once mid-run")
    args = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="kafkacompat-chaos-")
    cluster = LocalCluster(data_dir)
    cluster.start()
    topic = f"chaos-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    wait_for(lambda: leader_of(cluster, topic) >= 0, 30)

    acknowledged: list[tuple[int, bytes, float]] = []
    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 300000,
        }
    )

    def on_delivery(error: Any, message: Any) -> None:
        if error is None:
            acknowledged.append((message.offset(), message.value(), time.monotonic()))
        else:
            errors.append(str(error))

    running = threading.Event()
    running.set()

    def produce_forever() -> None:
        sequence = 0
        while running.is_set():
            try:
                producer.produce(topic, f"{sequence:010d}".encode(), partition=0, on_delivery=on_delivery)
                sequence += 1
            except BufferError:
                producer.poll(0.05)
                continue
            producer.poll(0)
            if sequence % 200 == 0:
                time.sleep(0.01)

    writer = threading.Thread(target=produce_forever, daemon=True)
    writer.start()
    kills: list[float] = []
    try:
        for number in range(args.kills):
            time.sleep(args.interval)
            if args.zk_restart and number == args.kills // 2:
                cluster.zookeeper.stop()
                time.sleep(1)
                cluster.zookeeper.start()
            leader = leader_of(cluster, topic)
            victim = cluster.brokers[leader]
            kills.append(time.monotonic())
            if args.stop and victim.process is not None:
                # a zombie leader: frozen past zookeeper.session.timeout.ms (6 s in test clusters), then
                # resumed; it must notice it lost leadership (new epoch) and truncate, not serve
                os.kill(victim.process.pid, signal.SIGSTOP)
                moved = wait_for(lambda leader=leader: leader_of(cluster, topic) not in (-1, leader), 60)
                time.sleep(1)
                os.kill(victim.process.pid, signal.SIGCONT)
                print(f"stop {number + 1}: broker {leader}; new leader elected: {moved}", file=sys.stderr)
                continue
            cluster.kill(leader)
            moved = wait_for(lambda leader=leader: leader_of(cluster, topic) not in (-1, leader), 60)
            print(f"kill {number + 1}: broker {leader}; new leader elected: {moved}", file=sys.stderr)
            cluster.start_broker(leader)
        time.sleep(args.interval)
    finally:
        running.clear()
        writer.join()
        left = producer.flush(300)

    end = max((offset for offset, _, _ in acknowledged), default=-1) + 1
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "chaos-check"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    stored: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 120
    while (not stored or stored[-1][0] < end - 1) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            stored.append((message.offset(), message.value()))
    consumer.close()
    cluster.stop()

    by_offset = dict(stored)
    values = [v for _, v in stored]
    lost = sum(1 for offset, value, _ in acknowledged if by_offset.get(offset) != value)
    duplicated = len(values) - len(set(values))
    ordered = values == sorted(values)
    times = sorted(t for _, _, t in acknowledged)
    windows = []
    for index, kill in enumerate(kills):
        # the longest pause in acknowledgements between this kill and the next one (or the end)
        until = kills[index + 1] if index + 1 < len(kills) else math.inf
        around = [t for t in times if kill - 1 <= t < until]
        gaps = [b - a for a, b in itertools.pairwise(around)]
        if gaps:
            windows.append(max(gaps) * 1000)
    print("| figure | value |")
    print("|---|---|")
    print(
        f"| failovers (leader {'SIGSTOP past the session timeout, then SIGCONT' if args.stop else 'SIGKILL'})"
        f" | {len(kills)} |"
    )
    print(f"| ZooKeeper restarted mid-run | {'yes' if args.zk_restart else 'no'} |")
    print(f"| records acknowledged | {len(acknowledged)} |")
    print(f"| acknowledged records lost | {lost} |")
    print(f"| records stored twice | {duplicated} |")
    print(f"| stored in order | {'yes' if ordered else 'NO'} |")
    print(f"| delivery errors reported to the producer | {len(errors)} |")
    print(f"| records left unflushed | {left} |")
    if windows:
        print(
            f"| unavailability per failover, ms (min / median / max) | {min(windows):.0f} / "
            f"{statistics.median(windows):.0f} / {max(windows):.0f} |"
        )
    return 0 if lost == 0 and duplicated == 0 and ordered and left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
