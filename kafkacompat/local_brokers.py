"""Brokers and clusters on this machine, started and stopped from Python: for tests, tools and `cluster up`.

Theory of operation: each runs a real kafkacompat broker on a free port of 127.0.0.1 with its data in a
directory the caller names.

- `InProcessBroker` runs `Broker.run()` under `trio.run` on a thread of its own, so the caller (sync or
  trio) talks to it over real TCP like any client. `start()` returns once the listener is bound; `stop()`
  asks for an orderly shutdown from the calling thread and joins.
- `BrokerProcess` runs `python -m kafkacompat serve` as a child process, for callers that restart the
  broker or kill it with SIGKILL (`restart()`, `kill()`, `start()` again on the same port and data).
  Readiness is the "started, listening on" log line, which the child writes to `broker.log` in the data
  dir.
- `LocalCluster` runs a ZooKeeper server (Debian's `zookeeper` jars, kafkacompat.replication.zk_server)
  and N `BrokerProcess`es with `broker.id` 1..N and `zookeeper.connect` set: cluster mode, for
  replication and failover (`kill(broker_id)`, `start_broker(broker_id)`, `restart_broker(broker_id)`);
  `start()` starts the brokers in parallel. With `base_port`, broker N listens on base_port + N - 1 and
  ZooKeeper on the port after the last broker's.

All take config overrides (`key=value` strings), which win over the defaults here (listener on
127.0.0.1, port 0 the first time, log.dirs in the data dir). This module imports nothing beyond the
standard library at import time (trio, the broker and the client are imported when a broker starts), and
never pytest: `kafkacompat cluster up` and the tools use it in an install without test dependencies. The
pytest fixtures around these classes are in kafkacompat.testing.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CLUSTER_TEST_OVERRIDES",
    "START_TIMEOUT",
    "BrokerProcess",
    "InProcessBroker",
    "LocalCluster",
]

START_TIMEOUT = 20.0
_STARTED = re.compile(r"started, listening on (\w+)://([^:\s]+):(\d+)")


def _overrides(data_dir: Path, port: int, extra: Sequence[str]) -> list[str]:
    return [
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        f"log.dirs={data_dir}",
        *extra,
    ]


class InProcessBroker:
    """A broker on a thread of this process. `.bootstrap` is "127.0.0.1:PORT" once started."""

    def __init__(
        self, data_dir: str | os.PathLike[str], overrides: Sequence[str] = (), port: int = 0
    ) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = list(overrides)
        self.port = port
        self.broker: Any = None
        self.ports: dict[str, int] = {}  # listener name -> bound port (several listeners: security tests)
        self._thread: threading.Thread | None = None
        self._token: Any = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        """The Prometheus endpoint (`metrics.listener`, port 0 allowed) once started, else None."""
        address = getattr(self.broker, "metrics_address", None)
        return None if address is None else f"http://{address[0]}:{address[1]}/metrics"

    def start(self) -> InProcessBroker:
        from kafkacompat.config import BrokerConfig

        config = BrokerConfig.load(None, _overrides(self.data_dir, self.port, self.overrides))
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(
            target=self._main, args=(config,), name="kafkacompat-broker", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise RuntimeError("broker did not start in time")
        if self._error is not None:
            raise RuntimeError("broker failed to start") from self._error
        return self

    def _main(self, config: Any) -> None:
        import trio

        from kafkacompat.broker.server import Broker

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self.broker = Broker(config)
            async with trio.open_nursery() as nursery:
                bound = await nursery.start(self.broker.run)
                self.port = bound[0].port
                self.ports = {listener.name: listener.port for listener in bound}
                self._ready.set()

        try:
            trio.run(main)
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    def stop(self) -> None:
        """Orderly shutdown (checkpoints, clean-shutdown marker); idempotent."""
        import trio

        thread = self._thread
        if thread is None:
            return
        if thread.is_alive() and self._token is not None:
            try:
                trio.from_thread.run_sync(self.broker.request_shutdown, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        thread.join(START_TIMEOUT)
        self._thread = None
        if self._error is not None:
            raise RuntimeError("broker failed") from self._error

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> InProcessBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class BrokerProcess:
    """A broker in a child process (`python -m kafkacompat serve`), for restart and crash tests."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        overrides: Sequence[str] = (),
        port: int = 0,
        *,
        open_files: int | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = list(overrides)
        self.port = port
        #: the child's open-file limit (soft and hard: the broker raises its soft limit to the hard one at
        #: start), for tests of what happens at that limit; None inherits this process's
        self.open_files = open_files
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / "broker.log"
        #: the first listener's name once started (its port is `port`, the one `bootstrap` names)
        self.listener_name = "PLAINTEXT"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = START_TIMEOUT) -> BrokerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "kafkacompat", "serve"]
        for override in _overrides(self.data_dir, self.port, self.overrides):
            args += ["--override", override]
        log_file = open(self.log_path, "ab")
        start_offset = log_file.tell()
        try:
            self.process = subprocess.Popen(
                args, stdout=log_file, stderr=subprocess.STDOUT, preexec_fn=self._limit_open_files
            )
        finally:
            log_file.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(start_offset)
                match = _STARTED.search(f.read().decode("utf-8", "replace"))
            if match:
                self.listener_name, self.port = match.group(1), int(match.group(3))
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}: {self._tail()}")
            time.sleep(0.01)
        self.kill()
        raise RuntimeError(f"broker did not start in time: {self._tail()}")

    def _limit_open_files(self) -> None:
        if self.open_files is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    def _tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self, timeout: float = START_TIMEOUT) -> int | None:
        """SIGTERM and wait (orderly shutdown). Returns the exit status."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.process = None
        return process.returncode

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown work at all."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()
        self.process = None

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: cluster-mode settings for test clusters: small internal topics, fast failure detection
CLUSTER_TEST_OVERRIDES = (
    "zookeeper.session.timeout.ms=6000",
    "offsets.topic.num.partitions=3",
    "transaction.state.log.num.partitions=3",
    "replica.lag.time.max.ms=10000",
    "replica.fetch.wait.max.ms=200",
    "replica.fetch.backoff.ms=200",
    "controlled.shutdown.retry.backoff.ms=500",
)


class LocalCluster:
    """A ZooKeeper server and N brokers in child processes (see module docstring)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        brokers: int = 3,
        overrides: Sequence[str] = CLUSTER_TEST_OVERRIDES,
        *,
        chroot: str = "/kafkacompat",
        base_port: int | None = None,
    ) -> None:
        from kafkacompat.replication.zk_server import LocalZooKeeper

        self.data_dir = Path(data_dir)
        # with base_port: broker N on base_port + N - 1, ZooKeeper on the port after the last broker's
        zookeeper_port = 0 if base_port is None else base_port + brokers
        self.zookeeper = LocalZooKeeper(self.data_dir / "zookeeper", port=zookeeper_port)
        self.chroot = chroot
        self.brokers: dict[int, BrokerProcess] = {}
        for broker_id in range(1, brokers + 1):
            self.brokers[broker_id] = BrokerProcess(
                self.data_dir / f"broker-{broker_id}",
                [
                    f"broker.id={broker_id}",
                    f"zookeeper.connect={self.zookeeper.connect_string}{chroot}",
                    *overrides,
                ],
                port=0 if base_port is None else base_port + broker_id - 1,
            )

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.process is not None)

    def start(self) -> LocalCluster:
        """ZooKeeper, then the brokers all at once: a broker spends its start importing and opening its
        logs, waiting for no other (whichever registers first becomes the controller). Sharing the CPU,
        each may take as long as they all would one after the other."""
        from concurrent.futures import ThreadPoolExecutor

        self.zookeeper.start()
        timeout = START_TIMEOUT * len(self.brokers)
        with ThreadPoolExecutor(len(self.brokers), thread_name_prefix="cluster-start") as pool:
            for started in [pool.submit(broker.start, timeout) for broker in self.brokers.values()]:
                started.result()
        return self

    def wait_until_ready(self, timeout: float = START_TIMEOUT) -> LocalCluster:
        """Until every broker lists all the brokers and names a controller.

        A broker serves as soon as it has registered, and answers controller_id -1 until it learns who
        won the election, as Kafka's do. A client that asks such a broker for the controller may not ask
        again for minutes (librdkafka's admin client waited out a test's 30 s once), so a fixture waits.
        It asks each broker's first listener, which must be PLAINTEXT (the tests' secured clusters put
        one first); a cluster whose first listener is another is not waited for.
        """
        from kafkacompat.client import ClientError, KafkaClient

        deadline = time.monotonic() + timeout
        for broker in self.brokers.values():
            if broker.listener_name != "PLAINTEXT":
                continue
            while True:
                try:
                    with KafkaClient(broker.bootstrap, timeout=5) as client:
                        metadata = client.metadata([])
                    if len(metadata.brokers) == len(self.brokers) and metadata.controller_id >= 0:
                        break
                except (ClientError, OSError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker at {broker.bootstrap}: no controller or not every broker")
                time.sleep(0.05)
        return self

    def start_broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id].start()

    def restart_broker(self, broker_id: int) -> BrokerProcess:
        """Stop one broker (SIGTERM, orderly; nothing to do if it is not running) and start it again on
        the same port with the same data."""
        return self.brokers[broker_id].restart()

    def kill(self, broker_id: int) -> None:
        """SIGKILL one broker: its ZooKeeper session expires after zookeeper.session.timeout.ms."""
        self.brokers[broker_id].kill()

    def stop(self) -> None:
        """Every broker at once (SIGTERM, orderly), then ZooKeeper. With the whole cluster going there is
        nowhere to move leaderships to: a broker whose controlled shutdown finds no controller gives up
        after its retries and shuts down all the same, sooner than brokers stopping in turn would."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max(len(self.brokers), 1), thread_name_prefix="cluster-stop") as pool:
            for stopped in [pool.submit(broker.stop) for broker in self.brokers.values()]:
                stopped.result()
        self.zookeeper.stop()

    def __enter__(self) -> LocalCluster:
        return self.start().wait_until_ready()

    def __exit__(self, *exc: object) -> None:
        self.stop()
