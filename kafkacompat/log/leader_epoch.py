"""Leader epoch cache of one partition: which leader epoch started at which offset.

Theory of operation: an ordered list of (epoch, start offset), epochs and offsets both increasing,
persisted in the partition dir as `leader-epoch-checkpoint` (Kafka's text format: version 0, count,
`epoch startOffset` lines) and rewritten atomically on every change. The leader assigns an entry when it
appends the first batch of a new epoch; followers assign from the epochs in the batches they copy.
`end_offset_for()` answers OffsetForLeaderEpoch with Kafka's rules; truncation from the end (replica
truncation, recovery) and from the start (log start offset moving) keep the cache consistent with the log.

Owned by one PartitionLog.
"""

from __future__ import annotations

import os

from kafkacompat.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    CheckpointError,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "LeaderEpochCache"]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: str, *, sync: bool = True) -> None:
        self.path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        self.sync = sync
        try:
            entries = read_epoch_checkpoint(self.path)
        except (CheckpointError, OSError):
            entries = []  # rebuilt from the batches' partition leader epochs by the owner
            self.damaged = True
        else:
            self.damaged = False
        self.entries: list[tuple[int, int]] = []
        for epoch, offset in entries:
            if not self.entries or (epoch > self.entries[-1][0] and offset >= self.entries[-1][1]):
                self.entries.append((epoch, offset))

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def _persist(self) -> None:
        write_epoch_checkpoint(self.path, self.entries, sync=self.sync)

    def assign(self, epoch: int, start_offset: int, *, persist: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset` if it is newer than the latest; True if changed."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return False
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()  # an older epoch claimed offsets that the new one now starts at
        self.entries.append((epoch, start_offset))
        if persist:
            self._persist()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch."""
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.entries[-1][0]:
            return requested_epoch, log_end_offset
        higher = next((e for e in self.entries if e[0] > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for entry in self.entries:
            if entry[0] <= requested_epoch:
                floor = entry
        return (requested_epoch if floor is None else floor[0]), higher[1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after `end_offset`."""
        kept = [e for e in self.entries if e[1] < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly below `start_offset`; the epoch covering it now starts there."""
        kept = [e for e in self.entries if e[1] >= start_offset]
        before = [e for e in self.entries if e[1] < start_offset]
        if before and (not kept or kept[0][1] > start_offset):
            kept.insert(0, (before[-1][0], start_offset))
        if kept != self.entries:
            self.entries = kept
            self._persist()

    def clear(self) -> None:
        self.entries = []
        self._persist()
