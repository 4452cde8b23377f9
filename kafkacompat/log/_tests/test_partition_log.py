"""Append, read, index, roll, retention, truncation: checked against kafka-python's reading of our files."""

from __future__ import annotations

import itertools
import os
import struct

import pytest

from kafkacompat.log._tests.helpers import (
    all_records,
    batch_positions,
    make_batch,
    parse_log_file,
    segment_logs,
)
from kafkacompat.log.file_slice import FileSlice
from kafkacompat.log.partition_log import PartitionLog
from kafkacompat.wire.errors import ErrorCode, KafkaError

NOW = 1_700_000_100_000


def fill(pl, batches: int, records_per_batch: int = 5, value_size: int = 100, ts: int = 1_700_000_000_000):
    results = []
    for i in range(batches):
        values = [bytes([65 + (i + j) % 26]) * value_size for j in range(records_per_batch)]
        results.append(pl.append_as_leader(make_batch(values, timestamp=ts + i * 10), 3, NOW))
    return results


def check_indexes_against_log(pl, interval: int) -> None:
    """Index entries where Kafka's rule puts them; time index increasing and pointing at real batches."""
    pl.flush()  # index entries reach the files at flush
    for log_path in segment_logs(pl.directory):
        base = int(os.path.basename(log_path)[:-4])
        batches = batch_positions(log_path)
        expected = []
        since = 0
        max_ts, max_ts_offset = -1, base
        expected_time = []
        raw_batches = {b.base_offset: b for b in parse_log_file(log_path)}
        for position, size, base_offset, last_offset in batches:
            batch_max_ts = raw_batches[base_offset].max_timestamp
            if batch_max_ts > max_ts:
                max_ts, max_ts_offset = batch_max_ts, last_offset
            if since > interval:
                expected.append((last_offset - base, position))
                if not expected_time or max_ts > expected_time[-1][0]:
                    expected_time.append((max_ts, max_ts_offset - base))
                since = 0
            since += size
        with open(log_path[:-4] + ".index", "rb") as f:
            data = f.read()
        assert [e for e in struct.iter_unpack(">ii", data)] == expected
        with open(log_path[:-4] + ".timeindex", "rb") as f:
            tdata = f.read()
        time_entries = list(struct.iter_unpack(">qi", tdata))
        # the index may end with one extra entry written at roll/close: the segment's max timestamp
        assert time_entries[: len(expected_time)] == expected_time
        assert all(a[0] < b[0] for a, b in itertools.pairwise(time_entries))
        if len(time_entries) > len(expected_time):
            assert time_entries[-1] == (max_ts, max_ts_offset - base)


def test_appended_files_parse_with_kafka_python_and_offsets_are_contiguous(make_log):
    pl = make_log({"segment.bytes": "20000"})
    results = fill(pl, 120)
    assert [r.base_offset for r in results] == list(range(0, 600, 5))
    assert all(r.last_offset == r.base_offset + 4 and r.records_count == 5 for r in results)
    assert len(pl.segments) > 3
    records = all_records(pl.directory)
    assert [r[0] for r in records] == list(range(600))
    for path in segment_logs(pl.directory):
        batches = parse_log_file(path)
        assert int(os.path.basename(path)[:-4]) == batches[0].base_offset
        assert all(b.leader_epoch == 3 for b in batches)
    assert pl.log_end_offset == 600
    check_indexes_against_log(pl, 4096)


def test_index_entries_follow_the_interval_rule_for_small_batches(make_log):
    pl = make_log({"index.interval.bytes": "1000"})
    fill(pl, 300, records_per_batch=2, value_size=50)
    pl.active_segment.on_become_inactive()
    check_indexes_against_log(pl, 1000)
    assert pl.active_segment.offset_index.entries > 10


def test_read_returns_whole_batches_from_the_one_holding_the_offset(make_log):
    pl = make_log()
    fill(pl, 20)
    positions = batch_positions(segment_logs(pl.directory)[0])
    batch_size = positions[0][1]
    result = pl.read(7, batch_size * 3 + 10)
    assert result.first_offset == 5
    assert len(result.slices) == 1 and isinstance(result.slices[0], FileSlice)
    data = result.slices[0].read_bytes()
    assert len(data) == result.size == 3 * batch_size
    from kafka.record.memory_records import MemoryRecords

    mr = MemoryRecords(data)
    offsets = []
    while mr.has_next():
        offsets.extend(r.offset for r in mr.next_batch())
    assert offsets == list(range(5, 20))


