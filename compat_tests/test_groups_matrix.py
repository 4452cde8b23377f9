"""Group scenarios run with each client (kafka-python, confluent-kafka, aiokafka, Java) through one adapter
(`compat_tests.group_clients.Member`), filling the cells of the client x scenario matrix that
`test_groups_consumers.py` and `test_groups_restart.py` leave open (see `MISSING` below: a scenario
already tested there for a client is not repeated here).

The suite's shared broker (conftest: group.initial.rebalance.delay.ms=0, or `--bootstrap`); session
timeouts at Kafka's 6000 ms minimum; the broker-restart cells start a broker process of their own.
Waits are bounded polls on observed state (assignments, records, committed offsets) with generous
limits; no fixed sleeps, except the quiet window that shows a static rejoin caused no rebalance.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compat_tests.group_clients import JOINS_ON_FIRST_POLL, SESSION_MS, Member, wait_for
from compat_tests.java_probe import unavailable_reason
from kafkacompat.local_brokers import BrokerProcess

GROUP_OVERRIDES = ["group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=4"]
REPO = Path(__file__).resolve().parents[1]

# Scenario -> clients still missing it (the others are covered in test_groups_consumers.py /
# test_groups_restart.py; their test names are listed in FINDINGS.md's group matrix).
MISSING = {
    "reads_all_commits": ["confluent", "java"],
    "split_then_leave": ["confluent", "aiokafka", "java"],
    "killed_member": ["kafka-python", "aiokafka", "java"],
    "commit_restart_resume": ["kafka-python", "aiokafka", "java"],
    # confluent: the leader's rejoin is new
    "static_rejoin": ["kafka-python", "confluent", "aiokafka", "java"],
    "broker_restart": ["kafka-python", "aiokafka", "java"],
}


@pytest.fixture(autouse=True)
def _java_available(request: pytest.FixtureRequest) -> None:
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("client") == "java":
        reason = unavailable_reason()
        if reason is not None:
            pytest.skip(reason)


@pytest.fixture
def group_id(request: pytest.FixtureRequest) -> str:
    return f"gm-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, partitions: int, start: int, count: int) -> None:
    """`count` records per partition, values "<partition>-<i>" for i from `start`."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for i in range(start, start + count):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def offsets_seen(member: Member) -> list[tuple[int, int]]:
    return sorted((p, o) for p, o, _ in member.seen())


