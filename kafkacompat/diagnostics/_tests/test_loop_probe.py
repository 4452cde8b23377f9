"""The loop probe (diagnostics/loop_probe.py): its histogram, its turn instrument, its wake-up writer, and the
fuzz tool's reading of its windows from a broker's log."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
import trio

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


def test_a_broker_started_with_the_variable_logs_its_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(loop_probe.ENVIRONMENT_VARIABLE, "0.3")
    broker = BrokerProcess(tmp_path / "data").start()
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
    monkeypatch.delenv(loop_probe.ENVIRONMENT_VARIABLE, raising=False)
    assert loop_probe.from_environment() is None
    monkeypatch.setenv(loop_probe.ENVIRONMENT_VARIABLE, "nonsense")
    assert loop_probe.from_environment() is None
    monkeypatch.setenv(loop_probe.ENVIRONMENT_VARIABLE, "0")
    assert loop_probe.from_environment() is None
    monkeypatch.setenv(loop_probe.ENVIRONMENT_VARIABLE, "2.5")
    probe = loop_probe.from_environment()
    assert probe is not None and probe.window == 2.5


@pytest.mark.parametrize("value", ["nonsense", "-5", "nan", "-inf"])
def test_both_diagnostics_stay_off_for_nonsense_and_say_so(
    value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(loop_lag.ENVIRONMENT_VARIABLE, value)
    with caplog.at_level(logging.WARNING):
        assert loop_lag.install_from_environment() is None  # off, before touching any trio loop
    warning = f"{loop_lag.ENVIRONMENT_VARIABLE}={value!r} is not milliseconds; loop-lag monitor off"
    assert warning in caplog.text
    number = loop_lag.positive_number_from_environment(loop_lag.ENVIRONMENT_VARIABLE, "x", "y")
    assert number is None
    monkeypatch.setenv(loop_lag.ENVIRONMENT_VARIABLE, "0.25")
    assert loop_lag.positive_number_from_environment(loop_lag.ENVIRONMENT_VARIABLE, "x", "y") == 0.25
    monkeypatch.setenv(loop_lag.ENVIRONMENT_VARIABLE, "0")  # the monitor's threshold may be 0 (every step)
    assert loop_lag.positive_number_from_environment(loop_lag.ENVIRONMENT_VARIABLE, "x", "y") is None
    name = loop_lag.ENVIRONMENT_VARIABLE
    assert loop_lag.positive_number_from_environment(name, "x", "y", zero_allowed=True) == 0.0


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
