"""Loading after clean and unclean shutdowns; repair of torn tails, corrupt batches and bad indexes."""

from __future__ import annotations

import logging
import os
import random

from kafkacompat.log._tests.helpers import all_records, batch_positions, make_batch, segment_logs
from kafkacompat.log.config import LogConfig
from kafkacompat.log.partition_log import PartitionLog

NOW = 1_700_000_100_000
CONFIG = LogConfig.from_properties({"segment.bytes": "4000", "index.interval.bytes": "500"})


def build(tmp_path, batches: int = 40) -> tuple[str, list[int]]:
    d = str(tmp_path / "t-0")
    pl = PartitionLog(d, "t", 0, CONFIG, sync=False)
    for i in range(batches):
        pl.append_as_leader(make_batch([b"%04d" % i * 30] * 3, timestamp=1000 + i), 0, NOW)
    pl.close(clean=False)
    return d, [r[0] for r in all_records(d)]


def reopen(d: str, *, clean: bool, recovery_point: int = 0) -> PartitionLog:
    return PartitionLog(d, "t", 0, CONFIG, clean_shutdown=clean, recovery_point=recovery_point, sync=False)


def check_consistent(pl: PartitionLog) -> None:
    """kafka-python reads every segment; every offset reads back from the index path."""
    offsets = [r[0] for r in all_records(pl.directory)]
    assert offsets == list(range(pl.log_start_offset, pl.log_end_offset))
    for offset in range(pl.log_start_offset, pl.log_end_offset, 7):
        result = pl.read(offset, 1)
        assert result.first_offset <= offset < result.first_offset + 3


def test_unclean_shutdown_without_damage_keeps_everything_and_logs_no_warning(tmp_path, caplog):
    d, offsets = build(tmp_path)
    with caplog.at_level(logging.WARNING, logger="kafkacompat.log"):
        pl = reopen(d, clean=False)
    assert pl.log_end_offset == len(offsets) == 120
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert pl.load_report.recovered_segments == len(pl.segments)
    check_consistent(pl)
    assert pl.append_as_leader(make_batch([b"n"]), 0, NOW).base_offset == 120
    pl.close(clean=False)


def test_recovery_point_limits_which_segments_are_scanned(tmp_path):
    d, _ = build(tmp_path)
    pl = reopen(d, clean=False, recovery_point=10**6)
    assert pl.load_report.recovered_segments == 1  # only the active segment
    pl.close(clean=False)


def test_torn_tail_is_truncated_on_unclean_and_clean_start(tmp_path, caplog):
    for clean in (False, True):
        sub = tmp_path / str(clean)
        d, _ = build(sub)
        last_log = segment_logs(d)[-1]
        positions = batch_positions(last_log)
        cut_at = positions[-2][0] + 20  # in the middle of the second-to-last batch
        with open(last_log, "r+b") as f:
            f.truncate(cut_at)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kafkacompat.log"):
            pl = reopen(d, clean=clean)
        assert pl.log_end_offset == positions[-2][2]
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "t-0" in warnings[0].getMessage()
        check_consistent(pl)
        assert pl.append_as_leader(make_batch([b"n"]), 0, NOW).base_offset == positions[-2][2]
        pl.close(clean=False)


def test_flipped_byte_truncates_from_the_corrupt_batch_and_drops_later_segments(tmp_path, caplog):
    d, _ = build(tmp_path)
    logs = segment_logs(d)
    victim = logs[1]
    positions = batch_positions(victim)
    position, size, base_offset, _ = positions[2]
    with open(victim, "r+b") as f:
        f.seek(position + size - 3)
        byte = f.read(1)
        f.seek(position + size - 3)
        f.write(bytes([byte[0] ^ 0x55]))
    with caplog.at_level(logging.WARNING, logger="kafkacompat.log"):
        pl = reopen(d, clean=False)
    assert pl.log_end_offset == base_offset
    assert len(pl.segments) == 2
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1
    check_consistent(pl)
    pl.close(clean=False)


