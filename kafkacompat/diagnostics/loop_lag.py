"""Event-loop lag: which task steps hold the one trio thread, and for which request.

Theory of operation
-------------------
The broker serves every connection on one trio event loop, so a task step (the code a task runs
between two of its awaits) that takes 300 ms delays every other client by 300 ms. Steps are timed in
the thread's CPU time (`time.thread_time`), not wall time: on a shared machine the wall time of a step
includes whatever the OS scheduler gave to other processes, which is not the step's doing.
`LoopLagMonitor` is a trio instrument: `before_task_step`/`after_task_step` time every step, and a step
longer than the threshold is logged at WARNING with the task's name and, when the task is a connection
handling a request, that request's API, version and size (the connection stores them in `CURRENT_REQUEST`, a
context variable, which lives in the task's own context and so is read back from `task.context`). The
connection clears the label only as its next read step begins, so a step that finishes a request, or
handles one whole, is that request's, and a step that reads part of the next frame is the connection's.
Garbage collections over the threshold are counted too (`gc.callbacks`), as their own kind: a
collection runs inside whichever step allocated last, and its time is taken out of that step's.
Each step's wall time is taken too: a step whose wall time exceeds its CPU time by the threshold was
off the CPU in the middle (the OS ran another process, or a worker thread held the GIL), which delays
every other client as much as a long step does but is not the step's doing; such steps are counted as
the kind "off-CPU inside a step", so a profile tells loop hogs from a starved process. Each such step
also says how much CPU the process's other threads used meanwhile (`time.process_time` less the loop
thread's): near the stall when a worker or acceptor thread held the GIL, near zero when the OS ran
another process or the thread waited on the disk.
Each slow step's line also says where the step stopped (the task's innermost await in the broker's code,
from its chain of awaited coroutines), which places the work of a task that serves no request.
`summary()` aggregates the slow steps per kind (count, total, worst), for profiling runs.

Off by default (no instrument, no cost). The broker config `loop.lag.threshold.ms` (read by
`kafkacompat.diagnostics.install`, with its environment-variable fallback) switches it on when the broker
starts; tests may install it directly. On, it costs: the CPU clocks it reads at every step are system
calls (not vDSO reads like `perf_counter`), and beside the fuzzer they were 4.8% of the broker's samples
in a py-spy profile, so latency figures meant for the broker as shipped are taken with it off.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import logging
import os
import time
from typing import Any

import trio

__all__ = [
    "CURRENT_REQUEST",
    "LoopLagMonitor",
    "enabled",
    "install",
    "uninstall",
]

# the logger name the monitor's lines carry, which log filters and tools/step_sweep.py select
log = logging.getLogger("kafkacompat.broker.loop_lag")

#: (api key, api version, request bytes) of the request a connection task is working on
CURRENT_REQUEST: contextvars.ContextVar[tuple[int, int, int] | None] = contextvars.ContextVar(
    "kafkacompat_current_request", default=None
)
#: the kind of a step that was off the CPU (another process or thread ran) for over the threshold
OFF_CPU = "off-CPU inside a step (OS scheduler or GIL)"
_state = {"enabled": False}


def enabled() -> bool:
    """Whether a monitor is installed (connections then label their task with the current request)."""
    return _state["enabled"]


class LoopLagMonitor(trio.abc.Instrument):
    """Times every task step; owns the per-kind aggregate of the steps over `threshold_ms`."""

    def __init__(self, threshold_ms: float, *, log_each: bool = True) -> None:
        self.threshold = threshold_ms / 1000
        self.log_each = log_each
        self._started = time.thread_time()  # the step that installs the monitor ends unmeasured
        #: kind -> [count, total seconds, worst seconds]
        self.slow: dict[str, list[float]] = {}
        self.steps = 0
        self.worst = 0.0
        self._gc_started = 0.0
        self._gc_in_step = 0.0  # collection time within the current step
        self._wall_started = time.perf_counter()
        self._process_started = time.process_time()

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        """gc.callbacks hook: a collection is a pause of the loop too (it runs inside some task's step)."""
        if phase == "start":
            self._gc_started = time.thread_time()
            return
        took = time.thread_time() - self._gc_started
        self._gc_in_step += took
        if took >= self.threshold:
            self._count(f"garbage collection, generation {info.get('generation')}", took)
            if self.log_each:
                log.warning("event loop held %.1f ms by a garbage collection of generation %s (%s collected)",
                            took * 1000, info.get("generation"), info.get("collected"))  # fmt: skip

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._gc_in_step = 0.0
        self._started = time.thread_time()
        self._wall_started = time.perf_counter()
        self._process_started = time.process_time()

    def _count(self, kind: str, took: float) -> None:
        entry = self.slow.setdefault(kind, [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += took
        entry[2] = max(entry[2], took)

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        # a collection is counted as its own kind, not against the step it happened to land in
        cpu = time.thread_time() - self._started
        took = cpu - self._gc_in_step
        self.steps += 1
        off_cpu = time.perf_counter() - self._wall_started - cpu
        if off_cpu >= self.threshold:
            self._count(OFF_CPU, off_cpu)
            if self.log_each:
                others = max(time.process_time() - self._process_started - cpu, 0.0)
                what = _describe(task, task.context.get(CURRENT_REQUEST))
                log.warning(
                    "event loop stalled %.1f ms off the CPU inside a step of %s"
                    " (the process's other threads used %.1f ms of CPU meanwhile)",
                    off_cpu * 1000, what, others * 1000,
                )  # fmt: skip
        if took < self.threshold:
            return
        self.worst = max(self.worst, took)
        request = task.context.get(CURRENT_REQUEST)
        kind = _describe(task, request)
        self._count(kind, took)
        if self.log_each:
            size = f", {request[2]} bytes" if request is not None else ""
            log.warning("event loop held %.1f ms by %s%s (%s)", took * 1000, kind, size, _stopped_at(task))

    def summary(self) -> list[dict[str, Any]]:
        """Slow steps per kind, the worst first."""
        rows = [
            {"kind": kind, "count": int(count), "total_ms": round(total * 1000, 1),
             "worst_ms": round(worst * 1000, 1)}
            for kind, (count, total, worst) in self.slow.items()
        ]  # fmt: skip
        return sorted(rows, key=lambda row: -row["worst_ms"])


def _describe(task: trio.lowlevel.Task, request: tuple[int, int, int] | None) -> str:
    if request is None:
        return f"task {task.name}"
    from kafkacompat.wire import messages

    spec = messages.API_SPECS.get(request[0])
    name = spec.name if spec is not None else str(request[0])
    return f"{name} v{request[1]}"


def _stopped_at(task: trio.lowlevel.Task) -> str:
    """Where the task's step ended: its innermost await in the broker's own code (file:line in function),
    read from the chain of awaited coroutines; what a slow step of an unlabelled task did is near it."""
    awaited: Any = task.coro
    place = None
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is not None and "kafkacompat" in frame.f_code.co_filename:
            code = frame.f_code
            place = f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return f"stopped at {place}" if place is not None else "ended, or stopped outside the broker's code"


def install(threshold_ms: float, *, log_each: bool = True) -> LoopLagMonitor:
    """Install a monitor on the running trio loop."""
    monitor = LoopLagMonitor(threshold_ms, log_each=log_each)
    trio.lowlevel.add_instrument(monitor)
    gc.callbacks.append(monitor.on_gc)
    _state["enabled"] = True
    return monitor


def uninstall(monitor: LoopLagMonitor) -> None:
    trio.lowlevel.remove_instrument(monitor)
    with contextlib.suppress(ValueError):
        gc.callbacks.remove(monitor.on_gc)
    _state["enabled"] = False
