"""Damage at random places, as Kafka recovers it: every batch before the damage kept, nothing after it.

A pristine log of several segments is written once (real files, real batches built by kafka-python);
each example copies it, damages the copy and opens it as after a SIGKILL (no clean-shutdown marker,
recovery point 0). Kafka's rules (LogLoader/LogSegment.recover) are the expectation:
- a segment truncated mid-batch, or a batch whose CRC no longer matches (bytes flipped or zeroed), is
  truncated at the last valid batch before it, and every later segment is deleted;
- a missing or garbled `.index`/`.timeindex` only means the indexes are rebuilt: no data is lost;
- after recovery kafka-python reads every remaining segment (valid CRCs, offsets increasing) and the
  log takes new appends at its end.
Bytes 0-16 of a batch (base offset, length, leader epoch, magic) lie outside the CRC, as in Kafka; damage
there is checked with the weaker rule only (the batches before it are kept, the log stays readable).
Log-dir level damage (garbled checkpoints, leftovers of compaction and deletes, another cluster's
meta.properties) is at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.log import LogManager
from kafkacompat.log._tests.helpers import all_records, batch_positions, make_batch, segment_logs
from kafkacompat.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from kafkacompat.log.config import LogConfig
from kafkacompat.log.partition_log import PartitionLog

NOW = 1_700_000_100_000
CONFIG = LogConfig.from_properties({"segment.bytes": "1500", "index.interval.bytes": "300"})
BATCHES = 30
CRC_COVERED_FROM = 17  # batch bytes before this (offset, length, epoch, magic) are outside the CRC
DAMAGE = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pristine") / "t-0"
    pl = PartitionLog(str(d), "t", 0, CONFIG, sync=False)
    for i in range(BATCHES):
        pl.append_as_leader(
            make_batch([b"%03d" % i * (20 + i % 7)] * (1 + i % 3), timestamp=1000 + i), 0, NOW
        )
    pl.close(clean=False)
    assert len(segment_logs(str(d))) >= 4
    return d


@pytest.fixture
def damaged_files_ok() -> None:
    """This module checks the files itself (the package conftest would reject the damaged ones)."""


@pytest.fixture
def scratch(damaged_files_ok: None) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


def _copy(pristine: Path, scratch: Path) -> Path:
    target = scratch / f"copy-{len(os.listdir(scratch))}" / "t-0"
    shutil.copytree(pristine, target)
    return target


def _layout(d: Path) -> list[tuple[str, int, int, int, int]]:
    """(segment path, position, size, base offset, last offset) of every batch, in log order."""
    return [(path, *batch) for path in segment_logs(str(d)) for batch in batch_positions(path)]


def _reopen(d: Path) -> PartitionLog:
    return PartitionLog(str(d), "t", 0, CONFIG, clean_shutdown=False, recovery_point=0, sync=False)


def _records(d: Path) -> list[tuple[int, int, bytes | None]]:
    return all_records(str(d))


def _check_usable(pl: PartitionLog) -> None:
    """kafka-python reads every segment (all_records validates CRCs); reads and appends work."""
    offsets = [r[0] for r in _records(Path(pl.directory))]
    assert offsets == sorted(set(offsets))
    assert not offsets or offsets[-1] < pl.log_end_offset
    for offset in offsets[::5]:
        assert pl.read(offset, 1).first_offset <= offset
    end = pl.log_end_offset
    assert pl.append_as_leader(make_batch([b"after"]), 0, NOW).base_offset == end
    assert _records(Path(pl.directory))[-1][0] == end


def _kept_before(layout: list[tuple[str, int, int, int, int]], segment: str, position: int) -> list[int]:
    """Base offsets of the batches wholly before (segment, position)."""
    order = sorted({entry[0] for entry in layout})
    return [
        base
        for path, pos, size, base, _ in layout
        if order.index(path) < order.index(segment) or (path == segment and pos + size <= position)
    ]


def _batch_bases(d: Path) -> list[int]:
    return [base for _, _, _, base, _ in _layout(d)]


@DAMAGE
@given(data=st.data())
def test_data_damage_at_a_random_offset_keeps_every_batch_before_it(
    pristine: Path, scratch: Path, data: st.DataObject
) -> None:
    d = _copy(pristine, scratch)
    layout = _layout(d)
    before = _records(d)
    path, position, size, base, _ = data.draw(st.sampled_from(layout), label="damaged batch")
    kind = data.draw(st.sampled_from(["truncate", "flip", "zero"]), label="kind")
    at = position + data.draw(st.integers(0, size - 1), label="byte in batch")
    original = Path(path).read_bytes()
    damage_at: int | None = at  # first byte that differs from the pristine file
    with open(path, "r+b") as f:
        if kind == "truncate":
            f.truncate(at)
        elif kind == "flip":
            f.seek(at)
            f.write(bytes([original[at] ^ data.draw(st.integers(1, 255), label="mask")]))
        else:  # zeroed bytes, as a power loss leaves them; some may have been zero already
            end = min(at + data.draw(st.integers(1, 64), label="zeroed bytes"), position + size)
            f.seek(at)
            f.write(bytes(end - at))
            damage_at = next((k for k in range(at, end) if original[k] != 0), None)
    pl = _reopen(d)
    try:
        kept = _batch_bases(d)
        if damage_at is None:
            assert _records(d) == before, "nothing changed, nothing lost"
        else:
            wholly_before = _kept_before(layout, path, damage_at)
            assert kept[: len(wholly_before)] == wholly_before
            assert [r for r in _records(d) if r[0] < base] == [r for r in before if r[0] < base]
            later_segments = [b for p, _, _, b, _ in layout if p > path]
            if kind == "truncate" and at == position:
                # cut exactly between two batches: nothing torn, the segment just ends earlier
                assert kept == wholly_before + later_segments
            elif damage_at - position >= CRC_COVERED_FROM or kind == "truncate":
                # Kafka's rule: truncate at the last valid batch, delete every later segment
                assert kept == wholly_before
                assert pl.log_end_offset == base
        _check_usable(pl)
    finally:
        pl.close(clean=False)


@DAMAGE
@given(data=st.data())
def test_missing_or_garbled_indexes_lose_nothing(pristine: Path, scratch: Path, data: st.DataObject) -> None:
    d = _copy(pristine, scratch)
    before = _records(d)
    logs = segment_logs(str(d))
    for _ in range(data.draw(st.integers(1, 4), label="damaged files")):
        log_path = data.draw(st.sampled_from(logs), label="segment")
        index = log_path[:-4] + data.draw(st.sampled_from([".index", ".timeindex"]), label="which index")
        how = data.draw(st.sampled_from(["delete", "truncate", "garble", "extend"]), label="how")
        if how == "delete":
            if os.path.exists(index):
                os.unlink(index)
        elif how == "truncate":
            with open(index, "ab") as f:
                f.truncate(data.draw(st.integers(0, max(os.path.getsize(index) - 1, 0))))
        elif how == "garble":
            garbage = data.draw(st.binary(min_size=1, max_size=200), label="garbage")
            with open(index, "r+b" if os.path.exists(index) else "wb") as f:
                f.seek(data.draw(st.integers(0, 64)))
                f.write(garbage)
        else:
            with open(index, "ab") as f:
                f.write(data.draw(st.binary(min_size=1, max_size=40), label="appended"))
    clean = data.draw(st.booleans(), label="clean shutdown marker")
    pl = PartitionLog(str(d), "t", 0, CONFIG, clean_shutdown=clean, recovery_point=0, sync=False)
    try:
        assert _records(d) == before, "an index problem never costs data"
        assert pl.log_end_offset == before[-1][0] + 1
        for offset, _, _ in before:  # every offset found through the (rebuilt) indexes
            result = pl.read(offset, 1)
            assert result.first_offset <= offset
        _check_usable(pl)
    finally:
        pl.close(clean=False)


@pytest.mark.parametrize("clean", [True, False])
def test_an_index_entry_garbled_to_an_earlier_offset_is_caught_on_read(
    pristine: Path, scratch: Path, clean: bool
) -> None:
    """The example hypothesis found (CI, session 10): one byte of a segment's first index entry set to 0
    makes the entry claim an earlier offset at the position of a later batch. Its size and order pass the
    load checks, and a read of an offset before that batch scanned on from there and answered the later
    batch. A read now checks that the batch it is pointed at starts at or before the offset, and rebuilds
    the index when not."""
    d = _copy(pristine, scratch)
    before = _records(d)
    logs = segment_logs(str(d))
    garbled = [path for path in logs[1:] if os.path.getsize(path[:-4] + ".index") >= 8]
    assert garbled, "the pristine log has a later segment with index entries"
    with open(garbled[0][:-4] + ".index", "r+b") as f:
        f.seek(3)  # the low byte of the first entry's relative offset
        f.write(b"\x00")
    pl = PartitionLog(str(d), "t", 0, CONFIG, clean_shutdown=clean, recovery_point=0, sync=False)
    try:
        for offset, _, _ in before:
            result = pl.read(offset, 1)
            assert result.first_offset <= offset, (offset, result.first_offset)
        _check_usable(pl)
    finally:
        pl.close(clean=False)


@pytest.mark.parametrize("clean", [True, False])
def test_an_index_entry_garbled_to_a_negative_position_is_rebuilt(
    pristine: Path, scratch: Path, clean: bool
) -> None:
    """The example hypothesis found (clean-clone make test, session 12): bytes 3-4 of the first segment's
    index set to 00 80 make its first entry's position negative. Later entries still count upwards, so
    the order checks passed, the index was trusted after a clean shutdown, and a read did
    `pread(fd, 61, -2147483316)`: EINVAL, answered as KAFKA_STORAGE_ERROR. Kafka's sanity check refuses
    a position below zero, and so does ours: the index is rebuilt."""
    d = _copy(pristine, scratch)
    before = _records(d)
    logs = segment_logs(str(d))
    index = logs[0][:-4] + ".index"
    assert os.path.getsize(index) >= 16, "the first segment has several index entries"
    with open(index, "r+b") as f:
        f.seek(3)
        f.write(b"\x00\x80")
    os.unlink(logs[1][:-4] + ".index")
    pl = PartitionLog(str(d), "t", 0, CONFIG, clean_shutdown=clean, recovery_point=0, sync=False)
    try:
        assert pl.log_end_offset == before[-1][0] + 1
        for offset, _, _ in before:
            result = pl.read(offset, 1)
            assert result.first_offset <= offset, (offset, result.first_offset)
        assert _records(d) == before
        _check_usable(pl)
    finally:
        pl.close(clean=False)


def test_a_base_offset_flipped_into_the_next_segment_is_cut_on_recovery(
    pristine: Path, scratch: Path
) -> None:
    """The example hypothesis found (local database, session 10): bit 0 of byte 4 of the last batch of
    the first segment (its base offset, outside the CRC) made that batch claim an offset 2**24 higher.
    Each segment still counted upwards on its own, so recovery kept it, and the log's offsets went
    backwards at the next segment. A batch must end before the next segment's base offset."""
    d = _copy(pristine, scratch)
    layout = _layout(d)
    first_segment = layout[0][0]
    path, position, _, base, _ = [entry for entry in layout if entry[0] == first_segment][-1]
    assert any(entry[0] != first_segment for entry in layout), "the pristine log has several segments"
    before = _records(d)
    with open(path, "r+b") as f:
        f.seek(position + 4)
        original = f.read(1)[0]
        f.seek(position + 4)
        f.write(bytes([original ^ 1]))
    pl = _reopen(d)
    try:
        assert _batch_bases(d) == [entry[3] for entry in layout if entry[3] < base]
        assert _records(d) == [r for r in before if r[0] < base]
        assert pl.log_end_offset == base
        _check_usable(pl)
    finally:
        pl.close(clean=False)


