"""The quota core: entity precedence, sensor sharing, Kafka's sampled rate and throttle time (fake clock)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkacompat.security.quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    Entity,
    QuotaManager,
    QuotaStore,
    RateSensor,
    precedence,
    user_of,
)


def test_precedence_is_kafkas_order() -> None:
    assert precedence("alice", "app") == (
        Entity("alice", "app"),
        Entity("alice", DEFAULT),
        Entity("alice", None),
        Entity(DEFAULT, "app"),
        Entity(DEFAULT, DEFAULT),
        Entity(DEFAULT, None),
        Entity(None, "app"),
        Entity(None, DEFAULT),
    )


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        # each step removes the most specific entity left: the next one in precedence wins
        (8, 1.0), (7, 2.0), (6, 3.0), (5, 4.0), (4, 5.0), (3, 6.0), (2, 7.0), (1, 8.0),
    ],
)  # fmt: skip
def test_most_specific_entity_wins(configured: int, expected: float) -> None:
    store = QuotaStore()
    entities = precedence("alice", "app")
    for rank, entity in enumerate(entities[-configured:], start=9 - configured):
        store.alter(entity, PRODUCER_BYTE_RATE, rank)
    resolved = QuotaManager(store).resolve(PRODUCER_BYTE_RATE, "alice", "app")
    assert resolved is not None and resolved[0] == expected


def test_quota_types_resolve_independently() -> None:
    store = QuotaStore()
    store.alter(Entity("alice", None), PRODUCER_BYTE_RATE, 100)
    store.alter(Entity(None, DEFAULT), CONSUMER_BYTE_RATE, 50)
    manager = QuotaManager(store)
    assert manager.resolve(PRODUCER_BYTE_RATE, "alice", "x") == (100.0, (PRODUCER_BYTE_RATE, "alice", ""))
    assert manager.resolve(CONSUMER_BYTE_RATE, "alice", "x") == (50.0, (CONSUMER_BYTE_RATE, "", "x"))
    assert manager.resolve(REQUEST_PERCENTAGE, "alice", "x") is None
    store.alter(Entity("alice", None), PRODUCER_BYTE_RATE, None)  # a change is seen at once
    assert manager.resolve(PRODUCER_BYTE_RATE, "alice", "x") is None


def test_user_quota_is_shared_by_client_ids_default_client_quota_is_not() -> None:
    store = QuotaStore()
    store.alter(Entity("alice", None), PRODUCER_BYTE_RATE, 1000)
    store.alter(Entity(None, DEFAULT), PRODUCER_BYTE_RATE, 1000)
    manager = QuotaManager(store, samples=2, window_seconds=1.0)
    # alice's two client ids share one sensor: together they exceed 1000 B/s
    assert manager.record(PRODUCER_BYTE_RATE, "alice", "a", 1000, 0.0) == 0
    assert manager.record(PRODUCER_BYTE_RATE, "alice", "b", 1000, 0.0) > 0
    # bob's client ids each get their own (client-id default) sensor
    assert manager.record(PRODUCER_BYTE_RATE, "bob", "a", 1000, 0.0) == 0
    assert manager.record(PRODUCER_BYTE_RATE, "bob", "b", 1000, 0.0) == 0


def test_rate_window_is_at_least_samples_minus_one_windows() -> None:
    sensor = RateSensor(samples=11, window=1.0, now=0.0)
    sensor.record(1000, 0.0)
    assert sensor.window_size(0.0) == 10.0
    assert sensor.rate(0.0) == pytest.approx(100.0)
    assert sensor.window_size(15.5) == pytest.approx(10.0)  # samples restart once older than the window


def test_throttle_time_brings_rate_back_to_quota() -> None:
    sensor = RateSensor(samples=11, window=1.0, now=0.0)
    sensor.record(1500, 0.0)  # 150 B/s over the 10 s minimum window, quota 100 B/s
    assert sensor.throttle_ms(100.0, 0.0) == 5000  # (150 - 100) / 100 * 10 s
    assert sensor.throttle_ms(100.0, 2.0) == 5000  # 2 s later the window is still the 10 s minimum
    assert sensor.throttle_ms(1000.0, 0.0) == 0
    sensor.record(100000, 0.0)
    assert sensor.throttle_ms(100.0, 0.0) == 11000  # bounded by the whole window


def test_a_client_that_waits_its_throttle_time_stays_within_quota() -> None:
    """Drive a client that sends as fast as it may (waiting out each throttle): rate ends near the quota."""
    manager = QuotaManager(QuotaStore(), samples=11, window_seconds=1.0)
    manager.store.alter(Entity(None, "app"), PRODUCER_BYTE_RATE, 200_000)
    now, sent = 0.0, 0
    while now < 300.0:
        throttle = manager.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "app", 50_000, now)
        if now >= 100.0:  # long after the warm-up: the first window lets a burst through, as Kafka's does
            sent += 50_000
        now += 0.001 + throttle / 1000
    assert sent / (now - 100.0) == pytest.approx(200_000, rel=0.03)


def test_enforced_ignores_controller_mutation_rate() -> None:
    store = QuotaStore()
    assert not store.enforced
    store.alter(Entity("alice", None), CONTROLLER_MUTATION_RATE, 10.0)
    assert not store.enforced
    store.alter(Entity("alice", None), REQUEST_PERCENTAGE, 50.0)
    assert store.enforced
    store.alter(Entity("alice", None), REQUEST_PERCENTAGE, None)
    assert not store.enforced


def test_store_round_trips_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "client-quotas.json"
    store = QuotaStore(path)
    store.alter(Entity("alice", DEFAULT), PRODUCER_BYTE_RATE, 1024)
    store.alter(Entity(None, "app"), REQUEST_PERCENTAGE, 25.5)
    QuotaStore.write(path, store.snapshot())
    loaded = QuotaStore.load(path)
    assert loaded.quotas == store.quotas
    assert loaded.enforced
    assert not (tmp_path / "client-quotas.json.tmp").exists()


def test_user_of_principal() -> None:
    assert user_of("User:alice") == "alice"
    assert user_of("User:CN=x,O=y") == "CN=x,O=y"


def test_ip_connection_rates(tmp_path: Path) -> None:
    """An address's own quota, else the default address's; a refused connection is not counted."""
    from kafkacompat.security.quotas import CONNECTION_CREATION_RATE, QuotaManager

    path = tmp_path / "client-quotas.json"
    store = QuotaStore(path)
    store.alter(Entity(ip="10.0.0.1"), CONNECTION_CREATION_RATE, 2)
    store.alter(Entity(ip=DEFAULT), CONNECTION_CREATION_RATE, 1)
    assert store.ip_limited and not store.enforced  # no per-request client quota to check
    QuotaStore.write(path, store.snapshot())
    assert QuotaStore.load(path).quotas == store.quotas
    manager = QuotaManager(store, samples=2, window_seconds=1.0)
    assert [manager.connection_throttle_ms("10.0.0.1", 0.0) for _ in range(3)][:2] == [0, 0]
    assert manager.connection_throttle_ms("10.0.0.1", 0.1) > 0  # a third within the window
    assert manager.connection_throttle_ms("10.0.0.2", 0.1) == 0  # the default: one a second each
    assert manager.connection_throttle_ms("10.0.0.2", 0.2) > 0
    assert manager.connection_throttle_ms("10.0.0.2", 2.5) == 0  # the window has passed
