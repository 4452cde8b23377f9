"""The loop probe (diagnostics/loop_probe.py): its histogram, its turn instrument, its wake-up writer, and the
fuzz tool's reading of its windows from a broker's log; how the broker config, or the environment variable
it falls back to, switches the diagnostics on (diagnostics/__init__.py)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
import trio

from kafkacompat import diagnostics
from kafkacompat.config import BrokerConfig, ConfigError
from kafkacompat.diagnostics import loop_lag, loop_probe
from kafkacompat.diagnostics.loop_probe import LOG_MARKER, Histogram, LoopProbe, TurnProbe
from kafkacompat.fuzzing.watch import loop_probe_alternating, loop_probe_phase, loop_probe_windows
from kafkacompat.testing import BrokerProcess


def test_histogram_percentiles_are_within_a_bucket_of_the_truth() -> None:
    histogram = Histogram()
    values = [i / 1e5 for i in range(1, 1001)]  # 10 µs .. 10 ms, evenly
    for value in reversed(values):
        histogram.record(value)
    assert histogram.count == 1000
    assert histogram.max == pytest.approx(0.01)
    assert histogram.total == pytest.approx(sum(values))
    for q, truth in ((0.5, values[499]), (0.99, values[989]), (1.0, values[-1])):
        got = histogram.percentile(q)
        assert truth <= got <= truth * 2 ** (1 / Histogram.STEPS_PER_OCTAVE) + 1e-12, (q, got, truth)
    assert Histogram().percentile(0.99) == 0.0


def test_histogram_merge_adds_logged_buckets() -> None:
    first, second = Histogram(), Histogram()
    for _ in range(99):
        first.record(0.001)
    second.record(0.05)
    logged = json.loads(json.dumps(second.summary("x")))  # bucket keys become text in the log
    first.merge(logged["x_buckets"], logged["x_max_ms"] / 1000)
    assert first.count == 100
    assert first.percentile(0.99) < 0.0011
    assert first.percentile(1.0) == pytest.approx(0.05)


def test_turn_probe_times_a_blocking_step_and_the_loop_s_busy_time() -> None:
    probe = TurnProbe()

    async def main() -> None:
        trio.lowlevel.add_instrument(probe)
        try:
            for _ in range(5):
                await trio.sleep(0.01)  # idle turns: the time asleep is not a turn's
            time.sleep(0.04)  # a step that holds the loop
            await trio.sleep(0.01)
        finally:
            trio.lowlevel.remove_instrument(probe)

    began = time.perf_counter()
    trio.run(main)
    elapsed = time.perf_counter() - began
    assert probe.turns.max >= 0.04
    assert probe.turns.count >= 6
    # the loop slept at least 60 ms of the run: the turns are not the whole of it
    assert probe.turns.total <= elapsed - 0.05


def test_wakeups_see_a_stalled_loop_and_the_writer_goes_with_the_probe(
    caplog: pytest.LogCaptureFixture,
) -> None:
    probe = LoopProbe(window_seconds=0.25)
    rows: list[dict[str, object]] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(probe.run)
            await trio.sleep(0.4)  # the writer has started and stamps the pipe
            time.sleep(0.06)  # the loop stalls: stamps written meanwhile are read late
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()

    with caplog.at_level(logging.INFO, logger=loop_probe.log.name):
        trio.run(main)
    for record in caplog.records:
        message = record.getMessage()
        if LOG_MARKER in message:
            rows.append(json.loads(message.partition(LOG_MARKER)[2]))
    assert len(rows) >= 3, caplog.text
    wakeups = sum(int(row["wakeups"]) for row in rows)  # type: ignore[call-overload]
    assert wakeups >= 40  # a stamp every 2-8 ms for ~0.9 s
    worst = max(float(row["wakeups_max_ms"]) for row in rows)  # type: ignore[arg-type]
    assert worst >= 40, rows  # a stamp written early in the 60 ms stall waited most of it
    assert max(float(row["turns_max_ms"]) for row in rows) >= 60  # type: ignore[arg-type]
    # the writer is gone with the probe (no stray child left behind by a broker that stopped)
    assert probe.writer_pid is not None
    assert not Path(f"/proc/{probe.writer_pid}").exists()


@pytest.mark.parametrize("switch", ["environment", "override"])
def test_a_broker_started_with_the_variable_logs_its_windows(
    switch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`KAFKACOMPAT_LOOP_PROBE=0.3`, or `kafkacompat serve --override loop.probe.window.seconds=0.3`."""
    monkeypatch.delenv(diagnostics.LOOP_PROBE_ENVIRONMENT_VARIABLE, raising=False)
    overrides = []
    if switch == "environment":
        monkeypatch.setenv(diagnostics.LOOP_PROBE_ENVIRONMENT_VARIABLE, "0.3")
    else:
        overrides.append(f"{diagnostics.LOOP_PROBE_WINDOW_SECONDS}=0.3")
    broker = BrokerProcess(tmp_path / "data", overrides).start()
    try:
        time.sleep(1.2)
    finally:
        assert broker.stop() == 0
    lines = broker.log_path.read_text().splitlines()
    rows = [json.loads(line.partition(LOG_MARKER)[2]) for line in lines if LOG_MARKER in line]
    assert len(rows) >= 2, lines
    assert all(row["wakeups"] > 0 and row["turns"] > 0 for row in rows), rows
    writer = [line for line in lines if "loop probe on" in line]
    assert writer, lines
    pid = int(writer[0].rsplit("writer pid ", 1)[1].rstrip(")"))
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_the_environment_variable_switches_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    config = BrokerConfig.load()
    name = diagnostics.LOOP_PROBE_ENVIRONMENT_VARIABLE
    monkeypatch.delenv(name, raising=False)
    assert diagnostics.loop_probe_window_seconds(config) is None
    monkeypatch.setenv(name, "nonsense")
    assert diagnostics.loop_probe_window_seconds(config) is None
    monkeypatch.setenv(name, "0")
    assert diagnostics.loop_probe_window_seconds(config) is None
    monkeypatch.setenv(name, "2.5")
    assert diagnostics.loop_probe_window_seconds(config) == 2.5
    install = diagnostics.install(config)  # constructs the probe; its task starts in the broker's nursery
    assert install.probe is not None and install.probe.window == 2.5
    assert install.lag_monitor is None


