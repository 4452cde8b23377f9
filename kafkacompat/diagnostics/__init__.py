"""Profiling diagnostics of the broker's one event loop, switched on by broker config, off by default.

Theory of operation
-------------------
Two instruments, each costing some CPU while on, so figures meant for the broker as shipped are taken
with both off:

- `loop_lag` (`loop.lag.threshold.ms`): a trio instrument that times every task step in the thread's
  CPU time and logs each step over the threshold (0: every step) with the request it served, plus the
  garbage collections and the steps spent off the CPU over it; a summary per kind when the broker stops.
- `loop_probe` (`loop.probe.window.seconds`): times each turn of the loop and how late it reads a pipe a
  child process stamps every few ms; one INFO line of JSON per window.

`install(config)` is the one entry point. `Broker.run` calls it on the running trio loop as it starts:
the loop-lag monitor is installed at once, and the returned `Diagnostics` starts the probe's task in the
nursery `start()` is given (the broker's background tasks) and uninstalls the monitor on `close()`.

A setting the config leaves unset falls back to an environment variable, read here and nowhere else,
in the same unit: `KAFKACOMPAT_LOOP_LAG_MS` for `loop.lag.threshold.ms` and `KAFKACOMPAT_LOOP_PROBE` for
`loop.probe.window.seconds`. Tools that start brokers as child processes (and their users' shells) switch
them on this way without an override. A variable that is not a number of the setting's range leaves its
diagnostic off, with a warning; a config value out of range is refused as any broker config is.

`loop_lag.enabled()` and `loop_lag.CURRENT_REQUEST` are what a connection checks and sets per request;
`loop_probe` is imported only when the probe is on.
"""

from __future__ import annotations

import gc
import logging
import math
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import trio

    from kafkacompat.config import BrokerConfig
    from kafkacompat.diagnostics.loop_lag import LoopLagMonitor
    from kafkacompat.diagnostics.loop_probe import LoopProbe

__all__ = [
    "LOOP_LAG_ENVIRONMENT_VARIABLE",
    "LOOP_LAG_THRESHOLD_MS",
    "LOOP_PROBE_ENVIRONMENT_VARIABLE",
    "LOOP_PROBE_WINDOW_SECONDS",
    "Diagnostics",
    "install",
    "loop_lag_threshold_ms",
    "loop_probe_window_seconds",
]

log = logging.getLogger("kafkacompat.diagnostics")

#: the broker configs (kafkacompat.config.BROKER_OPTIONS) and the environment variable each falls back to
LOOP_LAG_THRESHOLD_MS = "loop.lag.threshold.ms"
LOOP_LAG_ENVIRONMENT_VARIABLE = "KAFKACOMPAT_LOOP_LAG_MS"
LOOP_PROBE_WINDOW_SECONDS = "loop.probe.window.seconds"
LOOP_PROBE_ENVIRONMENT_VARIABLE = "KAFKACOMPAT_LOOP_PROBE"


def _from_environment(name: str, meaning: str, what: str, *, zero_allowed: bool) -> float | None:
    """The number in environment variable `name`, or None: unset or empty, or not a number greater than
    zero (or equal to it, if `zero_allowed`); then a warning says it is not `meaning` and `what` stays
    off."""
    value = os.environ.get(name)
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    # NaN fails both tests: a diagnostic asked for nonsense stays off
    if not (number >= 0 if zero_allowed else number > 0):
        log.warning("%s=%r is not %s; %s off", name, value, meaning, what)
        return None
    return number


def loop_lag_threshold_ms(config: BrokerConfig) -> float | None:
    """The loop-lag monitor's threshold in ms (0: every step), or None for off."""
    configured: float | None = config[LOOP_LAG_THRESHOLD_MS]
    if configured is not None:
        return configured
    return _from_environment(
        LOOP_LAG_ENVIRONMENT_VARIABLE, "milliseconds", "loop-lag monitor", zero_allowed=True
    )


def loop_probe_window_seconds(config: BrokerConfig) -> float | None:
    """The loop probe's window in seconds, or None for off."""
    configured: float | None = config[LOOP_PROBE_WINDOW_SECONDS]
    if configured is not None:
        return configured
    return _from_environment(
        LOOP_PROBE_ENVIRONMENT_VARIABLE, "a window in seconds", "loop probe", zero_allowed=False
    )


class Diagnostics:
    """The diagnostics one broker run switched on: owned by `Broker.run` from `install` to `close`."""

    def __init__(self, lag_monitor: LoopLagMonitor | None, probe: LoopProbe | None) -> None:
        self.lag_monitor = lag_monitor
        self.probe = probe

    def start(self, nursery: trio.Nursery) -> None:
        """Start the probe's task (when on) in `nursery`, which cancels it when the broker stops."""
        if self.probe is not None:
            nursery.start_soon(self.probe.run)

    def close(self) -> None:
        """Uninstall the loop-lag monitor (when on) and log its summary; a second call does nothing."""
        monitor, self.lag_monitor = self.lag_monitor, None
        if monitor is None:
            return
        from kafkacompat.diagnostics import loop_lag

        loop_lag.uninstall(monitor)
        loop_lag.log.info("loop-lag summary (slow task steps per kind): %s", monitor.summary())
        loop_lag.log.info("garbage collections per generation: %s", gc.get_stats())


def install(config: BrokerConfig) -> Diagnostics:
    """Switch on, on the running trio loop, the diagnostics `config` asks for (or, for a setting it leaves
    unset, the environment): the loop-lag monitor at once, the probe once `Diagnostics.start` runs."""
    lag_monitor = probe = None
    threshold = loop_lag_threshold_ms(config)
    if threshold is not None:
        from kafkacompat.diagnostics import loop_lag

        loop_lag.log.info("loop-lag monitor on: task steps over %.1f ms are logged", threshold)
        lag_monitor = loop_lag.install(threshold)
    window = loop_probe_window_seconds(config)
    if window is not None:
        from kafkacompat.diagnostics.loop_probe import LoopProbe

        probe = LoopProbe(window)
    return Diagnostics(lag_monitor, probe)