def split_evenly(members: list[Member], partitions: int) -> bool:
    parts = [m.partitions() for m in members]
    return (
        all(len(p) == partitions // len(members) for p in parts)
        and frozenset().union(*parts) == frozenset(range(partitions))
        and sum(len(p) for p in parts) == partitions  # no partition owned twice
    )


def closing(members: list[Member]) -> None:
    for member in members:
        try:
            member.close()
        except AssertionError:
            pass


@pytest.mark.parametrize("client", MISSING["reads_all_commits"])
def test_one_consumer_reads_all_and_commits(
    bootstrap: str, make_topic: Callable[..., str], group_id: str, client: str
) -> None:
    topic = make_topic(3)
    produce(bootstrap, topic, 3, 0, 20)
    with Member(client, bootstrap, group_id, topic) as member:
        assert wait_for(lambda: len(member.seen()) >= 60, 30), len(member.seen())
        assert offsets_seen(member) == [(p, o) for p in range(3) for o in range(20)]
        assert member.partitions() == frozenset(range(3))
        member.commit({p: 20 for p in range(3)})
        assert member.committed([0, 1, 2]) == {0: 20, 1: 20, 2: 20}
    produce(bootstrap, topic, 3, 20, 2)
    # A fresh member resumes at the commit: exactly the two new records of each partition.
    with Member(client, bootstrap, group_id, topic) as again:
        assert wait_for(lambda: len(again.seen()) >= 6, 30), again.seen()
        assert offsets_seen(again) == [(p, o) for p in range(3) for o in (20, 21)]


@pytest.mark.parametrize("client", MISSING["split_then_leave"])
def test_three_consumers_split_then_one_leaves(
    bootstrap: str, make_topic: Callable[..., str], group_id: str, client: str
) -> None:
    topic = make_topic(6)
    members = [Member(client, bootstrap, group_id, topic) for _ in range(3)]
    try:
        assert wait_for(lambda: split_evenly(members, 6), 40), [m.partitions() for m in members]
        leaving = members.pop(0)
        taken = leaving.partitions()
        leaving.close()  # a dynamic member sends LeaveGroup: no session timeout to wait for
        closed_at = time.monotonic()
        assert wait_for(lambda: split_evenly(members, 6), 30), [m.partitions() for m in members]
        assert time.monotonic() - closed_at < SESSION_MS / 1000, "takeover waited for the session timeout"
        # The survivors really consume the partitions they took over.
        before = [len(m.seen()) for m in members]
        produce(bootstrap, topic, 6, 0, 1)

        def new_partitions() -> set[int]:
            return {p for m, n in zip(members, before, strict=True) for p, _, _ in m.seen()[n:]}

        assert wait_for(lambda: taken <= new_partitions(), 30), (taken, new_partitions())
    finally:
        closing(members)


def _child_partitions(output: Path) -> frozenset[int]:
    lines = [ln for ln in output.read_text().splitlines() if ln.startswith("ASSIGNED ")]
    if not lines:
        return frozenset()
    return frozenset(int(p) for p in lines[-1][len("ASSIGNED ") :].split(",") if p)


@pytest.mark.parametrize("client", MISSING["killed_member"])
def test_killed_member_partitions_move_after_session_timeout(
    bootstrap: str, make_topic: Callable[..., str], group_id: str, client: str, tmp_path: Path
) -> None:
    topic = make_topic(4)
    output = tmp_path / "child.out"
    with open(output, "wb") as out:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "compat_tests.group_clients",
                "member",
                client,
                bootstrap,
                group_id,
                topic,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ},
        )
    survivor = Member(client, bootstrap, group_id, topic)
    try:

        def split() -> bool:
            mine, theirs = survivor.partitions(), _child_partitions(output)
            return len(mine) == 2 and len(theirs) == 2 and mine | theirs == frozenset(range(4))

        assert wait_for(split, 40), (survivor.partitions(), output.read_text()[-2000:])
        child.kill()  # SIGKILL: no LeaveGroup, the coordinator must notice the missing heartbeats
        child.wait()
        killed_at = time.monotonic()
        assert wait_for(lambda: survivor.partitions() == frozenset(range(4)), 40), survivor.partitions()
        took = time.monotonic() - killed_at
        # Not before the session timeout (the member only went silent), and not long after it.
        assert SESSION_MS / 1000 - 1.5 < took < SESSION_MS / 1000 + 15, took
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        survivor.close()


@pytest.mark.parametrize("client", MISSING["commit_restart_resume"])
def test_commit_restart_resume_exactly_after_commit(
    bootstrap: str, make_topic: Callable[..., str], group_id: str, client: str
) -> None:
    topic = make_topic(2)
    produce(bootstrap, topic, 2, 0, 10)
    with Member(client, bootstrap, group_id, topic) as member:
        assert wait_for(lambda: len(member.seen()) >= 20, 30), len(member.seen())
        # Commit positions in the middle of what was read (not the end), different per partition.
        member.commit({0: 4, 1: 7})
    with Member(client, bootstrap, group_id, topic) as again:
        assert again.committed([0, 1]) == {0: 4, 1: 7}
        assert wait_for(lambda: len(again.seen()) >= 9, 30), again.seen()
        seen = again.seen()
        assert sorted((p, o) for p, o, _ in seen) == [(0, o) for o in range(4, 10)] + [
            (1, o) for o in range(7, 10)
        ]
        firsts = {p: min(o for q, o, _ in seen if q == p) for p in (0, 1)}
        assert firsts == {0: 4, 1: 7}
        assert {v for p, o, v in seen if (p, o) == (1, 7)} == {b"1-7"}


