"""aiokafka: producer (plain and idempotent, every codec) and assign-based consumer, via asyncio.run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from compat_tests.clients import run_async  # noqa: E402


async def _consume(
    bootstrap: str, topic: str, partition: int, count: int, *, start: int | None = None, **config: Any
) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **config)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        if start is None:
            await consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, start)
        records: list[Any] = []
        deadline = time.monotonic() + 15
        while len(records) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(tp, timeout_ms=200)
            for batch in batches.values():
                records.extend(batch)
        return records
    finally:
        await consumer.stop()


def test_admin_create_list_delete(bootstrap: str, topic_name: str) -> None:
    async def scenario() -> tuple[set[str], set[str]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)])
            # in a cluster a broker's metadata may lag the creation and the deletion for a moment (as in
            # Kafka, whose brokers learn both from the controller's UpdateMetadata)
            for _ in range(60):
                after_create = set(await admin.list_topics())
                if topic_name in after_create:
                    break
                await asyncio.sleep(0.5)
            await admin.delete_topics([topic_name])
            for _ in range(60):
                after_delete = set(await admin.list_topics())
                if topic_name not in after_delete:
                    break
                await asyncio.sleep(0.5)
            return after_create, after_delete
        finally:
            await admin.close()

    after_create, after_delete = run_async(scenario())
    assert topic_name in after_create
    assert topic_name not in after_delete


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_every_codec(bootstrap: str, make_topic: Callable[..., str], codec: str | None) -> None:
    topic = make_topic()
    sent = [
        (
            f"k{i}".encode() if i % 3 or i % 5 == 1 else None,
            f"v{i}".encode() * (i % 4) if i % 5 != 1 else None,
            [("n", str(i).encode())] if i % 2 else [],
        )
        for i in range(120)
    ]

    async def scenario() -> list[Any]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=10)
        await producer.start()
        try:
            futures = [await producer.send(topic, key=k, value=v, headers=h, partition=0) for k, v, h in sent]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        return await _consume(bootstrap, topic, 0, len(sent))

    records = run_async(scenario())
    assert [(r.key, r.value, list(r.headers)) for r in records] == [(k, v, h) for k, v, h in sent]


def test_idempotent_producer_and_offsets(bootstrap: str, topic: str) -> None:
    async def scenario() -> tuple[list[int], int, int, list[Any]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            results = await asyncio.gather(
                *[await producer.send(topic, value=str(i).encode()) for i in range(300)]
            )
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            end = (await consumer.end_offsets([tp]))[tp]
            beginning = (await consumer.beginning_offsets([tp]))[tp]
        finally:
            await consumer.stop()
        records = await _consume(bootstrap, topic, 0, 300)
        return [r.offset for r in results], end, beginning, records

    offsets, end, beginning, records = run_async(scenario())
    assert offsets == list(range(300))
    assert (beginning, end) == (0, 300)
    assert [r.value for r in records] == [str(i).encode() for i in range(300)]


def test_offsets_for_times_and_out_of_range(bootstrap: str, topic: str) -> None:
    base = int(time.time() * 1000) - 30_000

    async def scenario() -> tuple[Any, list[Any]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")  # HW-bound reads follow
        await producer.start()
        try:
            for i in range(6):
                await producer.send_and_wait(topic, value=str(i).encode(), timestamp_ms=base + i * 1000)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            found = (await consumer.offsets_for_times({tp: base + 2001}))[tp]
        finally:
            await consumer.stop()
        reset = await _consume(bootstrap, topic, 0, 6, start=1000, auto_offset_reset="earliest")
        return found, reset

    found, reset = run_async(scenario())
    assert (found.offset, found.timestamp) == (3, base + 3000)
    assert [r.value for r in reset] == [str(i).encode() for i in range(6)]
