"""The partition seam on real partition logs: what a single node and a cluster leader do with an append,
and when an acks=-1 write is committed; and the cluster as the seam tells clients of it, in both modes."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from kafkacompat.log.config import LogConfig
from kafkacompat.log.partition_log import PartitionLog
from kafkacompat.replication.metadata import TopicInfo
from kafkacompat.replication.partition_state import LeaderAndIsr, PartitionState
from kafkacompat.replication.replica_manager import (
    BrokerEndpoint,
    ClusterReplicaManager,
    LocalReplicaManager,
    PartitionMetadata,
    ReplicationHealth,
    park_until,
)
from kafkacompat.replication.zk_data import BrokerRegistration
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import build_batch

NOW = 1_700_000_000_000
KEY = ("t", 0)


class Watchers:
    """The broker's parked-request registry, reduced to what the seam uses, counting notifications."""

    def __init__(self) -> None:
        self.waiting: dict[tuple[str, int], list[trio.Event]] = {}
        self.notified: list[tuple[str, int]] = []

    @contextmanager
    def watch(self, partitions: Iterable[tuple[str, int]]) -> Iterator[trio.Event]:
        event = trio.Event()
        for key in partitions:
            self.waiting.setdefault(key, []).append(event)
        yield event

    def notify(self, topic: str, partition: int) -> None:
        self.notified.append((topic, partition))
        for event in self.waiting.pop((topic, partition), []):
            event.set()


class Logs:
    def __init__(self, *logs: PartitionLog) -> None:
        self.logs = {(log.topic, log.partition): log for log in logs}

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))


class Link:
    """The cluster runtime's side: a controller that accepts every ISR change it is sent."""

    node_id = 1

    def __init__(self) -> None:
        self.fenced = False
        self.proposals: list[tuple[tuple[str, int], tuple[int, ...]]] = []
        self.refused: list[tuple[str, int]] = []

    def is_fenced(self) -> bool:
        return self.fenced

    def known_leader_epoch(self, topic: str, partition: int) -> int:
        return 9

    async def alter_partition(self, key: tuple[str, int], proposal: LeaderAndIsr) -> LeaderAndIsr | None:
        self.proposals.append((key, proposal.isr))
        return LeaderAndIsr(proposal.leader, proposal.leader_epoch, proposal.isr, 1, proposal.zk_version + 1)

    def isr_committed(self, key: tuple[str, int], state: LeaderAndIsr) -> None:
        return None

    def isr_refused(self, key: tuple[str, int]) -> None:
        self.refused.append(key)


class Host:
    """The single node's broker as its seam sees it: node 7, two topics, an endpoint per listener."""

    node_id = 7

    def __init__(self) -> None:
        self.config = {"broker.rack": "r1"}
        topics = [TopicInfo("t", uuid.uuid4(), 2), TopicInfo("u", uuid.uuid4(), 1)]
        self.metadata = SimpleNamespace(
            topic=lambda name: next((t for t in topics if t.name == name), None), topics=lambda: topics
        )

    def advertised_endpoint(self, listener_name: str) -> tuple[str, int]:
        return {"PLAIN": ("h", 9092), "TLS": ("h", 9093)}.get(listener_name, ("h", 9092))


@pytest.fixture
def partition_log(tmp_path: Path) -> Iterator[PartitionLog]:
    log = PartitionLog(str(tmp_path / "t-0"), "t", 0, LogConfig.from_properties({}), sync=False)
    yield log
    log.close(clean=False)


def batch(count: int = 2) -> bytearray:
    return bytearray(build_batch([(b"k", b"v" * i, (), NOW) for i in range(count)], base_timestamp=NOW))


def test_a_single_node_commits_every_append_at_once(partition_log: PartitionLog) -> None:
    watchers = Watchers()
    replicas = LocalReplicaManager(Logs(partition_log), watchers, Host())  # type: ignore[arg-type]
    appended = replicas.append_as_leader("t", 0, partition_log, batch(3), NOW, required_acks=-1)
    assert appended.result.base_offset == 0 and appended.required_offset == 3
    assert partition_log.high_watermark == 3 and watchers.notified == [KEY]
    assert replicas.leader_epoch("t", 0) == 0 and replicas.is_leader("t", 0)
    assert trio.run(replicas.wait_for_commits, {KEY: 3}, 0.0) == {}