@DAMAGE
@given(garbage=st.binary(min_size=1, max_size=300))
def test_garbage_after_the_last_batch_is_cut_off(pristine: Path, scratch: Path, garbage: bytes) -> None:
    d = _copy(pristine, scratch)
    before = _records(d)
    with open(segment_logs(str(d))[-1], "ab") as f:
        f.write(garbage)
    pl = _reopen(d)
    try:
        assert _records(d) == before
        _check_usable(pl)
    finally:
        pl.close(clean=False)


# --- log-dir level --------------------------------------------------------------------------------


def _manager(log_dir: Path, cluster_id: str = "damage-test") -> LogManager:
    manager = LogManager([str(log_dir)], CONFIG, 1, cluster_id, sync=False)
    manager.startup()
    return manager


def _write_partition(log_dir: Path, name: str, batches: int) -> None:
    manager = _manager(log_dir)
    topic, _, partition = name.rpartition("-")
    pl = manager.create_log(topic, int(partition), CONFIG)
    for i in range(batches):
        pl.append_as_leader(make_batch([b"v%03d" % i * 20]), 0, NOW)
    manager.checkpoint()
    manager.close_without_marker()  # as a SIGKILL leaves it: no clean-shutdown marker


def test_garbled_checkpoints_mean_full_recovery_not_a_failed_start(scratch: Path) -> None:
    log_dir = scratch / "logs"
    _write_partition(log_dir, "t-0", 25)
    before = _records(log_dir / "t-0")
    for name, garbage in (
        (RECOVERY_POINT_CHECKPOINT, b"0\n3\nt 0 notanumber\n"),
        (LOG_START_OFFSET_CHECKPOINT, b"\x00\xff garbage"),
        (REPLICATION_OFFSET_CHECKPOINT, b"0\n-5\n"),
    ):
        (log_dir / name).write_bytes(garbage)
    (log_dir / "t-0" / "leader-epoch-checkpoint").write_bytes(b"0\n1\n\xff\xfe")
    (log_dir / "t-0" / "partition.metadata").write_bytes(b"version: \xff\n")
    manager = _manager(log_dir)
    try:
        pl = manager.get_log("t", 0)
        assert pl is not None and not manager.offline_partitions
        assert _records(log_dir / "t-0") == before
        assert pl.log_end_offset == 25 and pl.log_start_offset == 0
        assert pl.load_report.recovered_segments == len(pl.segments), "recovery point reset to 0: all scanned"
    finally:
        manager.close_without_marker()


