"""Log compaction (`cleanup.policy=compact`): keep the latest record of every key.

Theory of operation: a clean works on the cleanable prefix of a log: the inactive segments whose
offsets all lie below the high watermark and the first unstable offset (open transactions), and whose
newest timestamp is older than `min.compaction.lag.ms`. It runs in three steps so that the expensive one
can leave the event loop:

1. `CleanPlan.prepare(log, now_ms)` (owner thread): picks the segments.
2. `plan.build()` (any thread): reads those segments batch by batch through their open fds, maps every
   key to the offset of its latest record, and writes for each segment that changes a
   `<base>.log.cleaned` file (fsynced) holding what survives: records that are the latest of their key,
   tombstones (null values) younger than `delete.retention.ms` (measured from the segment's newest
   timestamp), records without a key. Offsets never change: a rebuilt batch keeps its base offset, last
   offset delta, producer fields, leader epoch, codec and timestamp type. A batch left with no record is
   dropped unless it is the last batch of its producer in the cleaned range (then it stays, empty, so
   that producer state can be rebuilt from the log, as Kafka does). Transactional batches of aborted
   transactions (the `.txnindex` entries of the log, collected by `prepare`) are removed whole, as Kafka's
   cleaner removes aborted data, unless one is its producer's last batch (then it stays untouched, its
   keys not counted). A control batch (a COMMIT/ABORT marker) is removed, as Kafka's cleaner removes
   it, once no batch of its transaction is left in the cleaned range (read at the start of the pass:
   the pass that removes a transaction's last data leaves the marker to a later pass, as in Kafka) and
   `delete.retention.ms` has passed (measured like tombstones, from the segment's newest timestamp), so
   a consumer has had that long to read the transaction's end; a marker that is its producer's last
   batch stays (producer state is rebuilt from it). The `.txnindex` entry of a removed ABORT marker goes
   with it; other markers and entries stay untouched, so read_committed fetches are unaffected.
   Records of committed transactions are compacted like any others (the cleanable range lies below the
   last stable offset, so every transaction in it is complete); rebuilt batches keep their transactional
   flag.
3. `plan.commit(log, now_ms)` (owner thread): for each segment still present, renames `.cleaned` to
   `.swap`, renames the old files with `.deleted` (their fds stay open for in-flight reads until
   `file.delete.delay.ms`), renames `.swap` to `.log` and opens it, rebuilding its indexes. A crash
   between those renames leaves files that `PartitionLog` loading resolves: a `.swap` next to its `.log`
   is dropped (the old segment is intact), a `.swap` alone becomes the `.log`.

Every pass cleans the whole cleanable prefix (no `cleaner-offset-checkpoint`, no dirty ratio): simple
and correct, at the price of rereading cleaned data; the broker decides how often to run it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from kafkacompat.log.batch_header import read_header
from kafkacompat.log.partition_log import PartitionLog
from kafkacompat.log.segment import LogSegment
from kafkacompat.log.txn_index import AbortedTxn
from kafkacompat.wire.records import RecordBatchView, RecordInput, TimestampType, build_batch, iter_records

__all__ = ["CleanPlan", "CleanStats", "clean_log"]

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


@dataclass
class CleanStats:
    segments: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_removed: int = 0


@dataclass
class CleanPlan:
    segments: list[LogSegment]
    now_ms: int
    delete_retention_ms: int
    aborted: list[AbortedTxn] = field(default_factory=list)  # aborted transactions over the segments
    outputs: dict[int, str] = field(default_factory=dict)  # base offset -> .cleaned path
    removed_markers: set[int] = field(default_factory=set)  # offsets of the markers this clean drops
    stats: CleanStats = field(default_factory=CleanStats)

    @classmethod
    def prepare(cls, log: PartitionLog, now_ms: int) -> CleanPlan:
        config = log.config
        limit = min(log.high_watermark, log.last_stable_offset, log.active_segment.base_offset)
        lag = config.get("min.compaction.lag.ms")
        chosen = []
        for segment in log.segments[:-1]:
            if segment.next_offset > limit or (segment.size and now_ms - segment.largest_timestamp < lag):
                break
            chosen.append(segment)
        aborted = log.aborted_transactions(chosen[0].base_offset, limit) if chosen else []
        return cls(chosen, now_ms, config.get("delete.retention.ms"), aborted)

    def _is_aborted(self, batch: RecordBatchView, by_producer: dict[int, list[tuple[int, int]]]) -> bool:
        return any(
            first <= batch.base_offset <= last for first, last in by_producer.get(batch.producer_id, ())
        )

    def _batches(self, segment: LogSegment) -> Iterator[RecordBatchView]:
        position = 0
        while position < segment.size:
            header = read_header(segment.fd, position)
            if header is None:
                return
            data = os.pread(segment.fd, header.size, position)
            yield RecordBatchView(memoryview(data))
            position += header.size

    def build(self) -> CleanStats:
        aborted: dict[int, list[tuple[int, int]]] = {}
        for entry in self.aborted:
            aborted.setdefault(entry.producer_id, []).append((entry.first_offset, entry.last_offset))
        latest: dict[bytes, int] = {}
        last_batch_of_producer: dict[int, int] = {}
        in_txn: dict[int, bool] = {}  # producer id -> a batch of its current transaction was read
        spent_markers: set[int] = set()  # markers whose transaction has no batch left in the range
        for segment in self.segments:
            for batch in self._batches(segment):
                if batch.producer_id >= 0:
                    last_batch_of_producer[batch.producer_id] = batch.base_offset
                if batch.is_control:
                    if batch.producer_id >= 0 and not in_txn.pop(batch.producer_id, False):
                        spent_markers.add(batch.base_offset)
                    continue
                if batch.is_transactional:
                    in_txn[batch.producer_id] = True
                    if self._is_aborted(batch, aborted):
                        continue
                for record in iter_records(batch):
                    if record.key is not None:
                        latest[record.key] = record.offset
        for segment in self.segments:
            tombstones_expire = self.now_ms - segment.largest_timestamp > self.delete_retention_ms
            out = bytearray()
            changed = False
            for batch in self._batches(segment):
                if batch.is_transactional and not batch.is_control and self._is_aborted(batch, aborted):
                    if last_batch_of_producer.get(batch.producer_id) != batch.base_offset:
                        changed = True
                        self.stats.records_removed += batch.records_count
                        continue
                if (
                    batch.is_control
                    and batch.base_offset in spent_markers
                    and tombstones_expire
                    and last_batch_of_producer.get(batch.producer_id) != batch.base_offset
                ):
                    changed = True
                    self.removed_markers.add(batch.base_offset)
                    self.stats.records_removed += batch.records_count
                    continue
                if batch.is_control or (batch.is_transactional and self._is_aborted(batch, aborted)):
                    out += batch.buffer  # markers; an aborted producer's last batch
                    continue
                records = list(iter_records(batch))
                kept = [
                    r
                    for r in records
                    if r.key is None
                    or (latest.get(r.key) == r.offset and not (r.value is None and tombstones_expire))
                ]
                if len(kept) == len(records):
                    out += batch.buffer
                    continue
                changed = True
                self.stats.records_removed += len(records) - len(kept)
                keep_empty = batch.producer_id >= 0 and last_batch_of_producer.get(batch.producer_id) == (
                    batch.base_offset
                )
                if not kept and not keep_empty:
                    continue
                log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
                out += build_batch(
                    [RecordInput(r.key, r.value, r.headers, r.timestamp, r.offset_delta) for r in kept],
                    base_offset=batch.base_offset,
                    base_timestamp=batch.base_timestamp if not kept else None,
                    max_timestamp=batch.max_timestamp if (log_append or not kept) else None,
                    producer_id=batch.producer_id,
                    producer_epoch=batch.producer_epoch,
                    base_sequence=batch.base_sequence,
                    is_transactional=batch.is_transactional,
                    compression=batch.compression,
                    timestamp_type=batch.timestamp_type,
                    partition_leader_epoch=batch.partition_leader_epoch,
                    last_offset_delta=batch.last_offset_delta,
                )
            self.stats.segments += 1
            self.stats.bytes_before += segment.size
            self.stats.bytes_after += len(out) if changed else segment.size
            if changed:
                path = segment.log_path + CLEANED_SUFFIX
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    view = memoryview(out)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self.outputs[segment.base_offset] = path
        return self.stats

    def commit(self, log: PartitionLog, now_ms: int) -> int:
        """Swap the cleaned files in; returns how many segments were replaced."""
        replaced = 0
        for segment in self.segments:
            cleaned = self.outputs.pop(segment.base_offset, None)
            if cleaned is None:
                continue
            if segment not in log.segments or segment.deleted:
                os.unlink(cleaned)  # retention or truncation got there first
                continue
            log_path = segment.log_path
            swap = log_path + SWAP_SUFFIX
            os.rename(cleaned, swap)
            aborted = segment.txn_index.entries
            index = log.segments.index(segment)
            log._schedule_delete([segment], now_ms)
            os.rename(swap, log_path)
            fresh = log._new_segment(segment.base_offset, now_ms, create=False)
            fresh.recover()
            for entry in aborted:
                if entry.last_offset not in self.removed_markers:  # that ABORT marker is gone
                    fresh.txn_index.append(entry)
            log.segments[index] = fresh
            replaced += 1
        for leftover in self.outputs.values():
            os.unlink(leftover)
        self.outputs.clear()
        return replaced


def clean_log(log: PartitionLog, now_ms: int) -> CleanStats:
    """Prepare, build and commit one clean in the calling thread."""
    plan = CleanPlan.prepare(log, now_ms)
    stats = plan.build()
    plan.commit(log, now_ms)
    return stats
