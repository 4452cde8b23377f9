"""A segment's aborted-transaction index, `<base>.txnindex` (Kafka's format).

Theory of operation: one 34-byte big-endian entry per transaction aborted by a marker in this segment:
int16 version (0), int64 producer id, int64 first offset of the transaction, int64 offset of the abort
marker, int64 last stable offset when the marker was written. The file exists only once a segment has an
entry (most never do). Fetch with read_committed asks `collect(start, upper_bound)` for the aborted
transactions overlapping the fetched range; the consumer drops their records.

Entries are written at once (aborts are rare) so that they survive a process crash with the log; recovery
drops entries past the log end and re-adds those of markers it replays. Owned by one LogSegment.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

__all__ = ["AbortedTxn", "TransactionIndex"]

_ENTRY = struct.Struct(">hqqqq")


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: str) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None

    def _load(self) -> list[AbortedTxn]:
        if self._entries is None:
            entries: list[AbortedTxn] = []
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            usable = len(data) - len(data) % _ENTRY.size
            for version, pid, first, last, lso in _ENTRY.iter_unpack(data[:usable]):
                if version != 0 or (entries and last <= entries[-1].last_offset):
                    break  # garbage from here on: keep what is sound
                entries.append(AbortedTxn(pid, first, last, lso))
            if usable != len(data) or len(entries) * _ENTRY.size != usable:
                self._rewrite(entries)
            self._entries = entries
        return self._entries

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if not entries:
            if os.path.exists(self.path):
                os.unlink(self.path)
            return
        with open(self.path, "wb") as f:
            f.write(b"".join(_ENTRY.pack(0, *e) for e in entries))

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._load())

    def append(self, entry: AbortedTxn) -> None:
        entries = self._load()
        if entries and entry.last_offset <= entries[-1].last_offset:
            return  # already indexed (a replay after recovery)
        with open(self.path, "ab") as f:
            f.write(_ENTRY.pack(0, *entry))
        entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after `offset`."""
        entries = self._load()
        kept = [e for e in entries if e.last_offset < offset]
        if len(kept) != len(entries):
            self._entries = kept
            self._rewrite(kept)

    def collect(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        return [
            e for e in self._load() if e.last_offset >= start_offset and e.first_offset < upper_bound_offset
        ]

    def flush(self) -> None:
        if self._entries and os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename(self, new_path: str) -> None:
        if os.path.exists(self.path):
            os.rename(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