def test_read_gives_one_batch_larger_than_max_bytes_only_with_min_one_batch(make_log):
    pl = make_log()
    fill(pl, 3)
    size = batch_positions(segment_logs(pl.directory)[0])[0][1]
    assert pl.read(0, 10).size == size
    assert pl.read(0, 10, min_one_batch=False).slices == []


def test_read_respects_upper_bound_and_range(make_log):
    pl = make_log()
    fill(pl, 10)
    positions = batch_positions(segment_logs(pl.directory)[0])
    result = pl.read(0, 1 << 20, upper_bound_offset=20)
    assert result.size == sum(p[1] for p in positions[:4])
    assert pl.read(20, 1 << 20, upper_bound_offset=20).slices == []
    assert pl.read(50, 1 << 20).slices == []  # at the log end: empty, not an error
    with pytest.raises(KafkaError) as err:
        pl.read(51, 100)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_read_crosses_into_the_next_segment_when_the_offset_is_past_a_segment(make_log):
    pl = make_log({"segment.bytes": "3000"})
    fill(pl, 20)
    for offset in range(0, 100, 7):
        result = pl.read(offset, 1 << 20)
        first = parse_log_file_bytes(result.slices[0].read_bytes())[0]
        assert first.base_offset <= offset <= first.last_offset


def parse_log_file_bytes(data: bytes):
    from kafka.record.memory_records import MemoryRecords

    mr = MemoryRecords(data)
    out = []
    while mr.has_next():
        out.append(mr.next_batch())
    return out


def test_a_corrupt_batch_rejects_the_whole_request_and_writes_nothing(make_log):
    pl = make_log()
    fill(pl, 2)
    before = os.path.getsize(segment_logs(pl.directory)[0])
    good = make_batch([b"x"])
    bad = make_batch([b"y"])
    bad[-1] ^= 0xFF
    with pytest.raises(KafkaError) as err:
        pl.append_as_leader(good + bad, 3, NOW)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as err:
        pl.append_as_leader(good + bad[:-5], 3, NOW)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    assert os.path.getsize(segment_logs(pl.directory)[0]) == before
    assert pl.log_end_offset == 10


def test_size_limits(make_log):
    pl = make_log({"max.message.bytes": "1000", "segment.bytes": "5000"})
    with pytest.raises(KafkaError) as err:
        pl.append_as_leader(make_batch([b"x" * 2000]), 0, NOW)
    assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
    many = b"".join(make_batch([b"x" * 500]) for _ in range(12))
    with pytest.raises(KafkaError) as err:
        pl.append_as_leader(bytearray(many), 0, NOW)
    assert err.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert pl.log_end_offset == 0


def test_client_batches_must_have_base_offset_zero_and_matching_count(make_log):
    pl = make_log()
    batch = make_batch([b"a", b"b"])
    struct.pack_into(">q", batch, 0, 7)
    with pytest.raises(KafkaError) as err:
        pl.append_as_leader(batch, 0, NOW)
    assert err.value.code == ErrorCode.INVALID_RECORD


def test_timestamp_limits(make_log):
    pl = make_log({"message.timestamp.before.max.ms": "1000", "message.timestamp.after.max.ms": "1000"})
    with pytest.raises(KafkaError) as err:
        pl.append_as_leader(make_batch([b"a"], timestamp=NOW - 5000), 0, NOW)
    assert err.value.code == ErrorCode.INVALID_TIMESTAMP
    with pytest.raises(KafkaError) as err:
        pl.append_as_leader(make_batch([b"a"], timestamp=NOW + 5000), 0, NOW)
    assert err.value.code == ErrorCode.INVALID_TIMESTAMP
    assert pl.append_as_leader(make_batch([b"a"], timestamp=NOW - 500), 0, NOW).base_offset == 0


def test_log_append_time_rewrites_max_timestamp_with_a_valid_crc(make_log):
    pl = make_log({"message.timestamp.type": "LogAppendTime"})
    result = pl.append_as_leader(make_batch([b"a", b"b"], timestamp=5), 0, NOW)
    assert result.log_append_time == NOW
    (batch,) = parse_log_file(segment_logs(pl.directory)[0])
    assert batch.timestamp_type == 1 and batch.max_timestamp == NOW
    assert [r.timestamp for r in batch] == [NOW, NOW]


