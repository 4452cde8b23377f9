"""Memory and CPU of a broker process tree, read from /proc (or psutil when it is installed).

Theory of operation: a broker under test is a child we started; some peers run their server in a
grandchild, so figures are summed over the process and all its descendants (found through the parent
pid in /proc/*/stat). RSS is VmRSS from /proc/PID/status; CPU is utime + stime from /proc/PID/stat in
clock ticks. `PeakSampler` is a thread that samples the tree's RSS every `interval` seconds while a
workload runs and keeps the maximum. Everything here tolerates processes that vanish between two reads.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["PeakSampler", "cpu_seconds", "process_tree", "rss_bytes"]

try:  # optional; the /proc readers below are the fallback and give the same figures
    import psutil
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may contain spaces: split after the last ")"
    return text[text.rfind(")") + 2 :].split()


def process_tree(pid: int) -> list[int]:
    """`pid` and all its live descendants."""
    if psutil is not None:
        try:
            root = psutil.Process(pid)
            return [pid, *(child.pid for child in root.children(recursive=True))]
        except psutil.Error:
            return []
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    result, todo = [], [pid]
    while todo:
        current = todo.pop()
        result.append(current)
        todo.extend(children.get(current, ()))
    return result


def rss_bytes(pids: list[int]) -> int:
    """Summed resident set size of `pids` (processes gone meanwhile count zero)."""
    total = 0
    for pid in pids:
        if psutil is not None:
            try:
                total += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                pass
            continue
        try:
            for line in (_PROC / str(pid) / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            pass
    return total


def cpu_seconds(pids: list[int]) -> float:
    """Summed user + system CPU time of `pids` so far."""
    total = 0.0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            # after the command name: field 14 utime and 15 stime of proc(5) are at index 11 and 12
            total += (int(fields[11]) + int(fields[12])) / _TICKS
    return total


class PeakSampler:
    """Samples the RSS of a process tree on a thread; `.peak` is the largest sum seen (bytes).

    Owned by the runner for the duration of one workload: `with PeakSampler(pid): ...`.
    """

    def __init__(self, pid: int | None, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        if self.pid is not None:
            self.peak = max(self.peak, rss_bytes(process_tree(self.pid)))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> PeakSampler:
        self._sample()
        if self.pid is not None:
            self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
