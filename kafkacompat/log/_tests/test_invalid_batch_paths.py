"""No invalid batch reaches a log by any path: follower appends, the broker's own writes, recovery.

The batches are built by hand (test_record_validator's encoders): headers and CRCs right, one record
broken, so only the record walk can refuse them.
"""

from __future__ import annotations

import logging
import os

import pytest

from kafkacompat.log._tests.helpers import all_records, make_batch, segment_logs
from kafkacompat.log._tests.test_record_validator import Rec, hostile_batch, records, wrap_batch
from kafkacompat.log.partition_log import PartitionLog
from kafkacompat.log.record_validator import InvalidRecords
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import build_control_batch

NOW = 1_700_000_000_000


def _broken_record_batch(base_offset: int, *, codec: int = 0) -> bytes:
    """Three records whose second has a negative length (varint -5), at `base_offset`."""
    recs = records(3)
    recs[1].length_raw = b"\x09"
    return hostile_batch(recs, codec=codec, base_offset=base_offset)


def _files(pl: PartitionLog) -> list[tuple[str, int]]:
    return [(path, os.path.getsize(path)) for path in segment_logs(pl.directory)]


def _stamped(pl: PartitionLog, batch: bytes) -> bytearray:
    """A client batch given offsets as the leader would: appended to `pl` and read back."""
    first = pl.log_end_offset
    pl.append_as_leader(bytearray(batch), 0, NOW)
    return bytearray(pl.read(first, 1 << 20).slices[0].read_bytes())


@pytest.mark.parametrize("codec", [0, 1, 3])
def test_follower_refuses_an_invalid_batch_and_appends_nothing(make_log, codec):
    follower = make_log(name="f-0")
    follower.append_as_follower(_stamped(make_log(name="l-0"), make_batch([b"a", b"b"])), NOW)
    before = (follower.log_end_offset, _files(follower), follower.leader_epochs.entries)
    with pytest.raises(InvalidRecords) as info:
        follower.append_as_follower(_broken_record_batch(2, codec=codec), NOW)
    assert info.value.code == ErrorCode.INVALID_RECORD
    assert (follower.log_end_offset, _files(follower), follower.leader_epochs.entries) == before


def test_follower_refuses_a_record_set_whose_later_batch_is_invalid(make_log):
    follower = make_log(name="f-0")
    good = hostile_batch(records(2), base_offset=0)
    with pytest.raises(InvalidRecords):
        follower.append_as_follower(good + _broken_record_batch(2), NOW)
    assert follower.log_end_offset == 0 and _files(follower)[0][1] == 0
    assert follower.append_as_follower(good, NOW).last_offset == 1  # the sound batch alone is taken


def test_follower_takes_compacted_batches_and_config_independent_records(make_log):
    """Gaps in offset deltas (compaction), keyless records on a compacted topic and timestamps far from
    the clock are client-only rules: a batch the leader once accepted must replicate."""
    follower = make_log({"cleanup.policy": "compact", "message.timestamp.before.max.ms": "1"}, name="f-0")
    gappy = hostile_batch(
        [Rec(offset_delta=d, key=None, timestamp_delta=d) for d in (0, 4, 7)],
        last_offset_delta=9,
        base_timestamp=1000,
    )
    result = follower.append_as_follower(gappy, NOW)
    assert (result.base_offset, result.last_offset, follower.log_end_offset) == (0, 9, 10)
    backwards = hostile_batch([Rec(offset_delta=d) for d in (0, 5, 3)], last_offset_delta=9, base_offset=10)
    with pytest.raises(InvalidRecords):
        follower.append_as_follower(backwards, NOW)
    assert follower.log_end_offset == 10