def test_compressed_batches_are_stored_as_sent(make_log):
    pl = make_log()
    sent = make_batch([b"hello" * 50] * 10, compression="gzip")
    original_tail = bytes(sent[12:16]) + bytes(sent[17:])  # everything but base offset and epoch
    pl.append_as_leader(bytearray(sent), 0, NOW)
    with open(segment_logs(pl.directory)[0], "rb") as f:
        stored = f.read()
    assert len(stored) == len(sent)
    assert stored[17:] == original_tail[4:]
    assert [r.value for r in parse_log_file(segment_logs(pl.directory)[0])[0]] == [b"hello" * 50] * 10


def test_roll_on_segment_ms_and_full_index(make_log):
    pl = make_log({"segment.ms": "1000"})
    # segment.ms is measured in record time, from the first batch of the segment (Kafka's rule)
    pl.append_as_leader(make_batch([b"a"], timestamp=NOW), 0, NOW)
    pl.append_as_leader(make_batch([b"b"], timestamp=NOW + 900), 0, NOW + 5000)
    assert len(pl.segments) == 1
    pl.append_as_leader(make_batch([b"c"], timestamp=NOW + 1500), 0, NOW + 5000)
    assert [s.base_offset for s in pl.segments] == [0, 2]

    pl2 = make_log({"segment.index.bytes": "24", "index.interval.bytes": "10"}, name="u-0")
    fill(pl2, 12)
    assert len(pl2.segments) >= 3
    assert all(s.offset_index.entries <= 3 for s in pl2.segments)
    assert [r[0] for r in all_records(pl2.directory)] == list(range(60))


def test_roll_writes_producer_snapshot_at_the_new_base(make_log):
    pl = make_log({"segment.bytes": "2000"})
    pl.append_as_leader(make_batch([b"x" * 800], producer_id=9, producer_epoch=0, base_sequence=0), 0, NOW)
    pl.append_as_leader(make_batch([b"x" * 800], producer_id=9, producer_epoch=0, base_sequence=1), 0, NOW)
    pl.append_as_leader(make_batch([b"x" * 800], producer_id=9, producer_epoch=0, base_sequence=2), 0, NOW)
    assert len(pl.segments) == 2
    assert os.path.exists(os.path.join(pl.directory, f"{pl.segments[1].base_offset:020d}.snapshot"))


def test_retention_by_time_deletes_whole_old_segments_below_the_high_watermark(make_log):
    pl = make_log({"segment.bytes": "3000", "retention.ms": "10000", "file.delete.delay.ms": "500"})
    old_ts = NOW - 60_000
    for i in range(10):
        pl.append_as_leader(make_batch([b"o" * 300] * 2, timestamp=old_ts + i), 0, NOW)
    for i in range(10):
        pl.append_as_leader(make_batch([b"n" * 300] * 2, timestamp=NOW + i), 0, NOW)
    segments_before = [s.base_offset for s in pl.segments]
    assert pl.delete_old_segments(NOW) == 0  # nothing below the high watermark yet
    pl.update_high_watermark(pl.log_end_offset)
    deleted = pl.delete_old_segments(NOW)
    assert deleted >= 1
    assert pl.log_start_offset == pl.segments[0].base_offset == segments_before[deleted]
    remaining_first = parse_log_file(segment_logs(pl.directory)[0])[0]
    assert remaining_first.base_offset == pl.log_start_offset
    deleted_files = [n for n in os.listdir(pl.directory) if n.endswith(".deleted")]
    assert len(deleted_files) == 3 * deleted
    assert pl.run_pending_deletes(NOW + 100) == 0
    assert pl.run_pending_deletes(NOW + 500) == deleted
    assert not [n for n in os.listdir(pl.directory) if n.endswith(".deleted")]
    with pytest.raises(KafkaError):
        pl.read(0, 100)


def test_retention_deletes_the_active_segment_by_rolling_first(make_log):
    pl = make_log({"retention.ms": "1000", "file.delete.delay.ms": "0"})
    pl.append_as_leader(make_batch([b"a"], timestamp=NOW - 5000), 0, NOW)
    pl.update_high_watermark(pl.log_end_offset)
    assert pl.delete_old_segments(NOW) == 1
    assert pl.log_start_offset == pl.log_end_offset == 1
    assert pl.append_as_leader(make_batch([b"b"], timestamp=NOW), 0, NOW).base_offset == 1


def test_retention_by_size(make_log):
    pl = make_log({"segment.bytes": "3000", "retention.bytes": "7000"})
    fill(pl, 40)
    pl.update_high_watermark(pl.log_end_offset)
    total = pl.size_in_bytes
    deleted = pl.delete_old_segments(NOW)
    assert deleted >= 1
    assert pl.size_in_bytes < total
    # Kafka's rule: drop the oldest segment while the log stays at or above retention.bytes without it
    assert pl.size_in_bytes >= 7000
    assert pl.size_in_bytes - pl.segments[0].size < 7000


