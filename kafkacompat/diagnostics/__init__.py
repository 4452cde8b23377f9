"""Profiling diagnostics of the broker's one event loop, off by default.

`loop_lag` is a trio instrument that times every task step and logs those over a threshold, with the
request each served; `loop_probe` logs, every window, how long the loop's turns took and how late it
noticed a readable pipe. Neither is imported by the request path unless switched on, apart from
`loop_lag.enabled()` and `loop_lag.CURRENT_REQUEST`, which a connection checks and sets per request.
"""