def test_a_single_node_refuses_acks_all_below_min_insync_replicas_before_writing(tmp_path: Path) -> None:
    config = LogConfig.from_properties({"min.insync.replicas": "2"})
    log = PartitionLog(str(tmp_path / "t-0"), "t", 0, config, sync=False)
    try:
        replicas = LocalReplicaManager(Logs(log), Watchers(), Host())  # type: ignore[arg-type]
        with pytest.raises(KafkaError) as refused:
            replicas.append_as_leader("t", 0, log, batch(), NOW, required_acks=-1)
        assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS and log.log_end_offset == 0
        replicas.append_as_leader("t", 0, log, batch(), NOW, required_acks=1)  # acks=1 is not held back
        assert log.log_end_offset == 2 and log.high_watermark == 2
    finally:
        log.close(clean=False)


def leader(
    partition_log: PartitionLog, isr: tuple[int, ...], *, lag_ms: int = 30_000
) -> tuple[ClusterReplicaManager, Link, Watchers, PartitionState]:
    link, watchers = Link(), Watchers()
    replicas = ClusterReplicaManager(
        Logs(partition_log),  # type: ignore[arg-type]
        watchers,
        link,
        now_ms=lambda: NOW,
        lag_ms=lag_ms,
        closing=lambda: False,
    )
    state = replicas.partitions[KEY] = PartitionState("t", 0, link.node_id)
    state.become_leader(LeaderAndIsr(1, 4, isr, 1, 0), (1, 2), partition_log.log_end_offset, NOW)
    return replicas, link, watchers, state


def test_a_cluster_leader_commits_once_the_isr_has_the_append(partition_log: PartitionLog) -> None:
    replicas, _, _, _ = leader(partition_log, (1, 2))
    assert replicas.leader_epoch("t", 0) == 4 and replicas.leader_epoch("t", 1) == 9

    async def main() -> None:
        appended = replicas.append_as_leader("t", 0, partition_log, batch(2), NOW, required_acks=-1)
        assert partition_log.high_watermark == 0  # the follower has not fetched it yet
        results: list[dict[tuple[str, int], ErrorCode]] = []

        async def wait() -> None:
            results.append(
                await replicas.wait_for_commits({KEY: appended.required_offset}, trio.current_time() + 5)
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.01)
            assert results == []  # parked
            replicas.follower_fetched("t", 0, 2, partition_log.log_end_offset, partition_log)
        assert results == [{}] and partition_log.high_watermark == 2

        # nobody fetches the next append: the wait ends at its deadline
        second = replicas.append_as_leader("t", 0, partition_log, batch(1), NOW, required_acks=-1)
        timed_out = await replicas.wait_for_commits({KEY: second.required_offset}, trio.current_time() + 0.05)
        assert timed_out == {KEY: ErrorCode.REQUEST_TIMED_OUT}

    trio.run(main)


def test_a_fenced_or_demoted_leader_neither_appends_nor_answers_a_wait(partition_log: PartitionLog) -> None:
    replicas, link, _, _ = leader(partition_log, (1,))
    link.fenced = True
    with pytest.raises(KafkaError) as refused:
        replicas.append_as_leader("t", 0, partition_log, batch(), NOW, required_acks=1)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and partition_log.log_end_offset == 0
    failed = trio.run(replicas.wait_for_commits, {KEY: 1, ("t", 1): 1}, 0.0, park_until)
    assert failed == {KEY: ErrorCode.NOT_LEADER_OR_FOLLOWER, ("t", 1): ErrorCode.NOT_LEADER_OR_FOLLOWER}


def test_a_cluster_leader_refuses_acks_all_while_the_isr_is_below_the_minimum(tmp_path: Path) -> None:
    config = LogConfig.from_properties({"min.insync.replicas": "2"})
    log = PartitionLog(str(tmp_path / "t-0"), "t", 0, config, sync=False)
    try:
        replicas, _, _, _ = leader(log, (1,))
        with pytest.raises(KafkaError) as refused:
            replicas.append_as_leader("t", 0, log, batch(), NOW, required_acks=-1)
        assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS and log.log_end_offset == 0
        # the leader alone is the ISR: acks=1 commits at once
        replicas.append_as_leader("t", 0, log, batch(), NOW, required_acks=1)
        assert log.high_watermark == 2
    finally:
        log.close(clean=False)


def test_the_isr_shrinks_on_the_replica_managers_own_schedule(partition_log: PartitionLog) -> None:
    clock = [NOW]
    replicas, link, _, state = leader(partition_log, (1, 2), lag_ms=100)
    replicas.now_ms = lambda: clock[0]
    assert replicas.isr_check_seconds == pytest.approx(0.05)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(replicas.run)
            clock[0] += 1_000  # the follower has not fetched for 1 s, ten times the lag
            with trio.fail_after(5):
                while state.isr != (1,):
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert link.proposals == [(KEY, (1,))] and state.pending_isr is None


class OfflineLogs(Logs):
    """A log dir that failed: its partitions' logs raise KAFKA_STORAGE_ERROR, as LogManager's do."""

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition} is offline")


