"""Chaos run of cluster mode: disrupt brokers while idempotent acks=all producers write and a group consumes.

Theory of operation: `LocalCluster` (3 brokers + ZooKeeper in child processes) holds one topic with
replication factor 3 and min.insync.replicas=2. Two idempotent acks=all producers write numbered records
to its one partition without pause, each recording every acknowledgement (offset, value, time):
confluent-kafka (librdkafka, values `c0000000001`...) and the Java client (kafka-clients,
tools/java/ChaosProducer.java compiled as compat_tests' Java probe is, values `j0000000001`...; left out
with a printed reason when no JDK or client jar is there, or with `--no-java`). A confluent-kafka consumer
group member reads the same partition and commits synchronously every 500 records; a monitor asks the
group's committed offset (OffsetFetch from a separate client) every half second.

The chaos loop repeats `--kills` times: wait `--interval` seconds, pick the victim (`--target leader`: the
partition's leader; `--target coordinator`: the group's coordinator, i.e. the leader of its
`__consumer_offsets` partition), disrupt it (`--disrupt kill`: SIGKILL, wait until another broker leads,
start it again; `stop`: SIGSTOP until another broker leads, one more second, SIGCONT, a zombie leader
that must notice the newer epoch; `restart`: an orderly stop (SIGTERM, controlled shutdown) and start),
then wait until the victim is back in the ISR of both partitions before the next round. `--zk-restart`
also restarts ZooKeeper once in the middle.

Then the producers are flushed, the group reads to the end and commits, and a checker reads the
partition from the start: every acknowledged record of each producer must be present exactly once, at
its acknowledged offset, in that producer's order; no committed offset the group was told was committed
may be missing or lower at any later read (a lost or backwards commit), and the final committed offset
is the last one committed. The group's reading itself may repeat records after a move (at least once)
but must never skip an offset. The figures (failovers, how long until the metadata named another
leader, records acknowledged, lost, duplicated, the unavailability window of each failover per producer:
the longest pause between acknowledgements after the disruption) are printed as a Markdown table for
docs/RELIABILITY.md; the exit status is 0 only when every check held.

    PYTHONPATH=. .venv/bin/python tools/cluster_chaos.py --kills 20
    PYTHONPATH=. .venv/bin/python tools/cluster_chaos.py --kills 6 --interval 8 --target coordinator

A passing run removes its temp dir; a failing one (or `--dir`) keeps the brokers' logs and data.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkacompat.local_brokers import LocalCluster

# each producer writes at most PACE_RECORDS per PACE_SECONDS (2,000 records/s): enough traffic to have
# records in flight at every disruption, little enough that three brokers, ZooKeeper, two producers and
# the group share two cores without the run measuring only CPU starvation
PACE_RECORDS = 20
PACE_SECONDS = 0.01
COMMIT_EVERY = 500
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "ChaosProducer.java"


@dataclass
class Acks:
    """One producer's acknowledgements: (offset, value, monotonic time), and its delivery errors."""

    name: str
    prefix: bytes
    acknowledged: list[tuple[int, bytes, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unflushed: int = 0


@dataclass
class GroupLog:
    """What the group member did and what the monitor saw of its committed offset."""

    consumed: list[int] = field(default_factory=list)  # offsets, in the order the member got them
    commits: list[tuple[int, float]] = field(default_factory=list)  # (offset, time) confirmed commits
    commit_failures: list[str] = field(default_factory=list)
    reads: int = 0  # committed-offset reads by the monitor that got an answer
    regressions: list[str] = field(default_factory=list)  # a read below a confirmed commit
    final_committed: int = -1


QUIET = {"log_level": 2}  # librdkafka's connection-refused lines are the expected noise of a kill


def admin_for(cluster: LocalCluster, avoid: int | None = None) -> AdminClient:
    """A fresh admin client on the brokers that are up, leaving out `avoid`: a broker frozen with SIGSTOP
    keeps its connections open without answering, and a client that picked it would wait out its
    request timeout instead of seeing the failover."""
    servers = ",".join(
        b.bootstrap for i, b in cluster.brokers.items() if b.process is not None and i != avoid
    )
    return AdminClient({"bootstrap.servers": servers, **QUIET})


def partition_state(cluster: LocalCluster, topic: str, partition: int = 0, avoid: int | None = None) -> Any:
    metadata = admin_for(cluster, avoid).list_topics(topic, timeout=5)
    return metadata.topics[topic].partitions[partition]


def offsets_partition(group: str, partitions: int) -> int:
    """The group's `__consumer_offsets` partition, as Kafka picks it (Java's String.hashCode)."""
    code = 0
    for char in group:
        code = (31 * code + ord(char)) & 0xFFFFFFFF
    if code >= 1 << 31:
        code -= 1 << 32
    return (code & 0x7FFFFFFF) % partitions


def retrying(ask: Callable[[], int], timeout: float = 60) -> int:
    """`ask()`'s first positive answer (a broker id), asking again while brokers are away."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = ask()
            if answer > 0:
                return answer
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError("no answer")
        time.sleep(0.2)


def wait_for(predicate: Callable[[], Any], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:  # a broker going away mid-request: ask again
            pass
        time.sleep(0.1)
    return False


class ConfluentWriter:
    """librdkafka's idempotent acks=all producer on a thread, until `stop()`."""

    def __init__(self, cluster: LocalCluster, topic: str, acks: Acks) -> None:
        self.topic = topic
        self.acks = acks
        self.producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                **QUIET,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 300000,
            }
        )
        self.running = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, error: Any, message: Any) -> None:
        if error is None:
            self.acks.acknowledged.append((message.offset(), message.value(), time.monotonic()))
        else:
            self.acks.errors.append(str(error))

    def _run(self) -> None:
        sequence = 0
        while self.running.is_set():
            value = self.acks.prefix + f"{sequence:010d}".encode()
            try:
                self.producer.produce(self.topic, value, partition=0, on_delivery=self._on_delivery)
                sequence += 1
            except BufferError:
                self.producer.poll(0.05)
                continue
            self.producer.poll(0)
            if sequence % PACE_RECORDS == 0:
                time.sleep(PACE_SECONDS)

    def start(self) -> None:
        self.running.set()
        self.thread.start()

    def stop(self) -> None:
        self.running.clear()
        self.thread.join()
        self.acks.unflushed = self.producer.flush(300)


