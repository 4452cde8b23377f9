"""Idempotent-producer state of one partition, and its snapshot files (Kafka's binary format).

Theory of operation: for every producer id that wrote to the partition we keep its epoch and the
metadata of its last five batches (first/last sequence, last offset, offset delta, max timestamp).
`check_and_update()` is called for each incoming batch that carries a producer id, before anything is
written, and decides, as Kafka's leader does:
- a batch whose epoch and sequence range equal one of the five cached batches is a retried duplicate:
  the caller answers with the original offsets and writes nothing;
- an epoch lower than the known one is fenced: INVALID_PRODUCER_EPOCH;
- a new (higher) epoch must start at sequence 0, otherwise OUT_OF_ORDER_SEQUENCE_NUMBER;
- the same epoch must continue at last sequence + 1 (wrapping after 2^31-1), otherwise
  OUT_OF_ORDER_SEQUENCE_NUMBER;
- an unknown producer id starts fresh state at whatever sequence it sends (Kafka 3.x behaviour).
Changes are staged in a `ProducerAppendBatch` and applied only once the whole append was written, so a
rejected request leaves the state untouched. Replicated/recovered batches are applied without checks.

Snapshot file `<offset, 20 digits>.snapshot` (Kafka's format, version 1): int16 version, uint32 CRC-32C
of everything after the CRC, int32 entry count, then per producer: int64 producer id, int16 epoch,
int32 last sequence, int64 last offset, int32 offset delta (last seq - first seq of the last batch),
int64 timestamp, int32 coordinator epoch, int64 current transaction first offset (-1 when none). Like
Kafka, only the last batch of each producer survives a snapshot; the dedup window refills as batches
arrive. Snapshots are taken at segment roll and clean shutdown; recovery loads the newest snapshot at
or below the log end and replays the batch headers after it.

Owned by one PartitionLog.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kafkacompat.wire.crc import crc32c
from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = [
    "BatchMetadata",
    "ProducerAppendBatch",
    "ProducerEntry",
    "ProducerStateManager",
    "read_snapshot",
    "snapshot_offsets",
    "write_snapshot",
]

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
NO_PRODUCER_EPOCH = -1
INT32_MAX = 2_147_483_647
MAX_CACHED_BATCHES = 5


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.producer_id,
            self.epoch,
            deque(self.batches, maxlen=MAX_CACHED_BATCHES),
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerAppendBatch:
    """Producer-state changes staged for one append; `ProducerStateManager.commit()` applies them."""

    def __init__(self, manager: ProducerStateManager) -> None:
        self._manager = manager
        self.updated: dict[int, ProducerEntry] = {}

    def _entry(self, producer_id: int) -> ProducerEntry:
        entry = self.updated.get(producer_id)
        if entry is None:
            current = self._manager.producers.get(producer_id)
            entry = current.copy() if current is not None else ProducerEntry(producer_id)
            self.updated[producer_id] = entry
        return entry

    def find_duplicate(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        current = self._manager.producers.get(producer_id)
        return None if current is None else current.find_duplicate(epoch, first_seq, last_seq)

    def check_epoch(self, producer_id: int, epoch: int, coordinator_epoch: int = -1) -> None:
        """A transaction marker may not come from an older epoch than the producer's, nor from an older
        coordinator than the one that wrote its last marker (-1: an admin abort, not checked)."""
        entry = self.updated.get(producer_id) or self._manager.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker for producer {producer_id} with epoch {epoch} older than {entry.epoch}",
            )
        if entry is not None and 0 <= coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}",
            )

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> None:
        """Validate a client batch against the staged state; raises KafkaError."""
        entry = self.updated.get(producer_id) or self._manager.producers.get(producer_id)
        if entry is None or entry.epoch == NO_PRODUCER_EPOCH:
            return  # unknown producer: fresh state at whatever sequence it sends
        if epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {epoch} is older than {entry.epoch}",
            )
        if epoch != entry.epoch:
            if first_seq != 0:
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id}: new epoch {epoch} must start at sequence 0, got {first_seq}",
                )
            return
        if entry.batches and not _in_sequence(entry.last_seq, first_seq):
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id}: sequence {first_seq} after {entry.last_seq}",
            )

    def add(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        is_transactional: bool,
        is_control: bool,
        coordinator_epoch: int = -1,
    ) -> None:
        entry = self._entry(producer_id)
        if epoch != entry.epoch:
            entry.batches.clear()
            entry.epoch = epoch
        if is_control:
            entry.current_txn_first_offset = -1
            if coordinator_epoch >= 0:
                entry.coordinator_epoch = coordinator_epoch
            return
        if first_seq >= 0:
            entry.batches.append(
                BatchMetadata(first_seq, last_seq, last_offset, last_offset - first_offset, max_timestamp)
            )
        if is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset


class ProducerStateManager:
    """Producer id -> ProducerEntry for one partition, plus its snapshot files in the partition dir."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        # producer id -> first offset of its open transaction: the LSO is read on every fetch, so it
        # must not scan every producer
        self.ongoing_txns: dict[int, int] = {}

    def begin(self) -> ProducerAppendBatch:
        return ProducerAppendBatch(self)

    def commit(self, batch: ProducerAppendBatch) -> None:
        self.producers.update(batch.updated)
        for producer_id, entry in batch.updated.items():
            if entry.current_txn_first_offset >= 0:
                self.ongoing_txns[producer_id] = entry.current_txn_first_offset
            else:
                self.ongoing_txns.pop(producer_id, None)

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction in this partition, None when none is open."""
        return min(self.ongoing_txns.values()) if self.ongoing_txns else None

    def apply_replicated(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        is_transactional: bool,
        is_control: bool,
        coordinator_epoch: int = -1,
    ) -> None:
        """Apply a batch that is already in the log (follower append, recovery): no checks."""
        staged = self.begin()
        staged.add(
            producer_id,
            epoch,
            first_seq,
            last_seq,
            first_offset,
            last_offset,
            max_timestamp,
            is_transactional,
            is_control,
            coordinator_epoch,
        )
        self.commit(staged)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()

    # --- snapshots -------------------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def take_snapshot(self, offset: int, *, sync: bool = True) -> str:
        path = self.snapshot_path(offset)
        write_snapshot(path, self.producers.values(), sync=sync)
        return path

    def load_latest_snapshot(self, max_offset: int) -> int | None:
        """Load the newest readable snapshot at or below `max_offset`; returns its offset or None.
        Unreadable snapshots are deleted (the caller replays the log instead)."""
        for offset in sorted(snapshot_offsets(self.directory), reverse=True):
            if offset > max_offset:
                continue
            path = self.snapshot_path(offset)
            try:
                entries = read_snapshot(path)
            except (ValueError, OSError):
                os.unlink(path)
                continue
            self.producers = {e.producer_id: e for e in entries}
            self.ongoing_txns = {
                e.producer_id: e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0
            }
            return offset
        self.producers = {}
        self.ongoing_txns = {}
        return None

    def delete_snapshots(self, *, below: int | None = None, above: int | None = None) -> None:
        for offset in snapshot_offsets(self.directory):
            if (below is not None and offset < below) or (above is not None and offset > above):
                try:
                    os.unlink(self.snapshot_path(offset))
                except FileNotFoundError:
                    pass

    def retain_latest(self, count: int, keep_at_least: int) -> None:
        """Keep the newest `count` snapshots and any at or above `keep_at_least`."""
        offsets = sorted(snapshot_offsets(self.directory))
        for offset in offsets[:-count] if count else offsets:
            if offset < keep_at_least:
                os.unlink(self.snapshot_path(offset))


def snapshot_offsets(directory: str) -> list[int]:
    result = []
    for name in os.listdir(directory):
        if name.endswith(SNAPSHOT_SUFFIX) and name[: -len(SNAPSHOT_SUFFIX)].isdigit():
            result.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
    return result


def write_snapshot(path: str, entries: Iterable[ProducerEntry], *, sync: bool = True) -> None:
    body = bytearray()
    items = [e for e in entries if e.batches or e.current_txn_first_offset >= 0]
    body += _COUNT.pack(len(items))
    for e in items:
        last = e.batches[-1] if e.batches else None
        body += _ENTRY.pack(
            e.producer_id,
            e.epoch,
            last.last_seq if last else -1,
            last.last_offset if last else -1,
            last.offset_delta if last else 0,
            last.timestamp if last else -1,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    data = _SNAPSHOT_HEAD.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_snapshot(path: str) -> list[ProducerEntry]:
    """Parse a snapshot file; raises ValueError when it is malformed or its CRC does not match."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _SNAPSHOT_HEAD.size + _COUNT.size:
        raise ValueError(f"{path}: too short")
    version, crc = _SNAPSHOT_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise ValueError(f"{path}: unsupported version {version}")
    body = memoryview(data)[_SNAPSHOT_HEAD.size :]
    if crc32c(body) != crc:
        raise ValueError(f"{path}: CRC mismatch")
    (count,) = _COUNT.unpack_from(body, 0)
    if count < 0 or _COUNT.size + count * _ENTRY.size != len(body):
        raise ValueError(f"{path}: {count} entries do not match {len(body)} bytes")
    entries = []
    for pid, epoch, last_seq, last_offset, delta, ts, coord, txn_first in _ENTRY.iter_unpack(
        body[_COUNT.size :]
    ):
        entry = ProducerEntry(pid, epoch, coordinator_epoch=coord, current_txn_first_offset=txn_first)
        if last_offset >= 0:
            entry.batches.append(
                BatchMetadata(
                    (last_seq - delta) % 2147483648 if last_seq >= 0 else -1, last_seq, last_offset, delta, ts
                )
            )
        entries.append(entry)
    return entries
