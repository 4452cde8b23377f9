"""Config entities and ACLs in ZooKeeper (zk_config) against a real ZooKeeper server: Kafka's znode
formats, compare-and-set updates from two sessions that do not lose each other's changes, and the
change notifications."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.zk_config import ZkConfigStore, ZkDynamicConfigStore
from kafkacompat.replication.zookeeper import ZooKeeperStore
from kafkacompat.wire.errors import ErrorCode, KafkaError


@pytest.fixture
def config_stores(zk_connect: str) -> Iterator[Callable[[], ZkConfigStore]]:
    chroot = f"/zkconfig-{uuid.uuid4().hex[:8]}"
    opened: list[ZooKeeperStore] = []

    def open_store() -> ZkConfigStore:
        store = ZooKeeperStore(zk_connect + chroot, session_timeout_ms=6000, connection_timeout_ms=30000)
        store.start()
        opened.append(store)
        config_store = ZkConfigStore(store.client)
        config_store.ensure_paths()
        return config_store

    yield open_store
    for store in opened:
        store.close()


def test_sanitized_entity_names_round_trip() -> None:
    assert zd.sanitize("alice") == "alice"
    assert zd.sanitize("<default>") == "<default>"
    assert zd.sanitize("a b*c/d@e~") == "a%20b%2Ac%2Fd%40e%7E"
    for name in ("a b*c/d@e~", "ünïcode", "client.id-1_x"):
        assert zd.desanitize(zd.sanitize(name)) == name


def test_entity_config_and_notification_are_kafkas(config_stores: Callable[[], ZkConfigStore]) -> None:
    store = config_stores()
    store.update_entity("users/alice", lambda c: {**c, "producer_byte_rate": "1024"})
    data, _ = store.client.get("/config/users/alice")
    assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1024"}}
    changes = sorted(store.client.get_children("/config/changes"))
    assert changes and all(c.startswith("config_change_") and len(c) == 24 for c in changes)
    data, _ = store.client.get(f"/config/changes/{changes[-1]}")
    assert json.loads(data) == {"version": 2, "entity_path": "users/alice"}


def test_concurrent_entity_updates_lose_nothing(config_stores: Callable[[], ZkConfigStore]) -> None:
    first, second = config_stores(), config_stores()
    errors: list[BaseException] = []

    def writer(store: ZkConfigStore, prefix: str) -> None:
        try:
            for index in range(15):
                store.update_entity("clients/<default>", lambda c, k=f"{prefix}{index}": {**c, k: "1"})
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s, p)) for s, p in ((first, "a"), (second, "b"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    configs, version = first.read_entity("clients/<default>")
    assert set(configs) == {f"{p}{i}" for p in "ab" for i in range(15)}
    assert version == 29  # one create and 29 compare-and-set writes, none lost


def test_acl_znodes_are_kafkas_and_empty_resources_go(config_stores: Callable[[], ZkConfigStore]) -> None:
    store = config_stores()
    read = ("User:alice", "*", 3, 3)
    deny = ("User:bob", "10.0.0.1", 4, 2)
    store.update_acls((2, "orders", zd.PATTERN_LITERAL), lambda e: [*e, read, deny])
    store.update_acls((3, "app-", zd.PATTERN_PREFIXED), lambda e: [*e, read])
    data, _ = store.client.get("/kafka-acl/Topic/orders")
    assert json.loads(data) == {
        "version": 1,
        "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
            {"principal": "User:bob", "permissionType": "Deny", "operation": "Write", "host": "10.0.0.1"},
        ],
    }
    assert store.client.exists("/kafka-acl-extended/prefixed/Group/app-") is not None
    literal = store.client.get_children("/kafka-acl-changes")
    extended = store.client.get_children("/kafka-acl-extended-changes")
    assert [c[: len("acl_changes_")] for c in literal + extended] == ["acl_changes_"] * 2
    assert store.client.get(f"/kafka-acl-changes/{literal[0]}")[0] == b"TOPIC:orders"
    assert json.loads(store.client.get(f"/kafka-acl-extended-changes/{extended[0]}")[0]) == {
        "version": 1,
        "resourceType": "GROUP",
        "name": "app-",
        "patternType": "PREFIXED",
    }
    snapshot = store.read_all()
    assert snapshot.acls == {(2, "orders", 3): [read, deny], (3, "app-", 4): [read]}
    store.update_acls((2, "orders", zd.PATTERN_LITERAL), lambda e: [])
    assert store.client.exists("/kafka-acl/Topic/orders") is None
    assert (2, "orders", 3) not in store.read_all().acls


def test_read_all_reads_every_entity_kind_and_watches(config_stores: Callable[[], ZkConfigStore]) -> None:
    store = config_stores()
    store.update_entity("users/a%40b", lambda c: {"SCRAM-SHA-256": "salt=x", "consumer_byte_rate": "5"})
    store.update_entity("users/<default>/clients/c%201", lambda c: {"request_percentage": "50.0"})
    store.update_entity("brokers/<default>", lambda c: {"log.retention.ms": "1000"})
    fired = threading.Event()
    snapshot = store.read_all(lambda _event: fired.set())
    assert snapshot.users["a@b"] == {"SCRAM-SHA-256": "salt=x", "consumer_byte_rate": "5"}
    assert snapshot.user_clients[("<default>", "c 1")] == {"request_percentage": "50.0"}
    assert snapshot.brokers["<default>"] == {"log.retention.ms": "1000"}
    store.update_entity("clients/x", lambda c: {"producer_byte_rate": "1"})
    assert fired.wait(10), "the change notification did not fire the watch"


def test_dynamic_config_store_compare_and_set(config_stores: Callable[[], ZkConfigStore]) -> None:
    dynamic = ZkDynamicConfigStore(config_stores())
    assert dynamic.read_entity("1") == ({}, -1)
    assert dynamic.write_entity("1", {"log.retention.ms": "5"}, -1)
    assert not dynamic.write_entity("1", {"log.retention.ms": "6"}, -1)  # someone created it first
    configs, version = dynamic.read_entity("1")
    assert dynamic.write_entity("1", {**configs, "log.segment.bytes": "1048576"}, version)
    assert not dynamic.write_entity("1", {}, version)  # stale version
    assert dynamic.load() == {"1": {"log.retention.ms": "5", "log.segment.bytes": "1048576"}}
    with pytest.raises(KafkaError) as refused:  # no password.encoder.secret: never in the clear
        dynamic.write_entity("1", {"listener.name.internal.ssl.keystore.key": "secret"}, 1)
    assert refused.value.code == ErrorCode.INVALID_REQUEST
    assert refused.value.message == "Password encoder secret not configured"


def test_dynamic_config_store_encrypts_sensitive_values(config_stores: Callable[[], ZkConfigStore]) -> None:
    pytest.importorskip("cryptography")
    from kafkacompat.security.password_encoder import PasswordCodec, PasswordEncoder

    store = config_stores()
    dynamic = ZkDynamicConfigStore(store, PasswordCodec(PasswordEncoder("secret-1")))
    key = "listener.name.internal.ssl.keystore.key"
    assert dynamic.write_entity("1", {key: "-----BEGIN PRIVATE KEY-----", "log.retention.ms": "5"}, -1)
    raw, version = store.read_entity("brokers/1")
    assert raw["log.retention.ms"] == "5" and raw[key].startswith("keyFactoryAlgorithm:PBKDF2WithHmacSHA512,")
    assert "BEGIN" not in raw[key]
    assert dynamic.read_entity("1") == (
        {key: "-----BEGIN PRIVATE KEY-----", "log.retention.ms": "5"},
        version,
    )
    with pytest.raises(KafkaError) as refused:  # Kafka: per broker only
        dynamic.write_entity("<default>", {key: "x"}, -1)
    assert refused.value.code == ErrorCode.INVALID_REQUEST
    # another secret reads nothing sensitive (dropped, as Kafka ignores it); the old secret still does
    assert ZkDynamicConfigStore(store, PasswordCodec(PasswordEncoder("secret-2"))).load() == {
        "1": {"log.retention.ms": "5"}
    }
    rotated = PasswordCodec(PasswordEncoder("secret-2"), PasswordEncoder("secret-1"))
    assert ZkDynamicConfigStore(store, rotated).read_entity("1")[0][key] == "-----BEGIN PRIVATE KEY-----"


def test_topic_config_changes_are_notified_as_kafka_does(zk_connect: str) -> None:
    store = ZooKeeperStore(zk_connect + f"/topics-{uuid.uuid4().hex[:8]}", 6000, 30000)
    store.start()
    try:
        store.set_topic_configs("orders", {"retention.ms": "1000"})
        changes = store.client.get_children("/config/changes")
        assert [json.loads(store.client.get(f"/config/changes/{c}")[0]) for c in changes] == [
            {"version": 2, "entity_path": "topics/orders"}
        ]
    finally:
        store.close()


def test_a_starting_broker_reencodes_its_entity_with_the_new_secret(
    config_stores: Callable[[], ZkConfigStore],
) -> None:
    pytest.importorskip("cryptography")
    from kafkacompat.config import BrokerConfig
    from kafkacompat.security.password_encoder import PasswordCodec, PasswordEncoder

    store = config_stores()
    key = "listener.name.internal.ssl.key.password"
    ZkDynamicConfigStore(store, PasswordCodec(PasswordEncoder("old"))).write_entity("7", {key: "pw"}, -1)
    config = BrokerConfig.from_dict(
        {"node.id": "7", "password.encoder.secret": "new", "password.encoder.old.secret": "old"}
    )
    assert ZkDynamicConfigStore.for_broker(store, config).read_entity("7")[0] == {key: "pw"}
    raw, _ = store.read_entity("brokers/7")
    assert PasswordEncoder("new").decode(raw[key]) == "pw"
    with pytest.raises(ValueError):
        PasswordEncoder("old").decode(raw[key])
