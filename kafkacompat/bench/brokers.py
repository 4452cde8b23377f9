"""Brokers under test: kafkacompat itself, peers started from a command line, or one already running.

Theory of operation: `BrokerSpec` says how to get a broker (a command template with `{port}` and
`{dir}` placeholders, or a fixed bootstrap address). `RunningBroker.start()` picks a free loopback
port, makes a fresh data dir, starts the command in a new session (so its whole process group can be
stopped, and only it), then polls the port with our own small client until ApiVersions and a Metadata
request are answered: the time from spawn to that first Metadata answer is the start-up figure. The
ApiVersions answer also tells whether the broker serves JoinGroup (api key 11), which decides whether
the group workloads can run. `stop()` sends SIGTERM to the process group, then SIGKILL after a grace
period; the data dir is removed with the benchmark's temp dir. Before kafkacompat's first start its
package's stale bytecode is rewritten (`refresh_bytecode`), so that a checkout starts as an installed
package would, whatever PYTHONDONTWRITEBYTECODE says.

Traffic goes to 127.0.0.1 only: commands are given the loopback address, and a `--bootstrap` that
does not name a loopback host is refused by `check_loopback()`.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "BrokerSpec",
    "RunningBroker",
    "check_loopback",
    "free_port",
    "kafkacompat_spec",
    "parse_peer",
    "refresh_bytecode",
]

JOIN_GROUP = 11
START_TIMEOUT = 30.0
_REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class BrokerSpec:
    """How to obtain one broker under test. Exactly one of `command` and `bootstrap` is set."""

    name: str
    command: tuple[str, ...] | None = None
    bootstrap: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # a Python package of the broker's whose bytecode is brought up to date before its first start
    bytecode_dir: Path | None = None

    def display_command(self) -> str:
        return shlex.join(self.command) if self.command else f"(already running at {self.bootstrap})"


def kafkacompat_spec(overrides: list[str] | None = None) -> BrokerSpec:
    """kafkacompat started as `python -m kafkacompat serve` with its data and listener in place."""
    command = [
        sys.executable,
        "-m",
        "kafkacompat",
        "serve",
        "--override",
        "log.dirs={dir}",
        "--override",
        "listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override",
        "group.initial.rebalance.delay.ms=0",
        # topics the benchmark deletes go at once, between workloads, not 60 s later during another one
        "--override",
        "log.segment.delete.delay.ms=0",
    ]
    for item in overrides or []:
        command += ["--override", item]
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    return BrokerSpec("kafkacompat", tuple(command), env=env, bytecode_dir=_REPO_ROOT / "kafkacompat")


def refresh_bytecode(package_dir: Path) -> bool:
    """Write current bytecode for every module of `package_dir` (tests aside) whose .pyc is stale.

    An installed package has its bytecode compiled at install. A checkout run with
    PYTHONDONTWRITEBYTECODE=1 never rewrites it, so each start would recompile every module edited
    since the last write: about 40 ms of a 170 ms start-up when 36 modules were stale. Doing it once
    before the first start measures a checkout as it would start installed. False if some module could
    not be written (a read-only install, already compiled there).
    """
    import compileall
    import re

    return bool(compileall.compile_dir(str(package_dir), quiet=2, rx=re.compile(r"[/\\]_tests[/\\]")))


def parse_peer(text: str) -> BrokerSpec:
    """`[NAME=]COMMAND` -> BrokerSpec; the name defaults to the command's program name.

    The command must mention {port} (the broker has to listen where we connect); {dir} is optional.
    """
    name = None
    head, sep, rest = text.partition("=")
    if sep and head and all(ch.isalnum() or ch in "-_." for ch in head):
        name, text = head, rest
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"cannot parse peer command {text!r}: {exc}") from exc
    if not argv:
        raise ValueError("empty peer command")
    if not any("{port}" in arg for arg in argv):
        raise ValueError(f"peer command {text!r} has no {{port}} placeholder")
    for arg in argv:
        try:
            arg.format(port=0, dir="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"peer command argument {arg!r}: only {{port}} and {{dir}} may be used") from exc
    return BrokerSpec(name or Path(argv[0]).name, tuple(argv))


def check_loopback(bootstrap: str) -> None:
    """Refuse any bootstrap address that is not on this host's loopback interface."""
    for item in bootstrap.split(","):
        host = item.strip().rpartition(":")[0].strip("[]")
        if host == "localhost":
            continue
        try:
            if ipaddress.ip_address(host).is_loopback:
                continue
        except ValueError:
            pass
        raise ValueError(f"--bootstrap {item!r}: the benchmark only sends traffic to 127.0.0.1")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def probe(bootstrap: str, timeout: float = 2.0) -> tuple[bool, float]:
    """(serves JoinGroup?, seconds for the Metadata round trip) — raises ClientError if not up."""
    from kafkacompat.client import KafkaClient

    with KafkaClient(bootstrap, client_id="kafkacompat-bench", timeout=timeout) as client:
        t0 = time.perf_counter()
        client.metadata([])
        elapsed = time.perf_counter() - t0
        return JOIN_GROUP in client.connection().versions, elapsed


class RunningBroker:
    """One live broker under test; owned by the runner, which starts and stops it."""

    def __init__(self, spec: BrokerSpec, work_dir: Path) -> None:
        self.spec = spec
        self.work_dir = work_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.data_dir: Path | None = None
        self.serves_groups = False
        self._starts = 0

    @property
    def bootstrap(self) -> str:
        if self.spec.bootstrap is not None:
            return self.spec.bootstrap
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def log_path(self) -> Path:
        return self.work_dir / f"{self.spec.name}.log"

    def start(self) -> float | None:
        """Start (or attach); return seconds from spawn to the first Metadata answer (None if attached)."""
        if self.spec.command is None:
            self.serves_groups, _ = probe(self.bootstrap, timeout=10)
            return None
        if self._starts == 0 and self.spec.bytecode_dir is not None:
            refresh_bytecode(self.spec.bytecode_dir)
        self._starts += 1
        self.port = free_port()
        self.data_dir = self.work_dir / f"{self.spec.name}-data-{self._starts}"
        self.data_dir.mkdir(parents=True)
        argv = [arg.format(port=self.port, dir=self.data_dir) for arg in self.spec.command]
        env = os.environ | self.spec.env
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== {shlex.join(argv)}\n".encode())
            log.flush()
            t0 = time.perf_counter()
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                cwd=self.data_dir,
            )
        from kafkacompat.client import ClientError

        deadline = t0 + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.spec.name} exited with {self.process.returncode} at start-up "
                    f"(see {self.log_path})"
                )
            try:
                self.serves_groups, _ = probe(self.bootstrap, timeout=2.0)
                return time.perf_counter() - t0
            except (ClientError, OSError):
                if time.perf_counter() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"{self.spec.name} did not answer Metadata within {START_TIMEOUT:.0f} s"
                    ) from None
                time.sleep(0.002)

    def stop(self, grace: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(5)
