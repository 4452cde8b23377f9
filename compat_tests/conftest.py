"""Real clients against a running broker.

By default the session starts one kafkacompat broker in-process (kafkacompat.testing) on a free port
with its data in a temp dir, with `COMPAT_OVERRIDES`: group.initial.rebalance.delay.ms=0 (a group's first
rebalance completes as soon as its members have joined, instead of waiting three seconds) and a small
__consumer_offsets, so group tests take milliseconds per rebalance; every assertion must hold against a
stock Kafka too. `--bootstrap HOST:PORT` points the whole suite at any other broker (a real
Kafka, for comparison); tests marked `restarts_broker` need a broker the suite owns and are skipped then.
`--cluster` runs the suite against a 3-broker cluster of kafkacompat in cluster mode (ZooKeeper from
Debian's package; `default.replication.factor=3`, so `create_topic`'s topics have three replicas),
`restarts_broker` tests skipped as well; `make test` runs every client's produce, consume and group
suites this way too (the Makefile's CLUSTER_SUITE).
Every test uses its own topic names, so tests do not see each other's data.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from compat_tests.clients import create_topic
from kafkacompat.local_brokers import InProcessBroker

COMPAT_OVERRIDES = [
    "group.initial.rebalance.delay.ms=0",
    "offsets.topic.num.partitions=5",
    # transactions: a small __transaction_state, and timed-out transactions aborted within half a second
    "transaction.state.log.num.partitions=5",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--bootstrap",
        action="store",
        default=None,
        metavar="HOST:PORT",
        help="run compat_tests against this broker instead of one started by the suite",
    )
    parser.addoption(
        "--cluster",
        action="store_true",
        default=False,
        help="run compat_tests against a 3-broker kafkacompat cluster (cluster mode, needs ZooKeeper)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--bootstrap") and not config.getoption("--cluster"):
        return
    skip = pytest.mark.skip(reason="needs a broker started by the suite (--bootstrap or --cluster given)")
    for item in items:
        if "restarts_broker" in item.keywords or "secured_broker" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = request.config.getoption("--bootstrap")
    if external:
        yield external
        return
    if request.config.getoption("--cluster"):
        yield from _cluster_bootstrap(tmp_path_factory)
        return
    broker = InProcessBroker(tmp_path_factory.mktemp("broker") / "data", COMPAT_OVERRIDES).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def _cluster_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from kafkacompat.local_brokers import CLUSTER_TEST_OVERRIDES, LocalCluster
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable

    try:
        cluster = LocalCluster(
            tmp_path_factory.mktemp("cluster"),
            3,
            [*COMPAT_OVERRIDES, *CLUSTER_TEST_OVERRIDES, "default.replication.factor=3"],
        )
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"--cluster needs ZooKeeper: {exc}")
    cluster.start()
    try:
        cluster.wait_until_ready()
        yield cluster.bootstrap
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def default_bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A broker with Kafka's defaults, as `make run` starts it (notably the 3 s
    group.initial.rebalance.delay.ms), started on first use; with `--bootstrap`, that broker. For tests
    that must hold against a default broker, where `bootstrap`'s overrides would hide a wait."""
    external = request.config.getoption("--bootstrap")
    if external:
        yield external
        return
    broker = InProcessBroker(tmp_path_factory.mktemp("default-broker") / "data").start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name for this test (the topic itself is not created)."""
    test = "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:60]
    return f"compat-{test}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic(bootstrap: str, topic_name: str) -> str:
    """A fresh single-partition topic."""
    create_topic(bootstrap, topic_name)
    return topic_name


@pytest.fixture
def make_topic(bootstrap: str, topic_name: str) -> Callable[..., str]:
    counter = iter(range(1000))

    def make(partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        name = f"{topic_name}-{next(counter)}"
        create_topic(bootstrap, name, partitions, configs)
        return name

    return make


# --- kafka-python --------------------------------------------------------------------------------


@pytest.fixture
def kp_closing() -> Iterator[Callable[[Any], Any]]:
    """Register kafka-python clients to close after the test."""
    clients: list[Any] = []
    yield lambda client: clients.append(client) or client
    for client in reversed(clients):
        try:
            client.close()
        except Exception:
            pass


# --- confluent-kafka ---------------------------------------------------------------------------------


@pytest.fixture
def ck_closing() -> Iterator[Callable[[Any], Any]]:
    """Register confluent-kafka producers and consumers to close after the test, passed or failed. Unclosed,
    a client lives as long as anything refers to it (a failed test's traceback does), and librdkafka keeps
    reconnecting to its brokers all that time, even to a module's broker long stopped."""
    clients: list[Any] = []
    yield lambda client: clients.append(client) or client
    while clients:
        client = clients.pop()
        try:
            client.close()  # idempotent for a Producer (it flushes first); a closed Consumer raises
        except Exception:
            pass


# --- kcat ----------------------------------------------------------------------------------------


@pytest.fixture
def kcat() -> Callable[..., subprocess.CompletedProcess[bytes]]:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat not installed (CI installs it)")

    def run(
        *args: str, input: bytes | None = None, timeout: float = 30
    ) -> subprocess.CompletedProcess[bytes]:
        result = subprocess.run(
            [path, *args], input=input, capture_output=True, timeout=timeout, env={**os.environ}
        )
        if result.returncode != 0:
            raise AssertionError(f"kcat {' '.join(args)} failed: {result.stderr.decode(errors='replace')}")
        return result

    return run
