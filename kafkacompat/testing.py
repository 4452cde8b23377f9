"""pytest plugin (entry point `kafkacompat`): fixtures that run a real kafkacompat broker.

Theory of operation: each fixture starts one of kafkacompat.local_brokers' brokers with its data in the
test's temporary directory, yields it, and stops it after the test, whatever the test's outcome.

- `kafkacompat_broker`: an `InProcessBroker` (a broker on a thread of the test process; sync and trio
  tests talk to it over real TCP).
- `kafkacompat_broker_process`: a `BrokerProcess` (`python -m kafkacompat serve` as a child process),
  for tests that restart the broker or kill it with SIGKILL.
- `kafkacompat_cluster`: a `LocalCluster` of 3 brokers and a ZooKeeper server in child processes
  (cluster mode); skipped with a reason when ZooKeeper or java is absent.

The classes live in kafkacompat.local_brokers, which never imports pytest (`kafkacompat cluster up` and
the tools use them); they are re-exported here under their names, with `CLUSTER_TEST_OVERRIDES`.
`env_without_pytest()` gives a child Python the environment of an install without pytest, for tests of
that.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkacompat.local_brokers import CLUSTER_TEST_OVERRIDES, BrokerProcess, InProcessBroker, LocalCluster

__all__ = [
    "CLUSTER_TEST_OVERRIDES",
    "BrokerProcess",
    "InProcessBroker",
    "LocalCluster",
    "env_without_pytest",
    "kafkacompat_broker",
    "kafkacompat_broker_process",
    "kafkacompat_cluster",
]


def env_without_pytest(directory: Path) -> dict[str, str]:
    """This process's environment with `directory` first on PYTHONPATH, holding `pytest.py` and
    `_pytest.py` modules that raise ImportError: a child Python then fails `import pytest` as in an
    install without test dependencies (and so do the children it starts with the same environment)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("pytest", "_pytest"):
        (directory / f"{name}.py").write_text(f'raise ImportError("no {name} in this environment")\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(directory), *filter(None, [env.get("PYTHONPATH")])])
    return env


@pytest.fixture
def kafkacompat_broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    """A broker on a thread of the test process, data in a temp dir; stopped after the test."""
    broker = InProcessBroker(tmp_path / "data").start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def kafkacompat_broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker in a child process (restart(), kill(), start()), data in a temp dir."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def kafkacompat_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """Three brokers and a ZooKeeper server in child processes (cluster mode); stopped after the test."""
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable

    try:
        cluster = LocalCluster(tmp_path / "cluster")
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"cluster mode needs ZooKeeper: {exc}")
    try:
        cluster.start().wait_until_ready()
        yield cluster
    finally:
        cluster.stop()
