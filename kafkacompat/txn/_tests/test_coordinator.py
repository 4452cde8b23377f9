"""The transaction coordinator core, driven by numbers (no broker, no clock)."""

from __future__ import annotations

import itertools

from kafkacompat.txn import records as rec
from kafkacompat.txn.coordinator import TransactionCoordinatorCore, TxnConfig, TxnState
from kafkacompat.wire.errors import ErrorCode as E

TP = ("t", 0)


def new_core(**config: int) -> tuple[TransactionCoordinatorCore, itertools.count[int]]:
    core = TransactionCoordinatorCore(TxnConfig(num_partitions=3, **config))
    core.load_empty_partitions(range(3))
    return core, itertools.count(1000)


def init(core: TransactionCoordinatorCore, ids: itertools.count[int], tid: str = "tx", **kw: int):
    outcome = core.init_producer_id(
        tid,
        kw.get("timeout", 60_000),
        kw.get("pid", -1),
        kw.get("epoch", -1),
        kw.get("now", 0),
        lambda: next(ids),
    )
    return outcome.response, outcome


def test_init_bumps_the_epoch_and_persists() -> None:
    core, ids = new_core()
    first, outcome = init(core, ids)
    assert (first.error, first.producer_id, first.producer_epoch) == (E.NONE, 1000, 0)
    [(partition, key, value)] = [(r.partition, r.key, r.value) for r in outcome.records]
    assert partition == core.partition_for("tx") and rec.decode_key(key) == "tx"
    assert rec.decode_value(value).status == TxnState.EMPTY
    second, _ = init(core, ids)
    assert (second.producer_id, second.producer_epoch) == (1000, 1)


def test_commit_writes_prepare_markers_then_complete() -> None:
    core, ids = new_core()
    r, _ = init(core, ids)
    assert core.add_partitions("tx", r.producer_id, 0, [TP, ("u", 1)], 5).response == E.NONE
    assert core.txns["tx"].state == TxnState.ONGOING and core.txns["tx"].start_ms == 5
    end = core.end_txn("tx", r.producer_id, 0, True, 7)
    assert end.response == E.NONE
    [job] = end.markers
    assert job.commit and job.partitions == (TP, ("u", 1)) and job.producer_epoch == 0
    assert rec.decode_value(end.records[0].value).status == TxnState.PREPARE_COMMIT
    # while markers are pending: CONCURRENT_TRANSACTIONS for the same end and for new partitions
    assert core.end_txn("tx", r.producer_id, 0, True, 8).response == E.CONCURRENT_TRANSACTIONS
    assert core.end_txn("tx", r.producer_id, 0, False, 8).response == E.INVALID_TXN_STATE
    assert core.add_partitions("tx", r.producer_id, 0, [TP], 8).response == E.CONCURRENT_TRANSACTIONS
    done = core.markers_written(job, 9)
    assert core.txns["tx"].state == TxnState.COMPLETE_COMMIT and not core.txns["tx"].partitions
    assert rec.decode_value(done.records[0].value).status == TxnState.COMPLETE_COMMIT
    assert core.end_txn("tx", r.producer_id, 0, True, 10).response == E.NONE  # a retry
    assert core.end_txn("tx", r.producer_id, 0, False, 10).response == E.INVALID_TXN_STATE


def test_errors_for_bad_producers_and_timeouts() -> None:
    core, ids = new_core(max_timeout_ms=1000)
    bad, _ = init(core, ids, timeout=1001)
    assert bad.error == E.INVALID_TRANSACTION_TIMEOUT
    assert init(core, ids, timeout=0)[0].error == E.INVALID_TRANSACTION_TIMEOUT
    r, _ = init(core, ids, timeout=1000)
    assert core.add_partitions("nope", r.producer_id, 0, [TP], 0).response == E.INVALID_PRODUCER_ID_MAPPING
    assert core.add_partitions("tx", r.producer_id + 1, 0, [TP], 0).response == E.INVALID_PRODUCER_ID_MAPPING
    assert core.add_partitions("tx", r.producer_id, 3, [TP], 0).response == E.PRODUCER_FENCED
    assert core.end_txn("tx", r.producer_id, 0, True, 0).response == E.INVALID_TXN_STATE  # nothing to end
    assert init(core, ids, tid="")[0].error == E.INVALID_REQUEST


def test_init_during_a_transaction_fences_and_aborts() -> None:
    core, ids = new_core()
    r, _ = init(core, ids)
    core.add_partitions("tx", r.producer_id, 0, [TP], 0)
    fenced, outcome = init(core, ids)
    assert fenced.error == E.CONCURRENT_TRANSACTIONS
    [job] = outcome.markers
    assert not job.commit and job.producer_epoch == 1  # the abort carries the bumped epoch
    assert core.add_partitions("tx", r.producer_id, 0, [TP], 1).response == E.PRODUCER_FENCED
    core.markers_written(job, 2)
    again, _ = init(core, ids)
    assert (again.error, again.producer_id, again.producer_epoch) == (E.NONE, r.producer_id, 2)


