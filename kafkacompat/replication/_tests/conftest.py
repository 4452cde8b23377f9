"""A real ZooKeeper server (Debian's zookeeper package) for the ZooKeeper edge tests; each test gets a
chroot of its own so tests never see each other's znodes."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from kafkacompat.replication.zk_server import LocalZooKeeper, ZooKeeperUnavailable

_chroots = itertools.count()


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalZooKeeper]:
    try:
        server = LocalZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"ZooKeeper not installed: {exc}")
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def zk_connect(zookeeper_server: LocalZooKeeper) -> str:
    """A connect string with a fresh chroot, as Kafka's `zookeeper.connect=host:port/chroot`."""
    return f"{zookeeper_server.connect_string}/kc-test-{next(_chroots)}"
