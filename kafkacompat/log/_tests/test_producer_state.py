"""Idempotent producer state: duplicates, sequence gaps, fencing, snapshots (Kafka's layout)."""

from __future__ import annotations

import os
import struct

import crc32c
import pytest

from kafkacompat.log._tests.helpers import all_records, make_batch
from kafkacompat.log.config import LogConfig
from kafkacompat.log.partition_log import PartitionLog
from kafkacompat.log.producer_state import read_snapshot
from kafkacompat.wire.errors import ErrorCode, KafkaError

NOW = 1_700_000_100_000
PID = 4242


def produce(pl, seq: int, *, epoch: int = 0, pid: int = PID, n: int = 2):
    return pl.append_as_leader(
        make_batch(
            [b"v%d" % (seq + i) for i in range(n)], producer_id=pid, producer_epoch=epoch, base_sequence=seq
        ),
        0,
        NOW,
    )


def test_retried_batch_returns_original_offsets_without_writing(make_log):
    pl = make_log()
    first = produce(pl, 0)
    second = produce(pl, 2)
    size = pl.size_in_bytes
    retry = produce(pl, 0)
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (
        first.base_offset,
        first.last_offset,
    )
    retry2 = produce(pl, 2)
    assert (retry2.base_offset, retry2.last_offset) == (second.base_offset, second.last_offset)
    assert pl.size_in_bytes == size
    assert [r[0] for r in all_records(pl.directory)] == [0, 1, 2, 3]


def test_only_the_last_five_batches_are_remembered(make_log):
    pl = make_log()
    for i in range(7):
        produce(pl, 2 * i)
    assert produce(pl, 4).duplicate  # batch 3 of 7: still among the last five
    with pytest.raises(KafkaError) as err:
        produce(pl, 0)  # batch 1 of 7: forgotten, and not in sequence
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_gap_is_out_of_order_and_writes_nothing(make_log):
    pl = make_log()
    produce(pl, 0)
    with pytest.raises(KafkaError) as err:
        produce(pl, 5)
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert pl.log_end_offset == 2
    assert produce(pl, 2).base_offset == 2


def test_stale_epoch_is_fenced_and_new_epoch_restarts_at_zero(make_log):
    pl = make_log()
    produce(pl, 0, epoch=1)
    with pytest.raises(KafkaError) as err:
        produce(pl, 2, epoch=0)
    assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as err:
        produce(pl, 2, epoch=2)
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(pl, 0, epoch=2).base_offset == 2
    assert produce(pl, 0, epoch=2).duplicate  # same epoch and range: a retry


def test_unknown_producer_starts_fresh_at_any_sequence(make_log):
    pl = make_log()
    assert produce(pl, 17).base_offset == 0
    assert produce(pl, 19).base_offset == 2


def test_two_batches_of_one_producer_in_one_request_are_checked_in_order(make_log):
    pl = make_log()
    request = make_batch([b"a"], producer_id=PID, producer_epoch=0, base_sequence=0) + make_batch(
        [b"b"], producer_id=PID, producer_epoch=0, base_sequence=1
    )
    result = pl.append_as_leader(request, 0, NOW)
    assert (result.base_offset, result.last_offset) == (0, 1)
    bad = make_batch([b"c"], producer_id=PID, producer_epoch=0, base_sequence=2) + make_batch(
        [b"d"], producer_id=PID, producer_epoch=0, base_sequence=9
    )
    with pytest.raises(KafkaError):
        pl.append_as_leader(bad, 0, NOW)
    assert produce(pl, 2, n=1).base_offset == 2  # the rejected request changed no state


def test_snapshot_file_follows_kafkas_layout(make_log):
    pl = make_log()
    produce(pl, 0, n=3)
    pl.producer_state.take_snapshot(pl.log_end_offset, sync=False)
    with open(os.path.join(pl.directory, "00000000000000000003.snapshot"), "rb") as f:
        data = f.read()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1)
    assert crc == crc32c.crc32c(data[6:])
    pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first = struct.unpack_from(
        ">qhiqiqiq", data, 10
    )
    assert (pid, epoch, last_seq, last_offset, delta, coord_epoch, txn_first) == (PID, 0, 2, 2, 2, -1, -1)
    assert ts == 1_700_000_000_002
    assert len(data) == 10 + 46


def test_state_survives_clean_restart_via_snapshot(make_log, tmp_path):
    pl = make_log()
    produce(pl, 0)
    produce(pl, 2)
    pl.close(clean=True)
    reopened = make_log()
    assert reopened.producer_state.producers[PID].last_seq == 3
    assert produce(reopened, 2).duplicate  # the last batch is kept by the snapshot
    assert produce(reopened, 4).base_offset == 4


def test_state_is_rebuilt_after_unclean_shutdown_from_snapshot_and_log(tmp_path):
    config = LogConfig.from_properties({"segment.bytes": "700"})
    d = str(tmp_path / "t-0")
    pl = PartitionLog(d, "t", 0, config, sync=False)
    for i in range(30):
        produce(pl, 2 * i)
    other = make_batch([b"z"], producer_id=7, producer_epoch=3, base_sequence=0)
    pl.append_as_leader(other, 0, NOW)
    assert len(pl.segments) > 2
    pl.close(clean=False)
    reopened = PartitionLog(d, "t", 0, config, clean_shutdown=False, sync=False)
    assert reopened.producer_state.producers[PID].last_seq == 59
    assert reopened.producer_state.producers[7].epoch == 3
    assert produce(reopened, 58).duplicate
    with pytest.raises(KafkaError):
        produce(reopened, 0, pid=7, epoch=2)
    reopened.close(clean=False)
    for name in os.listdir(d):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(d, name))
    rebuilt = PartitionLog(d, "t", 0, config, clean_shutdown=False, sync=False)
    assert rebuilt.producer_state.producers[PID].last_seq == 59
    rebuilt.close(clean=False)


