"""Compaction: latest value per key, offsets kept, tombstones, producer batches, crash between renames."""

from __future__ import annotations

import os

from kafkacompat.log._tests.helpers import all_records, make_batch, parse_log_file, segment_logs
from kafkacompat.log._tests.test_partition_log import parse_log_file_bytes
from kafkacompat.log.cleaner import CleanPlan, clean_log
from kafkacompat.log.config import LogConfig
from kafkacompat.log.partition_log import PartitionLog

NOW = 1_700_000_100_000
TS = 1_700_000_000_000
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "2500", "file.delete.delay.ms": "0"}


def fill(pl, rounds: int, keys: int = 8, *, tombstone: bytes | None = None):
    """Round r writes key i with value b"r:i" (two records per batch); returns {key: (offset, value)}."""
    latest = {}
    for r in range(rounds):
        for i in range(0, keys, 2):
            ks = [b"k%d" % i, b"k%d" % (i + 1)]
            vs = [b"%d:%d" % (r, i) + b"x" * 60, b"%d:%d" % (r, i + 1) + b"x" * 60]
            result = pl.append_as_leader(make_batch(vs, keys=ks, timestamp=TS), 0, NOW)
            for j in range(2):
                latest[ks[j]] = (result.base_offset + j, vs[j])
    return latest


def records_by_key(directory: str) -> dict[bytes, list[tuple[int, bytes | None]]]:
    out: dict[bytes, list[tuple[int, bytes | None]]] = {}
    for path in segment_logs(directory):
        for batch in parse_log_file(path):
            for record in batch:
                out.setdefault(record.key, []).append((record.offset, record.value))
    return out