def rejoin_static(
    members: dict[str, Member], name: str, other: Member, make: Callable[[bool], Member]
) -> None:
    """Close static member `name`, start it again, and check that nothing moved at `other`.

    Kafka promises no rebalance only to a static member back within its session (STATIC_SESSION_MS): the
    coordinator expires the old one after that, rebalances, and `other` sees it. Starting a JVM alone can
    take 30 s on a loaded machine, so a client that joins from its first poll (JOINS_ON_FIRST_POLL) is
    started and subscribed first, held, and released once the old member is closed: the session then
    covers only the close and the join, not the process start."""
    before, others_before = members[name].partitions(), other.partitions()
    other.clear_events()
    held = members[name].client in JOINS_ON_FIRST_POLL
    again = make(held) if held else None
    members.pop(name).close()  # a static member does not send LeaveGroup on close
    closed_at = time.monotonic()
    if again is None:
        again = make(False)
    members[name] = again
    again.release()
    # Within the session (30 s from the old member's last heartbeat, before `closed_at`), with room.
    assert wait_for(lambda: again.partitions() == before, 25), (
        name,
        again.partitions(),
        before,
        f"{time.monotonic() - closed_at:.1f} s after the close",
    )
    # A rebalance would show up at the other member as a revoke/assign callback; keep both polling a
    # little (several heartbeat intervals) to give one the chance to appear.
    wait_for(lambda: bool(other.event_list()), 2)
    assert other.event_list() == [], (name, other.event_list(), f"{time.monotonic() - closed_at:.1f} s")
    assert other.partitions() == others_before
    # kafka-python and aiokafka report an empty revoke before a member's first assignment: not a move.
    assert [e for e in again.event_list() if e[1]] == [("assign", before)], again.event_list()


@pytest.mark.parametrize("client", MISSING["static_rejoin"])
def test_static_members_rejoin_in_turn_without_rebalance(
    bootstrap: str, make_topic: Callable[..., str], group_id: str, client: str
) -> None:
    """Each of two static members closes and comes back under its group.instance.id, in turn, so the
    group leader is among them (test_groups_consumers.py's confluent test restarts the member that joined
    second only)."""
    topic = make_topic(4)
    members = {
        name: Member(client, bootstrap, group_id, topic, instance_id=name)
        for name in ("static-a", "static-b")
    }
    try:
        assert wait_for(lambda: split_evenly(list(members.values()), 4), 40), {
            n: m.partitions() for n, m in members.items()
        }
        for name, other_name in (("static-b", "static-a"), ("static-a", "static-b")):
            rejoin_static(
                members,
                name,
                members[other_name],
                lambda held, name=name: Member(
                    client, bootstrap, group_id, topic, instance_id=name, held=held
                ),
            )
    finally:
        closing(list(members.values()))


# --- broker restart (subprocess broker) ----------------------------------------------------------------


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", GROUP_OVERRIDES)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def group_offsets(bootstrap: str, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """The group's committed offsets as an admin client sees them, retried while the coordinator reloads.

    Asked from the side rather than through the member: kafka-python 3.0.12 once stalled for good when
    `committed()` ran while its post-restart JoinGroup was in flight (see FINDINGS.md)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])]
    deadline = time.monotonic() + 30
    while True:
        try:
            result = admin.list_consumer_group_offsets(request)[group].result()
            return {tp.partition: tp.offset for tp in result.topic_partitions}
        except Exception:
            # COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR right after a start are retriable
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.restarts_broker
@pytest.mark.parametrize("how", ["orderly", "sigkill"])
@pytest.mark.parametrize("client", MISSING["broker_restart"])
def test_broker_restart_keeps_offsets_and_group_resumes(
    broker_process: BrokerProcess, client: str, how: str
) -> None:
    from compat_tests.clients import create_topic

    bootstrap = broker_process.bootstrap
    topic, group = f"gm-restart-{uuid.uuid4().hex[:8]}", f"gm-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 2, 0, 10)
    with Member(client, bootstrap, group, topic) as member:
        assert wait_for(lambda: len(member.seen()) >= 20, 30), len(member.seen())
        member.commit({0: 10, 1: 10})
        member.clear_events()
        if how == "orderly":
            broker_process.restart()
        else:
            broker_process.kill()
            broker_process.start()
        assert group_offsets(bootstrap, group, topic, [0, 1]) == {0: 10, 1: 10}
        produce(bootstrap, topic, 2, 10, 5)
        # The member carries on after the restart: the new records once each, nothing read again.
        assert wait_for(lambda: len(member.seen()) >= 30, 40), len(member.seen())
        assert offsets_seen(member) == [(p, o) for p in range(2) for o in range(15)]
        member.commit({0: 15, 1: 15})
        assert member.event_list() == []  # no rebalance: the group came back Stable with this member in it
    # A fresh member of the group starts at the post-restart commit.
    produce(bootstrap, topic, 2, 15, 1)
    with Member(client, bootstrap, group, topic) as again:
        assert wait_for(lambda: len(again.seen()) >= 2, 30), again.seen()
        assert offsets_seen(again) == [(0, 15), (1, 15)]
