"""TxnOffsetCommit: offsets pending in the group until their transaction's marker."""

from __future__ import annotations

from kafkacompat.groups._tests.harness import Harness
from kafkacompat.groups.api import OffsetCommitPartition, TxnOffsetCommitRequest
from kafkacompat.groups.manager import GroupCoordinatorCore
from kafkacompat.wire.errors import ErrorCode as E

G = "txn-group"
PID = 4000


def txn_commit(h: Harness, offsets: dict[tuple[str, int], int], producer_id: int = PID) -> dict:
    req = TxnOffsetCommitRequest(
        G, producer_id, 0, [OffsetCommitPartition(t, p, o) for (t, p), o in offsets.items()]
    )
    return dict(h.absorb(h.core.txn_offset_commit(req, h.now)))


def stable_fetch(h: Harness) -> list[tuple[str, int, int, int]]:
    response = h.absorb(h.core.offset_fetch(G, [("t", 0)], h.now, True))
    return [(p.topic, p.partition, p.offset, p.error_code) for p in response.partitions]


def test_pending_until_commit_marker() -> None:
    h = Harness()
    assert txn_commit(h, {("t", 0): 7}) == {("t", 0): E.NONE}
    [record] = h.log
    assert (record.producer_id, record.producer_epoch) == (PID, 0)  # written in the producer's batch
    assert h.fetch(G, [("t", 0)]) == {("t", 0): -1}
    assert stable_fetch(h) == [("t", 0, -1, E.UNSTABLE_OFFSET_COMMIT)]
    h.absorb(h.core.complete_txn(PID, True, h.core.partition_for(G), h.now))
    assert h.fetch(G, [("t", 0)]) == {("t", 0): 7}
    assert stable_fetch(h) == [("t", 0, 7, E.NONE)]


def test_abort_marker_drops_them() -> None:
    h = Harness()
    h.commit(G, {("t", 0): 3})
    txn_commit(h, {("t", 0): 9})
    h.absorb(h.core.complete_txn(PID, False, h.core.partition_for(G), h.now))
    assert h.fetch(G, [("t", 0)]) == {("t", 0): 3}
    assert not h.core.pending_txn_offsets


def test_replay_of_transactional_records_and_markers() -> None:
    h = Harness()
    txn_commit(h, {("t", 0): 11})
    txn_commit(h, {("t", 0): 12}, producer_id=PID + 1)
    partition = h.core.partition_for(G)
    fresh = GroupCoordinatorCore(h.core.config)
    fresh.begin_loading(partition)
    for record in h.log:
        fresh.replay(record.key, record.value, record.producer_id)
    fresh.replay_txn_marker(PID, True, partition)  # the other producer's transaction is still open
    fresh.finish_loading(partition, h.now)
    response = fresh.offset_fetch(G, [("t", 0)], h.now, True).response
    assert [(p.offset, p.error_code) for p in response.partitions] == [(-1, E.UNSTABLE_OFFSET_COMMIT)]
    assert fresh.offsets.get(G, ("t", 0)).offset == 11
