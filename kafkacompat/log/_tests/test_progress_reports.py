"""Progress reports of the log tools: dump-log on a large segment, the log manager's start-up."""

from __future__ import annotations

import io
import logging
import os
import re

from kafkacompat.progress import Progress, format_amount


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_dump_log_reports_the_bytes_of_a_large_file(make_log) -> None:  # type: ignore[no-untyped-def]
    from kafkacompat.commands import dump_log
    from kafkacompat.log._tests.helpers import make_batch, segment_logs

    partition_log = make_log({})
    for i in range(200):
        partition_log.append_as_leader(make_batch([b"x" * 1000] * 5), 0, 1_700_000_000_000 + i)
    partition_log.close(clean=True)
    path = segment_logs(partition_log.directory)[0]
    size = os.path.getsize(path)
    stream, clock = io.StringIO(), Clock()
    progress = Progress("dump-log", unit="bytes", stream=stream, tty=False, delay=0, interval=1, clock=clock)

    class Ticking(io.StringIO):
        """The dump's output; each printed batch line moves the clock on by 0.1 s."""

        def write(self, text: str) -> int:
            clock.now += 0.1 if text.startswith("baseOffset") else 0
            return super().write(text)

    with progress:
        dump_log.dump_log_file(path, Ticking(), deep=False, data=False, progress=progress)
    lines = stream.getvalue().splitlines()
    percents = [int(m.group(1)) for line in lines if (m := re.search(r"\((\d+)%\)", line))]
    assert len(percents) >= 15  # 200 batches, 20 s of output, a line a second
    assert percents == sorted(percents) and percents[0] == 0
    assert lines[-1] == f"dump-log: done, {format_amount(size, 'bytes')} in 20s"


def test_log_manager_start_up_reports_partitions_loaded(tmp_path, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    from kafkacompat.log import LogConfig, LogManager
    from kafkacompat.log import manager as manager_module

    manager = LogManager([str(tmp_path)], LogConfig(), 1, "Zx1clusterid", sync=False)
    manager.startup()
    for partition in range(12):
        manager.create_log("events", partition)
    manager.shutdown()
    entries = len(list(tmp_path.iterdir()))

    # every entry reports at once (as a start-up past the delay would), from the loading thread itself
    def immediate(*args, **kwargs):  # type: ignore[no-untyped-def]
        return Progress(*args, **{**kwargs, "heartbeat": False, "delay": 0, "interval": 0, "tty": False})

    monkeypatch.setattr(manager_module, "Progress", immediate)
    with caplog.at_level(logging.INFO, logger="kafkacompat.log"):
        LogManager([str(tmp_path)], LogConfig(), 1, "Zx1clusterid", sync=False).startup()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("loading logs")]
    assert lines[0].startswith(f"loading logs: 1 dir entries of {entries} dir entries")
    assert any(line.endswith("- events-11") for line in lines)
    assert lines[-1].startswith(f"loading logs: done, {entries} dir entries in")