def test_compaction_keeps_the_latest_value_of_each_key_at_its_offset(make_log):
    pl = make_log(CONFIG)
    latest = fill(pl, 12)
    pl.update_high_watermark(pl.log_end_offset)
    before_segments = [s.base_offset for s in pl.segments]
    size_before = pl.size_in_bytes
    stats = clean_log(pl, NOW)
    pl.run_pending_deletes(NOW)
    assert stats.records_removed > 0 and pl.size_in_bytes < size_before
    assert [s.base_offset for s in pl.segments] == before_segments  # offsets and segment bases kept
    by_key = records_by_key(pl.directory)
    active_base = pl.active_segment.base_offset
    for key, (offset, value) in latest.items():
        in_clean_part = [(o, v) for o, v in by_key[key] if o < active_base]
        assert len(in_clean_part) <= 1  # at most the latest of the cleaned range survives
        assert by_key[key][-1] == (offset, value)  # the newest value is never lost
    offsets = [o for o, _, _ in all_records(pl.directory)]
    assert offsets == sorted(offsets)
    for offset in range(pl.log_start_offset, pl.log_end_offset, 3):
        result = pl.read(offset, 1 << 20)
        (first_batch, *_) = parse_log_file_bytes(result.slices[0].read_bytes())
        assert first_batch.last_offset >= offset  # the batch holding the offset, or the next one left
    pl.close(clean=True)
    reopened = make_log(CONFIG)
    assert reopened.log_end_offset == pl.log_end_offset
    assert not [n for n in os.listdir(reopened.directory) if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_tombstones_survive_until_delete_retention_then_go(make_log):
    pl = make_log(dict(CONFIG, **{"delete.retention.ms": "1000"}))
    fill(pl, 3)
    tombstone_at = pl.append_as_leader(make_batch([None], keys=[b"k5"], timestamp=TS), 0, NOW).base_offset
    fill(pl, 2, keys=4)
    pl.roll(NOW)
    pl.update_high_watermark(pl.log_end_offset)
    clean_log(pl, TS + 500)  # the tombstone is younger than delete.retention.ms: it stays, alone
    pl.run_pending_deletes(NOW)
    assert records_by_key(pl.directory)[b"k5"] == [(tombstone_at, None)]
    clean_log(pl, TS + 5000)  # now past delete.retention.ms
    pl.run_pending_deletes(NOW)
    by_key = records_by_key(pl.directory)
    assert b"k5" not in by_key
    assert len(by_key[b"k6"]) == 1 and by_key[b"k6"][0][1].startswith(b"2:6")


def test_last_batch_of_a_producer_stays_so_its_state_can_be_rebuilt(make_log):
    pl = make_log(CONFIG)
    for seq in range(0, 20, 2):
        pl.append_as_leader(
            make_batch(
                [b"a" * 80, b"b" * 80],
                keys=[b"same", b"same"],
                producer_id=9,
                producer_epoch=0,
                base_sequence=seq,
            ),
            0,
            NOW,
        )
    fill(pl, 4)
    pl.roll(NOW)
    pl.update_high_watermark(pl.log_end_offset)
    clean_log(pl, NOW)
    pl.run_pending_deletes(NOW)
    producer_batches = [
        b for p in segment_logs(pl.directory) for b in parse_log_file(p) if b.producer_id == 9
    ]
    assert producer_batches[-1].base_sequence == 18 and producer_batches[-1].last_offset == 19
    pl.close(clean=False)
    for name in os.listdir(pl.directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(pl.directory, name))
    reopened = PartitionLog(
        pl.directory, "t", 0, LogConfig.from_properties(CONFIG), clean_shutdown=False, sync=False
    )
    assert reopened.producer_state.producers[9].last_seq == 19
    reopened.close(clean=False)


def test_only_segments_below_the_high_watermark_are_cleaned(make_log):
    pl = make_log(CONFIG)
    fill(pl, 12)
    pl.update_high_watermark(pl.segments[2].base_offset)
    plan = CleanPlan.prepare(pl, NOW)
    assert [s.base_offset for s in plan.segments] == [s.base_offset for s in pl.segments[:2]]


def test_interrupted_swap_is_resolved_on_load(make_log):
    pl = make_log(CONFIG)
    fill(pl, 12)
    pl.update_high_watermark(pl.log_end_offset)
    plan = CleanPlan.prepare(pl, NOW)
    plan.build()
    first = pl.segments[0]
    cleaned = plan.outputs[first.base_offset]
    with open(cleaned, "rb") as f:
        expected = f.read()
    pl.close(clean=False)
    # crash after the old segment was renamed away and before the swap became the .log
    os.rename(cleaned, first.log_path + ".swap")
    os.rename(first.log_path, first.log_path + ".deleted")
    for base, other in plan.outputs.items():
        if base != first.base_offset:
            os.unlink(other)  # the other segments: crash before their swap (the .cleaned go at load anyway)
    reopened = PartitionLog(
        pl.directory, "t", 0, LogConfig.from_properties(CONFIG), clean_shutdown=False, sync=False
    )
    with open(first.log_path, "rb") as f:
        assert f.read() == expected
    assert reopened.load_report.damage
    reopened.close(clean=False)


def test_aborted_transactions_are_removed_committed_ones_compacted_markers_kept(make_log):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from kafkacompat.wire.records import build_control_batch

    def txn(pid: int, seq: int, key: bytes, value: bytes) -> bytearray:
        builder = DefaultRecordBatchBuilder(2, 0, True, pid, 0, seq, batch_size=1 << 20)
        builder.append(0, TS, key, value, [])
        return bytearray(builder.build())

    def marker(pid: int, commit: bool) -> bytearray:
        return bytearray(
            build_control_batch(
                commit=commit, producer_id=pid, producer_epoch=0, coordinator_epoch=0, timestamp=TS
            )
        )

    pl = make_log(CONFIG)
    aborted_at = pl.append_as_leader(txn(7, 0, b"a", b"aborted-1"), 0, NOW).base_offset
    pl.append_as_leader(txn(7, 1, b"b", b"aborted-2"), 0, NOW)
    pl.append_as_leader(txn(8, 0, b"c", b"committed"), 0, NOW)
    pl.append_as_leader(txn(8, 1, b"d", b"overwritten-later"), 0, NOW)
    pl.append_as_leader(marker(7, commit=False), 0, NOW, from_coordinator=True)
    pl.append_as_leader(marker(8, commit=True), 0, NOW, from_coordinator=True)
    pl.append_as_leader(make_batch([b"plain-d"], keys=[b"d"], timestamp=TS), 0, NOW)
    fill(pl, 4)
    pl.roll(NOW)
    pl.update_high_watermark(pl.log_end_offset)
    aborted_entries = pl.aborted_transactions(0, pl.log_end_offset)
    assert [(a.producer_id, a.first_offset) for a in aborted_entries] == [(7, aborted_at)]
    stats = clean_log(pl, NOW)
    pl.run_pending_deletes(NOW)
    assert stats.records_removed >= 3
    values = [v for _, _, v in all_records(pl.directory)]
    assert b"aborted-1" not in values and b"aborted-2" not in values and b"committed" in values
    # committed transactional records take part in compaction like any other
    assert b"overwritten-later" not in values and b"plain-d" in values
    batches = [b for p in segment_logs(pl.directory) for b in parse_log_file(p)]
    assert sum(1 for b in batches if b.is_control_batch) == 2  # both markers stay
    assert pl.aborted_transactions(0, pl.log_end_offset) == aborted_entries  # the index stays


def test_markers_go_once_their_transaction_is_gone_and_delete_retention_passed(make_log):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from kafkacompat.wire.records import build_control_batch

    def txn(seq: int, key: bytes, value: bytes) -> bytearray:
        builder = DefaultRecordBatchBuilder(2, 0, True, 7, 0, seq, batch_size=1 << 20)
        builder.append(0, TS, key, value, [])
        return bytearray(builder.build())

    def marker(commit: bool) -> bytearray:
        return bytearray(
            build_control_batch(
                commit=commit, producer_id=7, producer_epoch=0, coordinator_epoch=0, timestamp=TS
            )
        )

    def markers() -> list[int]:
        batches = [b for p in segment_logs(pl.directory) for b in parse_log_file(p)]
        return [b.base_offset for b in batches if b.is_control_batch]

    pl = make_log({**CONFIG, "delete.retention.ms": "1000"})
    pl.append_as_leader(txn(0, b"a", b"aborted"), 0, NOW)
    abort_at = pl.append_as_leader(marker(False), 0, NOW, from_coordinator=True).base_offset
    pl.append_as_leader(txn(1, b"k0", b"overwritten"), 0, NOW)
    spent_at = pl.append_as_leader(marker(True), 0, NOW, from_coordinator=True).base_offset
    pl.append_as_leader(txn(2, b"kept", b"kept"), 0, NOW)
    last_at = pl.append_as_leader(marker(True), 0, NOW, from_coordinator=True).base_offset
    fill(pl, 4)  # overwrites k0
    pl.roll(NOW)
    pl.update_high_watermark(pl.log_end_offset)
    assert [a.last_offset for a in pl.aborted_transactions(0, pl.log_end_offset)] == [abort_at]

    # the pass that removes the aborted and overwritten records keeps their markers (it read them)
    clean_log(pl, NOW)
    pl.run_pending_deletes(NOW)
    assert markers() == [abort_at, spent_at, last_at]
    # a later pass within delete.retention.ms of the segment's timestamps keeps them too
    clean_log(pl, TS + 10)
    assert markers() == [abort_at, spent_at, last_at]
    # past it they go, with the .txnindex entry of the ABORT marker; the marker of a transaction with
    # records left (here also the producer's last batch) stays
    clean_log(pl, NOW)
    pl.run_pending_deletes(NOW)
    assert markers() == [last_at]
    assert pl.aborted_transactions(0, pl.log_end_offset) == []
    values = [v for _, _, v in all_records(pl.directory)]
    assert b"kept" in values and b"aborted" not in values and b"overwritten" not in values
