"""The two sparse index files of a segment: `.index` (offset -> position) and `.timeindex` (time -> offset).

Theory of operation (file formats are Kafka's):
- `.index`: 8-byte entries, big-endian `int32 relative_offset, int32 position`. The segment appends
  one entry per `index.interval.bytes` of log: the last offset of a batch and that batch's byte position.
  `lookup(offset)` gives the greatest entry whose offset is <= the target; the caller scans forward in the
  log from that position.
- `.timeindex`: 12-byte entries, big-endian `int64 timestamp, int32 relative_offset`; an entry is
  appended only when its timestamp is greater than the last one, so timestamps are strictly increasing.
  `lookup(ts)` gives the greatest entry whose timestamp is <= the target.

Files are not preallocated: their size is always a whole number of entries, which is what Kafka leaves
behind after it trims its preallocated files on close. New entries are buffered and written to the file
by `flush()`/`close()` (or once 64 KiB are pending): Kafka's mmap'd indexes reach the disk just as
lazily, and an index that was not flushed before a crash belongs to a segment after the recovery
point, which recovery rebuilds anyway. Entries are kept in memory in two `array`s
(4-8 bytes per value), loaded lazily on first use, so starting a broker with many segments reads only
what it touches. The fd is opened on the first append (only the active segment appends).

`check(log_size)` validates the file cheaply (size multiple of the entry size, last entry within the
segment); `load()` validates every entry (monotonic offsets and positions). Either failing means the
owner rebuilds the index from the log: a bad index is never fatal.

Owned by one `LogSegment`; nothing else touches these files.
"""

from __future__ import annotations

import os
import struct
import threading
from array import array
from bisect import bisect_right

__all__ = ["IndexCorrupt", "OffsetIndex", "TimeIndex"]


class IndexCorrupt(Exception):
    """The index file does not match its format or its segment; it must be rebuilt."""


class _SparseIndex:
    ENTRY: struct.Struct
    KEY_TYPE: str
    VALUE_TYPE: str

    def __init__(self, path: str, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.ENTRY.size)
        self._keys: array | None = None
        self._values: array | None = None
        self._fd: int | None = None
        self.dirty = False
        self.position_limit: int | None = None  # log size, for the offset index's positions
        self._pending = bytearray()  # entries not yet written to the file
        self._written = 0  # entries in the file
        self._lock = threading.Lock()  # flush() may write pending entries from a worker thread

    # --- file handling ---------------------------------------------------------------------------

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def file_size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return -1

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def write_pending(self) -> None:
        with self._lock:
            if self._pending:
                os.pwrite(self._open(), self._pending, self._written * self.ENTRY.size)
                self._written += len(self._pending) // self.ENTRY.size
                self._pending = bytearray()

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False  # cleared first: an append racing with this flush sets it again
            self.write_pending()
            if self._fd is not None:
                os.fsync(self._fd)

    def close(self) -> None:
        self.write_pending()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename(self, new_path: str) -> None:
        os.rename(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    # --- loading ---------------------------------------------------------------------------------

    def _ensure_loaded(self) -> None:
        if self._keys is None:
            self.load()

    def load(self) -> None:
        """Read and fully validate the file; raises IndexCorrupt."""
        keys = array(self.KEY_TYPE)
        values = array(self.VALUE_TYPE)
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                data = f.read()
            if len(data) % self.ENTRY.size:
                raise IndexCorrupt(f"{self.path}: size {len(data)} is not a multiple of {self.ENTRY.size}")
            for key, value in self.ENTRY.iter_unpack(data):
                keys.append(key)
                values.append(value)
        self._validate(keys, values)
        self._written = len(keys)
        if self.position_limit is not None and values and values[-1] >= max(self.position_limit, 1):
            raise IndexCorrupt(f"{self.path}: entry points past the end of the log")
        self._keys, self._values = keys, values

    def _validate(self, keys: array, values: array) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        """Drop every entry (file truncated to zero), e.g. before a rebuild."""
        with self._lock:
            os.ftruncate(self._open(), 0)
            self._pending = bytearray()
            self._written = 0
        self._keys = array(self.KEY_TYPE)
        self._values = array(self.VALUE_TYPE)
        self.dirty = True

    def _append_raw(self, key: int, value: int) -> None:
        assert self._keys is not None and self._values is not None
        with self._lock:
            self._pending += self.ENTRY.pack(key, value)
        if len(self._pending) >= 65536:
            self.write_pending()
        self._keys.append(key)
        self._values.append(value)
        self.dirty = True

    def _truncate_entries(self, count: int) -> None:
        assert self._keys is not None and self._values is not None
        if count >= len(self._keys):
            return
        del self._keys[count:]
        del self._values[count:]
        with self._lock:
            if count < self._written:
                os.ftruncate(self._open(), count * self.ENTRY.size)
                self._written = count
                self._pending = bytearray()
            else:
                del self._pending[(count - self._written) * self.ENTRY.size :]
        self.dirty = True

    def _last_raw(self) -> tuple[int, int] | None:
        """Last entry read from the file without loading it (for cheap checks at startup)."""
        if self._keys is not None:
            return (self._keys[-1], self._values[-1]) if self._keys else None  # type: ignore[index]
        size = self.file_size()
        if size < self.ENTRY.size:
            return None
        with open(self.path, "rb") as f:
            f.seek(size - size % self.ENTRY.size - self.ENTRY.size)
            return self.ENTRY.unpack(f.read(self.ENTRY.size))

    @property
    def entries(self) -> int:
        self._ensure_loaded()
        assert self._keys is not None
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries


class OffsetIndex(_SparseIndex):
    """A segment's `.index`: sparse map from offset to the byte position of the batch holding it."""

    ENTRY = struct.Struct(">ii")
    KEY_TYPE = "i"
    VALUE_TYPE = "i"

    def _validate(self, keys: array, values: array) -> None:
        for i in range(1, len(keys)):
            if keys[i] <= keys[i - 1] or values[i] < values[i - 1]:
                raise IndexCorrupt(f"{self.path}: entry {i} is not after entry {i - 1}")
        if keys and keys[0] < 0:
            raise IndexCorrupt(f"{self.path}: negative relative offset")
        if values and values[0] < 0:  # positions only increase, so the first bounds them all
            raise IndexCorrupt(f"{self.path}: negative position")

    def check(self, log_size: int) -> None:
        """Cheap validation at startup; raises IndexCorrupt."""
        size = self.file_size()
        if size < 0:
            raise IndexCorrupt(f"{self.path}: missing")
        if size % self.ENTRY.size:
            raise IndexCorrupt(f"{self.path}: size {size} is not a multiple of {self.ENTRY.size}")
        last = self._last_raw()
        if last is not None and (last[0] < 0 or not 0 <= last[1] < max(log_size, 1)):
            raise IndexCorrupt(f"{self.path}: last entry {last} does not fit a log of {log_size} bytes")

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) when empty."""
        last = self._last_raw()
        return (self.base_offset, 0) if last is None else (self.base_offset + last[0], last[1])

    def append(self, offset: int, position: int) -> None:
        self._ensure_loaded()
        assert self._keys is not None
        relative = offset - self.base_offset
        if self._keys and relative <= self._keys[-1]:
            return  # an entry at or after this offset exists (e.g. a re-appended batch after truncation)
        self._append_raw(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """Greatest (offset, position) entry with offset <= `offset`; (base_offset, 0) when none."""
        self._ensure_loaded()
        assert self._keys is not None and self._values is not None
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def floor_position(self, position: int) -> int:
        """Greatest indexed batch position <= `position` (0 when none): a batch boundary to scan from."""
        self._ensure_loaded()
        assert self._values is not None
        i = bisect_right(self._values, position) - 1
        return self._values[i] if i >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= `offset`."""
        self._ensure_loaded()
        assert self._keys is not None
        self._truncate_entries(bisect_right(self._keys, offset - self.base_offset - 1))

    def iter_entries(self) -> list[tuple[int, int]]:
        self._ensure_loaded()
        assert self._keys is not None and self._values is not None
        return [(self.base_offset + k, v) for k, v in zip(self._keys, self._values, strict=True)]


