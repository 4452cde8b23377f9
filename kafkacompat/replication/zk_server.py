"""A local ZooKeeper server as a child process, from the Debian `zookeeper` package's jars.

Theory of operation: `find_zookeeper_classpath()` locates the server jar (Debian installs
`/usr/share/java/zookeeper.jar`, whose manifest names its dependencies; `KAFKACOMPAT_ZOOKEEPER_CLASSPATH`
overrides it) and `java`. `LocalZooKeeper` runs `org.apache.zookeeper.server.ZooKeeperServerMain PORT
DIR` (a standalone server, no config file) on 127.0.0.1, waits until the port accepts connections and
stops it with SIGTERM (SIGKILL after a grace period). The data dir survives `stop()`, so `start()`
again on the same port is a ZooKeeper restart with its data. Used by `kafkacompat cluster up`, the
pytest cluster fixture and the ZooKeeper tests; the broker itself never starts ZooKeeper.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["LocalZooKeeper", "ZooKeeperUnavailable", "find_zookeeper_classpath", "free_port"]

_DEBIAN_JARS = ("/usr/share/java/zookeeper.jar",)
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperUnavailable(RuntimeError):
    """No ZooKeeper jars or no java on this machine."""


def find_zookeeper_classpath() -> tuple[str, str]:
    """(java executable, classpath) for a ZooKeeper server, or raise ZooKeeperUnavailable."""
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperUnavailable("no java on PATH (Debian: apt-get install zookeeper)")
    override = os.environ.get("KAFKACOMPAT_ZOOKEEPER_CLASSPATH")
    if override:
        return java, override
    for jar in _DEBIAN_JARS:
        if os.path.exists(jar):
            return java, jar
    raise ZooKeeperUnavailable("ZooKeeper jars not found (Debian: apt-get install zookeeper)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalZooKeeper:
    """One standalone ZooKeeper server process on 127.0.0.1 (see module docstring)."""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, port: int = 0) -> None:
        self.java, self.classpath = find_zookeeper_classpath()
        self._owned_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="kc-zk-"))
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "zookeeper.out", "ab")
        try:
            self.process = subprocess.Popen(
                [
                    self.java,
                    "-Xmx256m",
                    "-Dzookeeper.admin.enableServer=false",
                    "-Dzookeeper.4lw.commands.whitelist=ruok,srvr",
                    "-Dzookeeper.clientPortAddress=127.0.0.1",
                    "-cp",
                    self.classpath,
                    MAIN_CLASS,
                    str(self.port),
                    str(self.data_dir / "data"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.process.returncode}; see {self.data_dir}")
            if self._answers():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not start within {timeout}s on {self.connect_string}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"ruok")
                return sock.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self, grace: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Stop the server and remove a data dir this object created."""
        self.stop()
        if self._owned_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalZooKeeper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
