"""The loop-lag monitor (kafkacompat.diagnostics.loop_lag) under the name broker/connection.py imports.

Every name here is the diagnostics module's own object: the monitor's on/off state and the
`CURRENT_REQUEST` context variable live there, so a monitor installed through either name is the one
`enabled()` reports and the one a connection labels its steps for.
"""

from __future__ import annotations

from kafkacompat.diagnostics.loop_lag import (
    CURRENT_REQUEST,
    OFF_CPU,
    LoopLagMonitor,
    enabled,
    install,
    uninstall,
)

__all__ = ["CURRENT_REQUEST", "OFF_CPU", "LoopLagMonitor", "enabled", "install", "uninstall"]
