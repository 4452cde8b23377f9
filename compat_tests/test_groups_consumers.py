"""Consumer groups with real clients: assignment, rebalances, session expiry, commits, static members.

Runs against the suite's broker (conftest: group.initial.rebalance.delay.ms=0 and a small
__consumer_offsets, so rebalances take milliseconds) or against `--bootstrap` (e.g. a real Kafka, where
the same assertions must hold, only slower). Session timeouts stay at Kafka's minimum (6000 ms) so the
tests also pass against a stock Kafka.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import run_async
from compat_tests.group_clients import kafka_python_subscribe

SESSION_MS = 6000


@pytest.fixture
def group_id(request: pytest.FixtureRequest) -> str:
    return f"g-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(15) == 0


def wait_until(condition: Callable[[], bool], timeout: float, step: Callable[[], None]) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step()
        if condition():
            return True
    return False


# --- kafka-python ----------------------------------------------------------------------------------


def kp_consumer(bootstrap: str, group: str, topic: str, **config: Any) -> Any:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500,
        **config,
    )
    kafka_python_subscribe(consumer, topic)  # first join only once the topic's metadata is known
    return consumer


def kp_partitions(consumer: Any) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


@pytest.mark.parametrize("broker", ["suite-broker", "kafka-defaults"])
def test_kp_one_consumer_reads_all_and_commits(
    request: pytest.FixtureRequest, broker: str, topic_name: str, group_id: str, kp_closing: Any
) -> None:
    from kafka import TopicPartition

    from compat_tests.clients import create_topic

    # also against Kafka's defaults (`make run`), where joining an empty group waits out the 3 s
    # group.initial.rebalance.delay.ms
    bootstrap = request.getfixturevalue("bootstrap" if broker == "suite-broker" else "default_bootstrap")
    topic = topic_name
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 3, 20)
    consumer = kp_closing(kp_consumer(bootstrap, group_id, topic))
    seen: list[tuple[int, int]] = []
    assert wait_until(
        lambda: len(seen) >= 60,
        20,
        lambda: [seen.extend((r.partition, r.offset) for r in rs) for rs in consumer.poll(200).values()],
    )
    assert sorted(seen) == [(p, o) for p in range(3) for o in range(20)]
    assert kp_partitions(consumer) == {0, 1, 2}
    consumer.commit()
    for partition in range(3):
        assert consumer.committed(TopicPartition(topic, partition)) == 20
    consumer.close()
    # A fresh member of the group starts where the group committed: nothing left to read.
    again = kp_closing(kp_consumer(bootstrap, group_id, topic))
    extra: list[Any] = []
    assert wait_until(
        lambda: kp_partitions(again) == {0, 1, 2},
        30,
        lambda: [extra.extend(rs) for rs in again.poll(200).values()],
    )
    assert [again.position(TopicPartition(topic, p)) for p in range(3)] == [20, 20, 20]
    wait_until(lambda: False, 1, lambda: [extra.extend(rs) for rs in again.poll(200).values()])
    assert extra == []


class PollingThread:
    """Polls one kafka-python consumer in a thread of its own, as applications do (kafka-python runs a
    rebalance inside poll(), so members polled in turn from one thread would stall each other)."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.consumer.poll(100)
        finally:
            self.consumer.close()

    def partitions(self) -> set[int]:
        return kp_partitions(self.consumer)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def test_kp_three_consumers_split_then_one_leaves(
    bootstrap: str, make_topic: Callable[..., str], group_id: str
) -> None:
    topic = make_topic(6)
    members = [PollingThread(kp_consumer(bootstrap, group_id, topic)) for _ in range(3)]
    try:

        def split_evenly() -> bool:
            parts = [m.partitions() for m in members]
            return all(len(p) == 6 // len(members) for p in parts) and set().union(*parts) == set(range(6))

        assert wait_until(split_evenly, 30, lambda: time.sleep(0.05)), [m.partitions() for m in members]
        assert sum(len(m.partitions()) for m in members) == 6  # no partition twice
        leaving = members.pop(0)
        leaving.stop()  # close() sends LeaveGroup: the others take over without a session timeout
        started = time.monotonic()
        assert wait_until(split_evenly, 15, lambda: time.sleep(0.05)), [m.partitions() for m in members]
        assert time.monotonic() - started < SESSION_MS / 1000
    finally:
        for m in members:
            m.stop()


# --- confluent-kafka -------------------------------------------------------------------------------


def ck_consumer(bootstrap: str, group: str, topic: str, **config: Any) -> Any:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 500,
            **config,
        }
    )
    return consumer


