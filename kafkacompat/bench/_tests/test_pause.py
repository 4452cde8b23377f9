"""The brokers not being measured are stopped during a run and resumed after it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkacompat.bench import runner
from kafkacompat.bench.cli import build_parser, settings_from_args


def _state_letter(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def _states_become(pids: list[int], letters: str) -> bool:
    """Whether every process reaches one of `letters` within 5 s (signals are delivered asynchronously)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if all(_state_letter(pid) in letters for pid in pids):
            return True
        time.sleep(0.01)
    return False


class _FakeBroker:
    def __init__(self, pid: int | None) -> None:
        self.pid = pid


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to read process states")
def test_others_are_stopped_while_one_is_measured_and_resumed_after() -> None:
    # a "broker" with a child process, as a peer started through a shell or a launcher would be
    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )
    other = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while len(runner.process_tree(other.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = runner.process_tree(other.pid)
        assert len(tree) == 2
        measured = runner._BrokerState(_FakeBroker(None))  # type: ignore[arg-type]
        peer = runner._BrokerState(_FakeBroker(other.pid))  # type: ignore[arg-type]
        measured.others = [peer]
        with runner._others_paused(measured):
            assert _states_become(tree, "T")
        assert _states_become(tree, "SR")
        # a broker without a pid (given with --bootstrap) is never touched, and pausing nothing is fine
        peer.others = [measured]
        with runner._others_paused(peer):
            time.sleep(0.1)
            assert not any(_state_letter(pid) == "T" for pid in tree)
    finally:
        for pid in reversed(runner.process_tree(other.pid)):
            subprocess.run(["kill", "-9", str(pid)], check=False)
        other.wait(10)


def test_pausing_is_on_by_default_and_can_be_turned_off() -> None:
    assert settings_from_args(build_parser().parse_args([])).pause_others is True
    assert settings_from_args(build_parser().parse_args(["--no-pause"])).pause_others is False
