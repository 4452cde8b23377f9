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
`--against kafka` runs the suite against Apache Kafka itself, the reference broker: at session start
tools/reference_kafka.py resolves it with Maven (`--kafka-version`, default the tool's) and starts one
KRaft node in a temp dir (three with `--cluster`) with the same `COMPAT_OVERRIDES`, and the session goes
on as with `--bootstrap` pointing at it (the nodes are stopped at session end). Tests marked
`kafkacompat_only` (they check what only kafkacompat has: its CLI, data dir, metrics, config files) are
skipped there with the marker's reason, as are `restarts_broker` and `secured_broker` ones.
Every test uses its own topic names, so tests do not see each other's data.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
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
REFERENCE_TOOL = Path(__file__).resolve().parent.parent / "tools" / "reference_kafka.py"
REFERENCE_DIRS = pytest.StashKey[list[Path]]()


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
        help="run compat_tests against a 3-broker cluster (cluster mode, needs ZooKeeper; with "
        "--against kafka, three KRaft nodes of Apache Kafka)",
    )
    parser.addoption(
        "--against",
        action="store",
        choices=("kafkacompat", "kafka"),
        default="kafkacompat",
        help="kafka: run compat_tests against Apache Kafka (tools/reference_kafka.py), not kafkacompat",
    )
    parser.addoption(
        "--kafka-version",
        action="store",
        default=None,
        metavar="VERSION",
        help="Apache Kafka version for --against kafka (default: tools/reference_kafka.py's)",
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if config.getoption("--against") != "kafka":
        return
    if config.getoption("--bootstrap"):
        pytest.exit("--against kafka starts its own broker: give it or --bootstrap, not both", 4)
    cluster = config.getoption("--cluster")
    overrides = [*COMPAT_OVERRIDES, *(["default.replication.factor=3"] if cluster else [])]
    config.option.bootstrap = start_reference(config, overrides, 3 if cluster else 1)


def against_kafka(config: pytest.Config) -> bool:
    """Whether the session runs against Apache Kafka started by the suite (`--against kafka`)."""
    return bool(config.getoption("--against") == "kafka")


def start_reference(config: pytest.Config, overrides: list[str], brokers: int = 1) -> str:
    """Start Apache Kafka with tools/reference_kafka.py in a temp dir, stopped at session end; its
    bootstrap list. The tool's start-up lines go to the terminal."""
    directory = Path(tempfile.mkdtemp(prefix="reference-kafka-"))
    command = [sys.executable, str(REFERENCE_TOOL), "start", "--dir", str(directory)]
    command += ["--brokers", str(brokers)]
    command += [arg for override in overrides for arg in ("--override", override)]
    version = config.getoption("--kafka-version")
    if version:
        command += ["--kafka-version", version]
    config.stash.setdefault(REFERENCE_DIRS, []).append(directory)
    config.add_cleanup(lambda: _stop_reference(directory))  # after an interrupted session too
    result = subprocess.run(command, capture_output=True, text=True)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in result.stderr.splitlines():
        if reporter is not None and line.startswith("reference_kafka:"):
            reporter.write_line(line)
    if result.returncode != 0:
        pytest.exit(f"--against kafka: the reference broker did not start:\n{result.stderr}", 4)
    return result.stdout.strip().splitlines()[-1]


def _stop_reference(directory: Path) -> None:
    subprocess.run(
        [sys.executable, str(REFERENCE_TOOL), "stop", "--dir", str(directory)], capture_output=True
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the reference brokers; remove their directories, or keep them (logs in node-N/server.log)
    and say where when the session failed."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for directory in session.config.stash.get(REFERENCE_DIRS, []):
        _stop_reference(directory)
        if exitstatus == 0:
            shutil.rmtree(directory, ignore_errors=True)
        elif reporter is not None:
            reporter.write_line(f"reference_kafka: broker logs kept in {directory}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if against_kafka(config):
        for item in items:
            marker = item.get_closest_marker("kafkacompat_only")
            if marker is not None:
                reason = marker.args[0] if marker.args else "checks what only kafkacompat has"
                item.add_marker(pytest.mark.skip(reason=f"kafkacompat only: {reason}"))
    if not config.getoption("--bootstrap") and not config.getoption("--cluster"):
        return
    skip = pytest.mark.skip(
        reason="needs a broker started by the suite (--bootstrap, --cluster or --against kafka)"
    )
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
    group.initial.rebalance.delay.ms), started on first use; with `--against kafka`, a second Apache Kafka
    node with its quickstart config and nothing else; with `--bootstrap`, that broker. For tests
    that must hold against a default broker, where `bootstrap`'s overrides would hide a wait."""
    if against_kafka(request.config):
        yield start_reference(request.config, [])
        return
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