def test_delete_records_moves_log_start_and_drops_covered_segments(make_log):
    pl = make_log({"segment.bytes": "3000", "file.delete.delay.ms": "0"})
    fill(pl, 30)
    pl.update_high_watermark(100)
    with pytest.raises(KafkaError) as err:
        pl.delete_records_before(101, NOW)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    new_start = pl.delete_records_before(42, NOW)
    assert new_start == pl.log_start_offset == 42
    assert pl.segments[0].base_offset <= 42 < pl.segments[0].next_offset
    with pytest.raises(KafkaError):
        pl.read(41, 100)
    assert pl.read(42, 100).first_offset == 40  # the batch holding 42 starts at 40
    assert pl.delete_records_before(-1, NOW) == 100


def test_truncate_to_removes_everything_from_the_offset(make_log):
    pl = make_log({"segment.bytes": "3000", "file.delete.delay.ms": "0"})
    fill(pl, 30)
    pl.update_high_watermark(150)
    assert pl.truncate_to(55, NOW)
    assert pl.log_end_offset == 55
    assert pl.high_watermark == 55
    pl.run_pending_deletes(NOW)
    assert [r[0] for r in all_records(pl.directory)] == list(range(55))
    check_indexes_against_log(pl, 4096)
    assert pl.append_as_leader(make_batch([b"z"]), 4, NOW).base_offset == 55
    assert pl.end_offset_for_epoch(3) == (3, 55)
    assert pl.end_offset_for_epoch(4) == (4, 56)
    pl.truncate_to(0, NOW)
    assert pl.log_end_offset == 0 and pl.read(0, 100).slices == []


def test_offset_for_timestamp_and_max_timestamp(make_log):
    pl = make_log({"segment.bytes": "2000"})
    fill(pl, 20, ts=1000)  # batch i holds timestamps 1000 + 10 i + (0..4)
    assert pl.offset_for_timestamp(1000) == (0, 1000)
    assert pl.offset_for_timestamp(1052) == (27, 1052)
    assert pl.offset_for_timestamp(1056) == (30, 1060)  # the first record at or after the target
    assert pl.offset_for_timestamp(99999) is None
    assert pl.max_timestamp_offset() == (99, 1194)
    assert pl.offset_for_timestamp(1052, upper_bound_offset=20) is None


def test_follower_append_keeps_offsets_and_epochs(make_log):
    leader = make_log(name="l-0")
    fill(leader, 5)
    follower = make_log(name="f-0")
    data = leader.read(0, 1 << 20).slices[0].read_bytes()
    result = follower.append_as_follower(data, NOW)
    assert (result.base_offset, result.last_offset) == (0, 24)
    with open(segment_logs(follower.directory)[0], "rb") as f:
        assert f.read() == data
    assert follower.leader_epochs.entries == [(3, 0)]
    with pytest.raises(KafkaError):
        follower.append_as_follower(data, NOW)  # offsets below the log end


def test_flush_advances_recovery_point_and_flush_policy(make_log):
    pl = make_log({"flush.messages": "10", "flush.ms": "1000"}, now_ms=NOW)
    fill(pl, 1)
    assert not pl.flush_needed(NOW)
    assert pl.flush_needed(NOW + 1000)
    fill(pl, 1)
    assert pl.flush_needed(NOW)
    assert pl.flush(NOW) == 10 == pl.recovery_point
    assert not pl.flush_needed(NOW + 5000)


def test_storage_error_takes_only_that_log_offline(make_log):
    broken = make_log(name="a-0")
    healthy = make_log(name="b-0")
    fill(broken, 1)
    os.close(broken.active_segment.fd)  # the disk "fails" under this log
    with pytest.raises(KafkaError) as err:
        fill(broken, 1)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    with pytest.raises(KafkaError) as err:
        broken.read(0, 100)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    broken.active_segment.fd = -1
    assert fill(healthy, 1)[0].base_offset == 0


def test_flush_in_a_worker_thread_while_appending(make_log):
    import threading

    pl = make_log({"segment.bytes": "20000", "index.interval.bytes": "500"})
    stop = threading.Event()
    errors: list[BaseException] = []
    points: list[int] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                points.append(pl.flush())
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        fill(pl, 300)
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert points == sorted(points) and points[-1] <= pl.log_end_offset
    assert pl.flush() == pl.log_end_offset == 1500
    check_indexes_against_log(pl, 500)