def test_follower_takes_a_batch_larger_than_max_message_bytes(make_log):
    """max.message.bytes lowered after the leader accepted a batch: the follower still replicates it (as
    Kafka's follower ignores the record size), while a client's append of the same size is refused."""
    leader = make_log(name="l-0")
    stamped = _stamped(leader, make_batch([b"x" * 2000]))
    follower = make_log({"max.message.bytes": "1000"}, name="f-0")
    assert follower.append_as_follower(stamped, NOW).last_offset == 0
    with pytest.raises(KafkaError) as info:
        follower.append_as_leader(bytearray(make_batch([b"y" * 2000])), 0, NOW)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_the_brokers_own_writes_are_walked(make_log):
    pl = make_log()
    with pytest.raises(InvalidRecords):
        pl.append_as_leader(bytearray(_broken_record_batch(0)), 0, NOW, from_coordinator=True)
    assert pl.log_end_offset == 0 and _files(pl)[0][1] == 0
    marker = build_control_batch(
        producer_id=7, producer_epoch=0, commit=True, coordinator_epoch=3, timestamp=NOW
    )
    assert pl.append_as_leader(bytearray(marker), 0, NOW, from_coordinator=True).last_offset == 0


# -- recovery ------------------------------------------------------------------------------------------


def _segment_with_a_stored_invalid_batch(make_log, codec: int = 0) -> tuple[str, int, int]:
    """A log of two sound batches (offsets 0-4), then an invalid batch at offset 5 written straight into
    the segment file with a right CRC (as an older version would have stored it), then a sound one.
    Returns (directory, size of the file up to the bad batch, bad offset)."""
    pl = make_log()
    pl.append_as_leader(make_batch([b"a", b"b"]), 0, NOW)
    pl.append_as_leader(make_batch([b"c", b"d", b"e"], compression="gzip"), 0, NOW)
    directory = pl.directory
    pl.close(clean=False)
    (path,) = segment_logs(directory)
    good_size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(_broken_record_batch(5, codec=codec))
        f.write(hostile_batch(records(1), base_offset=8))
    return directory, good_size, 5


@pytest.mark.parametrize("codec", [0, 3])
def test_recovery_truncates_at_a_batch_whose_records_are_invalid(make_log, caplog, codec):
    directory, good_size, bad_offset = _segment_with_a_stored_invalid_batch(make_log, codec)
    with caplog.at_level(logging.WARNING, logger="kafkacompat.log"):
        pl = make_log(clean_shutdown=False)
    assert pl.directory == directory
    assert pl.log_end_offset == bad_offset
    assert [offset for offset, _, _ in all_records(directory)] == list(range(5))
    assert _files(pl)[0][1] == good_size
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "t-0" in line and f"at offset {bad_offset}" in line and "invalid records" in line
    assert "Invalid record size" in line or "record 1" in line
    assert pl.append_as_leader(make_batch([b"f"]), 0, NOW).base_offset == bad_offset


def test_a_clean_start_does_not_walk_records(make_log):
    """Only recovery after an unclean shutdown reads records, as only it reads whole batches."""
    _segment_with_a_stored_invalid_batch(make_log)
    pl = make_log(clean_shutdown=True)
    assert pl.log_end_offset == 9


def test_stored_batches_written_by_this_broker_pass_recovery(make_log):
    pl = make_log()
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        pl.append_as_leader(make_batch([b"x" * 100] * 3, keys=[b"k"] * 3, compression=codec), 0, NOW)
    marker = build_control_batch(
        producer_id=7, producer_epoch=0, commit=False, coordinator_epoch=1, timestamp=NOW
    )
    pl.append_as_leader(bytearray(marker), 0, NOW, from_coordinator=True)
    pl.close(clean=False)
    reopened = make_log(clean_shutdown=False)
    assert reopened.log_end_offset == 16 and not reopened.load_report.damage


def test_an_empty_batch_left_by_compaction_passes_recovery(make_log):
    pl = make_log()
    pl.append_as_leader(make_batch([b"a"]), 0, NOW)
    directory = pl.directory
    pl.close(clean=False)
    with open(segment_logs(directory)[0], "ab") as f:
        f.write(wrap_batch(b"", 0, last_offset_delta=3, base_offset=1))
    reopened = make_log(clean_shutdown=False)
    assert reopened.log_end_offset == 5 and not reopened.load_report.damage
