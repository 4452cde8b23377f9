"""confluent-kafka (librdkafka): AdminClient, Producer and assign-based Consumer against the broker."""

from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from compat_tests.clients import ck_consume_all, ck_consume_partitions  # noqa: E402


def _produce(bootstrap: str, topic: str, items: list[tuple], **config: object) -> list[tuple[int, int]]:
    """Produce (key, value, headers, partition) tuples; returns delivered (partition, offset) in order."""
    delivered: list[tuple[int, int]] = []
    errors: list[object] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for key, value, headers, partition in items:
        kwargs = {"key": key, "value": value, "headers": headers, "on_delivery": report}
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, **kwargs)
    assert producer.flush(15) == 0
    assert not errors, errors
    return delivered


def test_admin_create_list_delete(bootstrap: str, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)])[topic_name].result(10)
    topics = admin.list_topics(timeout=10).topics
    assert len(topics[topic_name].partitions) == 2
    again = admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)])[topic_name]
    with pytest.raises(KafkaException) as info:
        again.result(10)
    assert info.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    # one replica more than there are brokers (one, or three with `--cluster`)
    too_many = len(admin.list_topics(timeout=10).brokers) + 1
    bad_rf = admin.create_topics(
        [NewTopic(topic_name + "-rf", num_partitions=1, replication_factor=too_many)]
    )
    with pytest.raises(KafkaException) as info:
        bad_rf[topic_name + "-rf"].result(10)
    assert info.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    bad_config = admin.create_topics(
        [
            NewTopic(
                topic_name + "-cfg", num_partitions=1, replication_factor=1, config={"retention.ms": "soon"}
            )
        ]
    )
    with pytest.raises(KafkaException) as info:
        bad_config[topic_name + "-cfg"].result(10)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    validated = admin.create_topics(
        [NewTopic(topic_name + "-v", num_partitions=1, replication_factor=1)], validate_only=True
    )
    validated[topic_name + "-v"].result(10)
    assert topic_name + "-v" not in admin.list_topics(timeout=10).topics
    admin.delete_topics([topic_name])[topic_name].result(10)
    assert topic_name not in admin.list_topics(timeout=10).topics
    gone = admin.delete_topics([topic_name])[topic_name]
    with pytest.raises(KafkaException) as info:
        gone.result(10)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_keys_null_values_headers_round_trip(bootstrap: str, topic: str) -> None:
    items = [
        (b"k1", b"v1", [("a", b"1"), ("b", None)], 0),
        (None, b"keyless", None, 0),
        (b"tomb", None, [("x", b"")], 0),
        (b"\x00\xff", bytes(range(256)), None, 0),
    ]
    delivered = _produce(bootstrap, topic, items)
    assert [offset for _, offset in delivered] == [0, 1, 2, 3]
    messages = ck_consume_all(bootstrap, topic, 0, len(items))
    got = [(m.key(), m.value(), m.headers()) for m in messages]
    assert got == [
        (b"k1", b"v1", [("a", b"1"), ("b", None)]),
        (None, b"keyless", None),
        (b"tomb", None, [("x", b"")]),
        (b"\x00\xff", bytes(range(256)), None),
    ]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_round_trip(bootstrap: str, make_topic, codec: str) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(partitions=3)
    items = [(str(i).encode(), f"value {i} ".encode() * (i % 5 + 1), None, i % 3) for i in range(300)]
    _produce(bootstrap, topic, items, **{"compression.type": codec})
    expected = {partition: [(k, v) for k, v, _, p in items if p == partition] for partition in range(3)}
    got = ck_consume_partitions(bootstrap, topic, {p: len(e) for p, e in expected.items()})
    assert {p: [(m.key(), m.value()) for m in messages] for p, messages in got.items()} == expected


def test_idempotent_producer_no_duplicates(bootstrap: str, topic: str) -> None:
    items = [(None, str(i).encode(), None, 0) for i in range(1000)]
    delivered = _produce(bootstrap, topic, items, **{"enable.idempotence": True, "acks": "all"})
    assert sorted(offset for _, offset in delivered) == list(range(1000))
    messages = ck_consume_all(bootstrap, topic, 0, 1000)
    assert [m.value() for m in messages] == [str(i).encode() for i in range(1000)]
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "compat-assign-only", "enable.auto.commit": False}
    )
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 1000)
    finally:
        consumer.close()


def test_message_too_large_is_refused(bootstrap: str, topic: str) -> None:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 5_000_000})
    producer.produce(topic, value=b"z" * 2_000_000, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_consume_from_timestamp_and_latest(bootstrap: str, topic: str) -> None:
    base = int(time.time() * 1000) - 50_000
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, value=str(i).encode(), timestamp=base + i * 1000)
    assert producer.flush(15) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "compat-assign-only", "enable.auto.commit": False}
    )
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 6500)], timeout=10)[0]
        assert found.offset == 7
    finally:
        consumer.close()
    messages = ck_consume_all(bootstrap, topic, 0, 3, start=found.offset)
    assert [m.value() for m in messages] == [b"7", b"8", b"9"]
    assert [m.timestamp()[1] for m in messages] == [base + 7000, base + 8000, base + 9000]
    # OFFSET_END (-1): nothing old, then what is produced afterwards. No offset commits: there is no
    # group coordinator yet, and librdkafka's close() waits for one to commit to.
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "compat-assign-only", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, -1)])
        assert consumer.poll(1.0) is None
        producer.produce(topic, value=b"fresh")
        producer.flush(10)
        message = None
        deadline = time.monotonic() + 10
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.2)
        assert message is not None and message.value() == b"fresh" and message.offset() == 10
    finally:
        consumer.close()


def test_out_of_range_resets_to_earliest(bootstrap: str, topic: str) -> None:
    _produce(bootstrap, topic, [(None, b"a", None, 0), (None, b"b", None, 0)])
    messages = ck_consume_all(bootstrap, topic, 0, 2, start=50, **{"auto.offset.reset": "earliest"})
    assert [m.value() for m in messages] == [b"a", b"b"]


def test_produce_to_new_topic_auto_creates_it(bootstrap: str, topic_name: str) -> None:
    delivered = _produce(bootstrap, topic_name, [(b"k", b"first", None, None)])
    assert delivered == [(0, 0)]
    assert [m.value() for m in ck_consume_all(bootstrap, topic_name, 0, 1)] == [b"first"]
