"""Loop probe: how long the event loop's turns take, and how late it notices a readable socket.

Theory of operation
-------------------
A client's latency through the broker has two parts that the broker's own code can be blamed for: the
loop being busy with other work when the client's bytes arrive, and the work of the client's request.
The first is what hostile or heavy clients cost the others, and it is what this probe measures, in two
ways, into histograms that are logged (one INFO line of JSON per window) and reset every window:

- **Turns.** `TurnProbe` is a trio instrument. A turn of the loop is the time from the end of one wait
  for I/O (`after_io_wait`) to the start of the next (`before_io_wait`): every task step, garbage
  collection and callback of that turn. Their sum over the window is the loop's busy fraction.
- **Wake-ups.** A small child process (`WRITER`, started with the broker's own Python) writes its
  `CLOCK_MONOTONIC` time, 8 bytes, into a pipe every 2-8 ms (random, so it cannot beat in step with
  anything); a broker task reads the pipe and records how late each time stamp is read. That is what
  any client's socket waits: the kernel's wake-up, the OS scheduling the broker's thread, and the loop
  finishing its turn. The same probe in an idle broker (the fuzz tool's control broker) measures the
  machine alone, so the difference is the busy broker's own share.

The writer is a separate process, not a thread, because a thread would need the GIL to take its time
stamp and so would wait for the loop's step before stamping: it would hide the very delay it measures.
The writer exits when the pipe breaks (the broker stopped or died).

Off by default. The broker config `loop.probe.window.seconds` (read by `kafkacompat.diagnostics.install`,
with its environment-variable fallback) switches it on when the broker starts. On, it costs two clock
reads per loop turn and one pipe read every few ms. `Histogram` is sans-io (no trio); `LoopProbe.run` is
the broker's background task.
"""

from __future__ import annotations

import json
import logging
import math
import struct
import subprocess
import sys
import time
from typing import Any

import trio

__all__ = ["LOG_MARKER", "Histogram", "LoopProbe", "TurnProbe"]

# the logger name the probe's lines carry, which log filters select
log = logging.getLogger("kafkacompat.broker.loop_probe")

#: the marker of a window's log line; the fuzz tool reads the JSON after it
LOG_MARKER = "loop probe window: "
#: the child that stamps the pipe: 8-byte big-endian CLOCK_MONOTONIC nanoseconds every 2-8 ms
WRITER = (
    "import os, random, struct, time\n"
    "rng = random.Random()\n"
    "while True:\n"
    "    time.sleep(rng.uniform(0.002, 0.008))\n"
    "    try:\n"
    "        os.write(1, struct.pack('>q', time.monotonic_ns()))\n"
    "    except OSError:\n"
    "        break\n"
)
STAMP = struct.Struct(">q")


class Histogram:
    """Durations in buckets an eighth of an octave wide (each bound 9% above the last) from 1 µs.

    Owns its counts; one task (or the loop's instrument) records, the reporter reads and resets.
    A percentile is the upper bound of its bucket, so it is at most 9% above the true value.
    """

    STEPS_PER_OCTAVE = 8

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def record(self, seconds: float) -> None:
        micros = seconds * 1e6
        index = 0 if micros <= 1.0 else math.ceil(math.log2(micros) * self.STEPS_PER_OCTAVE)
        self.buckets[index] = self.buckets.get(index, 0) + 1
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds

    @classmethod
    def upper_bound(cls, index: int) -> float:
        """The largest duration (seconds) that falls in bucket `index`."""
        return 2.0 ** (index / cls.STEPS_PER_OCTAVE) / 1e6

    def percentile(self, q: float) -> float:
        """The duration (seconds) at or below which a fraction `q` of the recorded ones fall."""
        if not self.count:
            return 0.0
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                return min(self.upper_bound(index), self.max)
        return self.max

    def merge(self, buckets: dict[Any, int], max_seconds: float) -> None:
        """Add another histogram (its bucket counts as logged, keys may be text, and its maximum). `total` is
        not merged (the log carries none), so a merged histogram's total means nothing."""
        for index, count in buckets.items():
            self.buckets[int(index)] = self.buckets.get(int(index), 0) + count
            self.count += count
        self.max = max(self.max, max_seconds)

    def summary(self, name: str) -> dict[str, Any]:
        return {
            name: self.count,
            f"{name}_p50_ms": round(self.percentile(0.50) * 1000, 3),
            f"{name}_p99_ms": round(self.percentile(0.99) * 1000, 3),
            f"{name}_max_ms": round(self.max * 1000, 3),
            f"{name}_buckets": dict(sorted(self.buckets.items())),
        }