class JavaWriter:
    """kafka-clients' idempotent acks=all producer in a JVM (tools/java/ChaosProducer.java)."""

    def __init__(self, command: tuple[str, ...], cluster: LocalCluster, topic: str, acks: Acks) -> None:
        self.acks = acks
        self.process = subprocess.Popen(
            [*command, cluster.bootstrap, topic, "0", acks.prefix.decode(), str(PACE_RECORDS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            word, _, rest = line.rstrip("\n").partition(" ")
            if word == "ack":
                offset, value, nanos = rest.split(" ")
                self.acks.acknowledged.append((int(offset), value.encode(), int(nanos) / 1e9))
            elif word == "error":
                self.acks.errors.append(rest)
            elif word == "done":
                self.done.set()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()  # end of input: the producer stops sending and flushes
        try:
            self.process.wait(330)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.thread.join(30)
        if not self.done.is_set():
            status = self.process.returncode
            self.acks.errors.append(f"the Java producer ended without flushing (status {status})")
            self.acks.unflushed = -1


class GroupMember:
    """A confluent-kafka group member reading the partition, committing every 500 records, and a
    monitor reading the group's committed offset from another client twice a second."""

    def __init__(self, cluster: LocalCluster, topic: str, group: str, log: GroupLog) -> None:
        self.cluster = cluster
        self.topic = topic
        self.group = group
        self.log = log
        self.settings = {
            "bootstrap.servers": cluster.bootstrap,
            **QUIET,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 30000,
        }
        self.checker = Consumer(self.settings)  # never subscribes: only asks for committed offsets
        self.running = threading.Event()
        self.end_offset: int | None = None  # set at the end: read up to here, commit it, stop
        self.threads = [
            threading.Thread(target=self._consume, daemon=True),
            threading.Thread(target=self._monitor, daemon=True),
        ]

    def _commit(self, consumer: Consumer, offset: int) -> bool:
        try:
            consumer.commit(offsets=[TopicPartition(self.topic, 0, offset)], asynchronous=False)
        except KafkaException as error:
            self.log.commit_failures.append(str(error.args[0]))
            return False
        self.log.commits.append((offset, time.monotonic()))
        return True

    def _consume(self) -> None:
        consumer = Consumer(self.settings)
        consumer.subscribe([self.topic])
        next_offset = -1
        try:
            while self.running.is_set():
                if self.end_offset is not None and next_offset >= self.end_offset:
                    if self._commit(consumer, next_offset):
                        break
                    time.sleep(0.5)
                    continue
                message = consumer.poll(0.5)
                if message is None or message.error():
                    continue
                self.log.consumed.append(message.offset())
                next_offset = message.offset() + 1
                if next_offset % COMMIT_EVERY == 0:
                    self._commit(consumer, next_offset)
        finally:
            consumer.close()

    def committed(self) -> int:
        [answer] = self.checker.committed([TopicPartition(self.topic, 0)], timeout=10)
        if answer.error is not None:
            raise KafkaException(answer.error)
        return int(answer.offset)

    def _monitor(self) -> None:
        while self.running.is_set():
            confirmed = max((offset for offset, _ in self.log.commits), default=-1)
            try:
                seen = max(self.committed(), -1)  # -1001 (OFFSET_INVALID): nothing committed yet
            except Exception:  # coordinator moving or a broker down: that read has no answer
                time.sleep(0.5)
                continue
            self.log.reads += 1
            if seen < confirmed:
                self.log.regressions.append(f"committed {seen} read after {confirmed} was confirmed")
            time.sleep(0.5)

    def start(self) -> None:
        self.running.set()
        for thread in self.threads:
            thread.start()

    def finish(self, end_offset: int, timeout: float = 180) -> None:
        self.end_offset = end_offset
        self.threads[0].join(timeout)
        self.running.clear()
        for thread in self.threads:
            thread.join(30)
        self.log.final_committed = self.committed()
        self.checker.close()


def java_command(enabled: bool) -> tuple[tuple[str, ...] | None, str]:
    if not enabled:
        return None, "--no-java"
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from compat_tests.java_probe import java_command as compile_java
    from compat_tests.java_probe import unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        return None, reason
    return compile_java(JAVA_SOURCE), ""


def read_partition(cluster: LocalCluster, topic: str, partition: int, end: int) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "chaos-check", **QUIET})
    consumer.assign([TopicPartition(topic, partition, 0)])
    stored: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 180
    while (not stored or stored[-1][0] < end - 1) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            stored.append((message.offset(), message.value()))
    consumer.close()
    return stored


def windows_after(kills: list[float], times: list[float]) -> list[float]:
    """Per disruption, the longest pause (ms) between acknowledgements from a second before it until the
    next disruption (or the end)."""
    windows = []
    for index, kill in enumerate(kills):
        until = kills[index + 1] if index + 1 < len(kills) else math.inf
        around = [t for t in times if kill - 1 <= t < until]
        gaps = [b - a for a, b in itertools.pairwise(around)]
        if gaps:
            windows.append(max(gaps) * 1000)
    return windows


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.0f} / {statistics.median(values):.0f} / {max(values):.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="number of disruptions")
    parser.add_argument("--interval", type=float, default=3.0, help="seconds of traffic between disruptions")
    parser.add_argument("--target", choices=["leader", "coordinator"], default="leader")
    parser.add_argument("--disrupt", choices=["kill", "stop", "restart"], default="kill")
    parser.add_argument("--stop", action="store_true", help="same as --disrupt stop")
    parser.add_argument("--zk-restart", action="store_true", help="restart ZooKeeper once mid-run")
    parser.add_argument("--no-java", action="store_true", help="leave the Java producer out")
    parser.add_argument("--dir", help="cluster directory (default: a new temp dir)")
    args = parser.parse_args()
    disrupt = "stop" if args.stop else args.disrupt

    command, why_no_java = java_command(not args.no_java)
    if command is None:
        print(f"Java producer left out: {why_no_java}", file=sys.stderr)
    data_dir = args.dir or tempfile.mkdtemp(prefix="kafkacompat-chaos-")
    cluster = LocalCluster(data_dir)
    cluster.start()
    status = 1
    try:
        status = run(cluster, args, disrupt, command)
        return status
    finally:
        cluster.stop()
        if status == 0 and not args.dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:  # the brokers' logs and data, to see what went wrong
            print(f"cluster data and broker logs kept in {data_dir}", file=sys.stderr)


