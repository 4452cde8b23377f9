"""The ZooKeeper edge against a real ZooKeeper server: registration, controller election and fencing,
versioned partition state writes, topics, chroot."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.partition_state import LeaderAndIsr
from kafkacompat.replication.zookeeper import StaleController, ZooKeeperStore, split_chroot
from kafkacompat.wire.errors import ErrorCode, KafkaError


@pytest.fixture
def stores(zk_connect: str) -> Iterator[Callable[[], ZooKeeperStore]]:
    opened: list[ZooKeeperStore] = []

    def open_store() -> ZooKeeperStore:
        store = ZooKeeperStore(zk_connect, session_timeout_ms=6000, connection_timeout_ms=30000)
        store.start()
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        try:
            store.close()
        except Exception:  # already closed by the test
            pass


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_split_chroot() -> None:
    assert split_chroot("a:1,b:2/kafka/x") == ("a:1,b:2", "/kafka/x")
    assert split_chroot("a:1") == ("a:1", "")


def test_chroot_layout_and_cluster_id(stores: Callable[[], ZooKeeperStore], zk_connect: str) -> None:
    first, second = stores(), stores()
    assert first.get_or_create_cluster_id("cluster-a") == "cluster-a"
    assert second.get_or_create_cluster_id("cluster-b") == "cluster-a"  # the first one wins, for good
    assert first.client.exists(zd.TOPICS) is not None
    # the znodes live under the chroot, seen from a client without it
    root = ZooKeeperStore(split_chroot(zk_connect)[0])
    root.start()
    try:
        assert root.client.exists(split_chroot(zk_connect)[1] + zd.CLUSTER_ID) is not None
    finally:
        root.close()


def test_brokers_register_ephemerally(stores: Callable[[], ZooKeeperStore]) -> None:
    one, two, observer = stores(), stores(), stores()
    one.register_broker(zd.BrokerRegistration(1, {"PLAINTEXT": ("127.0.0.1", 9092)}, rack="a"))
    two.register_broker(zd.BrokerRegistration(2, {"PLAINTEXT": ("127.0.0.1", 9093)}))
    with pytest.raises(KafkaError) as taken:
        observer.register_broker(zd.BrokerRegistration(1, {"PLAINTEXT": ("127.0.0.1", 9094)}))
    assert taken.value.code is ErrorCode.BROKER_NOT_AVAILABLE
    # what holds the id: a broker restarted after a crash tells its own stale registration by it
    holder = observer.registration_of(1)
    assert holder is not None and holder.endpoints == {"PLAINTEXT": ("127.0.0.1", 9092)}
    assert observer.registration_of(7) is None
    brokers = observer.live_brokers()
    assert (
        sorted(brokers) == [1, 2] and brokers[1].rack == "a" and brokers[2].endpoint("PLAINTEXT")[1] == 9093
    )
    one.close()  # its session ends: the ephemeral registration goes with it
    wait_for(lambda: sorted(observer.live_brokers()) == [2])


def test_controller_election_epochs_and_fencing(stores: Callable[[], ZooKeeperStore]) -> None:
    one, two = stores(), stores()
    assert one.try_become_controller(1) and one.controller_epoch == 1
    assert not two.try_become_controller(2)
    assert two.current_controller() == 1
    key = ("t", 0)
    versions = one.controller_write_states({key: LeaderAndIsr(1, 0, (1, 2), 1)})
    assert versions == {key: 0}
    one.close()
    wait_for(lambda: two.current_controller() is None)
    assert two.try_become_controller(2) and two.controller_epoch == 2
    assert two.stored_controller_epoch() == 2
    # the old controller's epoch version no longer matches: a write as controller is fenced
    zombie = stores()
    zombie.controller_epoch, zombie.controller_epoch_zk_version = (
        one.controller_epoch,
        one.controller_epoch_zk_version,
    )
    with pytest.raises(StaleController):
        zombie.controller_write_states({key: LeaderAndIsr(1, 1, (1,), 1, 0)})
    assert two.partition_state(*key) == LeaderAndIsr(1, 0, (1, 2), 1, 0)
    # the live controller writes with compare-and-set; a stale version is a conflict, not a write
    assert two.controller_write_states({key: LeaderAndIsr(2, 1, (2,), 2, 0)}) == {key: 1}
    assert two.controller_write_states({key: LeaderAndIsr(1, 2, (1,), 2, 0)}) == {key: -1}
    assert two.partition_state(*key) == LeaderAndIsr(2, 1, (2,), 2, 1)


def test_topics_configs_and_deletion_requests(stores: Callable[[], ZooKeeperStore]) -> None:
    store = stores()
    topic_id = uuid.uuid4()
    store.create_topic("orders", {0: [1, 2], 1: [2, 1]}, topic_id, {"min.insync.replicas": "2"})
    with pytest.raises(KafkaError) as exists:
        store.create_topic("orders", {0: [1]}, uuid.uuid4(), {})
    assert exists.value.code is ErrorCode.TOPIC_ALREADY_EXISTS
    assignment = store.topic("orders")
    assert assignment is not None and assignment.topic_id == topic_id and assignment.partitions[1] == [2, 1]
    assert store.topic_configs("orders") == {"min.insync.replicas": "2"}
    store.set_topic_configs("orders", {"retention.ms": "1000"})
    assert store.topic_configs("orders") == {"retention.ms": "1000"}
    assert store.topic_names() == ["orders"]
    store.request_topic_deletion("orders")
    assert store.pending_topic_deletions() == ["orders"]
    store.remove_topic("orders")
    assert (
        store.topic_names() == [] and store.pending_topic_deletions() == [] and store.topic("orders") is None
    )


def test_producer_id_blocks_are_unique(stores: Callable[[], ZooKeeperStore]) -> None:
    one, two = stores(), stores()
    blocks = [one.allocate_producer_id_block(1, 1000), two.allocate_producer_id_block(2, 1000)]
    blocks.append(one.allocate_producer_id_block(1, 1000))
    assert blocks == [0, 1000, 2000]


def test_snapshot_live_brokers_are_as_new_as_its_partition_states(
    stores: Callable[[], ZooKeeperStore],
) -> None:
    """The controller takes an ISR member missing from a read's live brokers for lost. A broker that
    registers again while the read is in flight (a zombie back with a new session) and is put back in
    the ISR (AlterPartition) before the read reaches the partition state must be among the live brokers
    of that read, or the controller shrinks the ISR again with a needless leader epoch bump."""
    from kafkacompat.replication.cluster import read_snapshot

    reader, controller, zombie = stores(), stores(), stores()
    controller.register_broker(zd.BrokerRegistration(1, {"PLAINTEXT": ("127.0.0.1", 9092)}))
    assert controller.try_become_controller(1)
    controller.create_topic("t", {0: [1, 3]}, uuid.uuid4(), {})
    key = ("t", 0)
    assert controller.controller_write_states({key: LeaderAndIsr(1, 1, (1,), 1)}) == {key: 0}
    read_state = reader.partition_state

    def state_after_the_zombie_is_back(topic: str, partition: int, watch: Any = None) -> LeaderAndIsr | None:
        # what happens meanwhile on the other brokers: the zombie registers, the leader adds it back
        if not zombie.registered_by_this_session(3):
            zombie.register_broker(zd.BrokerRegistration(3, {"PLAINTEXT": ("127.0.0.1", 9094)}))
            assert controller.controller_write_states({key: LeaderAndIsr(1, 1, (1, 3), 1, 0)}) == {key: 1}
        return read_state(topic, partition, watch)

    reader.partition_state = state_after_the_zombie_is_back  # type: ignore[method-assign]
    snapshot = read_snapshot(reader)
    assert snapshot.states[key].isr == (1, 3)
    assert set(snapshot.states[key].isr) <= set(snapshot.brokers)
    assert snapshot.broker_epochs[3] == reader.client.exists(zd.broker_path(3)).czxid


def test_closing_fails_calls_waiting_for_an_unreachable_zookeeper(tmp_path: Any) -> None:
    """Kazoo waits for a reconnect without a timeout; closing the store ends those waits at once."""
    import threading

    from kafkacompat.replication.zk_server import LocalZooKeeper

    server = LocalZooKeeper(tmp_path / "zk")
    server.start()
    store = ZooKeeperStore(server.connect_string, session_timeout_ms=6000, connection_timeout_ms=30000)
    try:
        store.start()
        assert store.connected
        server.stop()
        wait_for(lambda: not store.connected)
        outcome: list[BaseException | None] = []

        def read() -> None:
            try:
                store.client.get(zd.BROKER_IDS)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        waiting = threading.Thread(target=read, daemon=True)
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive(), "the call should wait for ZooKeeper"
        started = time.monotonic()
        store.close()
        waiting.join(5.0)
        assert not waiting.is_alive() and time.monotonic() - started < 5
        assert outcome and outcome[0] is not None
        store.close()  # idempotent
        assert store.closed and not store.connected
    finally:
        store.close()
        server.close()