class TimeIndex(_SparseIndex):
    """A segment's `.timeindex`: strictly increasing timestamps and the offset where each is reached."""

    ENTRY = struct.Struct(">qi")
    KEY_TYPE = "q"
    VALUE_TYPE = "i"

    def _validate(self, keys: array, values: array) -> None:
        for i in range(1, len(keys)):
            if keys[i] <= keys[i - 1] or values[i] < values[i - 1]:
                raise IndexCorrupt(f"{self.path}: entry {i} is not after entry {i - 1}")
        if values and values[0] < 0:
            raise IndexCorrupt(f"{self.path}: negative relative offset")

    def check(self, next_offset: int | None = None) -> None:
        size = self.file_size()
        if size < 0:
            raise IndexCorrupt(f"{self.path}: missing")
        if size % self.ENTRY.size:
            raise IndexCorrupt(f"{self.path}: size {size} is not a multiple of {self.ENTRY.size}")
        last = self._last_raw()
        if last is not None and last[1] < 0:
            raise IndexCorrupt(f"{self.path}: negative relative offset in last entry")
        if last is not None and next_offset is not None and self.base_offset + last[1] >= next_offset:
            raise IndexCorrupt(f"{self.path}: last entry points past the end of the segment")

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        last = self._last_raw()
        return (-1, self.base_offset) if last is None else (last[0], self.base_offset + last[1])

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append (timestamp, offset) if `timestamp` is greater than the last entry's."""
        self._ensure_loaded()
        assert self._keys is not None and self._values is not None
        relative = offset - self.base_offset
        if self._keys and (timestamp <= self._keys[-1] or relative < self._values[-1]):
            return
        self._append_raw(timestamp, relative)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Greatest (timestamp, offset) entry with timestamp <= `timestamp`; (-1, base_offset) when none."""
        self._ensure_loaded()
        assert self._keys is not None and self._values is not None
        i = bisect_right(self._keys, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._keys[i], self.base_offset + self._values[i]

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= `offset`."""
        self._ensure_loaded()
        assert self._values is not None
        relative = offset - self.base_offset
        keep = len(self._values)
        while keep and self._values[keep - 1] >= relative:
            keep -= 1
        self._truncate_entries(keep)

    def iter_entries(self) -> list[tuple[int, int]]:
        self._ensure_loaded()
        assert self._keys is not None and self._values is not None
        return [(k, self.base_offset + v) for k, v in zip(self._keys, self._values, strict=True)]