def test_missing_or_garbage_indexes_are_rebuilt_not_fatal(tmp_path):
    d, offsets = build(tmp_path)
    logs = segment_logs(d)
    os.unlink(logs[0][:-4] + ".index")
    os.unlink(logs[1][:-4] + ".timeindex")
    rng = random.Random(7)
    with open(logs[2][:-4] + ".index", "wb") as f:
        f.write(bytes(rng.randrange(256) for _ in range(83)))
    with open(logs[-1][:-4] + ".index", "wb") as f:
        f.write(bytes(rng.randrange(256) for _ in range(64)))
    expected = {p: open(p, "rb").read() for p in logs}
    pl = reopen(d, clean=True)
    assert pl.log_end_offset == len(offsets)
    check_consistent(pl)
    for p in logs:
        with open(p, "rb") as f:
            assert f.read() == expected[p]  # no data lost to an index problem
    pl.close(clean=True)
    reference_dir, _ = build(tmp_path / "ref")
    for p in logs:
        name = os.path.basename(p)[:-4]
        for suffix in (".index", ".timeindex"):
            with (
                open(os.path.join(d, name + suffix), "rb") as mine,
                open(os.path.join(reference_dir, name + suffix), "rb") as ref,
            ):
                rebuilt, original = mine.read(), ref.read()
                # rebuilt entries equal those written at append time (the time index may gain the
                # closing max-timestamp entry written at close)
                assert rebuilt[: len(original)] == original or original[: len(rebuilt)] == rebuilt


def test_garbage_index_of_plausible_size_is_caught_on_first_use(tmp_path, caplog):
    d, _offsets = build(tmp_path)
    logs = segment_logs(d)
    entries = b"".join((i * 1000).to_bytes(4, "big") + ((9 - i) * 10).to_bytes(4, "big") for i in range(10))
    with open(logs[0][:-4] + ".index", "wb") as f:
        f.write(entries)  # last entry looks fine, the others go backwards
    pl = reopen(d, clean=True)
    with caplog.at_level(logging.WARNING, logger="kafkacompat.log"):
        check_consistent(pl)
    assert any("rebuilding its indexes" in r.getMessage() for r in caplog.records)
    pl.close(clean=False)


def test_clean_start_after_clean_close_scans_nothing(tmp_path):
    d = str(tmp_path / "t-0")
    pl = PartitionLog(d, "t", 0, CONFIG, sync=False)
    for i in range(40):
        pl.append_as_leader(make_batch([b"x" * 90] * 3, timestamp=1000 + i), 0, NOW)
    pl.close(clean=True)
    pl = reopen(d, clean=True)
    assert pl.load_report.recovered_segments == 0 and not pl.load_report.damage
    assert pl.log_end_offset == 120
    check_consistent(pl)
    pl.close(clean=False)


def test_leader_epoch_checkpoint_is_truncated_to_the_log_and_rebuilt_when_garbage(tmp_path):
    d = str(tmp_path / "t-0")
    pl = PartitionLog(d, "t", 0, CONFIG, sync=False)
    for epoch in (1, 1, 2, 5):
        pl.append_as_leader(make_batch([b"x" * 500]), epoch, NOW)
    assert pl.leader_epochs.entries == [(1, 0), (2, 2), (5, 3)]
    with open(os.path.join(d, "leader-epoch-checkpoint")) as f:
        assert f.read() == "0\n3\n1 0\n2 2\n5 3\n"
    pl.close(clean=False)
    last_log = segment_logs(d)[-1]
    with open(last_log, "r+b") as f:
        f.truncate(os.path.getsize(last_log) - 10)
    pl = reopen(d, clean=False)
    assert pl.log_end_offset == 3
    assert pl.leader_epochs.entries == [(1, 0), (2, 2)]
    pl.close(clean=False)
    with open(os.path.join(d, "leader-epoch-checkpoint"), "w") as f:
        f.write("garbage\n")
    pl = reopen(d, clean=True)
    assert pl.leader_epochs.entries == [(1, 0), (2, 2)]
    pl.close(clean=False)
