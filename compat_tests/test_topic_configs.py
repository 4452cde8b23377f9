"""Topic-level configs honoured by the running broker, seen through real clients.

- `compression.type=<codec>`: whatever the producer sends, the batches the broker serves (read raw
  with a Fetch through kafkacompat.client, which works against any broker) carry the topic's codec, and
  consumers read the records back unchanged; `compression.type=producer` keeps the producer's codec.
- `message.timestamp.type=LogAppendTime`: records produced with an old CreateTime come back stamped
  with the broker's clock and timestamp type LogAppendTime (a CreateTime topic is the control).
- `retention.ms` / `retention.bytes` with tiny segments: the log start offset moves forward. This needs
  a broker checking retention every few hundred milliseconds, so those tests start their own broker
  (`log.retention.check.interval.ms=200`) and are skipped with `--bootstrap` (`restarts_broker` marker:
  a stock broker checks every five minutes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import (  # noqa: E402
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    Producer,
    TopicPartition,
)

from compat_tests.clients import ck_consume_all, create_topic, kp_consume_all, wait_for_topic_config  # noqa: E402
from kafkacompat.client import KafkaClient  # noqa: E402
from kafkacompat.local_brokers import InProcessBroker  # noqa: E402
from kafkacompat.wire.messages import request_class  # noqa: E402
from kafkacompat.wire.records import CompressionCodec, RecordBatchView, TimestampType, iter_batches  # noqa: E402

FETCH = 1
WAIT = 20.0
CODECS = {
    "uncompressed": CompressionCodec.NONE,
    "gzip": CompressionCodec.GZIP,
    "lz4": CompressionCodec.LZ4,
    "zstd": CompressionCodec.ZSTD,
}


def produce(bootstrap: str, topic: str, values: list[bytes], *, timestamp: int = 0, **config: Any) -> None:
    """Produce `values` in order to partition 0 (keys b"k<i>"), several records per batch."""
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **config})
    for i, value in enumerate(values):
        producer.produce(
            topic,
            key=b"k%d" % i,
            value=value,
            partition=0,
            timestamp=timestamp,
            on_delivery=lambda err, _msg: errors.append(err) if err is not None else None,
        )
    assert producer.flush(15) == 0
    assert not errors, errors


def raw_batches(bootstrap: str, topic: str, start: int = 0) -> list[RecordBatchView]:
    """The batches of partition 0 from `start` to its high watermark, as the broker serves them to a Fetch."""
    cls = request_class(FETCH)
    batches: list[RecordBatchView] = []
    with KafkaClient(bootstrap, timeout=10) as client:
        leader = client.partition_leaders(topic)[0]
        offset, high = start, None
        deadline = time.monotonic() + WAIT
        while (high is None or offset < high) and time.monotonic() < deadline:
            part = cls.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
            request = cls(
                max_wait_ms=100, min_bytes=1, topics=[cls.FetchTopic(topic=topic, partitions=[part])]
            )
            data = client.send(FETCH, request, node_id=leader).responses[0].partitions[0]
            assert data.error_code == 0, data.error_code
            high = data.high_watermark
            for batch in iter_batches(bytes(data.records or b""), allow_partial_tail=True):
                if batch.last_offset >= offset:
                    batch.ensure_valid()  # rewritten offsets, codec and timestamps keep the CRC right
                    batches.append(batch)
                    offset = batch.last_offset + 1
    assert high is not None and offset >= high, f"fetched up to {offset}, high watermark {high}"
    return batches


def values_for(topic: str, count: int) -> list[bytes]:
    # compressible but distinct, so a codec that mangles data cannot go unnoticed
    return [b"%s record %04d " % (topic.encode(), i) + b"abc" * (i % 50) for i in range(count)]


# --- compression.type -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic_codec", "producer_codec", "served"),
    [
        ("zstd", "none", "zstd"),
        ("gzip", "none", "gzip"),
        ("zstd", "lz4", "zstd"),
        ("producer", "lz4", "lz4"),
        ("uncompressed", "zstd", "uncompressed"),
    ],
)
def test_compression_type(
    bootstrap: str, make_topic: Callable[..., str], topic_codec: str, producer_codec: str, served: str
) -> None:
    topic = make_topic(configs={"compression.type": topic_codec})
    values = values_for(topic, 200)
    produce(bootstrap, topic, values, **{"compression.type": producer_codec})

    batches = raw_batches(bootstrap, topic)
    assert batches
    assert {batch.compression for batch in batches} == {CODECS[served]}
    assert sum(batch.records_count for batch in batches) == len(values)
    assert [b.base_offset for b in batches] == sorted(b.base_offset for b in batches)

    messages = ck_consume_all(bootstrap, topic, 0, len(values))
    assert [m.value() for m in messages] == values
    assert [m.key() for m in messages] == [b"k%d" % i for i in range(len(values))]
    assert [m.offset() for m in messages] == list(range(len(values)))
    records = kp_consume_all(bootstrap, topic, 0, len(values))
    assert [r.value for r in records] == values


def test_altered_compression_type_applies_to_later_batches(
    bootstrap: str, make_topic: Callable[..., str]
) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    topic = make_topic()
    first, second = values_for(topic + "-a", 30), values_for(topic + "-b", 30)
    produce(bootstrap, topic, first, **{"compression.type": "none"})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("compression.type", "gzip", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(10)
    wait_for_topic_config(bootstrap, topic, "compression.type", "gzip")  # every broker (`--cluster`)
    produce(bootstrap, topic, second, **{"compression.type": "none"})

    batches = raw_batches(bootstrap, topic)
    codecs = {(b.base_offset < len(first), b.compression) for b in batches}
    assert codecs == {(True, CompressionCodec.NONE), (False, CompressionCodec.GZIP)}
    messages = ck_consume_all(bootstrap, topic, 0, len(first) + len(second))
    assert [m.value() for m in messages] == first + second


# --- message.timestamp.type -----------------------------------------------------------------------

OLD_TIMESTAMP = 1_262_304_000_000  # 2010-01-01T00:00:00Z, far from any broker clock


def test_log_append_time_replaces_create_time(bootstrap: str, make_topic: Callable[..., str]) -> None:
    append_topic = make_topic(configs={"message.timestamp.type": "LogAppendTime"})
    # retention.ms=-1: the control topic's records carry a 2010 timestamp, so the broker's periodic
    # retention pass (every log.retention.check.interval.ms) would rightly delete them mid-test
    create_topic_ = make_topic(configs={"message.timestamp.type": "CreateTime", "retention.ms": "-1"})
    values = values_for(append_topic, 20)
    before = int(time.time() * 1000)
    produce(bootstrap, append_topic, values, timestamp=OLD_TIMESTAMP)
    produce(bootstrap, create_topic_, values, timestamp=OLD_TIMESTAMP)
    after = int(time.time() * 1000)
    slack = 30_000  # clock skew between this host and a --bootstrap broker

    messages = ck_consume_all(bootstrap, append_topic, 0, len(values))
    assert [m.value() for m in messages] == values
    for message in messages:
        kind, stamp = message.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before - slack <= stamp <= after + slack, (stamp, before, after)
    records = kp_consume_all(bootstrap, append_topic, 0, len(values))
    assert [r.value for r in records] == values
    assert {r.timestamp_type for r in records} == {TimestampType.LOG_APPEND_TIME}
    assert all(before - slack <= r.timestamp <= after + slack for r in records)
    batches = raw_batches(bootstrap, append_topic)
    assert {b.timestamp_type for b in batches} == {TimestampType.LOG_APPEND_TIME}
    assert all(before - slack <= b.max_timestamp <= after + slack for b in batches)

    control = ck_consume_all(bootstrap, create_topic_, 0, len(values))
    assert [m.value() for m in control] == values
    assert {m.timestamp() for m in control} == {(TIMESTAMP_CREATE_TIME, OLD_TIMESTAMP)}


# --- retention.ms / retention.bytes ---------------------------------------------------------------


@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data: Path = tmp_path_factory.mktemp("retention") / "data"
    broker = InProcessBroker(data, ["log.retention.check.interval.ms=200"]).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-watermarks"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)
        return low, high
    finally:
        consumer.close()


def wait_for_log_start(bootstrap: str, topic: str, predicate: Callable[[int, int], bool]) -> tuple[int, int]:
    deadline = time.monotonic() + WAIT
    low, high = watermarks(bootstrap, topic)
    while not predicate(low, high) and time.monotonic() < deadline:
        time.sleep(0.1)
        low, high = watermarks(bootstrap, topic)
    return low, high


def produce_in_batches(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """One Produce per record (linger.ms=0, flushed each time), so segments roll on small sizes."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, value in enumerate(values):
        producer.produce(topic, key=b"k%d" % i, value=value, partition=0)
        assert producer.flush(10) == 0


