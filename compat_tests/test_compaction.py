"""Log compaction seen by real clients: topics created (or altered) with cleanup.policy=compact, keyed
overwrites and tombstones produced, then a consumer reading from the beginning waits until it sees exactly
the latest value of every key and no deleted key.

Against the suite's own broker the module starts a dedicated one with `log.cleaner.backoff.ms=200`, so
cleaning takes well under a second. With `--bootstrap` the broker cleans on its own schedule (Kafka's
default backoff is 15 s and tombstones go in a later pass), so the wait is longer there and a tombstone
may still be seen once, as the latest record of its key; a broker refusing `segment.bytes=1024` (Kafka 4
raised the minimum) gets the topic with `segment.ms` rolling only.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import run_async, wait_for_topic
from kafkacompat.local_brokers import InProcessBroker

OURS_WAIT = 20.0
EXTERNAL_WAIT = 150.0
KEYS = 8
ROUNDS = 4
TOMBSTONED = {b"key-0", b"key-3"}
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "100",
}


class Target:
    def __init__(self, bootstrap: str, external: bool) -> None:
        self.bootstrap = bootstrap
        self.external = external
        self.wait = EXTERNAL_WAIT if external else OURS_WAIT


@pytest.fixture(scope="module")
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    external = request.config.getoption("--bootstrap")
    if external:
        yield Target(external, True)
        return
    data: Path = tmp_path_factory.mktemp("compaction") / "data"
    broker = InProcessBroker(data, ["log.cleaner.backoff.ms=200"]).start()
    try:
        yield Target(broker.bootstrap, False)
    finally:
        broker.stop()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    return f"compact-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}".replace("[", "-").replace("]", "")


def writes() -> list[tuple[bytes, bytes | None]]:
    """The keyed writes of every test: ROUNDS overwrites of KEYS keys, the last round deleting some."""
    out: list[tuple[bytes, bytes | None]] = []
    for r in range(ROUNDS):
        for k in range(KEYS):
            key = b"key-%d" % k
            last = r == ROUNDS - 1
            out.append(
                (key, None if last and key in TOMBSTONED else b"value %d of key %d " % (r, k) + b"v" * 40)
            )
    return out


FILLERS = [(b"filler-%d" % i, b"f" * 60) for i in range(20)]


def expected_latest() -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    for key, value in writes() + FILLERS:
        latest[key] = value
    return latest


def compacted_view(seen: list[tuple[bytes, bytes | None]], external: bool) -> bool:
    """True once `seen` (key, value pairs read from the beginning) holds exactly one record per live key
    with its latest value and nothing of the deleted keys (a real Kafka may keep one tombstone a while)."""
    latest = expected_latest()
    live = sorted(((k, v) for k, v in latest.items() if v is not None), key=repr)
    kept = sorted(((k, v) for k, v in seen if not (external and v is None and k in TOMBSTONED)), key=repr)
    return kept == live


def produce_then_roll(send: Callable[[bytes, bytes | None], None], flush: Callable[[], None]) -> None:
    # one record per request: a client batch larger than segment.bytes is refused (RECORD_LIST_TOO_LARGE)
    for key, value in writes():
        send(key, value)
        flush()
    time.sleep(0.3)  # past segment.ms: the next append rolls the segment even where segment.bytes is large
    for key, value in FILLERS:
        send(key, value)
        flush()


def wait_compacted(target: Target, read_all: Callable[[], list[tuple[bytes, bytes | None]]]) -> None:
    deadline = time.monotonic() + target.wait
    seen: list[tuple[bytes, bytes | None]] = []
    while time.monotonic() < deadline:
        seen = read_all()
        if compacted_view(seen, target.external):
            return
        time.sleep(0.3)
    raise AssertionError(f"not compacted within {target.wait} s; a consumer saw {len(seen)} records: {seen}")


def ck_create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, 1, 1, config=configs)], operation_timeout=10)[topic].result(10)
    except Exception as exc:
        if "segment.bytes" not in str(exc):
            raise
        rest = {k: v for k, v in configs.items() if k != "segment.bytes"}
        admin.create_topics([NewTopic(topic, 1, 1, config=rest)], operation_timeout=10)[topic].result(10)
    wait_for_topic(bootstrap, topic, 1)


def ck_read_all(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "compaction-reader", "enable.auto.commit": False}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        seen: list[tuple[bytes, bytes | None]] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                raise AssertionError(f"consumer error: {message.error()}")
            seen.append((message.key(), message.value()))
            if message.offset() >= high - 1:
                break
        return seen
    finally:
        consumer.close()


def test_confluent_compacts_overwrites_and_tombstones(target: Target, name: str) -> None:
    from confluent_kafka import Producer

    ck_create(target.bootstrap, name, TOPIC_CONFIGS)
    producer = Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 0})
    errors: list[Any] = []

    def send(key: bytes, value: bytes | None) -> None:
        producer.produce(name, key=key, value=value, partition=0, on_delivery=lambda e, _: errors.append(e))

    def flush() -> None:
        assert producer.flush(15) == 0
        assert not [e for e in errors if e is not None], errors

    produce_then_roll(send, flush)
    wait_compacted(target, lambda: ck_read_all(target.bootstrap, name))


def test_kafka_python_alter_to_compact(target: Target, name: str) -> None:
    """A topic created with the default policy becomes compacted by AlterConfigs (kafka-python admin)."""
    pytest.importorskip("kafka")
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=target.bootstrap)
    try:
        admin.create_topics([NewTopic(name, 1, 1)])
        wait_for_topic(target.bootstrap, name, 1)
        configs = dict(TOPIC_CONFIGS)
        try:
            admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs=configs)])
        except Exception:
            if not target.external:
                raise
            configs.pop("segment.bytes")
            admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs=configs)])
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        assert "compact" in repr(described)
    finally:
        admin.close()

    producer = KafkaProducer(bootstrap_servers=target.bootstrap, linger_ms=0)
    try:
        produce_then_roll(
            lambda k, v: producer.send(name, key=k, value=v, partition=0).get(15), lambda: producer.flush(15)
        )
    finally:
        producer.close()

    def read_all() -> list[tuple[bytes, bytes | None]]:
        consumer = KafkaConsumer(bootstrap_servers=target.bootstrap, enable_auto_commit=False)
        try:
            tp = TopicPartition(name, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            high = consumer.end_offsets([tp])[tp]
            seen: list[tuple[bytes, bytes | None]] = []
            deadline = time.monotonic() + 15
            while consumer.position(tp) < high and time.monotonic() < deadline:
                for batch in consumer.poll(timeout_ms=200).values():
                    seen.extend((r.key, r.value) for r in batch)
            return seen
        finally:
            consumer.close()

    wait_compacted(target, read_all)


def test_aiokafka_compacts(target: Target, name: str) -> None:
    pytest.importorskip("aiokafka")
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    ck_create(target.bootstrap, name, TOPIC_CONFIGS)

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=target.bootstrap, linger_ms=0)
        await producer.start()
        try:
            for key, value in writes():
                await producer.send_and_wait(name, key=key, value=value, partition=0)
            await asyncio.sleep(0.3)
            for key, value in FILLERS:
                await producer.send_and_wait(name, key=key, value=value, partition=0)
        finally:
            await producer.stop()

    async def read_all() -> list[tuple[bytes, bytes | None]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=target.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(name, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            high = (await consumer.end_offsets([tp]))[tp]
            seen: list[tuple[bytes, bytes | None]] = []
            deadline = time.monotonic() + 15
            while await consumer.position(tp) < high and time.monotonic() < deadline:
                for batch in (await consumer.getmany(tp, timeout_ms=200)).values():
                    seen.extend((r.key, r.value) for r in batch)
            return seen
        finally:
            await consumer.stop()

    run_async(produce())
    wait_compacted(target, lambda: run_async(read_all()))
