"""Broker-side helpers for the Spark integration tests: topics, producing in many small batches,
reading a topic back with assign (no consumer group), DeleteRecords. All through confluent-kafka."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass(frozen=True, slots=True)
class Produced:
    partition: int
    key: bytes | None
    value: bytes
    timestamp_ms: int
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Consumed:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


def create_topic(
    bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 1, config=configs or {})
    admin.create_topics([new], operation_timeout=10)[topic].result(15)


def produce(bootstrap: str, topic: str, records: Iterable[Produced], batch_size: int = 7) -> list[int]:
    """Produce with one flush every `batch_size` records, so each partition gets many record batches.

    Returns the offset each record got, in input order.
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    offsets: list[int] = []
    errors: list[str] = []
    pending: list[int] = []

    def report(index: int) -> Callable[[Any, Any], None]:
        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                offsets[index] = msg.offset()

        return delivered

    for i, record in enumerate(records):
        offsets.append(-1)
        producer.produce(
            topic,
            value=record.value,
            key=record.key,
            partition=record.partition,
            timestamp=record.timestamp_ms,
            headers=list(record.headers) or None,
            on_delivery=report(i),
        )
        pending.append(i)
        if len(pending) >= batch_size:
            assert producer.flush(15) == 0
            pending.clear()
    assert producer.flush(15) == 0
    assert not errors, errors
    return offsets


def read_topic(
    bootstrap: str, topic: str, partitions: Sequence[int], timeout: float = 20.0
) -> list[Consumed]:
    """Every record from each partition's log start to its high watermark, via assign."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "spark-it-readback", "enable.auto.commit": False}
    )
    out: list[Consumed] = []
    try:
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            position = low
            deadline = time.monotonic() + timeout
            while position < high:
                assert time.monotonic() < deadline, f"{topic}[{partition}] stuck at {position} of {high}"
                for message in consumer.consume(500, 1.0):
                    assert message.error() is None, message.error()
                    position = message.offset() + 1
                    out.append(
                        Consumed(
                            partition,
                            message.offset(),
                            message.key(),
                            message.value(),
                            message.timestamp()[1],
                            tuple(message.headers() or ()),
                        )
                    )
    finally:
        consumer.close()
    return out


def delete_records(bootstrap: str, topic: str, partition: int, before_offset: int) -> None:
    """DeleteRecords up to `before_offset`; skips the test when the broker does not serve the API."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if not hasattr(admin, "delete_records"):
        pytest.skip("confluent-kafka too old for AdminClient.delete_records")
    futures = admin.delete_records([TopicPartition(topic, partition, before_offset)], operation_timeout=10)
    try:
        result = next(iter(futures.values())).result(15)
    except KafkaException as exc:
        error = exc.args[0]
        if "UNSUPPORTED" in error.name() or "unsupported" in error.str().lower():
            pytest.skip(f"broker does not serve DeleteRecords yet ({error.name()})")
        raise
    assert result.low_watermark == before_offset