def test_corrupt_snapshot_is_ignored_and_state_replayed(make_log):
    pl = make_log()
    produce(pl, 0)
    pl.close(clean=True)
    (snap,) = [n for n in os.listdir(pl.directory) if n.endswith(".snapshot")]
    path = os.path.join(pl.directory, snap)
    with open(path, "r+b") as f:
        f.seek(12)
        f.write(b"\xff\xff")
    with pytest.raises(ValueError):
        read_snapshot(path)
    reopened = make_log()
    assert reopened.producer_state.producers[PID].last_seq == 1


def test_open_transactions_hold_back_the_last_stable_offset(make_log):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from kafkacompat.wire.records import build_control_batch

    pl = make_log()
    produce(pl, 0)  # offsets 0-1, not transactional
    builder = DefaultRecordBatchBuilder(2, 0, True, 77, 0, 0, batch_size=1 << 20)
    builder.append(0, 1_700_000_000_000, None, b"txn", [])
    assert pl.append_as_leader(bytearray(builder.build()), 0, NOW).base_offset == 2
    pl.update_high_watermark(pl.log_end_offset)
    assert pl.first_unstable_offset() == 2 and pl.last_stable_offset == 2
    marker = bytearray(
        build_control_batch(commit=True, producer_id=77, producer_epoch=0, coordinator_epoch=1, timestamp=NOW)
    )
    with pytest.raises(KafkaError):
        pl.append_as_leader(bytearray(marker), 0, NOW)  # clients may not write markers
    assert pl.append_as_leader(marker, 0, NOW, from_coordinator=True).base_offset == 3
    pl.update_high_watermark(pl.log_end_offset)
    assert pl.first_unstable_offset() is None and pl.last_stable_offset == 4


def txn_batch(pid: int, seq: int, values: list[bytes]) -> bytearray:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, 0, True, pid, 0, seq, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, 1_700_000_000_000 + i, None, value, [])
    return bytearray(builder.build())


def marker(pid: int, commit: bool) -> bytearray:
    from kafkacompat.wire.records import build_control_batch

    return bytearray(
        build_control_batch(
            commit=commit, producer_id=pid, producer_epoch=0, coordinator_epoch=1, timestamp=NOW
        )
    )


def test_aborted_transactions_are_indexed_in_kafkas_txnindex_format(make_log):
    pl = make_log()
    produce(pl, 0)  # 0-1
    pl.append_as_leader(txn_batch(77, 0, [b"a", b"b"]), 0, NOW)  # 2-3
    pl.append_as_leader(txn_batch(88, 0, [b"c"]), 0, NOW)  # 4
    abort_at = pl.append_as_leader(marker(77, commit=False), 0, NOW, from_coordinator=True).base_offset
    commit_at = pl.append_as_leader(marker(88, commit=True), 0, NOW, from_coordinator=True).base_offset
    assert (abort_at, commit_at) == (5, 6)
    expected = [(77, 2, 5, 4)]  # the txn of producer 88 (from offset 4) was still open at the abort
    assert [tuple(e) for e in pl.aborted_transactions(0, 7)] == expected
    assert [tuple(e) for e in pl.aborted_transactions(3, 4)] == expected
    assert pl.aborted_transactions(6, 7) == []
    assert pl.aborted_transactions(0, 2) == []
    path = os.path.join(pl.directory, "00000000000000000000.txnindex")
    with open(path, "rb") as f:
        assert f.read() == struct.pack(">hqqqq", 0, 77, 2, 5, 4)
    from kafkacompat.log._tests.test_dump_log import run_dump

    assert "version: 0 producerId: 77 firstOffset: 2 lastOffset: 5 lastStableOffset: 4\n" in run_dump(path)
    pl.close(clean=False)
    os.unlink(path)
    for name in os.listdir(pl.directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(pl.directory, name))
    recovered = PartitionLog(pl.directory, "t", 0, pl.config, clean_shutdown=False, sync=False)
    assert [tuple(e) for e in recovered.aborted_transactions(0, 7)] == expected
    recovered.truncate_to(5, NOW)
    assert recovered.aborted_transactions(0, 7) == []
    assert recovered.first_unstable_offset() == 2
    recovered.close(clean=False)


def test_markers_record_and_check_the_coordinator_epoch(make_log):
    from kafkacompat.wire.records import build_control_batch

    def epoch_marker(coordinator_epoch: int) -> bytearray:
        return bytearray(
            build_control_batch(
                commit=False,
                producer_id=77,
                producer_epoch=0,
                coordinator_epoch=coordinator_epoch,
                timestamp=NOW,
            )
        )

    pl = make_log()
    pl.append_as_leader(txn_batch(77, 0, [b"a"]), 0, NOW)
    pl.append_as_leader(epoch_marker(3), 0, NOW, from_coordinator=True)
    assert pl.producer_state.producers[77].coordinator_epoch == 3
    with pytest.raises(KafkaError) as fenced:
        pl.append_as_leader(epoch_marker(2), 0, NOW, from_coordinator=True)  # a stale coordinator
    assert fenced.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    pl.append_as_leader(epoch_marker(-1), 0, NOW, from_coordinator=True)  # an admin abort is not checked
    pl.close(clean=False)
    for name in os.listdir(pl.directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(pl.directory, name))
    recovered = PartitionLog(pl.directory, "t", 0, pl.config, clean_shutdown=False, sync=False)
    assert recovered.producer_state.producers[77].coordinator_epoch == 3  # replayed from the markers
    recovered.close(clean=False)