def test_leftovers_of_compaction_and_deletes_are_recovered_as_kafka_does(scratch: Path) -> None:
    log_dir = scratch / "logs"
    _write_partition(log_dir, "t-0", 25)
    part = log_dir / "t-0"
    before = _records(part)
    logs = segment_logs(str(part))
    first, second = Path(logs[0]), Path(logs[1])
    # a compaction that had written its output but not swapped it in: the .cleaned file is discarded
    (part / (first.name + ".cleaned")).write_bytes(first.read_bytes()[:100])
    # a swap whose old segment is still there (interrupted before the old one was renamed away): discarded
    (part / (first.name + ".swap")).write_bytes(b"partial")
    # a swap whose old segment is already gone: completed (renamed into place), indexes rebuilt
    swapped = second.read_bytes()
    second.unlink()
    (part / (second.name + ".swap")).write_bytes(swapped)
    # a retention delete interrupted after its rename, a checkpoint's temp file, a deleted partition dir
    (part / "00000000000000099999.log.deleted").write_bytes(b"old")
    (part / "00000000000000099999.index.deleted").write_bytes(b"old")
    (log_dir / (RECOVERY_POINT_CHECKPOINT + ".tmp")).write_bytes(b"half")
    doomed = log_dir / "t-1.0123456789abcdef0123456789abcdef-delete"
    doomed.mkdir()
    (doomed / "00000000000000000000.log").write_bytes(b"x")
    manager = _manager(log_dir)
    try:
        leftovers = [n for n in os.listdir(part) if n.endswith((".cleaned", ".swap", ".deleted", ".tmp"))]
        assert leftovers == []
        assert not doomed.exists()
        assert second.read_bytes() == swapped
        assert _records(part) == before
        pl = manager.get_log("t", 0)
        assert pl is not None and pl.log_end_offset == 25
        _check_usable(pl)
    finally:
        manager.close_without_marker()