def run(cluster: LocalCluster, args: Any, disrupt: str, command: tuple[str, ...] | None) -> int:
    topic = f"chaos-{uuid.uuid4().hex[:8]}"
    group = f"chaos-group-{uuid.uuid4().hex[:8]}"
    admin = admin_for(cluster)
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    wait_for(lambda: len(partition_state(cluster, topic).isrs) == 3, 60)

    producers = [Acks("confluent-kafka", b"c")]
    writers: list[Any] = [ConfluentWriter(cluster, topic, producers[0])]
    if command is not None:
        producers.append(Acks("Java", b"j"))
        writers.append(JavaWriter(command, cluster, topic, producers[1]))
    group_log = GroupLog()
    member = GroupMember(cluster, topic, group, group_log)
    for writer in writers:
        writer.start()
    member.start()
    # the group's coordinator is the leader of its __consumer_offsets partition (Kafka's choice:
    # abs(groupId.hashCode) % offsets.topic.num.partitions), there once the member has committed
    wait_for(lambda: group_log.commits, 120)
    offsets_topic_partitions = len(
        admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"].partitions
    )
    offsets_part = offsets_partition(group, offsets_topic_partitions)

    watched = (topic, 0) if args.target == "leader" else ("__consumer_offsets", offsets_part)

    def victim_now() -> int:
        return int(partition_state(cluster, *watched).leader)

    seen_moved: list[float] = []

    def moved_away(victim: int) -> bool:
        if int(partition_state(cluster, *watched, avoid=victim).leader) in (-1, victim):
            return False
        seen_moved.append(time.monotonic())
        return True

    def fully_in_sync(broker_id: int) -> bool:
        return (
            broker_id in partition_state(cluster, topic).isrs
            and broker_id in partition_state(cluster, "__consumer_offsets", offsets_part).isrs
        )

    kills: list[float] = []
    moved_after: list[float] = []  # per disruption, ms until the metadata named another leader
    not_moved = 0
    try:
        for number in range(args.kills):
            time.sleep(args.interval)
            if args.zk_restart and number == args.kills // 2:
                cluster.zookeeper.stop()
                time.sleep(1)
                cluster.zookeeper.start()
            victim_id = retrying(victim_now)
            victim = cluster.brokers[victim_id]
            kills.append(time.monotonic())
            wall_clock = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]  # to find it in the broker logs
            if disrupt == "stop" and victim.process is not None:
                # frozen past zookeeper.session.timeout.ms (6 s in test clusters), then resumed
                os.kill(victim.process.pid, signal.SIGSTOP)
                moved = wait_for(lambda v=victim_id: moved_away(v), 60)
                time.sleep(1)
                os.kill(victim.process.pid, signal.SIGCONT)
            elif disrupt == "restart":
                victim.stop()  # SIGTERM: controlled shutdown moves its leaderships first
                moved = wait_for(lambda v=victim_id: moved_away(v), 60)
                cluster.start_broker(victim_id)
            else:
                cluster.kill(victim_id)
                moved = wait_for(lambda v=victim_id: moved_away(v), 60)
                cluster.start_broker(victim_id)
            not_moved += not moved
            if moved:
                moved_after.append(seen_moved[-1] - kills[-1])
            back = wait_for(lambda v=victim_id: fully_in_sync(v), 120)
            print(
                f"{disrupt} {number + 1} at {wall_clock} UTC: {args.target} broker {victim_id}; "
                f"moved: {f'after {moved_after[-1] * 1000:.0f} ms' if moved else 'NO'}; "
                f"back in the ISR: {back}; group read {len(group_log.consumed)}, "
                f"committed {len(group_log.commits)} times",
                file=sys.stderr,
            )
        time.sleep(args.interval)
    finally:
        for writer in writers:
            writer.stop()

    end = max((offset for acks in producers for offset, _, _ in acks.acknowledged), default=-1) + 1
    member.finish(end)
    stored = read_partition(cluster, topic, 0, end)
    by_offset = dict(stored)
    ok = not_moved == 0
    rows: list[tuple[str, str]] = [
        (f"disruptions ({args.target} {describe(disrupt)})", str(len(kills))),
        ("ZooKeeper restarted mid-run", "yes" if args.zk_restart else "no"),
        (
            "another leader in the metadata after a disruption, ms (min / median / max)",
            spread([seconds * 1000 for seconds in moved_after]),
        ),
    ]
    for acks in producers:
        values = [v for _, v in stored if v.startswith(acks.prefix)]
        lost = sum(1 for offset, value, _ in acks.acknowledged if by_offset.get(offset) != value)
        duplicated = len(values) - len(set(values))
        ordered = values == sorted(values)
        windows = windows_after(kills, sorted(t for _, _, t in acks.acknowledged))
        rows += [
            (f"{acks.name}: records acknowledged", str(len(acks.acknowledged))),
            (f"{acks.name}: acknowledged records lost", str(lost)),
            (f"{acks.name}: records stored twice", str(duplicated)),
            (f"{acks.name}: stored in order", "yes" if ordered else "NO"),
            (f"{acks.name}: delivery errors reported", str(len(acks.errors))),
            (f"{acks.name}: unavailability per disruption, ms (min / median / max)", spread(windows)),
        ]
        ok = ok and lost == 0 and duplicated == 0 and ordered and acks.unflushed == 0
        ok = ok and bool(acks.acknowledged)
        if acks.errors:
            print(f"{acks.name} errors (first 3): {acks.errors[:3]}", file=sys.stderr)
    consumed = group_log.consumed
    skipped = sum(1 for a, b in itertools.pairwise(consumed) if b > a + 1)
    repeated = len(consumed) - len(set(consumed))
    confirmed = [offset for offset, _ in group_log.commits]
    backwards = sum(1 for a, b in itertools.pairwise(confirmed) if b < a)
    last_commit = confirmed[-1] if confirmed else -1
    commit_windows = windows_after(kills, [t for _, t in group_log.commits])
    rows += [
        ("group: commits confirmed", str(len(confirmed))),
        ("group: commits refused or failed (retried)", str(len(group_log.commit_failures))),
        ("group: committed-offset reads", str(group_log.reads)),
        ("group: reads below a confirmed commit (lost or backwards)", str(len(group_log.regressions))),
        ("group: confirmed commits going backwards", str(backwards)),
        (
            "group: final committed offset = last commit = end of partition",
            f"{group_log.final_committed} = {last_commit} = {end}",
        ),
        ("group: offsets skipped by the member / read again after a move", f"{skipped} / {repeated}"),
        (
            "group: unavailability per disruption (longest pause between commits), ms (min / median / max)",
            spread(commit_windows),
        ),
    ]
    ok = ok and not group_log.regressions and backwards == 0 and skipped == 0
    ok = ok and group_log.final_committed == last_commit == end
    if group_log.regressions:
        print(f"regressions (first 3): {group_log.regressions[:3]}", file=sys.stderr)
    if group_log.commit_failures:
        print(f"commit failures (first 3): {group_log.commit_failures[:3]}", file=sys.stderr)
    print("| figure | value |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    print(f"all checks held: {'yes' if ok else 'NO'}", file=sys.stderr)
    return 0 if ok else 1


def describe(disrupt: str) -> str:
    return {
        "kill": "SIGKILL, then restarted",
        "stop": "SIGSTOP past the session timeout, then SIGCONT",
        "restart": "orderly restart: SIGTERM, controlled shutdown, start",
    }[disrupt]


if __name__ == "__main__":
    sys.exit(main())