def test_topic_compression_type_recompresses_keeping_records_and_producer_fields(make_log):
    pl = make_log({"compression.type": "gzip"})
    sent = make_batch(
        [b"a" * 300, b"b" * 300, b"c"],
        keys=[b"k1", None, b"k3"],
        producer_id=5,
        producer_epoch=1,
        base_sequence=0,
        headers=[("h", b"1")],
    )
    result = pl.append_as_leader(sent, 2, NOW)
    assert (result.base_offset, result.last_offset) == (0, 2)
    (batch,) = parse_log_file(segment_logs(pl.directory)[0])
    assert batch.compression_type == 1
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 1, 0)
    records = list(batch)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (0, b"k1", b"a" * 300, 1_700_000_000_000),
        (1, None, b"b" * 300, 1_700_000_000_001),
        (2, b"k3", b"c", 1_700_000_000_002),
    ]
    assert [list(r.headers) for r in records] == [[("h", b"1")]] * 3
    plain = make_log({"compression.type": "uncompressed"}, name="p-0")
    plain.append_as_leader(make_batch([b"z" * 100] * 3, compression="gzip"), 0, NOW)
    (batch,) = parse_log_file(segment_logs(plain.directory)[0])
    assert batch.compression_type == 0 and [r.value for r in batch] == [b"z" * 100] * 3


def test_compacted_topics_require_keys(make_log):
    pl = make_log({"cleanup.policy": "compact"})
    with pytest.raises(KafkaError) as err:
        pl.append_as_leader(make_batch([b"a", b"b"], keys=[b"k", None]), 0, NOW)
    assert err.value.code == ErrorCode.INVALID_RECORD
    assert pl.append_as_leader(make_batch([b"a"], keys=[b"k"]), 0, NOW).base_offset == 0


def test_reads_of_segments_untouched_since_a_clean_start_respect_the_upper_bound(make_log):
    pl = make_log({"segment.bytes": "3000"})
    fill(pl, 30)
    pl.close(clean=True)
    reopened = make_log({"segment.bytes": "3000"})
    assert len(reopened.segments) > 3
    second = reopened.segments[1]
    bound = second.base_offset + 5  # a high watermark inside an old segment
    result = reopened.read(second.base_offset, 1 << 20, upper_bound_offset=bound)
    batches = parse_log_file_bytes(result.slices[0].read_bytes())
    assert batches[0].base_offset == second.base_offset
    assert batches[-1].last_offset < bound


def test_roll_when_offsets_would_overflow_the_relative_index(make_log):
    leader = make_log(name="l-0")
    fill(leader, 2)
    data = bytearray(leader.read(0, 1 << 20).slices[0].read_bytes())
    follower = make_log(name="f-0")
    follower.append_as_follower(data[: len(data) // 2], NOW)  # offsets 0-4
    far = 2**31 + 10  # a replicated batch (e.g. after compaction) far beyond the segment base
    second = bytearray(data[len(data) // 2 :])
    struct.pack_into(">q", second, 0, far)
    result = follower.append_as_follower(second, NOW)
    assert result.base_offset == far
    assert [s.base_offset for s in follower.segments] == [0, far]
    assert follower.read(far, 100).first_offset == far


def test_after_a_crash_retries_from_before_the_last_roll_are_duplicates(make_log):
    """An idempotent producer had five requests written but unanswered when the broker died; a roll
    (and its snapshot, which keeps only each producer's last batch) came between them. After recovery
    every retry is a duplicate answered with its original offsets, none is refused out of order (which
    made librdkafka bump its epoch and write them again: duplicates found by the crash-loop test)."""
    pl = make_log({"segment.bytes": "1200"})
    batches = [make_batch([b"x" * 500], producer_id=9, producer_epoch=0, base_sequence=s) for s in range(6)]
    offsets = [pl.append_as_leader(bytearray(b), 0, NOW).base_offset for b in batches]
    assert len(pl.segments) >= 3  # rolls (and snapshots) between the batches
    directory, config = pl.directory, pl.config
    pl.close(clean=False)  # SIGKILL: no snapshot at the log end
    recovered = PartitionLog(directory, "t", 0, config, clean_shutdown=False, sync=False)
    try:
        for sequence in range(1, 6):  # the five in flight
            result = recovered.append_as_leader(bytearray(batches[sequence]), 0, NOW)
            assert result.duplicate and result.base_offset == offsets[sequence], sequence
        assert recovered.log_end_offset == 6
    finally:
        recovered.close(clean=False)
