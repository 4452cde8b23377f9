"""The command line refuses what it cannot use, in one line that says what and where: run as processes
(`python -m kafkacompat ...`), as a user runs them."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kafkacompat import __version__


def kafkacompat(
    *args: str, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkacompat", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_version_is_printed() -> None:
    result = kafkacompat("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{__version__}\n", "")


def test_users_add_refuses_an_empty_password() -> None:
    # refused before any connection is tried (nothing listens on port 1)
    for args, stdin in ((["--password", ""], None), ([], "\n"), ([], "")):
        result = kafkacompat(
            "users", "add", "--user", "alice", *args, "--bootstrap-server", "127.0.0.1:1", input=stdin
        )
        assert result.returncode == 1, result
        assert result.stderr == "Error while executing user command : the password must not be empty\n"


def test_serve_refuses_an_unknown_log_level() -> None:
    result = kafkacompat("serve", "--log-level", "LOUD")
    assert result.returncode == 2
    error = result.stderr.splitlines()[-1]
    assert "--log-level" in error and "'LOUD'" in error
    assert all(level in error for level in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR"))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_bootstrap_that_is_not_kafka_is_named() -> None:
    """An HTTP server (the metrics port, say) as --bootstrap-server."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def answer_http() -> None:
            for _ in range(2):  # the client asks ApiVersions v3, then once more in v0
                conn, _ = server.accept()
                with conn:
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        thread = threading.Thread(target=answer_http, daemon=True)
        thread.start()
        result = kafkacompat("topics", "list", "--bootstrap-server", f"127.0.0.1:{port}", timeout=30)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert f"the server at 127.0.0.1:{port} does not speak the Kafka protocol" in line
    assert "b'HTTP'" in line


def serve(tmp_path: Path, *overrides: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    args = ["serve", "--log-level", "WARN"]
    for override in overrides:
        args += ["--override", override]
    return kafkacompat(*args, timeout=timeout)


def test_serve_names_the_listener_whose_port_is_in_use_and_writes_nothing(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        result = serve(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{port}", f"log.dirs={data}")
    assert (result.returncode, result.stderr) == (
        1,
        f"kafkacompat serve: listener PLAINTEXT failed to bind to 127.0.0.1:{port}: Address already in use\n",
    )
    assert not data.exists()


def test_serve_names_a_listener_host_that_does_not_resolve(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = serve(tmp_path, "listeners=PLAINTEXT://no-such-host.invalid:0", f"log.dirs={data}")
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(
        "kafkacompat serve: listener PLAINTEXT: cannot resolve host 'no-such-host.invalid'"
    )
    assert not data.exists()


def test_serve_names_a_log_dir_that_is_a_regular_file(tmp_path: Path) -> None:
    regular = tmp_path / "data"
    regular.write_text("not a directory\n")
    result = serve(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={regular}")
    assert (result.returncode, result.stderr) == (
        1,
        f"kafkacompat serve: log.dirs: {regular} is not a directory\n",
    )


@pytest.mark.parametrize("chroot", ["", "/kafka"])
@pytest.mark.parametrize("zookeeper", ["closed", "silent"])
def test_serve_says_zookeeper_is_unreachable_within_the_connection_timeout(
    tmp_path: Path, zookeeper: str, chroot: str
) -> None:
    """Nothing listening, or a server that accepts and never answers: one line, within the timeout."""
    with socket.socket() as silent:
        if zookeeper == "silent":
            silent.bind(("127.0.0.1", 0))
            silent.listen()
            port = silent.getsockname()[1]
        else:
            port = _closed_port()
        connect = f"127.0.0.1:{port}{chroot}"
        started = time.monotonic()
        result = serve(
            tmp_path,
            "listeners=PLAINTEXT://127.0.0.1:0",
            f"log.dirs={tmp_path / 'data'}",
            f"zookeeper.connect={connect}",
            "zookeeper.session.timeout.ms=30000",
            "zookeeper.connection.timeout.ms=1000",
        )
        took = time.monotonic() - started
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"kafkacompat serve: cannot reach ZooKeeper at {connect} within 1000 ms "
        "(zookeeper.connection.timeout.ms); without zookeeper.connect the broker runs as a single node"
    )
    assert took < 15, took  # the connection timeout and the start of a Python process, not the session's