def test_an_offline_log_ends_a_wait_and_an_isr_change_without_raising(partition_log: PartitionLog) -> None:
    """A log dir failing under a leader: the acks=-1 wait answers KAFKA_STORAGE_ERROR, and the ISR change
    the controller accepted is recorded without the task raising (which would end the cluster runtime)."""
    replicas, link, _, state = leader(partition_log, (1, 2))
    replicas.logs = OfflineLogs()  # type: ignore[assignment]
    failed = trio.run(replicas.wait_for_commits, {KEY: 1}, 1e9, park_until)
    assert failed == {KEY: ErrorCode.KAFKA_STORAGE_ERROR}
    trio.run(replicas._write_isr, KEY, state.propose_isr((1,)))
    assert link.proposals[-1] == (KEY, (1,)) and state.isr == (1,)


def test_coordinators_hear_of_elections_and_resignations_of_their_topic_only(
    partition_log: PartitionLog,
) -> None:
    replicas, _, _, _ = leader(partition_log, (1,))
    heard: list[tuple[str, int, bool, int]] = []

    def listener(topic: str) -> Any:
        async def told(partition: int, leads: bool, epoch: int) -> None:
            heard.append((topic, partition, leads, epoch))

        return told

    replicas.add_leadership_listener("t", listener("t"))
    replicas.add_leadership_listener("other", listener("other"))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(replicas.run)
            replicas.leadership_changed(KEY, True)
            replicas.leadership_changed(KEY, False)
            await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    # each is told in a task of its own, which trio may run in either order
    assert sorted(heard) == [("t", 0, False, 4), ("t", 0, True, 4)]


# --- the cluster as clients see it ----------------------------------------------------------------------


def test_a_single_node_tells_of_a_cluster_of_itself() -> None:
    replicas = LocalReplicaManager(Logs(), Watchers(), Host())  # type: ignore[arg-type]
    assert replicas.partition_metadata("t", 1) == PartitionMetadata(7, 0, [7], [7], [])
    assert replicas.leader_of("t", 0) == 7 and replicas.controller_id() == 7
    assert replicas.live_broker_ids() == [7] and replicas.live_broker_count() == 1
    assert replicas.broker_endpoints("TLS") == [BrokerEndpoint(7, "h", 9093, "r1")]
    assert replicas.reassignments() == {} and not replicas.serves_followers
    assert replicas.health(5, 1) == ReplicationHealth(5, 0, 1, 1)
    trio.run(replicas.refresh_live_brokers)  # nothing to read


def test_a_single_node_accepts_only_assignments_to_itself() -> None:
    replicas = LocalReplicaManager(Logs(), Watchers(), Host())  # type: ignore[arg-type]
    assert replicas.check_replica_assignment([(0, [7]), (1, [7])]) == {0: [7], 1: [7]}
    with pytest.raises(KafkaError) as refused:
        replicas.check_replica_assignment([(0, [7]), (1, [7, 8])])
    assert refused.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert refused.value.message == "Replica assignment [7, 8] names brokers other than the only one, 7."


