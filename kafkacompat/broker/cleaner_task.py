"""The log cleaner's trio task: compacts the logs whose `cleanup.policy` includes `compact`.

Theory of operation
-------------------
`LogCleanerTask.run()` (started by the server in its background nursery when `log.cleaner.enable` is
true) makes one pass every `log.cleaner.backoff.ms`; `run_once()` makes a pass now (tests, tools) and
`trigger()` wakes the periodic loop early. Passes never overlap (one lock): two plans over the same
segment would write the same `.cleaned` file. The first periodic pass waits until the group coordinator
has loaded `__consumer_offsets`, so start-up replay does not compete with a clean of the same logs.

A pass visits `LogManager.compacted_logs()` one log at a time, in three steps (see log/cleaner.py):

1. trio thread: `CleanPlan.prepare` picks the cleanable segments; the task decides whether the log is
   worth cleaning (below) and, if so, duplicates the descriptors of those segments and notes their sizes;
2. worker thread (`trio.to_thread.run_sync`): `plan.build()` reads the segments through the duplicated
   descriptors (a segment closed meanwhile by a delayed delete cannot make it read another file) and
   writes the `.cleaned` files;
3. trio thread: the task checks that nothing changed under the plan (the log is still the manager's
   log for that partition, online and compacted; every planned segment still present is inactive and
   has the size it had at step 1; a segment deleted meanwhile is left out by `commit` itself), then
   `plan.commit` swaps the cleaned files in. When anything changed the outputs are removed and the log
   waits for the next pass.

A failing log (build or commit raising) gets one warning and its outputs removed; the pass goes on
with the other logs (and tries that log again on the next one). A failure inside `commit` takes the log
offline (its segment list may no longer match its files), as a storage error does elsewhere.

When a log is worth cleaning. Kafka keeps a `cleaner-offset-checkpoint` (the end of the cleaned part of
each log) and cleans a log when dirty bytes / cleanable bytes >= `min.cleanable.dirty.ratio`. This task
keeps that "clean end" in memory per log: the cleanable segments from the clean end onwards are dirty,
those below it clean; the log is due when

- it has dirty bytes and dirty / (clean + dirty) >= `min.cleanable.dirty.ratio`; or
- it has dirty bytes and its oldest dirty segment's first batch is older than `max.compaction.lag.ms`;
- or the tombstone horizon of the last clean has passed: a clean keeps tombstones younger than
  `delete.retention.ms`, so the task cleans the log once more when the newest segment it cleaned becomes
  older than that (at most one extra read per log per `delete.retention.ms`).

So an idle compacted topic is read once, not every pass. The clean end is not persisted: after a
restart every compacted log with cleanable segments is cleaned once (its whole cleanable part counts as
dirty), which rereads data but never loses any.

Shutdown: cancelling the task while a build runs sets the plan's abort flag, the worker stops at its
next batch and the outputs written so far are removed; `.cleaned` files that a crash leaves behind are
removed when the log is loaded (PartitionLog loading drops `.cleaned` and unpaired `.swap` files).

Owned by the server (`Broker.cleaner`); it only touches logs on the trio thread, except for the build.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from kafkacompat.log.batch_header import read_header
from kafkacompat.log.cleaner import CleanPlan, CleanStats
from kafkacompat.log.segment import LogSegment
from kafkacompat.wire.records import RecordBatchView

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.log.partition_log import PartitionLog

__all__ = ["CleanerAborted", "LogCleanerTask", "cleaning_due"]

log = logging.getLogger("kafkacompat.cleaner")

LONG_MAX = 9_223_372_036_854_775_807

TopicPartition = tuple[str, int]
ThreadRunner = Callable[[Callable[[], CleanStats]], Awaitable[CleanStats]]


class CleanerAborted(Exception):
    """Raised inside a build when the task was cancelled (shutdown)."""


class _TaskPlan(CleanPlan):
    """A CleanPlan whose build reads through descriptors duplicated on the trio thread, with sizes fixed
    at prepare time, and stops at the next batch once `abort` is set."""

    def attach(self) -> None:
        self.abort = threading.Event()
        self.sources: dict[int, tuple[int, int]] = {}  # base offset -> (duplicated fd, size)
        self.sizes: dict[int, int] = {}
        try:
            for segment in self.segments:
                self.sources[segment.base_offset] = (os.dup(segment.fd), segment.size)
                self.sizes[segment.base_offset] = segment.size
        except OSError:
            self.release()
            raise

    def _batches(self, segment: LogSegment) -> Iterator[RecordBatchView]:
        fd, size = self.sources[segment.base_offset]
        position = 0
        while position < size:
            if self.abort.is_set():
                raise CleanerAborted()
            header = read_header(fd, position)
            if header is None:
                return
            data = os.pread(fd, header.size, position)
            yield RecordBatchView(memoryview(data))
            position += header.size

    def release(self) -> None:
        for fd, _ in self.sources.values():
            os.close(fd)
        self.sources = {}

    def discard_outputs(self) -> None:
        for path in self.outputs.values():
            try:
                os.unlink(path)
            except OSError:
                pass
        self.outputs.clear()


@dataclass
class _Progress:
    """What the task remembers of one log between passes."""

    log: PartitionLog  # the log object this is about (a recreated partition is a new object)
    clean_end: int  # offsets below it were cleaned by the last pass
    recheck_at_ms: int | None  # tombstone horizon of the last clean, if still ahead


def cleaning_due(
    plan: CleanPlan, progress: _Progress | None, now_ms: int, min_dirty_ratio: float, max_lag_ms: int
) -> bool:
    """Whether the log of `plan` is worth cleaning now (see the module docstring)."""
    if not plan.segments:
        return False
    clean_end = progress.clean_end if progress is not None else -1
    dirty_segments = [s for s in plan.segments if s.base_offset >= clean_end]
    dirty = sum(s.size for s in dirty_segments)
    clean = sum(s.size for s in plan.segments) - dirty
    if dirty > 0:
        if dirty / (dirty + clean) >= min_dirty_ratio:
            return True
        if max_lag_ms < LONG_MAX:
            first = dirty_segments[0].first_batch_timestamp()
            if first >= 0 and now_ms - first > max_lag_ms:
                return True
    return progress is not None and progress.recheck_at_ms is not None and now_ms >= progress.recheck_at_ms


async def _default_runner(build: Callable[[], CleanStats]) -> CleanStats:
    return await trio.to_thread.run_sync(build)


class LogCleanerTask:
    """Periodic compaction of the broker's compacted logs. See the module docstring."""

    def __init__(self, state: BrokerState, *, run_in_thread: ThreadRunner = _default_runner) -> None:
        self.state = state
        self.enabled: bool = bool(state.config["log.cleaner.enable"])
        self._run_in_thread = run_in_thread
        self._lock = trio.Lock()
        self._wakeup = trio.Event()
        self._progress: dict[TopicPartition, _Progress] = {}
        self.passes = 0

    @property
    def backoff_ms(self) -> int:
        """Pause between passes, read at each pass: `log.cleaner.backoff.ms` is a dynamic broker config."""
        return int(self.state.config["log.cleaner.backoff.ms"])

    def trigger(self) -> None:
        """Wake the periodic loop for a pass now."""
        self._wakeup.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Pass every `log.cleaner.backoff.ms` until cancelled; returns at once when disabled."""
        task_status.started()
        if not self.enabled:
            log.info("log cleaner disabled (log.cleaner.enable=false)")
            return
        groups = getattr(self.state, "groups", None)
        if groups is not None:
            await groups.loaded.wait()
        while True:
            with trio.move_on_after(max(self.backoff_ms, 1) / 1000):
                await self._wakeup.wait()
            self._wakeup = trio.Event()
            try:
                await self.run_once()
            except Exception:
                log.exception("log cleaner pass failed")

    async def run_once(self) -> dict[TopicPartition, CleanStats]:
        """One pass over every compacted log; returns the stats of the logs it cleaned."""
        async with self._lock:
            cleaned: dict[TopicPartition, CleanStats] = {}
            live = set()
            for partition_log in self.state.logs.compacted_logs():
                tp = (partition_log.topic, partition_log.partition)
                live.add(tp)
                try:
                    stats = await self._clean(tp, partition_log)
                except Exception as exc:
                    log.warning("cleaning %s failed: %s", partition_log.name, exc, exc_info=True)
                    self._progress.pop(tp, None)
                    continue
                if stats is not None:
                    cleaned[tp] = stats
                await trio.lowlevel.checkpoint()
            for tp in list(self._progress):
                if tp not in live:
                    del self._progress[tp]
            self.passes += 1
            return cleaned

    async def _clean(self, tp: TopicPartition, partition_log: PartitionLog) -> CleanStats | None:
        now = self.state.now_ms()
        plan = _TaskPlan.prepare(partition_log, now)
        progress = self._progress.get(tp)
        if progress is not None and progress.log is not partition_log:
            progress = None
        config = partition_log.config
        if not cleaning_due(
            plan, progress, now, config.get("min.cleanable.dirty.ratio"), config.get("max.compaction.lag.ms")
        ):
            return None
        newest = max(s.largest_timestamp for s in plan.segments)
        clean_end = plan.segments[-1].next_offset
        plan.attach()
        try:
            stats = await self._build(plan)
            if not self._unchanged(tp, partition_log, plan):
                log.info("%s changed while it was being cleaned; trying again later", partition_log.name)
                plan.discard_outputs()
                return None
            try:
                replaced = plan.commit(partition_log, self.state.now_ms())
            except Exception as exc:  # part swapped, part not: the segment list may not match the files
                partition_log.offline = True
                log.error("compaction of %s failed, taking it offline: %s", partition_log.name, exc)
                raise
        except BaseException:
            plan.discard_outputs()
            raise
        finally:
            plan.release()
        horizon = newest + config.get("delete.retention.ms") + 1
        self._progress[tp] = _Progress(partition_log, clean_end, horizon if horizon > now else None)
        if replaced:
            log.info(
                "cleaned %s: %d segment(s), %d -> %d bytes, %d record(s) removed",
                partition_log.name,
                stats.segments,
                stats.bytes_before,
                stats.bytes_after,
                stats.records_removed,
            )
        return stats

    async def _build(self, plan: _TaskPlan) -> CleanStats:
        """Run the build in a worker thread; a cancellation sets the abort flag, and the build (which
        cannot be abandoned: its descriptors must outlive it) stops at its next batch."""
        stats: list[CleanStats] = []
        failure: list[Exception] = []
        async with trio.open_nursery() as nursery:

            async def abort_when_cancelled() -> None:
                try:
                    await trio.sleep_forever()
                finally:
                    plan.abort.set()

            nursery.start_soon(abort_when_cancelled)
            try:
                stats.append(await self._run_in_thread(plan.build))
            except Exception as exc:  # kept out of the nursery's exception group for the caller
                failure.append(exc)
            nursery.cancel_scope.cancel()
        if failure:  # (a build aborted by our cancellation does not get here: the nursery raised)
            if isinstance(failure[0], CleanerAborted):
                raise RuntimeError("cleaning was aborted")
            raise failure[0]
        return stats[0]

    def _unchanged(self, tp: TopicPartition, partition_log: PartitionLog, plan: _TaskPlan) -> bool:
        if self.state.logs.logs.get(tp) is not partition_log:
            return False  # deleted (and maybe created again) meanwhile
        if partition_log.offline or not partition_log.config.compacted:
            return False
        present = set(map(id, partition_log.segments))
        active = partition_log.active_segment
        for segment in plan.segments:
            if segment.deleted or id(segment) not in present:
                continue  # commit leaves it out
            if segment is active or segment.size != plan.sizes[segment.base_offset]:
                return False
        return True