def test_kip_360_recovery_and_retry() -> None:
    core, ids = new_core()
    r, _ = init(core, ids)
    bumped, _ = init(core, ids, pid=r.producer_id, epoch=0)
    assert (bumped.error, bumped.producer_epoch) == (E.NONE, 1)
    retry, _ = init(core, ids, pid=r.producer_id, epoch=0)  # the answer got lost: same answer again
    assert (retry.error, retry.producer_epoch) == (E.NONE, 1)
    assert init(core, ids, pid=r.producer_id + 7, epoch=0)[0].error == E.PRODUCER_FENCED


def test_epoch_exhaustion_takes_a_new_producer_id() -> None:
    core, ids = new_core()
    init(core, ids)
    core.txns["tx"].producer_epoch = 32766
    r, _ = init(core, ids)
    assert (r.producer_id, r.producer_epoch) == (1001, 0)


def test_timeout_aborts_with_a_bumped_epoch() -> None:
    core, ids = new_core(abort_check_interval_ms=100)
    r, _ = init(core, ids, timeout=1000)
    core.add_partitions("tx", r.producer_id, 0, [TP], 1000)
    assert not core.tick(1500).markers
    outcome = core.tick(2100)
    [job] = outcome.markers
    assert not job.commit and job.producer_epoch == 1
    assert core.txns["tx"].state == TxnState.PREPARE_ABORT


def test_idle_ids_expire_with_a_tombstone() -> None:
    core, ids = new_core(id_expiration_ms=1000, expire_check_interval_ms=10)
    init(core, ids, now=0)
    outcome = core.tick(2000)
    assert "tx" not in core.txns
    assert [(r.key, r.value) for r in outcome.records] == [(rec.encode_key("tx"), None)]


def test_replay_restores_state_and_resends_markers() -> None:
    core, ids = new_core()
    r, first = init(core, ids)
    added = core.add_partitions("tx", r.producer_id, 0, [TP], 1)
    ended = core.end_txn("tx", r.producer_id, 0, False, 2)
    log = first.records + added.records + ended.records
    fresh = TransactionCoordinatorCore(TxnConfig(num_partitions=3))
    partition = fresh.partition_for("tx")
    fresh.begin_loading(partition)
    assert init(fresh, ids)[0].error == E.COORDINATOR_LOAD_IN_PROGRESS
    for record in log:
        fresh.replay(record.key, record.value)
    loaded = fresh.finish_loading(partition, 3)
    [job] = loaded.markers
    assert not job.commit and job.partitions == (TP,) and job.producer_id == r.producer_id
    meta = fresh.txns["tx"]
    assert (meta.state, meta.producer_epoch, meta.partitions) == (TxnState.PREPARE_ABORT, 0, {TP})


def test_list_and_describe() -> None:
    core, ids = new_core()
    r, _ = init(core, ids)
    core.add_partitions("tx", r.producer_id, 0, [TP], 10)
    init(core, ids, tid="idle")
    unknown, listed = core.list_transactions(["Ongoing", "Bogus"], [], -1, 20).response
    assert unknown == ["Bogus"] and listed == [("tx", r.producer_id, "Ongoing")]
    assert [t for t, _, _ in core.list_transactions([], [], 5, 20).response[1]] == ["tx"]
    assert core.list_transactions([], [], 50, 20).response[1] == []
    [described, missing] = core.describe_transactions(["tx", "missing"]).response
    assert (described.state, described.partitions, described.start_ms) == ("Ongoing", [TP], 10)
    assert missing.error == E.TRANSACTIONAL_ID_NOT_FOUND
    assert core.verify_partitions("tx", r.producer_id, 0, [TP, ("x", 0)]) == {
        TP: E.NONE,
        ("x", 0): E.INVALID_TXN_STATE,
    }


def test_leader_epoch_is_the_coordinator_epoch_and_unloading_forgets() -> None:
    """Cluster mode: a partition loaded at leader epoch 7 writes markers with coordinator epoch 7; once
    unloaded (leadership moved) its transactional ids answer NOT_COORDINATOR and are forgotten."""
    core, ids = new_core()
    partition = core.partition_for("tx")
    core.unload_partition(partition)
    assert "tx" not in core.txns and init(core, ids)[0].error == E.NOT_COORDINATOR
    core.begin_loading(partition, 7)
    core.finish_loading(partition, 0)
    r, _ = init(core, ids)
    core.add_partitions("tx", r.producer_id, r.producer_epoch, [TP], 1)
    [job] = core.end_txn("tx", r.producer_id, r.producer_epoch, True, 2).markers
    assert job.coordinator_epoch == 7
    core.unload_partition(partition)
    assert "tx" not in core.txns
    assert core.end_txn("tx", r.producer_id, r.producer_epoch, True, 3).response == E.NOT_COORDINATOR
    # a timed-out transaction of a partition no longer owned is not aborted by this coordinator
    assert core.tick(10**9).markers == []