def test_a_single_node_answers_elections_reassignments_and_shutdowns_itself() -> None:
    replicas = LocalReplicaManager(Logs(), Watchers(), Host())  # type: ignore[arg-type]

    async def main() -> None:
        elected = await replicas.elect_leaders([("t", 1), ("t", 2), ("x", 0)], 0)
        assert elected == {
            ("t", 1): (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
            ("t", 2): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."),
            ("x", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."),
        }
        every = await replicas.elect_leaders(None, 1)
        assert sorted(every) == [("t", 0), ("t", 1), ("u", 0)]
        moved = await replicas.alter_reassignments(
            {("t", 0): [7], ("t", 1): None, ("u", 0): [8], ("v", 0): [7]}
        )
        assert {key: code for key, (code, _) in moved.items()} == {
            ("t", 0): ErrorCode.NONE,
            ("t", 1): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
            ("u", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            ("v", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert await replicas.controlled_shutdown_as_controller(7) == []
        with pytest.raises(KafkaError) as refused:
            await replicas.controlled_shutdown_as_controller(8)
        assert refused.value.code == ErrorCode.BROKER_NOT_AVAILABLE

    trio.run(main)


class ViewLink(Link):
    """A cluster runtime whose view has brokers 1 and 2 live (3 gone), controller 2, and `t` on 1-3."""

    def __init__(self) -> None:
        super().__init__()
        self.is_controller = True
        self.refreshed = 0
        self.asked: list[Any] = []
        self.snapshot = SimpleNamespace(states={("t", 0): None, ("t", 1): None})
        self.brokers = [
            BrokerRegistration(1, {"PLAIN": ("b1", 1), "TLS": ("b1", 2)}, rack="a"),
            BrokerRegistration(2, {"PLAIN": ("b2", 1)}),
        ]

    def live_brokers(self) -> list[BrokerRegistration]:
        return self.brokers

    def controller_id(self) -> int:
        return 2

    def partition_metadata(
        self, topic: str, partition: int
    ) -> tuple[int, int, list[int], list[int], list[int]]:
        if partition == 0:
            return 1, 4, [1, 2, 3], [1, 2], [3]
        return -1, 6, [3], [], [3]

    def reassignments(self) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        return {("t", 0): ([1, 2, 3], [3], [])}

    async def refresh_live_brokers(self) -> None:
        self.refreshed += 1

    async def alter_reassignments(self, wanted: Any) -> Any:
        self.asked.append(("reassign", wanted))
        return {key: (ErrorCode.NONE, None) for key in wanted}

    async def elect_leaders(self, wanted: Any, election_type: int) -> Any:
        self.asked.append(("elect", wanted, election_type))
        raise KafkaError(ErrorCode.NOT_CONTROLLER)

    async def controlled_shutdown_as_controller(self, broker_id: int) -> list[tuple[str, int]]:
        self.asked.append(("shutdown", broker_id))
        return [("t", 0)]


def viewer(partition_log: PartitionLog) -> tuple[ClusterReplicaManager, ViewLink]:
    link = ViewLink()
    replicas = ClusterReplicaManager(
        Logs(partition_log),  # type: ignore[arg-type]
        Watchers(),
        link,  # type: ignore[arg-type]
        now_ms=lambda: NOW,
        lag_ms=30_000,
        closing=lambda: False,
    )
    return replicas, link


def test_a_cluster_member_tells_of_the_cluster_as_its_runtime_sees_it(partition_log: PartitionLog) -> None:
    replicas, link = viewer(partition_log)
    assert replicas.partition_metadata("t", 0) == PartitionMetadata(1, 4, [1, 2, 3], [1, 2], [3])
    assert replicas.leader_of("t", 0) == 1 and replicas.leader_of("t", 1) == -1
    assert replicas.live_broker_ids() == [1, 2] and replicas.live_broker_count() == 2
    assert replicas.controller_id() == 2 and replicas.serves_followers
    # only the brokers with an endpoint on the listener, as its clients reach them
    assert replicas.broker_endpoints("TLS") == [BrokerEndpoint(1, "b1", 2, "a")]
    assert replicas.broker_endpoints("PLAIN") == [
        BrokerEndpoint(1, "b1", 1, "a"),
        BrokerEndpoint(2, "b2", 1, None),
    ]
    assert replicas.reassignments() == {("t", 0): ([1, 2, 3], [3], [])}
    trio.run(replicas.refresh_live_brokers)
    assert link.refreshed == 1


def test_a_cluster_member_checks_assignments_against_the_live_brokers(partition_log: PartitionLog) -> None:
    replicas, _ = viewer(partition_log)
    assert replicas.check_replica_assignment([(0, [1, 2]), (1, [2, 1])]) == {0: [1, 2], 1: [2, 1]}
    for wrong in ([(0, [1, 3])], [(0, [1, 1])], [(0, [])], [(0, [1, 2]), (1, [1])]):
        with pytest.raises(KafkaError) as refused:
            replicas.check_replica_assignment(wrong)
        assert refused.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_a_cluster_member_asks_the_controller_duties(partition_log: PartitionLog) -> None:
    replicas, link = viewer(partition_log)

    async def main() -> None:
        assert await replicas.alter_reassignments({("t", 0): None}) == {("t", 0): (ErrorCode.NONE, None)}
        with pytest.raises(KafkaError) as refused:
            await replicas.elect_leaders(None, 0)
        assert refused.value.code == ErrorCode.NOT_CONTROLLER
        assert await replicas.controlled_shutdown_as_controller(3) == [("t", 0)]

    trio.run(main)
    assert link.asked == [("reassign", {("t", 0): None}), ("elect", None, 0), ("shutdown", 3)]


def test_a_cluster_members_health_counts_what_it_leads_and_as_controller_what_nobody_leads(
    partition_log: PartitionLog,
) -> None:
    replicas, link = viewer(partition_log)
    state = replicas.partitions[KEY] = PartitionState("t", 0, link.node_id)
    state.become_leader(LeaderAndIsr(1, 4, (1,), 1, 0), (1, 2), 0, NOW)
    # leads t-0 with an ISR short of its replicas; as controller, t-1 has no live leader
    assert replicas.health(99, 99) == ReplicationHealth(1, 1, 1, 1)
    link.is_controller = False
    assert replicas.health(99, 99) == ReplicationHealth(1, 1, 0, 0)