def test_the_config_switches_them_on_and_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(diagnostics.LOOP_PROBE_ENVIRONMENT_VARIABLE, "2.5")
    monkeypatch.setenv(diagnostics.LOOP_LAG_ENVIRONMENT_VARIABLE, "7")
    config = BrokerConfig.load(None, ["loop.probe.window.seconds=0.5", "loop.lag.threshold.ms=0"])
    assert diagnostics.loop_probe_window_seconds(config) == 0.5
    assert diagnostics.loop_lag_threshold_ms(config) == 0.0  # 0: every step
    monkeypatch.delenv(diagnostics.LOOP_PROBE_ENVIRONMENT_VARIABLE)
    monkeypatch.delenv(diagnostics.LOOP_LAG_ENVIRONMENT_VARIABLE)
    assert BrokerConfig.load()["loop.lag.threshold.ms"] is None  # off by default
    assert BrokerConfig.load()["loop.probe.window.seconds"] is None
    assert diagnostics.loop_lag_threshold_ms(BrokerConfig.load()) is None
    for bad in ("loop.lag.threshold.ms=-1", "loop.lag.threshold.ms=nan", "loop.probe.window.seconds=0",
                "loop.probe.window.seconds=inf", "loop.lag.threshold.ms=x"):  # fmt: skip
        with pytest.raises(ConfigError, match=bad.partition("=")[0]):
            BrokerConfig.load(None, [bad])


def test_the_monitor_is_installed_on_the_loop_and_closed_with_its_summary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = BrokerConfig.load(None, ["loop.lag.threshold.ms=5"])

    async def main() -> None:
        handle = diagnostics.install(config)
        assert handle.lag_monitor is not None and handle.probe is None
        assert loop_lag.enabled()
        handle.close()
        handle.close()  # a second close does nothing
        assert not loop_lag.enabled()

    with caplog.at_level(logging.INFO, logger=loop_lag.log.name):
        trio.run(main)
    assert "loop-lag monitor on: task steps over 5.0 ms are logged" in caplog.text
    assert caplog.text.count("loop-lag summary") == 1