def ck_partitions(consumer: Any) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


_CHILD = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Consumer
    bootstrap, group, topic = sys.argv[1:4]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": SESSION_MS,
                  "heartbeat.interval.ms": 500, "enable.auto.commit": False})
    c.subscribe([topic])
    reported = None
    while True:
        c.poll(0.1)
        parts = sorted(tp.partition for tp in c.assignment())
        if parts != reported:
            reported = parts
            print("ASSIGNED", ",".join(map(str, parts)), flush=True)
    """
).replace("SESSION_MS", str(SESSION_MS))


def test_ck_killed_member_partitions_move_after_session_timeout(
    bootstrap: str, make_topic: Callable[..., str], group_id: str, tmp_path: Path
) -> None:
    topic = make_topic(4)
    survivor = ck_consumer(bootstrap, group_id, topic)
    survivor.subscribe([topic])
    output = tmp_path / "child.out"
    with open(output, "wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, bootstrap, group_id, topic],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ},
        )
    try:

        def child_parts() -> set[int]:
            lines = [ln for ln in output.read_text().splitlines() if ln.startswith("ASSIGNED ")]
            if not lines:
                return set()
            return {int(p) for p in lines[-1][9:].split(",") if p}

        def split() -> bool:
            mine, theirs = ck_partitions(survivor), child_parts()
            return len(mine) == 2 and len(theirs) == 2 and mine | theirs == set(range(4))

        assert wait_until(split, 30, lambda: survivor.poll(0.1)), (ck_partitions(survivor), child_parts())
        child.kill()  # no LeaveGroup: the coordinator must notice the missing heartbeats
        child.wait()
        killed_at = time.monotonic()
        assert wait_until(lambda: ck_partitions(survivor) == set(range(4)), 30, lambda: survivor.poll(0.1))
        took = time.monotonic() - killed_at
        # Not before the session timeout (the member was only silent), and not much after it.
        assert SESSION_MS / 1000 - 1.5 < took < SESSION_MS / 1000 + 10, took
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        survivor.close()


def test_ck_static_member_rejoins_without_rebalance(
    bootstrap: str, make_topic: Callable[..., str], group_id: str
) -> None:
    topic = make_topic(4)
    events: list[tuple[str, list[int]]] = []

    def on_assign(_: Any, tps: list[Any]) -> None:
        events.append(("assign", sorted(tp.partition for tp in tps)))

    def on_revoke(_: Any, tps: list[Any]) -> None:
        events.append(("revoke", sorted(tp.partition for tp in tps)))

    other = ck_consumer(bootstrap, group_id, topic, **{"group.instance.id": "other"})
    other.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    first = ck_consumer(bootstrap, group_id, topic, **{"group.instance.id": "static-1"})
    first.subscribe([topic])
    try:

        def both_assigned() -> bool:
            return len(ck_partitions(other)) == 2 and len(ck_partitions(first)) == 2

        assert wait_until(both_assigned, 30, lambda: (other.poll(0.05), first.poll(0.05)))
        before = ck_partitions(first)
        events.clear()
        first.close()  # a static member does not send LeaveGroup on close
        again = ck_consumer(bootstrap, group_id, topic, **{"group.instance.id": "static-1"})
        again.subscribe([topic])
        try:
            assert wait_until(
                lambda: ck_partitions(again) == before, 15, lambda: (other.poll(0.05), again.poll(0.05))
            ), (ck_partitions(again), before)
            # keep both polling a little: a rebalance would show up as a revoke at the other member
            wait_until(lambda: False, 2, lambda: (other.poll(0.05), again.poll(0.05)))
            assert events == [], events
            assert ck_partitions(other) == set(range(4)) - before
        finally:
            again.close()
    finally:
        other.close()


def test_ck_cooperative_sticky_incremental(
    bootstrap: str, make_topic: Callable[..., str], group_id: str
) -> None:
    topic = make_topic(6)
    revoked: list[list[int]] = []
    strategy = {"partition.assignment.strategy": "cooperative-sticky"}

    def on_revoke(_: Any, tps: list[Any]) -> None:
        revoked.append(sorted(tp.partition for tp in tps))

    first = ck_consumer(bootstrap, group_id, topic, **strategy)
    first.subscribe([topic], on_revoke=on_revoke)
    second = None
    try:
        assert wait_until(lambda: ck_partitions(first) == set(range(6)), 20, lambda: first.poll(0.05))
        second = ck_consumer(bootstrap, group_id, topic, **strategy)
        second.subscribe([topic])

        def split() -> bool:
            a, b = ck_partitions(first), ck_partitions(second)
            return len(a) == 3 and len(b) == 3 and a | b == set(range(6))

        assert wait_until(split, 30, lambda: (first.poll(0.05), second.poll(0.05))), (
            ck_partitions(first),
            ck_partitions(second),
        )
        # Incremental: the first member gave up only the partitions that moved, never all six.
        assert revoked and all(len(r) == 3 for r in revoked if r), revoked
        assert set().union(*revoked) == ck_partitions(second)
    finally:
        if second is not None:
            second.close()
        first.close()


def test_ck_commit_restart_resume(bootstrap: str, make_topic: Callable[..., str], group_id: str) -> None:
    from confluent_kafka import TopicPartition

    topic = make_topic(1)
    produce(bootstrap, topic, 1, 10)
    consumer = ck_consumer(bootstrap, group_id, topic)
    consumer.subscribe([topic])
    got: list[int] = []

    def poll() -> None:
        message = consumer.poll(0.1)
        if message is not None and not message.error():
            got.append(message.offset())

    assert wait_until(lambda: len(got) >= 4, 20, poll)
    consumer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    consumer.close()
    consumer = ck_consumer(bootstrap, group_id, topic)
    consumer.subscribe([topic])
    got = []
    try:
        assert wait_until(lambda: len(got) >= 6, 20, poll)
        assert got[:6] == [4, 5, 6, 7, 8, 9]
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == 4
    finally:
        consumer.close()


def test_first_assignment_is_quick(
    request: pytest.FixtureRequest, bootstrap: str, make_topic: Callable[..., str], group_id: str
) -> None:
    # the bound needs group.initial.rebalance.delay.ms=0: the suite's overrides, which --against kafka
    # starts Apache Kafka with too
    if request.config.getoption("--bootstrap") and request.config.getoption("--against") != "kafka":
        pytest.skip("timing sanity bound for a broker the suite started (group.initial.rebalance.delay.ms=0)")
    topic = make_topic(2)
    consumer = ck_consumer(bootstrap, group_id, topic)
    try:
        started = time.monotonic()
        consumer.subscribe([topic])
        assert wait_until(lambda: ck_partitions(consumer) == {0, 1}, 10, lambda: consumer.poll(0.02))
        assert time.monotonic() - started < 3.0
    finally:
        consumer.close()


# --- aiokafka --------------------------------------------------------------------------------------


def test_aiokafka_group_commit_and_resume(
    bootstrap: str, make_topic: Callable[..., str], group_id: str
) -> None:
    pytest.importorskip("aiokafka")
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topic = make_topic(2)
    produce(bootstrap, topic, 2, 5)

    async def consume(count: int) -> list[tuple[int, int]]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group_id,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=500,
        )
        await consumer.start()
        seen: list[tuple[int, int]] = []
        try:
            deadline = time.monotonic() + 20
            while len(seen) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    seen.extend((r.partition, r.offset) for r in records)
            await consumer.commit()
            for partition in range(2):
                committed = await consumer.committed(TopicPartition(topic, partition))
                assert committed == max(o for p, o in seen if p == partition) + 1
        finally:
            await consumer.stop()
        return seen

    first = run_async(consume(10))
    assert sorted(first) == [(p, o) for p in range(2) for o in range(5)]
    produce(bootstrap, topic, 2, 3)
    second = run_async(consume(6))
    assert sorted(second) == [(p, o) for p in range(2) for o in range(5, 8)]
