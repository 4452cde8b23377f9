"""The log of one partition: ordered segments, offsets, producer state, leader epochs.

Theory of operation
-------------------
A partition dir `<topic>-<partition>` holds segments (`<base>.log/.index/.timeindex`, plus `.txnindex`
once a transaction aborts in it), producer-state snapshots (`<offset>.snapshot`),
`leader-epoch-checkpoint` and, once the broker sets a topic id, `partition.metadata`. The last segment
is the active one; only it is appended to. Offsets: `log_start_offset` (first readable offset; moved by
retention and DeleteRecords), `log_end_offset` (next offset to assign), `recovery_point` (everything
below it is fsynced) and `high_watermark` (set by the broker; the read bound it passes for consumers). This
module keeps Kafka's LocalLog and UnifiedLog in one class because, without tiered storage, the split
only moved state between two objects that always change together.

Appends (`append_as_leader`): validate every batch and its records (validator.py), check
idempotent-producer state (a retried duplicate returns the original offsets and writes nothing), roll if
needed, patch offsets in place, write the whole record set with one `pwrite` into the page cache, update
both indexes, then commit producer state and the leader epoch. Nothing is written if any check fails.
Transaction markers (from the coordinator, `from_coordinator=True`) close a producer's open transaction;
aborts are recorded in the segment's `.txnindex` (`aborted_transactions()` for read_committed fetches),
and `last_stable_offset` stays below the first offset of any open transaction.

Reads (`read`) return `FileSlice`s: from the start of the batch containing the requested offset,
whole batches only, at most `max_bytes` (but at least one batch when `min_one_batch`), never past
`upper_bound_offset`; data comes from one segment per call, as in Kafka.

Loading: after a clean shutdown only the active segment's tail after its last index entry is scanned;
producer state comes from the snapshot at the log end. After an unclean shutdown every segment from the
one holding the recovery point onwards is verified batch by batch (CRC and every record included:
`LogSegment.recover`), its indexes rebuilt, and a torn or corrupt tail cut off, from the first batch
that fails; later segments are then dropped. Missing or invalid index files are
rebuilt in either case. Damage is reported as one warning per partition.

Deletion (retention, DeleteRecords, truncation) renames segment files with `.deleted` and closes and
removes them only after `file.delete.delay.ms`, so FileSlices handed out just before stay valid:
`take_due_deletes(now_ms)` takes the due segments off the pending list and `remove_segment_files()`
closes and unlinks them (`run_pending_deletes(now_ms)` does both).

Threading: all methods must be called from one thread (the broker's trio thread), except `flush()`,
which may run in a worker thread concurrently with appends and reads of the same log: it only fsyncs
descriptors and advances `recovery_point`; and `remove_segment_files()`, which only touches segments
`take_due_deletes()` already took out of the log (unlinking a big file can block for a while).
Any OSError marks the log offline and surfaces as KafkaError(KAFKA_STORAGE_ERROR); an offline log
refuses every later call with the same error, and `on_storage_error` tells the LogManager, which takes
the log's whole dir offline (as Kafka does on an IOException).
"""

from __future__ import annotations

import bisect
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from kafkacompat.log.batch_header import BatchHeader
from kafkacompat.log.checkpoints import fsync_dir, read_partition_metadata, write_partition_metadata
from kafkacompat.log.config import LogConfig
from kafkacompat.log.file_slice import FileSlice
from kafkacompat.log.index import IndexCorrupt
from kafkacompat.log.leader_epoch import LeaderEpochCache
from kafkacompat.log.producer_state import ProducerStateManager, snapshot_offsets
from kafkacompat.log.segment import DELETED_SUFFIX, INT32_MAX, LogSegment
from kafkacompat.log.txn_index import AbortedTxn
from kafkacompat.log.validator import assign_offsets, recompress_if_needed, validate_records
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import (
    ABORT_MARKER,
    RecordBatchView,
    iter_records,
    parse_control_record_key,
    parse_end_txn_marker_value,
)

__all__ = ["AppendResult", "PartitionLog", "ReadResult", "parse_partition_dir_name"]

log = logging.getLogger("kafkacompat.log")

_SNAPSHOTS_TO_KEEP = 3
F = TypeVar("F", bound=Callable[..., Any])


