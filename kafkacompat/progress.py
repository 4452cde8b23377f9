"""Progress of long work: a bar redrawn in place on a terminal, a status line now and then otherwise.

Theory of operation: the job creates one `Progress(label, total, unit=...)`, calls `advance(n)` (or
`update(done)`) as it goes and `finish()` at the end (or uses it as a context manager). Where it reports
is decided once: on a terminal (`stream.isatty()`) a bar on that stream, redrawn at most every
`REDRAW_SECONDS`; elsewhere (a pipe, a file, a service's log) one status line every `interval` seconds,
written to `logger` at INFO when one is given (the broker's start-up) or to the stream. Nothing is
shown before `delay` seconds have passed, so short jobs stay silent and only long ones report; once
something was shown, `finish()` writes a last line with the total and the elapsed time.

`advance()` is cheap enough for a per-batch loop: a counter, one clock read and a comparison. With
`heartbeat=True` the reports come from a thread of the display's own instead, on time even while one
step takes long (the log manager's start-up: one large partition recovering); `advance()` then only
counts. Used by
`kafkacompat bench` (one step per measured run), `kafkacompat dump-log` (bytes of each .log file) and
the log manager's start-up (partitions loaded, and recovered after an unclean shutdown).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["Progress", "format_amount"]

REDRAW_SECONDS = 0.1
BAR_WIDTH = 24


def format_amount(value: float, unit: str) -> str:
    """`value` with its unit; bytes in KiB/MiB/GiB."""
    if unit == "bytes":
        for name in ("B", "KiB", "MiB", "GiB"):
            if value < 1024 or name == "GiB":
                return f"{value:.0f} {name}" if name == "B" else f"{value:.1f} {name}"
            value /= 1024
    text = f"{value:,.0f}"
    return f"{text} {unit}" if unit else text


def _tick(ref: weakref.ref[Progress], stop: threading.Event) -> None:
    """A heartbeat display's reporting thread: a report every interval until finished or collected."""
    progress = ref()
    if progress is None:
        return
    wait = max(progress.delay, 0.0)
    del progress
    while not stop.wait(wait):
        progress = ref()
        if progress is None:
            return
        with progress._lock:
            if progress._finished:
                return
            progress._report()
        wait = REDRAW_SECONDS if progress.tty else max(progress.interval, REDRAW_SECONDS)
        del progress


def _duration(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """One job's progress (see the module docstring). Owned by the code doing the job; not thread-safe."""

    def __init__(
        self,
        label: str,
        total: float | None = None,
        *,
        unit: str = "",
        stream: TextIO | None = None,
        logger: logging.Logger | None = None,
        tty: bool | None = None,
        delay: float = 1.0,
        interval: float = 5.0,
        enabled: bool = True,
        summary: bool = True,
        heartbeat: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0.0
        self.detail: str | None = None
        self.stream: Any = stream if stream is not None else sys.stderr
        self.logger = logger
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) if tty is None else tty
        self.enabled = enabled
        self.summary = summary
        self.delay = delay
        self.interval = interval
        self.clock = clock
        self.started = clock()
        self.shown = False
        self._next = self.started + delay  # clock time of the next report
        self._width = 0
        self._finished = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if heartbeat and enabled:
            # reports come from a thread of their own, so that one long step (a large partition being
            # recovered) still shows the display is alive and what it works on. The thread holds the
            # display only weakly: a job that dies without finish() (an exception) stops it too.
            self._ticker = threading.Thread(
                target=_tick, args=(weakref.ref(self), self._stop), name=f"progress {label}", daemon=True
            )
            weakref.finalize(self, self._stop.set)
            self._ticker.start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    # --- reporting -------------------------------------------------------------------------------

    def advance(self, amount: float = 1, detail: str | None = None) -> None:
        self.done += amount
        if detail is not None:
            self.detail = detail
        if self.enabled and self._ticker is None and self.clock() >= self._next:
            self._report()

    def update(self, done: float, detail: str | None = None) -> None:
        self.advance(done - self.done, detail)

    def note(self, text: str) -> None:
        """A message that stays (e.g. a failure), shown even when the progress display is off."""
        if self.tty and self._width:
            self.stream.write("\n")
            self._width = 0
        self.stream.write(text + "\n")
        self.stream.flush()
        if self.tty and self.shown and self.enabled:
            self._draw()

    def finish(self, summary: str | None = None) -> None:
        """End the display: a final line (`summary`, else the total and elapsed time unless the display
        was made with `summary=False`) if anything was shown."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
        if not (self.enabled and self.shown):
            return
        if summary is None and self.summary:
            summary = f"{self.label}: done, {format_amount(self.done, self.unit)} in " + _duration(
                self.clock() - self.started
            )
        if self.tty:
            if summary is not None:
                self._overwrite(summary)
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
        elif summary is not None:
            self._emit(summary)

    def status_text(self) -> str:
        """The status shown on each report (what a subclass changes to show something else)."""
        elapsed = self.clock() - self.started
        parts = [f"{self.label}: {format_amount(self.done, self.unit)}"]
        if self.total:
            parts[0] += f" of {format_amount(self.total, self.unit)} ({100 * self.done / self.total:.0f}%)"
        if elapsed > 0 and self.done > 0:
            rate = self.done / elapsed
            parts.append(f"{format_amount(rate, self.unit)}/s")
            if self.total and self.done < self.total:
                parts.append(f"about {_duration((self.total - self.done) / rate)} left")
        text = ", ".join(parts)
        return f"{text} - {self.detail}" if self.detail else text

    def _report(self) -> None:
        self.shown = True
        now = self.clock()
        if self.tty:
            self._draw()
            self._next = now + REDRAW_SECONDS
        else:
            self._emit(self.status_text())
            self._next = now + self.interval

    def _draw(self) -> None:
        text = self.status_text()
        if self.total:
            filled = int(BAR_WIDTH * min(self.done / self.total, 1.0))
            text = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {text}"
        self._overwrite(text)

    def _overwrite(self, text: str) -> None:
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)

    def _emit(self, line: str) -> None:
        if self.logger is not None:
            self.logger.info("%s", line)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()
