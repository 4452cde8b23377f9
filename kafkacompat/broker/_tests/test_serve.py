"""`kafkacompat serve` as a process: start-up time, signals, config errors."""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkacompat.testing import BrokerProcess, InProcessBroker


def _metadata_answer(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        body = struct.pack(">hhih", 3, 1, 1, 1) + b"t" + struct.pack(">i", -1)
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        return sock.recv(size, socket.MSG_WAITALL)


def test_sigterm_shuts_down_cleanly(tmp_path: Path) -> None:
    started = time.monotonic()
    broker = BrokerProcess(tmp_path / "data").start()
    assert time.monotonic() - started < 5  # generous for loaded CI machines; typically ~0.5 s
    answer = _metadata_answer(broker.port)
    assert struct.unpack(">i", answer[:4])[0] == 1  # correlation id
    assert broker.stop() == 0
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()
    assert "shutting down" in broker.log_path.read_text()


def test_second_signal_exits_at_once(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    process = broker.process
    assert process is not None
    # two different signals (trio coalesces repeats of one signal that arrive before they are read)
    process.send_signal(signal.SIGTERM)
    process.send_signal(signal.SIGINT)
    assert process.wait(10) in (128 + signal.SIGINT, 128 + signal.SIGTERM)  # not 0: no orderly shutdown
    broker.process = None


def test_bad_config_exits_with_message(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafkacompat",
            "serve",
            "--override",
            "num.partitions=zero",
            "--override",
            f"log.dirs={tmp_path}",
        ],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert b"num.partitions" in result.stderr


def test_config_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(f"log.dirs={tmp_path / 'fromfile'}\nlisteners=PLAINTEXT://127.0.0.1:0\nunknown.key=1\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "kafkacompat", "serve", "--config", str(path)],
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "fromfile" / "meta.properties").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (tmp_path / "fromfile" / "meta.properties").exists()
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0
    assert b"unknown configuration keys (ignored): unknown.key" in stderr


def test_plugin_fixture_runs_a_broker_in_process(kafkacompat_broker: InProcessBroker) -> None:
    host, port = kafkacompat_broker.bootstrap.split(":")
    assert host == "127.0.0.1"
    assert struct.unpack(">i", _metadata_answer(int(port))[:4])[0] == 1
    assert (kafkacompat_broker.data_dir / "meta.properties").exists()
    kafkacompat_broker.stop()
    assert (kafkacompat_broker.data_dir / ".kafka_cleanshutdown").exists()


def test_plugin_process_fixture_restart_and_kill(kafkacompat_broker_process: BrokerProcess) -> None:
    port = kafkacompat_broker_process.port
    kafkacompat_broker_process.kill()
    assert not (kafkacompat_broker_process.data_dir / ".kafka_cleanshutdown").exists()
    kafkacompat_broker_process.start()
    assert kafkacompat_broker_process.port == port
    kafkacompat_broker_process.restart()
    assert struct.unpack(">i", _metadata_answer(port)[:4])[0] == 1


def test_port_in_use_exits_with_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "kafkacompat",
                "serve",
                "--override",
                f"listeners=PLAINTEXT://127.0.0.1:{port}",
                "--override",
                f"log.dirs={tmp_path}",
            ],
            capture_output=True,
            timeout=30,
        )
    assert result.returncode == 1
    assert b"Address already in use" in result.stderr


def test_second_broker_on_the_same_log_dir_is_refused_before_touching_it(tmp_path: Path) -> None:
    """A second `make run` beside a live one: it must stop at the log dir's `.lock`, naming the dir and the
    live broker's pid, and leave the live broker's files alone (no recovery, no checkpoints, no marker)."""
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        assert broker.process is not None
        before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in data.iterdir() if p.is_file()}
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "kafkacompat",
                "serve",
                "--override",
                f"log.dirs={data}",
                "--override",
                "listeners=PLAINTEXT://127.0.0.1:0",  # a free port: only the lock can stop it
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1, result.stderr
        assert str(data) in result.stderr
        assert f"process {broker.process.pid}" in result.stderr
        after = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in data.iterdir() if p.is_file()}
        assert after == before
        assert not (data / ".kafka_cleanshutdown").exists()
        assert struct.unpack(">i", _metadata_answer(broker.port)[:4])[0] == 1  # the first broker serves on
    finally:
        assert broker.stop() == 0
    assert (data / ".kafka_cleanshutdown").exists()


def test_a_failed_start_releases_the_log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A start that fails after taking the lock must not keep the dir locked, or the next start in the
    same process (a test's restart) would be refused: here an unreadable topic table (before the logs
    load) and a disk error after they loaded."""
    from kafkacompat.broker import server

    data = tmp_path / "data"
    InProcessBroker(data).start().stop()
    table = data / "kafkacompat-metadata.json"
    table.write_text('{"version": 99}')
    with pytest.raises(RuntimeError, match="failed to start"):
        InProcessBroker(data).start()
    table.unlink()

    def disk_error(state: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(server, "_adopt_unknown_logs", disk_error)
    with pytest.raises(RuntimeError, match="failed to start"):
        InProcessBroker(data).start()
    monkeypatch.undo()
    InProcessBroker(data).start().stop()


@pytest.mark.parametrize("switch", ["environment", "override"])
def test_the_first_request_does_not_import_the_request_path_on_the_event_loop(
    switch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server imported connection/dispatch/handlers on its first connection: one task step of
    0.2-0.3 s of CPU (loop-lag monitor), every client waiting. `serve` imports them before the loop.
    The monitor is switched on by `KAFKACOMPAT_LOOP_LAG_MS` or by `--override loop.lag.threshold.ms`."""
    monkeypatch.delenv("KAFKACOMPAT_LOOP_LAG_MS", raising=False)
    overrides = []
    if switch == "environment":
        monkeypatch.setenv("KAFKACOMPAT_LOOP_LAG_MS", "50")
    else:
        overrides.append("loop.lag.threshold.ms=50")
    broker = BrokerProcess(tmp_path / "data", overrides).start()
    try:
        answer = _metadata_answer(broker.port)
        assert struct.unpack(">i", answer[:4])[0] == 1
    finally:
        assert broker.stop() == 0
    log = broker.log_path.read_text()
    assert "loop-lag monitor on" in log
    # the import would be a step of the connection's task, named by the request it began (Metadata)
    held = [line for line in log.splitlines() if "event loop held" in line and "collection" not in line]
    assert held == [], held
