"""One log segment: `<base>.log` with its `<base>.index`, `<base>.timeindex` (and `<base>.txnindex`).

Theory of operation: the `.log` file is a plain sequence of v2 record batches exactly as they travel on
the wire, offsets already assigned. Appends write whole validated batches at the end of the file with
`os.pwrite` (page cache only; `flush()` fsyncs) and then add index entries: once more than
`index.interval.bytes` of log has been written since the last entry, the next batch gets an offset index
entry (its last offset, its position) and the time index gets the segment's running maximum timestamp
with the offset where it was reached (Kafka's rule). Reads never touch record bytes: an offset becomes a
byte position through the offset index plus a forward scan of 61-byte headers (`os.pread`), and callers
get `FileSlice`s over the open fd.

`recover()` rescans the whole file, verifying every batch (size, magic, offsets, CRC-32C) and walking
its records (`record_validator`, with the rules of every non-client origin: a compressed batch is
inflated under the same bound as on append), rebuilds both indexes from scratch and truncates the file
at the first bad batch. A batch whose CRC is right but whose records no reader can walk (stored by an
older version that did not check them) is damage like a torn write: it and everything after it go.
Kafka's recovery checks the CRC only; the walk costs one pass over the records of the segments after
the recovery point, the only ones recovery reads. `load_tail()` is the cheap
path after a clean shutdown: from the last index entry it scans headers to the end of the file to learn
the next offset and the latest timestamps.

Owned by one `PartitionLog`; the fd stays open until `delete_files()`/`close()`, so FileSlices taken
before a retention delete remain valid during `file.delete.delay.ms`.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator

from kafkacompat.log.batch_header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    read_header,
    verify_batch,
)
from kafkacompat.log.index import IndexCorrupt, OffsetIndex, TimeIndex
from kafkacompat.log.record_validator import check_batch_records
from kafkacompat.log.txn_index import TransactionIndex
from kafkacompat.log.validator import MAX_INFLATED_BATCH_BYTES
from kafkacompat.wire.errors import KafkaError
from kafkacompat.wire.records import RecordBatchView

__all__ = ["DELETED_SUFFIX", "BatchInfo", "LogSegment", "segment_file_name"]

log = logging.getLogger("kafkacompat.log")

DELETED_SUFFIX = ".deleted"
_SCAN_CHUNK = 4 * 1024 * 1024
_INT32 = struct.Struct(">i")
INT32_MAX = 2_147_483_647

BatchInfo = tuple[int, int, int]  # (last_offset, max_timestamp, size) of a batch being appended


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def _records_fault(batch: memoryview, base_offset: int) -> str | None:
    """Why the records of a stored batch (header and CRC already verified) fail the record walk of
    `record_validator` with the rules of every non-client origin, or None when they pass."""
    try:
        check_batch_records(
            RecordBatchView(batch),
            compacted=False,
            timestamp_check=None,
            max_inflated_bytes=MAX_INFLATED_BATCH_BYTES,
        )
    except KafkaError as exc:
        return f"invalid records in the batch at offset {base_offset}: {exc.code.name}: {exc.message}"
    return None


class LogSegment:
    """A segment's three files and its in-memory state (size, next offset, max timestamp, index cursor)."""

    def __init__(
        self,
        directory: str,
        base_offset: int,
        index_interval_bytes: int,
        max_index_bytes: int,
        *,
        create: bool = False,
        now_ms: int = 0,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = os.path.join(directory, segment_file_name(base_offset, ".log"))
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if create else 0)
        self.fd = os.open(self.log_path, flags, 0o644)
        stat = os.fstat(self.fd)
        self.size = stat.st_size
        self.created_ms = now_ms if create else int(stat.st_mtime * 1000)
        self.offset_index = OffsetIndex(
            os.path.join(directory, segment_file_name(base_offset, ".index")), base_offset, max_index_bytes
        )
        self.time_index = TimeIndex(
            os.path.join(directory, segment_file_name(base_offset, ".timeindex")),
            base_offset,
            max_index_bytes,
        )
        self.txn_index = TransactionIndex(
            os.path.join(directory, segment_file_name(base_offset, ".txnindex"))
        )
        self.offset_index.position_limit = self.size
        if create:
            self.txn_index.delete()
            self.offset_index.reset()
            self.time_index.reset()
        self._next_offset: int = base_offset  # valid once loaded (load_tail/recover) or created
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self._tail_loaded = create
        self.bytes_since_last_index_entry = 0
        self.rolling_timestamp: int | None = None  # max timestamp of the first batch (segment.ms)
        self.dirty = create
        self.deleted = False

    # --- loading ---------------------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """Offset after the segment's last batch (loads the tail of a segment not touched since startup)."""
        if not self._tail_loaded:
            try:
                self.load_tail()
            except IndexCorrupt as exc:
                self._repair_indexes(exc)
        return self._next_offset

    def check_indexes(self) -> None:
        """Cheap startup validation of both index files; raises IndexCorrupt."""
        self.offset_index.check(self.size)
        self.time_index.check()

    def load_tail(self) -> None:
        """Learn next offset and max timestamp by scanning headers after the last index entry.
        Raises IndexCorrupt if the log does not continue cleanly from the index (recover() then)."""
        if self._tail_loaded:
            return
        last_offset, position = self.offset_index.last_entry()
        max_ts, max_ts_offset = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        next_offset = self.base_offset if position == 0 else last_offset + 1
        while position < self.size:
            header = read_header(self.fd, position)
            if header is None or header.batch_length < MIN_BATCH_LENGTH or position + header.size > self.size:
                raise IndexCorrupt(f"{self.log_path}: no complete batch at position {position}")
            if header.base_offset < self.base_offset:
                raise IndexCorrupt(f"{self.log_path}: batch offset {header.base_offset} below segment base")
            next_offset = header.next_offset
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = header.max_timestamp, header.last_offset
            position += header.size
        self._next_offset = next_offset
        self.bytes_since_last_index_entry = self.size - self.offset_index.last_entry()[1]
        self._tail_loaded = True

    def recover(
        self, max_batch_bytes: int | None = None, next_segment_base: int | None = None
    ) -> tuple[int, str | None]:
        """Verify every batch and its records, rebuild the indexes, truncate at the first bad batch.

        `next_segment_base`, when given, bounds the offsets this segment may hold: the base offset is
        not covered by the CRC, so a flipped bit there can make a batch claim offsets of a later segment.
        Returns (bytes truncated, reason or None)."""
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.bytes_since_last_index_entry = 0
        self.rolling_timestamp = None
        expected = self.base_offset
        position = 0
        end = self.size
        buf = b""
        buf_position = 0
        reason: str | None = None
        while position < end:
            offset_in_buf = position - buf_position
            available = len(buf) - offset_in_buf
            if available < HEADER_SIZE:
                buf = os.pread(self.fd, min(_SCAN_CHUNK, end - position), position)
                buf_position, offset_in_buf, available = position, 0, len(buf)
            if available >= LOG_OVERHEAD:
                total = _INT32.unpack_from(buf, offset_in_buf + 8)[0] + LOG_OVERHEAD
                if available < total <= end - position:
                    buf = os.pread(self.fd, max(total, min(_SCAN_CHUNK, end - position)), position)
                    buf_position, offset_in_buf, available = position, 0, len(buf)
            header, reason = verify_batch(memoryview(buf), offset_in_buf, available)
            if reason is None and header is not None:
                if header.base_offset < expected:
                    reason = f"batch offset {header.base_offset} not after {expected - 1}"
                elif header.last_offset - self.base_offset > INT32_MAX:
                    reason = f"offset {header.last_offset} too far from segment base"
                elif next_segment_base is not None and header.last_offset >= next_segment_base:
                    reason = f"offset {header.last_offset} reaches the next segment ({next_segment_base})"
                else:
                    reason = _records_fault(
                        memoryview(buf)[offset_in_buf : offset_in_buf + header.size], header.base_offset
                    )
            if reason is not None or header is None:
                break
            self._index_batch(header.last_offset, header.max_timestamp, header.size, position)
            expected = header.next_offset
            position += header.size
        truncated = self.size - position
        if truncated:
            os.ftruncate(self.fd, position)
            self.size = position
            self.dirty = True
        self.txn_index.truncate_to(expected)
        self._next_offset = expected
        self._tail_loaded = True
        return truncated, (reason if truncated else None)

    # --- appending -------------------------------------------------------------------------------

    def _index_batch(self, last_offset: int, max_timestamp: int, size: int, position: int) -> None:
        if self.rolling_timestamp is None and position == 0:
            self.rolling_timestamp = max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def append(self, data: memoryview | bytes, batches: list[BatchInfo]) -> int:
        """Write `data` (whole batches, offsets assigned) at the end; returns the position written at.
        On a write error the file is cut back to its previous size before the error propagates."""
        position = self.size
        view = memoryview(data)
        done = 0
        try:
            while done < len(view):
                done += os.pwrite(self.fd, view[done:], position + done)
        except OSError:
            try:
                os.ftruncate(self.fd, position)
            except OSError:
                pass
            raise
        self.size = position + done
        self.dirty = True
        written_end = self.size
        try:
            for last_offset, max_timestamp, size in batches:
                self._index_batch(last_offset, max_timestamp, size, position)
                position += size
        except IndexCorrupt as exc:
            # an index first loaded here (lazily) was garbled: the batches are written, rebuild the
            # indexes from the log (which indexes them too) rather than fail an append that happened
            self._repair_indexes(exc)
            if self.size < written_end:
                raise OSError(f"{self.log_path}: corrupt data before the appended batches") from exc
        if batches:
            self._next_offset = batches[-1][0] + 1
        return self.size - done

    def on_become_inactive(self) -> None:
        """Called at roll: make the time index end with the segment's max timestamp (Kafka does)."""
        if self.max_timestamp >= 0:
            try:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            except IndexCorrupt as exc:  # garbled, found on its first (lazy) load: rebuild, then append
                self._repair_indexes(exc)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    # --- lookups ---------------------------------------------------------------------------------

    def _repair_indexes(self, exc: IndexCorrupt) -> None:
        log.warning("segment %s: %s; rebuilding its indexes from the log", self.log_path, exc)
        self.recover()

    def _index_position(self, offset: int) -> int:
        try:
            return self.offset_index.lookup(offset)[1]
        except IndexCorrupt as exc:  # found on first (lazy) load: rebuild, never fail the read
            self._repair_indexes(exc)
            return self.offset_index.lookup(offset)[1]

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset >= `offset`, or None."""
        position = self._index_position(offset)
        if not 0 <= position < max(self.size, 1):
            # load() refuses such entries; an index loaded before the log shrank can still hold one
            position = 0
        if position:
            # The entry found is at or before `offset`, so the batch it points at starts at or before it.
            # One that does not (or no batch there) is an index garbled in a way its load checks cannot
            # see (a flipped byte in an entry's offset): scanning on from there would skip batches.
            first = read_header(self.fd, position)
            if first is None or first.base_offset > offset:
                self._repair_indexes(
                    IndexCorrupt(f"{self.offset_index.path}: the entry for offset {offset} is wrong")
                )
                position = self._index_position(offset)
        while position < self.size:
            header = read_header(self.fd, position)
            if header is None:
                return None
            if header.last_offset >= offset:
                return position, header
            position += header.size
        return None

    def position_of(self, offset: int) -> int:
        """Position of the batch holding `offset` (or the first one after it); the size if none."""
        found = self.find_batch(offset)
        return self.size if found is None else found[0]

    def whole_batches_end(self, start: int, limit: int) -> int:
        """Greatest batch boundary in [start, limit] when scanning whole batches from `start`."""
        if limit >= self.size:
            return self.size
        try:
            floor = self.offset_index.floor_position(limit)
        except IndexCorrupt as exc:
            self._repair_indexes(exc)
            floor = self.offset_index.floor_position(limit)
        position = max(start, floor)
        while position < limit:
            header = read_header(self.fd, position)
            if header is None or position + header.size > limit:
                break
            position += header.size
        return position

    def iter_headers(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) for every batch from `start_position` to the end of the file."""
        position = start_position
        while position < self.size:
            header = read_header(self.fd, position)
            if header is None or header.batch_length < MIN_BATCH_LENGTH:
                return
            yield position, header
            position += header.size

    def find_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch from `start_offset` on with max timestamp >= `timestamp`."""
        try:
            _, indexed_offset = self.time_index.lookup(timestamp)
        except IndexCorrupt as exc:
            self._repair_indexes(exc)
            _, indexed_offset = self.time_index.lookup(timestamp)
        position = self._index_position(max(indexed_offset, start_offset))
        for pos, header in self.iter_headers(position):
            if header.last_offset >= start_offset and header.max_timestamp >= timestamp:
                return pos, header
        return None

    @property
    def largest_timestamp(self) -> int:
        """Largest batch max timestamp in the segment; the file's mtime when no batch carries one."""
        if not self._tail_loaded:
            self.load_tail()
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self.fd).st_mtime * 1000)

    def first_batch_timestamp(self) -> int:
        """Max timestamp of the first batch (-1 when empty or untimed): the base of segment.ms rolls."""
        if self.rolling_timestamp is None:
            header = read_header(self.fd, 0) if self.size else None
            if header is None:
                return -1
            self.rolling_timestamp = header.max_timestamp
        return self.rolling_timestamp

    def ensure_loaded(self) -> None:
        self.load_tail()

    # --- changing the file -------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset >= `offset`; returns bytes removed."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        os.ftruncate(self.fd, position)
        self.size = position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.dirty = True
        self._tail_loaded = False
        self.rolling_timestamp = None if position == 0 else self.rolling_timestamp
        self.load_tail()
        return removed

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False  # cleared first: an append racing with this fsync sets it again
            os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def mark_deleted(self) -> None:
        """Rename the files with the `.deleted` suffix; the fd stays open for in-flight reads."""
        for path_holder in (self.offset_index, self.time_index):
            if path_holder.exists():
                path_holder.rename(path_holder.path + DELETED_SUFFIX)
            else:
                path_holder.path += DELETED_SUFFIX
        self.txn_index.rename(self.txn_index.path + DELETED_SUFFIX)
        os.rename(self.log_path, self.log_path + DELETED_SUFFIX)
        self.log_path += DELETED_SUFFIX
        self.deleted = True

    def delete_files(self) -> None:
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.offset_index.close()
        self.time_index.close()

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"