def test_meta_properties_of_another_cluster_is_refused_with_a_clear_error(scratch: Path) -> None:
    log_dir = scratch / "logs"
    _write_partition(log_dir, "t-0", 3)
    meta = (log_dir / META_PROPERTIES).read_text()
    (log_dir / META_PROPERTIES).write_text(
        meta.replace("cluster.id=damage-test", "cluster.id=another-cluster")
    )
    with pytest.raises(RuntimeError, match="belongs to cluster another-cluster, not damage-test"):
        _manager(log_dir)
    assert _records(log_dir / "t-0")[-1][0] == 2, "a refused start touches no data"


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_an_active_segment_index_garbled_at_its_start_is_rebuilt_at_the_next_append_or_roll(
    pristine: Path, scratch: Path, suffix: str
) -> None:
    """Found by the property test above: the cheap start-up check reads only an index's last entry, so
    a garbled first entry surfaced at the first append that added an index entry (or at the roll), and
    failed every later produce to the partition."""
    d = _copy(pristine, scratch)
    before = _records(d)
    with open(segment_logs(str(d))[-1][:-4] + suffix, "r+b") as f:
        f.write(b"\x01")
    pl = PartitionLog(str(d), "t", 0, CONFIG, clean_shutdown=True, recovery_point=10**6, sync=False)
    try:
        end = pl.log_end_offset
        for i in range(12):  # enough for new index entries and a roll
            assert pl.append_as_leader(make_batch([b"n%03d" % i * 40]), 0, NOW).base_offset == end + i
        assert _records(d)[: len(before)] == before
        assert [r[0] for r in _records(d)] == list(range(end + 12))
        _check_usable(pl)
    finally:
        pl.close(clean=False)