class AppendResult(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime topics
    log_start_offset: int
    records_count: int
    duplicate: bool = False  # a retried idempotent batch: offsets are the original ones, nothing written


@dataclass
class ReadResult:
    slices: list[FileSlice]
    size: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    first_offset: int = -1  # base offset of the first batch returned, -1 when empty
    # the returned batches all lie below this (the end of the segment they come from): bounds the
    # aborted-transaction lookup of a read_committed fetch, as Kafka bounds it by the fetched range
    upper_offset: int = -1


@dataclass
class _PendingDelete:
    deadline_ms: int
    segment: LogSegment


@dataclass
class LoadReport:
    """What loading found; `damage` non-empty means data or index files had to be repaired."""

    recovered_segments: int = 0
    damage: list[str] = field(default_factory=list)


def _marker_coordinator_epoch(marker: RecordBatchView) -> int:
    """The coordinator epoch a transaction marker carries, -1 when it is not a well-formed marker."""
    try:
        for record in iter_records(marker):
            return parse_end_txn_marker_value(record.value)[1]
    except KafkaError:
        pass
    return -1


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """`<topic>-<partition>` -> (topic, partition), None for anything else (e.g. `-delete` dirs)."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def _storage_guard(method: F) -> F:
    @functools.wraps(method)
    def wrapper(self: PartitionLog, *args: Any, **kwargs: Any) -> Any:
        if self.offline:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.name} is offline")
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            self.offline = True
            log.error("disk error on log %s, taking it offline: %s", self.name, exc)
            if self.on_storage_error is not None:
                self.on_storage_error(self, str(exc))  # the manager takes the whole log dir offline
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.name}: {exc}") from exc

    return wrapper  # type: ignore[return-value]


class PartitionLog:
    """Owns one partition dir and everything in it. See the module docstring for the threading rule."""

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        clean_shutdown: bool = True,
        now_ms: int = 0,
        sync: bool = True,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.name = f"{topic}-{partition}"
        self.config = config
        self.sync = sync
        self.offline = False
        # called (log, reason) once a disk error takes this log offline; the LogManager sets it
        self.on_storage_error: Callable[[PartitionLog, str], None] | None = None
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._pending_deletes: list[_PendingDelete] = []
        self._flush_lock = threading.Lock()
        self._dir_dirty = False
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms
        os.makedirs(directory, exist_ok=True)
        self.producer_state = ProducerStateManager(directory)
        self.leader_epochs = LeaderEpochCache(directory, sync=sync)
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.high_watermark = high_watermark
        self.load_report = self._load(clean_shutdown, now_ms)
        self.topic_id: str | None = read_partition_metadata(self.directory)

    def set_topic_id(self, topic_id: str) -> None:
        """Record the topic id in `partition.metadata` (Kafka's file: `version: 0`, `topic_id: <id>`)."""
        if self.topic_id == topic_id:
            return
        write_partition_metadata(self.directory, topic_id, sync=self.sync)
        self.topic_id = topic_id

    # --- loading ---------------------------------------------------------------------------------

    def _new_segment(self, base_offset: int, now_ms: int, *, create: bool) -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            self.config.index_interval_bytes,
            self.config.segment_index_bytes,
            create=create,
            now_ms=now_ms,
        )

    def _load(self, clean: bool, now_ms: int) -> LoadReport:
        report = LoadReport()
        bases = []
        for name in os.listdir(self.directory):
            if name.endswith(".log.swap"):  # a compaction interrupted between its renames (cleaner.py)
                swap = os.path.join(self.directory, name)
                target = swap[: -len(".swap")]
                if os.path.exists(target):
                    os.unlink(swap)  # the old segment is still whole: keep it
                else:
                    for stale in (".index", ".timeindex"):
                        if os.path.exists(target[:-4] + stale):
                            os.unlink(target[:-4] + stale)
                    os.rename(swap, target)
                    report.damage.append(f"completed an interrupted compaction of {name[:-9]}")
        names = os.listdir(self.directory)
        present = set(names)
        for name in names:
            path = os.path.join(self.directory, name)
            if name.endswith((DELETED_SUFFIX, ".tmp", ".cleaned", ".swap")):
                os.unlink(path)  # unfinished deletes, checkpoint temp files, compaction leftovers
            elif name.endswith(".log") and name[:-4].isdigit():
                bases.append(int(name[:-4]))
            elif name.endswith((".index", ".timeindex", ".txnindex")):
                stem = name.split(".", 1)[0]
                if f"{stem}.log" not in present:
                    os.unlink(path)  # an index without its log is useless
        bases.sort()
        for base in bases:
            self.segments.append(self._new_segment(base, now_ms, create=False))
        self._bases = bases[:]

        def next_base(i: int) -> int | None:
            """The base offset of the segment after segment i (None for the last one)."""
            return self.segments[i + 1].base_offset if i + 1 < len(self.segments) else None

        recover_from = len(self.segments)
        if not clean:
            for i in range(len(self.segments)):
                following = next_base(i)
                if following is None or following > self.recovery_point:
                    recover_from = i
                    break
        i = 0
        while i < len(self.segments):
            segment = self.segments[i]
            reason = None
            if i >= recover_from:
                reason = "unclean shutdown"
            else:
                try:
                    segment.check_indexes()
                    if i == len(self.segments) - 1:
                        segment.load_tail()
                except IndexCorrupt as exc:
                    reason = f"index: {exc}"
                    report.damage.append(f"rebuilt the indexes of segment {segment.base_offset} ({exc})")
            if reason is not None:
                report.recovered_segments += 1
                truncated, why = segment.recover(next_segment_base=next_base(i))
                if truncated:
                    report.damage.append(
                        f"truncated {truncated} bytes at offset {segment.next_offset} of segment "
                        f"{segment.base_offset} ({why})"
                    )
                    for later in self.segments[i + 1 :]:
                        report.damage.append(f"dropped segment {later.base_offset} after the damage")
                        later.delete_files()
                    del self.segments[i + 1 :]
                    del self._bases[i + 1 :]
            i += 1

        if not self.segments:
            start = max(self.log_start_offset, 0)
            self.segments.append(self._new_segment(start, now_ms, create=True))
            self._bases = [start]
            self._dir_dirty = True
        leo = self.log_end_offset
        self.log_start_offset = min(max(self.log_start_offset, self.segments[0].base_offset), leo)
        self.recovery_point = min(self.recovery_point, leo)
        self.high_watermark = min(max(self.high_watermark, self.log_start_offset), leo)

        epochs_damaged = self.leader_epochs.damaged
        if epochs_damaged:
            report.damage.append("leader-epoch-checkpoint unreadable, rebuilt from the batches")
        self.leader_epochs.truncate_from_end(leo)
        self._rebuild_producer_state(rebuild_epochs=epochs_damaged, refill_window=not clean)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        if report.damage:
            log.warning("log %s was damaged and repaired: %s", self.name, "; ".join(report.damage))
        elif report.recovered_segments:
            log.info(
                "log %s: recovered %d segment(s) after an unclean shutdown, no damage",
                self.name,
                report.recovered_segments,
            )
        return report

    def _rebuild_producer_state(self, *, rebuild_epochs: bool = False, refill_window: bool = False) -> None:
        """Newest snapshot at or below the log end, then replay of the batch headers after it.

        `refill_window` (recovery after a crash): start from the snapshot before the newest one. A
        snapshot keeps only each producer's last batch, but a producer whose requests were written and
        not answered before the crash retries up to five of them; those written before the newest
        snapshot (taken at a segment roll) must be recognised as duplicates, not refused as out of
        order (which makes librdkafka bump its epoch and write them again). Replaying one more segment
        puts them back into the five-batch window."""
        leo = self.log_end_offset
        self.producer_state.delete_snapshots(above=leo)
        limit = leo
        if refill_window:
            older = sorted(o for o in snapshot_offsets(self.directory) if o <= leo)
            if older:
                limit = older[-2] if len(older) >= 2 else older[0] - 1  # none older: from the log start
        start = None if rebuild_epochs else self.producer_state.load_latest_snapshot(limit)
        if rebuild_epochs:
            self.producer_state.clear()
        replay_from = self.log_start_offset if start is None else start
        if replay_from >= leo:
            return
        for segment, position, header in self._iter_headers_from(replay_from):
            if rebuild_epochs:
                self.leader_epochs.assign(header.partition_leader_epoch, header.base_offset, persist=False)
            if header.producer_id >= 0:
                coordinator_epoch = -1
                if header.is_control:
                    marker = self._read_batch(segment, position, header)
                    coordinator_epoch = _marker_coordinator_epoch(marker)
                    entry = self._aborted_txn(header.producer_id, header.base_offset, marker)
                    if entry is not None:
                        segment.txn_index.append(entry)
                self._apply_header(header, coordinator_epoch)
        if rebuild_epochs:
            self.leader_epochs._persist()

    def _apply_header(self, header: BatchHeader, coordinator_epoch: int = -1) -> None:
        self.producer_state.apply_replicated(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            header.base_offset,
            header.last_offset,
            header.max_timestamp,
            header.is_transactional,
            header.is_control,
            coordinator_epoch,
        )

    def _iter_headers_from(self, offset: int) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
        index = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        for segment in self.segments[index:]:
            found = segment.find_batch(offset)
            if found is None:
                continue
            for position, header in segment.iter_headers(found[0]):
                yield segment, position, header

    # --- state -----------------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: LogConfig) -> None:
        """New topic configs apply to later appends, rolls and retention runs (index sizes at next roll)."""
        self.config = config
        self.active_segment.index_interval_bytes = config.index_interval_bytes

    def update_high_watermark(self, offset: int) -> int:
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    # --- append ----------------------------------------------------------------------------------

    @_storage_guard
    def append_as_leader(
        self,
        records: memoryview | bytes | bytearray,
        leader_epoch: int,
        now_ms: int,
        *,
        check_producers: bool = True,
        from_coordinator: bool = False,
    ) -> AppendResult:
        """Validate, deduplicate, assign offsets and write a record set. Raises KafkaError.

        `from_coordinator=True` is for batches the broker builds itself (group and transaction
        coordinators): they may be control batches (transaction markers) and skip the client-only checks."""
        buf = memoryview(records)
        if buf.readonly:
            buf = memoryview(bytearray(buf))  # offsets are patched in place; the broker passes bytearrays
        batches = validate_records(buf, self.config, now_ms, from_client=not from_coordinator)
        if not batches:
            return AppendResult(-1, -1, -1, self.log_start_offset, 0)
        if self.config.target_codec is not None:
            recompressed = recompress_if_needed(batches, self.config)
            if recompressed is not None:
                buf, batches = recompressed
        # one pass for the aggregates (most requests carry a single batch)
        count = offsets_used = 0
        max_ts = -1
        has_producer = has_control = False
        for batch in batches:
            count += batch.records_count
            offsets_used += batch.last_offset_delta + 1
            if batch.max_timestamp > max_ts:
                max_ts = batch.max_timestamp
            has_producer = has_producer or batch.producer_id >= 0
            has_control = has_control or batch.is_control
        if has_producer and check_producers:
            duplicate = self._check_producers(batches)
            if duplicate is not None:
                return duplicate
        first_offset = self.log_end_offset
        append_time = now_ms if self.config.log_append_time else None
        self._maybe_roll(
            len(buf), first_offset + offsets_used - 1, now_ms if append_time is not None else max_ts, now_ms
        )
        infos = assign_offsets(batches, first_offset, leader_epoch, append_time)
        aborted = self._aborted_by(batches) if has_control else ()
        staged = self.producer_state.begin() if has_producer else None
        if staged is not None:
            for batch, (last_offset, batch_max_ts, _) in zip(batches, infos, strict=True):
                if batch.producer_id >= 0:
                    staged.add(
                        batch.producer_id,
                        batch.producer_epoch,
                        batch.base_sequence,
                        batch.last_sequence,
                        batch.base_offset,
                        last_offset,
                        batch_max_ts,
                        batch.is_transactional,
                        batch.is_control,
                        _marker_coordinator_epoch(batch) if batch.is_control else -1,
                    )
        self.active_segment.append(buf, infos)
        if staged is not None:
            self.producer_state.commit(staged)
        for entry in aborted:
            self.active_segment.txn_index.append(entry)
        self.leader_epochs.assign(leader_epoch, first_offset)
        self.unflushed_messages += count
        return AppendResult(
            first_offset,
            infos[-1][0],
            -1 if append_time is None else append_time,
            self.log_start_offset,
            count,
        )

    def _check_producers(self, batches: list[RecordBatchView]) -> AppendResult | None:
        """Idempotence checks of a client append: the original offsets for a retried duplicate, None to go
        on; raises KafkaError for fencing and sequence gaps. Changes nothing."""
        staged = self.producer_state.begin()
        for batch in batches:
            if batch.producer_id < 0:
                continue
            if batch.is_control:  # a transaction marker: no sequence, only the epochs are checked
                staged.check_epoch(batch.producer_id, batch.producer_epoch, _marker_coordinator_epoch(batch))
                continue
            duplicate = staged.find_duplicate(
                batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence
            )
            if duplicate is not None:
                return AppendResult(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    -1,
                    self.log_start_offset,
                    duplicate.last_offset - duplicate.first_offset + 1,
                    duplicate=True,
                )
            staged.check(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence)
            # staged with placeholder offsets so that a later batch of the same request is checked
            # against this one
            staged.add(
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                batch.last_sequence,
                0,
                batch.last_offset_delta,
                batch.max_timestamp,
                batch.is_transactional,
                False,
            )
        return None

    @_storage_guard
    def append_as_follower(self, records: memoryview | bytes | bytearray, now_ms: int) -> AppendResult:
        """Append batches that already carry offsets and leader epochs (replication). Raises KafkaError.

        Every record of every batch is walked first (`validate_records(from_client=False)`): an invalid
        batch raises InvalidRecords or InvalidRecordBatch and nothing of the record set is appended."""
        buf = memoryview(records)
        batches = validate_records(buf, self.config, now_ms, from_client=False, ignore_record_size=True)
        if not batches:
            return AppendResult(-1, -1, -1, self.log_start_offset, 0)
        expected = self.log_end_offset
        for batch in batches:
            if batch.base_offset < expected:
                raise KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"replicated batch at offset {batch.base_offset} below log end {expected}",
                )
            expected = batch.next_offset
        first = batches[0].base_offset
        if (
            self.active_segment.size == 0
            and first != self.active_segment.base_offset
            and first > self.log_end_offset
        ):
            self._replace_empty_active(first, now_ms)
        incoming_max_ts = max(b.max_timestamp for b in batches)
        self._maybe_roll(len(buf), batches[-1].last_offset, incoming_max_ts, now_ms, base_for_new=first)
        infos = [(b.last_offset, b.max_timestamp, b.size) for b in batches]
        aborted = self._aborted_by(batches)
        self.active_segment.append(buf, infos)
        for entry in aborted:
            self.active_segment.txn_index.append(entry)
        for batch in batches:
            self.leader_epochs.assign(batch.partition_leader_epoch, batch.base_offset)
            if batch.producer_id >= 0:
                self.producer_state.apply_replicated(
                    batch.producer_id,
                    batch.producer_epoch,
                    batch.base_sequence,
                    batch.last_sequence,
                    batch.base_offset,
                    batch.last_offset,
                    batch.max_timestamp,
                    batch.is_transactional,
                    batch.is_control,
                    _marker_coordinator_epoch(batch) if batch.is_control else -1,
                )
        count = sum(b.records_count for b in batches)
        self.unflushed_messages += count
        return AppendResult(first, batches[-1].last_offset, -1, self.log_start_offset, count)

    def _aborted_txn(
        self, producer_id: int, marker_offset: int, marker: RecordBatchView
    ) -> AbortedTxn | None:
        """The aborted-transaction entry for a transaction marker (None for commits and unknown txns)."""
        try:
            records = list(iter_records(marker))
            if not records or parse_control_record_key(records[0].key)[1] != ABORT_MARKER:
                return None
        except KafkaError:
            return None  # not a well-formed transaction marker: nothing to index
        entry = self.producer_state.producers.get(producer_id)
        if entry is None or entry.current_txn_first_offset < 0:
            return None
        others = [
            e.current_txn_first_offset
            for pid, e in self.producer_state.producers.items()
            if pid != producer_id and e.current_txn_first_offset >= 0
        ]
        last_stable = min(others) if others else marker_offset + 1
        return AbortedTxn(producer_id, entry.current_txn_first_offset, marker_offset, last_stable)

    def _aborted_by(self, batches: list[RecordBatchView]) -> list[AbortedTxn]:
        """Entries for the abort markers among `batches` (offsets assigned), from the state before them."""
        result = []
        for batch in batches:
            if batch.is_control and batch.producer_id >= 0:
                entry = self._aborted_txn(batch.producer_id, batch.base_offset, batch)
                if entry is not None:
                    result.append(entry)
        return result

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound_offset) (Fetch, read_committed)."""
        index = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        result: list[AbortedTxn] = []
        for segment in self.segments[index:]:
            result.extend(segment.txn_index.collect(start_offset, upper_bound_offset))
        return result

    def _replace_empty_active(self, base_offset: int, now_ms: int) -> None:
        old = self.segments.pop()
        self._bases.pop()
        old.delete_files()
        self.segments.append(self._new_segment(base_offset, now_ms, create=True))
        self._bases.append(base_offset)
        self._dir_dirty = True

    # --- roll ------------------------------------------------------------------------------------

    def _should_roll(
        self, segment: LogSegment, size: int, last_offset: int, max_timestamp: int, now_ms: int
    ) -> bool:
        """Kafka's roll rules: size, segment.ms (measured in record time from the segment's first batch,
        or wall time since creation when batches carry no timestamp), full index, offset overflow."""
        if segment.size == 0:
            return False
        if segment.size + size > self.config.segment_bytes:
            return True
        first_ts = segment.first_batch_timestamp()
        waited = max_timestamp - first_ts if first_ts >= 0 else now_ms - segment.created_ms
        if waited > self.config.segment_ms - self.config.segment_jitter_ms:
            return True
        if segment.offset_index.is_full or segment.time_index.is_full:
            return True
        return last_offset - segment.base_offset > INT32_MAX

    def _maybe_roll(
        self, size: int, last_offset: int, max_timestamp: int, now_ms: int, *, base_for_new: int | None = None
    ) -> None:
        if self._should_roll(self.active_segment, size, last_offset, max_timestamp, now_ms):
            self.roll(now_ms, base_offset=base_for_new)

    @_storage_guard
    def roll(self, now_ms: int, *, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (Kafka's roll); a no-op on an empty active segment."""
        new_base = self.log_end_offset if base_offset is None else max(base_offset, self.log_end_offset)
        old = self.active_segment
        if old.size == 0 and old.base_offset == new_base:
            return old
        old.on_become_inactive()
        self.producer_state.take_snapshot(self.log_end_offset, sync=False)
        self.producer_state.retain_latest(_SNAPSHOTS_TO_KEEP, keep_at_least=self.segments[-1].base_offset)
        segment = self._new_segment(new_base, now_ms, create=True)
        self.segments.append(segment)
        self._bases.append(new_base)
        self._dir_dirty = True
        return segment

    # --- read ------------------------------------------------------------------------------------

    @_storage_guard
    def read(
        self, offset: int, max_bytes: int, upper_bound_offset: int | None = None, min_one_batch: bool = True
    ) -> ReadResult:
        """Whole batches from the one holding `offset`; raises KafkaError(OFFSET_OUT_OF_RANGE)."""
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} outside [{self.log_start_offset}, {leo}] of {self.name}",
            )
        bound = leo if upper_bound_offset is None else min(upper_bound_offset, leo)
        empty = ReadResult([], 0, self.log_start_offset, leo, self.high_watermark)
        if offset >= bound:
            return empty
        index = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        for segment in self.segments[index:]:
            found = segment.find_batch(offset)
            if found is None:
                continue
            start, header = found
            if header.base_offset >= bound:
                return empty
            end_limit = segment.size if bound >= segment.next_offset else segment.position_of(bound)
            end = segment.whole_batches_end(start, min(end_limit, start + max(max_bytes, 0)))
            if end <= start:
                if not min_one_batch:
                    return empty
                end = start + header.size
            return ReadResult(
                [FileSlice(segment.fd, start, end - start)],
                end - start,
                self.log_start_offset,
                leo,
                self.high_watermark,
                header.base_offset,
                segment.next_offset,
            )
        return empty

    def _read_batch(self, segment: LogSegment, position: int, header: BatchHeader) -> RecordBatchView:
        data = os.pread(segment.fd, header.size, position)
        return RecordBatchView(memoryview(data))

    @_storage_guard
    def offset_for_timestamp(
        self, timestamp: int, upper_bound_offset: int | None = None
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp >= `timestamp` (ListOffsets), or None."""
        bound = self.log_end_offset if upper_bound_offset is None else upper_bound_offset
        for segment in self.segments:
            if segment.next_offset <= self.log_start_offset or segment.largest_timestamp < timestamp:
                continue
            found = segment.find_by_timestamp(timestamp, self.log_start_offset)
            if found is None:
                continue
            position, header = found
            if header.base_offset >= bound:
                return None
            for record in iter_records(self._read_batch(segment, position, header)):
                if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                    return (record.offset, record.timestamp) if record.offset < bound else None
            return None
        return None

    @_storage_guard
    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3), or None."""
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.size == 0:
                continue
            segment.ensure_loaded()
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None:
            return None
        found = best.find_batch(best.offset_of_max_timestamp)
        if found is None:
            return None
        position, header = found
        for record in iter_records(self._read_batch(best, position, header)):
            if record.timestamp == header.max_timestamp:
                return record.offset, record.timestamp
        return header.last_offset, header.max_timestamp

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, None when no transaction is open."""
        return self.producer_state.first_unstable_offset()

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the high watermark, or the first offset of the oldest open transaction below it."""
        first_unstable = self.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        return min(self.high_watermark, first_unstable)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch."""
        return self.leader_epochs.end_offset_for(leader_epoch, self.log_end_offset)

    # --- retention and truncation ------------------------------------------------------------------

    def _schedule_delete(self, segments: list[LogSegment], now_ms: int) -> None:
        for segment in segments:
            segment.mark_deleted()
            self._pending_deletes.append(_PendingDelete(now_ms + self.config.file_delete_delay_ms, segment))
        self._dir_dirty = True

    def _delete_prefix(self, count: int, now_ms: int) -> None:
        if count <= 0:
            return
        if count >= len(self.segments):
            self.roll(now_ms)  # Kafka: never leave a log without a segment
            count = len(self.segments) - 1
        removed = self.segments[:count]
        del self.segments[:count]
        del self._bases[:count]
        self._schedule_delete(removed, now_ms)
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        self.producer_state.delete_snapshots(below=self.segments[0].base_offset)

    @_storage_guard
    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: delete segments past retention.ms / retention.bytes / the log start offset.
        Only segments wholly below the high watermark go; returns how many were deleted."""
        config = self.config
        delete_by_retention = config.deletes_by_retention
        size_excess = self.size_in_bytes - config.retention_bytes
        count = 0
        for i, segment in enumerate(self.segments):
            is_last = i == len(self.segments) - 1
            upper = self.log_end_offset if is_last else self.segments[i + 1].base_offset
            if upper > self.high_watermark or (is_last and segment.size == 0):
                break
            breach = not is_last and self.segments[i + 1].base_offset <= self.log_start_offset
            if delete_by_retention and not breach:
                if config.retention_ms >= 0 and now_ms - segment.largest_timestamp > config.retention_ms:
                    breach = True
                elif config.retention_bytes >= 0 and size_excess - segment.size >= 0:
                    breach = True
            if not breach:
                break
            if delete_by_retention and config.retention_bytes >= 0:
                size_excess -= segment.size
            count += 1
        self._delete_prefix(count, now_ms)
        return count

    @_storage_guard
    def delete_records_before(self, offset: int, now_ms: int) -> int:
        """DeleteRecords: move the log start offset to `offset` (-1 = high watermark); returns the new
        log start offset. Raises KafkaError(OFFSET_OUT_OF_RANGE) past the high watermark."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is not in [0, high watermark {self.high_watermark}]",
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.leader_epochs.truncate_from_start(offset)
            count = 0
            while count + 1 < len(self.segments) and self.segments[count + 1].base_offset <= offset:
                count += 1
            self._delete_prefix(count, now_ms)
        return self.log_start_offset

    @_storage_guard
    def truncate_to(self, offset: int, now_ms: int) -> bool:
        """Remove every batch whose last offset is >= `offset` (replica truncation); True if anything went.

        Truncation happens at batch boundaries: a target inside a batch removes that whole batch, so the
        log end becomes that batch's base offset (epoch boundaries and high watermarks, the targets
        replication uses, are batch boundaries anyway). The log never ends below its start offset: a
        truncation reaching below it leaves an empty log starting there."""
        if offset >= self.log_end_offset:
            return False
        offset = max(offset, self.log_start_offset)
        if offset <= self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset, now_ms)
            return True
        index = bisect.bisect_right(self._bases, offset) - 1
        doomed = self.segments[index + 1 :]
        del self.segments[index + 1 :]
        del self._bases[index + 1 :]
        self._schedule_delete(doomed, now_ms)
        self.active_segment.truncate_to(offset)
        if self.log_end_offset < self.log_start_offset:
            self.truncate_fully_and_start_at(self.log_start_offset, now_ms)
            return True
        self._after_truncation()
        return True

    @_storage_guard
    def truncate_fully_and_start_at(self, offset: int, now_ms: int) -> None:
        """Drop every segment and start an empty log at `offset`."""
        doomed = self.segments
        self.segments, self._bases = [], []
        self._schedule_delete(doomed, now_ms)
        self.segments.append(self._new_segment(offset, now_ms, create=True))
        self._bases.append(offset)
        self.log_start_offset = offset
        self.producer_state.delete_snapshots(above=-1)
        self.leader_epochs.clear()
        self._after_truncation()

    def _after_truncation(self) -> None:
        leo = self.log_end_offset
        self.high_watermark = min(self.high_watermark, leo)
        self.recovery_point = min(self.recovery_point, leo)
        self.log_start_offset = min(self.log_start_offset, leo)
        self.leader_epochs.truncate_from_end(leo)
        self._rebuild_producer_state()

    @_storage_guard
    def run_pending_deletes(self, now_ms: int) -> int:
        """Close and remove `.deleted` segments whose delay has passed; returns how many were removed."""
        due = self.take_due_deletes(now_ms)
        if due:
            self.remove_segment_files(due)
        return len(due)

    def take_due_deletes(self, now_ms: int) -> list[LogSegment]:
        """The `.deleted` segments whose delay has passed, taken off the pending list (owner thread).
        Nothing refers to them afterwards except the caller, who passes them to `remove_segment_files`."""
        due = [p.segment for p in self._pending_deletes if p.deadline_ms <= now_ms]
        if due:
            self._pending_deletes = [p for p in self._pending_deletes if p.deadline_ms > now_ms]
        return due

    @_storage_guard
    def remove_segment_files(self, segments: list[LogSegment]) -> None:
        """Close and unlink segments from `take_due_deletes`. May run in a worker thread."""
        for segment in segments:
            segment.delete_files()

    # --- flush -----------------------------------------------------------------------------------

    def flush_needed(self, now_ms: int) -> bool:
        """True when flush.messages or flush.ms says the unflushed data must be fsynced now."""
        if self.unflushed_messages <= 0:
            return False
        return (
            self.unflushed_messages >= self.config.flush_messages
            or now_ms - self.last_flush_ms >= self.config.flush_ms
        )

    @_storage_guard
    def flush(self, now_ms: int | None = None) -> int:
        """fsync everything after the recovery point and advance it; returns the new recovery point.
        Blocking: the broker runs it in a worker thread."""
        target = self.log_end_offset
        pending_messages = self.unflushed_messages
        segments = list(self.segments)
        for segment in segments:
            if segment.next_offset > self.recovery_point or segment is segments[-1] or segment.dirty:
                if segment.deleted:
                    continue
                segment.flush()
        if self._dir_dirty:
            self._dir_dirty = False
            fsync_dir(self.directory)
        with self._flush_lock:
            self.recovery_point = max(self.recovery_point, target)
            self.unflushed_messages = max(0, self.unflushed_messages - pending_messages)
            if now_ms is not None:
                self.last_flush_ms = now_ms
        return self.recovery_point

    # --- closing ---------------------------------------------------------------------------------

    def close(self, *, clean: bool = True) -> None:
        """Close every file. `clean=True` first flushes and writes a producer snapshot at the log end."""
        if clean and not self.offline:
            try:
                self.active_segment.on_become_inactive()
                self.producer_state.take_snapshot(self.log_end_offset, sync=self.sync)
                self.flush()
            except (OSError, KafkaError) as exc:
                log.error("could not close log %s cleanly: %s", self.name, exc)
        for segment in self.segments:
            segment.close()
        for pending in self._pending_deletes:
            pending.segment.close()

    def delete_all_files(self) -> None:
        """Close and remove every file of this log (the directory itself is the manager's)."""
        self.close(clean=False)
        for pending in self._pending_deletes:
            pending.segment.delete_files()
        self._pending_deletes = []
        for segment in self.segments:
            segment.delete_files()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.name}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"segments={len(self.segments)})"
        )
