"""kafka-python 3.x: admin, producer and assign-based consumer against the broker."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from kafka.codec import has_gzip, has_lz4, has_snappy, has_zstd  # noqa: E402
from kafka.errors import MessageSizeTooLargeError, TopicAlreadyExistsError  # noqa: E402

from compat_tests.clients import kp_consume_all, wait_for_topic  # noqa: E402


def test_admin_create_list_delete(bootstrap: str, topic_name: str, kp_closing: Callable[[Any], Any]) -> None:
    admin = kp_closing(KafkaAdminClient(bootstrap_servers=bootstrap))
    admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=1)])
    # on a cluster a broker other than the controller can answer Metadata without the topic for moments
    wait_for_topic(bootstrap, topic_name, 3)
    assert topic_name in admin.list_topics()
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)])
    admin.delete_topics([topic_name])
    deadline = time.monotonic() + 10
    while topic_name in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert topic_name not in admin.list_topics()


def test_keys_null_values_headers_round_trip(
    bootstrap: str, topic: str, kp_closing: Callable[[Any], Any]
) -> None:
    producer = kp_closing(KafkaProducer(bootstrap_servers=bootstrap))
    sent = [
        (b"key-0", b"value-0", [("h1", b"x"), ("h2", b"")]),
        (None, b"no key", []),
        (b"tombstone", None, [("deleted", b"yes")]),
        (b"", b"", []),
        (b"binary\x00\xff", bytes(range(256)), [("bin", bytes(range(10)))]),
    ]
    for key, value, headers in sent:
        producer.send(topic, key=key, value=value, headers=headers, partition=0)
    producer.flush(10)
    records = kp_consume_all(bootstrap, topic, 0, len(sent))
    assert [(r.key, r.value, list(r.headers)) for r in records] == sent
    assert [r.offset for r in records] == list(range(len(sent)))


CODECS = {
    "gzip": has_gzip,
    "snappy": has_snappy,
    "lz4": has_lz4,
    "zstd": has_zstd,
}


@pytest.mark.parametrize("codec", [None, *CODECS])
def test_compression_round_trip(
    bootstrap: str, make_topic: Callable[..., str], codec: str | None, kp_closing: Callable[[Any], Any]
) -> None:
    if codec is not None and not CODECS[codec]():
        pytest.skip(f"kafka-python has no {codec} library installed (python-snappy/lz4/zstandard)")
    topic = make_topic()
    producer = kp_closing(KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=20))
    values = [f"record {i} ".encode() * (i % 7 + 1) for i in range(200)]
    for i, value in enumerate(values):
        producer.send(topic, key=str(i).encode(), value=value)
    producer.flush(10)
    records = kp_consume_all(bootstrap, topic, 0, len(values))
    assert [r.value for r in records] == values
    assert [r.key for r in records] == [str(i).encode() for i in range(200)]


def test_record_near_max_message_bytes(bootstrap: str, topic: str, kp_closing: Callable[[Any], Any]) -> None:
    producer = kp_closing(
        KafkaProducer(bootstrap_servers=bootstrap, max_request_size=2_000_000, batch_size=2_000_000)
    )
    # one record whose batch is just under the default max.message.bytes (1048588)
    big = b"x" * (1048588 - 200)
    producer.send(topic, value=big).get(10)
    too_big = b"y" * 1_100_000
    with pytest.raises(MessageSizeTooLargeError):
        producer.send(topic, value=too_big).get(10)
    records = kp_consume_all(bootstrap, topic, 0, 1, max_partition_fetch_bytes=2_000_000)
    assert len(records) == 1 and records[0].value == big


def test_idempotent_producer_no_duplicates(
    bootstrap: str, topic: str, kp_closing: Callable[[Any], Any]
) -> None:
    producer = kp_closing(KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all"))
    futures = [producer.send(topic, value=str(i).encode()) for i in range(500)]
    producer.flush(10)
    offsets = [f.get(10).offset for f in futures]
    assert offsets == list(range(500))
    records = kp_consume_all(bootstrap, topic, 0, 500)
    assert [r.value for r in records] == [str(i).encode() for i in range(500)]


def test_latest_offset_is_count(
    bootstrap: str, make_topic: Callable[..., str], kp_closing: Callable[[Any], Any]
) -> None:
    topic = make_topic(partitions=2)
    producer = kp_closing(KafkaProducer(bootstrap_servers=bootstrap))
    for i in range(30):
        producer.send(topic, value=b"v", partition=i % 2)
    producer.send(topic, value=b"extra", partition=1)
    producer.flush(10)
    consumer = kp_closing(KafkaConsumer(bootstrap_servers=bootstrap))
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    assert consumer.end_offsets(tps) == {tps[0]: 15, tps[1]: 16}
    assert consumer.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}


def test_offsets_for_times_and_latest(bootstrap: str, topic: str, kp_closing: Callable[[Any], Any]) -> None:
    producer = kp_closing(KafkaProducer(bootstrap_servers=bootstrap))
    base = int(time.time() * 1000) - 100_000
    for i in range(10):
        producer.send(topic, value=str(i).encode(), timestamp_ms=base + i * 1000)
    producer.flush(10)
    consumer = kp_closing(KafkaConsumer(bootstrap_servers=bootstrap))
    tp = TopicPartition(topic, 0)
    found = consumer.offsets_for_times({tp: base + 4500})[tp]
    assert (found.offset, found.timestamp) == (5, base + 5000)
    assert consumer.offsets_for_times({tp: base + 60_000})[tp] is None
    records = kp_consume_all(bootstrap, topic, 0, 5, start=found.offset)
    assert [r.value for r in records] == [str(i).encode() for i in range(5, 10)]


def test_consume_from_latest_sees_only_new(
    bootstrap: str, topic: str, kp_closing: Callable[[Any], Any]
) -> None:
    producer = kp_closing(KafkaProducer(bootstrap_servers=bootstrap))
    for i in range(5):
        producer.send(topic, value=f"old{i}".encode())
    producer.flush(10)
    consumer = kp_closing(KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False))
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_end(tp)
    assert consumer.position(tp) == 5
    producer.send(topic, value=b"new").get(10)
    records: list[Any] = []
    deadline = time.monotonic() + 10
    while not records and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=200).values():
            records.extend(batch)
    assert [r.value for r in records] == [b"new"]


def test_out_of_range_resets_per_policy(bootstrap: str, topic: str, kp_closing: Callable[[Any], Any]) -> None:
    producer = kp_closing(KafkaProducer(bootstrap_servers=bootstrap))
    for i in range(3):
        producer.send(topic, value=str(i).encode())
    producer.flush(10)
    earliest = kp_consume_all(bootstrap, topic, 0, 3, start=100, auto_offset_reset="earliest")
    assert [r.value for r in earliest] == [b"0", b"1", b"2"]
    consumer = kp_closing(KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="latest"))
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 100)
    assert not any(consumer.poll(timeout_ms=500).values())
    assert consumer.position(tp) == 3


def test_produce_to_new_topic_auto_creates_it(
    bootstrap: str, topic_name: str, kp_closing: Callable[[Any], Any]
) -> None:
    producer = kp_closing(KafkaProducer(bootstrap_servers=bootstrap))
    metadata = producer.send(topic_name, value=b"first").get(15)
    assert (metadata.topic, metadata.partition, metadata.offset) == (topic_name, 0, 0)
    assert [r.value for r in kp_consume_all(bootstrap, topic_name, 0, 1)] == [b"first"]