@pytest.mark.parametrize("value", ["nonsense", "-5", "nan", "-inf"])
def test_both_diagnostics_stay_off_for_nonsense_and_say_so(
    value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(diagnostics.LOOP_LAG_ENVIRONMENT_VARIABLE, value)
    monkeypatch.setenv(diagnostics.LOOP_PROBE_ENVIRONMENT_VARIABLE, value)
    with caplog.at_level(logging.WARNING):
        handle = diagnostics.install(BrokerConfig.load())  # off, before touching any trio loop
    assert handle.lag_monitor is None and handle.probe is None
    lag = diagnostics.LOOP_LAG_ENVIRONMENT_VARIABLE
    assert f"{lag}={value!r} is not milliseconds; loop-lag monitor off" in caplog.text
    probe = diagnostics.LOOP_PROBE_ENVIRONMENT_VARIABLE
    assert f"{probe}={value!r} is not a window in seconds; loop probe off" in caplog.text
    monkeypatch.setenv(lag, "0.25")
    assert diagnostics.loop_lag_threshold_ms(BrokerConfig.load()) == 0.25
    monkeypatch.setenv(lag, "0")  # the monitor's threshold may be 0 (every step)
    assert diagnostics.loop_lag_threshold_ms(BrokerConfig.load()) == 0.0


def _window(end: float, seconds: float, wakeup_ms: float, busy: float) -> str:
    histogram = Histogram()
    for _ in range(10):
        histogram.record(wakeup_ms / 1000)
    row = {"end_monotonic": end, "seconds": seconds, "busy": busy}
    row.update(Histogram().summary("turns"))
    row.update(histogram.summary("wakeups"))
    return f"[2026-11-28 03:00:00,000] INFO kafkacompat.broker.loop_probe: {LOG_MARKER}{json.dumps(row)}\n"


def test_the_fuzz_tool_merges_the_windows_wholly_inside_a_phase(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    before = "[2026-11-28 02:59:00,000] INFO kafkacompat: an earlier run\n" + _window(50.0, 10.0, 99.0, 0.9)
    log.write_text(
        before
        + _window(110.0, 10.0, 1.0, 0.1)  # straddles the phase's start (105): left out
        + _window(120.0, 10.0, 2.0, 0.2)
        + _window(130.0, 10.0, 4.0, 0.4)
        + _window(141.0, 11.0, 50.0, 0.5)  # ends after the phase: left out
        + "not json: " + LOG_MARKER + "{\n"
    )  # fmt: skip
    windows = loop_probe_windows(log, len(before))
    assert len(windows) == 4  # the earlier run's window and the garbled line are not among them
    phase = loop_probe_phase(windows, 105.0, 135.0)
    assert phase is not None
    assert phase["windows"] == 2
    assert phase["wakeups"] == 20
    assert phase["busy"] == pytest.approx(0.3)
    assert 2.0 <= phase["wakeups_p50_ms"] < 2.2
    assert 4.0 <= phase["wakeups_p99_ms"] < 4.4
    assert phase["wakeups_max_ms"] == pytest.approx(4.0)
    assert loop_probe_phase(windows, 200.0, 300.0) is None


def test_the_fuzz_tool_splits_the_windows_by_alternating_block(tmp_path: Path) -> None:
    # blocks of 20 s from 100: fuzzed [100, 120), quiet [120, 140), fuzzed [140, 160), quiet [160, 170)
    log = tmp_path / "broker.log"
    log.write_text(
        _window(110.0, 10.0, 1.0, 0.9)  # starts at 100, in the first block's first second: neither
        + _window(115.0, 10.0, 2.0, 0.5)  # wholly inside the first fuzzed block
        + _window(128.0, 10.0, 40.0, 0.2)  # across the fuzzed and the quiet block: neither
        + _window(132.0, 10.0, 3.0, 0.1)  # quiet
        + _window(155.0, 10.0, 4.0, 0.7)  # fuzzed
        + _window(172.0, 10.0, 5.0, 0.3)  # quiet, but ends after the fuzzing (170): neither
    )  # fmt: skip
    split = loop_probe_alternating(loop_probe_windows(log, 0), 100.0, 170.0, 20.0)
    fuzzed, quiet = split["fuzzed_blocks"], split["quiet_blocks"]
    assert fuzzed is not None and quiet is not None
    assert (fuzzed["windows"], quiet["windows"]) == (2, 1)
    assert fuzzed["busy"] == pytest.approx(0.6)
    assert 2.0 <= fuzzed["wakeups_p50_ms"] < 2.2 and 4.0 <= fuzzed["wakeups_p99_ms"] < 4.4
    assert quiet["busy"] == pytest.approx(0.1)
    assert 3.0 <= quiet["wakeups_p99_ms"] < 3.3
    assert loop_probe_alternating(loop_probe_windows(log, 0), 300.0, 400.0, 20.0) == {
        "fuzzed_blocks": None,
        "quiet_blocks": None,
    }