@pytest.mark.restarts_broker
def test_retention_ms_deletes_old_segments(retention_broker: str, topic_name: str) -> None:
    topic = f"{topic_name}-ms"
    configs = {"retention.ms": "1000", "segment.bytes": "1024", "file.delete.delay.ms": "0"}
    create_topic(retention_broker, topic, 1, configs)
    values = [b"old %03d " % i + b"x" * 100 for i in range(40)]
    started = time.monotonic()
    produce_in_batches(retention_broker, topic, values)
    low, high = watermarks(retention_broker, topic)
    assert high == len(values)
    if time.monotonic() - started < 0.9:
        assert low == 0, "a segment went before retention.ms could pass"

    low, high = wait_for_log_start(retention_broker, topic, lambda lo, _hi: lo > 0)
    assert time.monotonic() - started >= 0.9, "a segment went before retention.ms could pass"
    assert 0 < low <= high == len(values)
    remaining = ck_consume_all(retention_broker, topic, 0, high - low, timeout=10)
    assert [m.offset() for m in remaining] == list(range(low, high))
    assert [m.value() for m in remaining] == values[low:high]


@pytest.mark.restarts_broker
def test_retention_bytes_keeps_the_newest_segments(retention_broker: str, topic_name: str) -> None:
    topic = f"{topic_name}-bytes"
    configs = {"retention.bytes": "3000", "segment.bytes": "1024", "file.delete.delay.ms": "0"}
    create_topic(retention_broker, topic, 1, configs)
    values = [b"rec %03d " % i + b"y" * 100 for i in range(60)]  # ~7 KB of batches: several segments
    produce_in_batches(retention_broker, topic, values)

    # only whole segments beyond the byte budget go: what is left is at least retention.bytes and less
    # than retention.bytes plus one segment. A pass that ran while the records were still arriving
    # has already moved the log start, so wait until it has stood still for ten passes (one every
    # 200 ms): the last of them saw every record, and no pass deletes under the Fetch below.
    deadline = time.monotonic() + WAIT
    low, high = wait_for_log_start(retention_broker, topic, lambda lo, _hi: lo > 0)
    still_since = time.monotonic()
    while time.monotonic() - still_since < 2.0 and time.monotonic() < deadline:
        time.sleep(0.1)
        now_low, high = watermarks(retention_broker, topic)
        if now_low != low:
            low, still_since = now_low, time.monotonic()
    assert 0 < low <= high == len(values)
    left = sum(b.size for b in raw_batches(retention_broker, topic, low))
    assert 3000 <= left < 3000 + 1024 + 200, left
    assert [m.value() for m in ck_consume_all(retention_broker, topic, 0, high - low, timeout=10)] == (
        values[low:high]
    )