class TurnProbe(trio.abc.Instrument):
    """Times each turn of the loop; owns the turn histogram. Only the loop's thread calls it."""

    def __init__(self) -> None:
        self.turns = Histogram()
        self._woke = time.perf_counter()

    def after_io_wait(self, timeout: float) -> None:
        self._woke = time.perf_counter()

    def before_io_wait(self, timeout: float) -> None:
        self.turns.record(time.perf_counter() - self._woke)


class LoopProbe:
    """Owns the turn instrument, the wake-up histogram and the writer child; `run` is its task."""

    def __init__(self, window_seconds: float) -> None:
        self.window = window_seconds
        self.turn_probe = TurnProbe()
        self.wakeups = Histogram()
        self.windows = 0
        self.writer_pid: int | None = None

    def report(self, seconds: float) -> dict[str, Any]:
        """The window's figures (and reset): what the log line carries."""
        turns = self.turn_probe.turns
        row: dict[str, Any] = {"end_monotonic": round(time.monotonic(), 3), "seconds": round(seconds, 3),
                               "busy": round(turns.total / seconds, 4) if seconds > 0 else 0.0}  # fmt: skip
        row.update(turns.summary("turns"))
        row.update(self.wakeups.summary("wakeups"))
        self.turn_probe.turns = Histogram()
        self.wakeups = Histogram()
        self.windows += 1
        return row

    async def run(self) -> None:
        trio.lowlevel.add_instrument(self.turn_probe)
        try:
            process: trio.Process | None = await trio.lowlevel.open_process(
                [sys.executable, "-I", "-S", "-c", WRITER], stdout=subprocess.PIPE
            )
        except OSError as exc:  # a diagnostic never stops the broker: the turns are still measured
            log.warning("loop probe: no writer (%s); wake-ups are not measured", exc)
            process = None
        self.writer_pid = process.pid if process is not None else None
        log.info("loop probe on: a window every %.1f s (writer pid %s)", self.window, self.writer_pid)
        started = time.monotonic()
        try:
            async with trio.open_nursery() as nursery:
                if process is not None and process.stdout is not None:
                    nursery.start_soon(self._read, process.stdout)
                while True:
                    await trio.sleep(self.window)
                    now = time.monotonic()
                    row = self.report(now - started)
                    log.info("%s%s", LOG_MARKER, json.dumps(row, separators=(",", ":")))
                    started = now
        finally:
            trio.lowlevel.remove_instrument(self.turn_probe)
            if process is not None:
                with trio.CancelScope(shield=True):
                    if process.stdout is not None:
                        await process.stdout.aclose()  # the writer's next write breaks the pipe
                    process.kill()
                    await process.wait()

    async def _read(self, stream: trio.abc.ReceiveStream) -> None:
        pending = b""
        while True:
            data = await stream.receive_some(4096)
            if not data:
                log.warning("loop probe: the writer went away; wake-ups are no longer measured")
                return
            now = time.monotonic_ns()
            pending += data
            whole = len(pending) - len(pending) % STAMP.size
            for (stamp,) in STAMP.iter_unpack(pending[:whole]):
                self.wakeups.record(max(now - stamp, 0) / 1e9)
            pending = pending[whole:]
