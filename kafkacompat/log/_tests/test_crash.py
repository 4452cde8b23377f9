"""Crash safety: a child appends continuously and is SIGKILLed at random moments; every acknowledged
batch must survive byte for byte, and appends must continue at the right offset."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from kafkacompat.log import LogConfig, LogManager
from kafkacompat.log._tests.helpers import parse_log_file, segment_logs

ROUNDS = 50
CONFIG = LogConfig.from_properties({"segment.bytes": "65536", "index.interval.bytes": "1024"})


@pytest.mark.slow
def test_acknowledged_batches_survive_sigkill(tmp_path):
    log_dir = str(tmp_path / "logs")
    rng = random.Random(1234)
    acked: dict[int, tuple[int, str]] = {}
    expected_end = 0
    deadline = time.monotonic() + 90
    rounds = 0
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    while rounds < ROUNDS and time.monotonic() < deadline:
        child = subprocess.Popen(
            [sys.executable, "-m", "kafkacompat.log._tests.crash_child", log_dir, str(rounds)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None
        first = child.stdout.readline().split()
        assert first[0] == b"START"
        assert int(first[1]) == expected_end, (
            f"round {rounds}: log reopened at {first[1]}, expected {expected_end}"
        )
        time.sleep(rng.uniform(0.0, 0.12))
        child.send_signal(signal.SIGKILL)
        output = child.stdout.read()
        child.wait()
        child.stdout.close()
        lines = output.split(b"\n")
        new = 0
        for line in lines[:-1]:  # the part after the last newline may be cut by the kill
            base, last, digest = line.split()
            if new == 0:
                assert int(base) == expected_end, (
                    f"round {rounds}: first append at {base}, expected {expected_end}"
                )
            acked[int(base)] = (int(last), digest.decode())
            new += 1

        manager = LogManager([log_dir], CONFIG, 1, "crash-test", sync=False)
        manager.startup()
        pl = manager.get_log("crash", 0)
        assert pl is not None
        last_acked = max((last for last, _ in acked.values()), default=-1)
        assert pl.log_end_offset >= last_acked + 1
        # every batch acknowledged in this round, and a sample of the older ones (all of them at the end)
        older = [b for b in acked if b < expected_end]
        to_check = [b for b in acked if b >= expected_end] + rng.sample(older, min(30, len(older)))
        if rounds == ROUNDS - 1:
            to_check = list(acked)
        for base in to_check:
            last, digest = acked[base]
            result = pl.read(base, 1)
            assert result.first_offset == base
            assert hashlib.sha1(result.slices[0].read_bytes()).hexdigest() == digest, f"batch {base} differs"
        # kafka-python reads the segments this round wrote to (all segments in the last round)
        logs = segment_logs(pl.directory)
        if rounds < ROUNDS - 1:
            logs = [
                p
                for p in logs
                if int(os.path.basename(p)[:-4]) >= pl.segments[-1].base_offset
                or int(os.path.basename(p)[:-4]) >= expected_end - 64
            ]
            logs = logs[-3:]
        offsets = [r.offset for p in logs for b in parse_log_file(p) for r in b]
        first_base = int(os.path.basename(logs[0])[:-4])
        assert offsets == list(range(first_base, pl.log_end_offset))
        expected_end = pl.log_end_offset
        if rounds % 5 == 4:
            manager.shutdown()  # exercise the clean path too
        else:
            if rounds % 7 != 3:  # usually the broker's flush task has advanced the recovery point
                pl.flush()
                manager.checkpoint()
            manager.close_without_marker()
        rounds += 1
    assert rounds >= ROUNDS, f"only {rounds} rounds in the time budget"
    assert len(acked) > ROUNDS  # the child really appended between kills
