"""kafkacompat.progress: silent for short jobs, status lines off a terminal, a bar on one; and its users
(dump-log on a large file, the log manager's start-up) through the same helper."""

from __future__ import annotations

import io
import logging

import pytest

from kafkacompat.progress import Progress, format_amount


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_short_job_prints_nothing() -> None:
    stream, clock = io.StringIO(), Clock()
    with Progress("copy", 10, unit="files", stream=stream, tty=False, clock=clock) as progress:
        for _ in range(10):
            clock.now += 0.05
            progress.advance()
    assert stream.getvalue() == ""


def test_off_a_terminal_a_line_every_interval_then_a_summary() -> None:
    stream, clock = io.StringIO(), Clock()
    progress = Progress("copy", 80, unit="files", stream=stream, tty=False, delay=1, interval=5, clock=clock)
    for _ in range(80):
        clock.now += 0.125  # ten seconds in all
        progress.advance()
    progress.finish()
    lines = stream.getvalue().splitlines()
    # first report once the delay has passed (after 1 s: 8 files), then every 5 s (48 files)
    assert lines[0] == "copy: 8 files of 80 files (10%), 8 files/s, about 9.0s left"
    assert lines[1] == "copy: 48 files of 80 files (60%), 8 files/s, about 4.0s left"
    assert lines[2] == "copy: done, 80 files in 10s"
    assert len(lines) == 3
    assert "\r" not in stream.getvalue()


def test_a_logger_gets_the_lines(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    logger = logging.getLogger("kafkacompat.test-progress")
    with caplog.at_level(logging.INFO, logger=logger.name):
        with Progress("load", 4, stream=io.StringIO(), tty=False, logger=logger, delay=0, interval=0,
                      clock=clock) as progress:  # fmt: skip
            for name in "abcd":
                clock.now += 1
                progress.advance(1, name)
    messages = [record.getMessage() for record in caplog.records]
    assert messages[0] == "load: 1 of 4 (25%), 1/s, about 3.0s left - a"
    assert messages[3] == "load: 4 of 4 (100%), 1/s - d"
    assert messages[4] == "load: done, 4 in 4.0s"


def test_on_a_terminal_a_bar_redrawn_in_place() -> None:
    stream, clock = io.StringIO(), Clock()
    with Progress("read", 1 << 20, unit="bytes", stream=stream, tty=True, delay=0, clock=clock) as progress:
        for _ in range(4):
            clock.now += 0.5
            progress.advance(1 << 18)
    text = stream.getvalue()
    frames = text.split("\r")[1:]
    assert frames[0].startswith("[" + "#" * 6 + "." * 18 + "] read: 256.0 KiB of 1.0 MiB (25%)")
    assert frames[-2].startswith("[" + "#" * 24 + "] read: 1.0 MiB of 1.0 MiB (100%)")
    assert frames[-1].startswith("read: done, 1.0 MiB in 2.0s") and text.endswith("\n")


def test_a_disabled_display_still_shows_notes() -> None:
    stream = io.StringIO()
    progress = Progress("x", 1, stream=stream, tty=False, delay=0, enabled=False)
    progress.advance()
    progress.note("a failure")
    progress.finish()
    assert stream.getvalue() == "a failure\n"


def test_format_amount() -> None:
    assert format_amount(512, "bytes") == "512 B"
    assert format_amount(3 * 1024 * 1024, "bytes") == "3.0 MiB"
    assert format_amount(1234567, "records") == "1,234,567 records"


def test_a_heartbeat_reports_while_one_step_takes_long() -> None:
    """With heartbeat=True a thread reports on time even when advance() is not called meanwhile."""
    import time

    stream = io.StringIO()
    with Progress(
        "recover", 2, stream=stream, tty=False, delay=0.1, interval=0.1, heartbeat=True
    ) as progress:
        progress.advance(1, "orders-0")
        time.sleep(0.6)  # one long step: several intervals, so at least a couple of reports
        progress.advance(1, "orders-1")
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3
    assert lines[0].startswith("recover: 1 of 2 (50%)") and lines[0].endswith("- orders-0")
    assert lines[-1].startswith("recover: done, 2 in ")


def test_a_heartbeat_stays_silent_for_a_short_job() -> None:
    stream = io.StringIO()
    with Progress("quick", 1, stream=stream, tty=False, delay=30, heartbeat=True) as progress:
        progress.advance()
    assert stream.getvalue() == ""
    assert progress._ticker is not None and not progress._ticker.is_alive()


def test_a_heartbeat_display_dropped_without_finish_stops_its_thread() -> None:
    import gc

    stream = io.StringIO()
    progress = Progress("failed job", 10, stream=stream, tty=False, delay=30, heartbeat=True)
    ticker = progress._ticker
    assert ticker is not None and ticker.is_alive()
    del progress  # the job raised: nobody calls finish()
    gc.collect()
    ticker.join(5)
    assert not ticker.is_alive()
