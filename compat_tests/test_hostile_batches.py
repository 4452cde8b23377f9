"""Hostile record batches (issue 35): refused as Apache Kafka refuses them, nothing appended, the partition
still readable by every client.

Each batch below has a right header and a right CRC-32C (compat_tests/hostile.py builds them as a
client would), and something wrong inside its records. It goes out over a real socket as Produce v8
(and the highest version the broker offers where the version matters), with acks=-1 and acks=1, to a
broker in a process of its own (or the `--bootstrap`/`--cluster` broker). Each must be answered with
the error code Kafka answers, with `record_errors` and `error_message` as Kafka fills them, and must
leave the partition as it was: ListOffsets' latest offset unchanged, and a Fetch from the start returning
only the valid records produced before. Afterwards librdkafka, kafka-python, aiokafka and the Java client
read the partition without an error and see only the valid records, and decompression bombs are refused
with the broker's resident memory growing by under 64 MiB.

The expected answers are Kafka's, read from its source (apache/kafka at 1eb7644, trunk of October
2024); each case names the file and method that decides it. Two consequences worth knowing:

- Kafka names records in `record_errors` (KIP-467) and sets `error_message` only for a
  RecordValidationException (LogValidator.processRecordErrors: a key missing on a compacted topic, a
  timestamp out of range); ReplicaManager.appendToLocalLog sets `hasCustomErrorMessage` for that
  exception alone. A structurally broken record (a length, a varint, a count) throws
  InvalidRecordException out of the record iterator instead: INVALID_RECORD with no record errors and a
  null message.
- Two shapes reach Kafka's catch-all (`case t: Throwable` in ReplicaManager.appendToLocalLog) with an
  IllegalArgumentException, which Errors.forException maps to UNKNOWN_SERVER_ERROR: a record length
  varint longer than 5 bytes in an uncompressed batch (ByteUtils.readVarint is called outside
  DefaultRecord.readFrom's try, and DefaultRecordBatch.uncompressedIterator catches only
  BufferUnderflowException), and a codec id Kafka does not know (CompressionType.forId, called in
  UnifiedLog.analyzeAndValidateRecords).
"""

from __future__ import annotations

import functools
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compat_tests import hostile
from compat_tests.clients import ck_consume_all, create_topic, kp_consume_all, run_async
from compat_tests.conftest import COMPAT_OVERRIDES
from compat_tests.hostile import MIB, ReadRecord, Rec

NONE = 0
UNKNOWN_SERVER_ERROR = -1
INVALID_TIMESTAMP = 32
INVALID_RECORD = 87
INT32_MAX = 2**31 - 1
RSS_GROWTH_LIMIT = 64 * MIB

PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2


# --- the broker and the wire ---------------------------------------------------------------------


@dataclass
class Target:
    bootstrap: str
    pid: int | None  # the broker process, when this module started it
    no_pid_reason: str = ""


@pytest.fixture(scope="module")
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """A broker process of this module's own (its pid lets the bomb test read its RSS); with
    `--bootstrap` or `--cluster`, the suite's broker, whose process is not ours to measure."""
    for option in ("--bootstrap", "--cluster"):
        if request.config.getoption(option):
            reason = f"the broker's process is not this suite's ({option})"
            yield Target(request.getfixturevalue("bootstrap"), None, reason)
            return
    from kafkacompat.local_brokers import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("hostile") / "data", COMPAT_OVERRIDES).start()
    try:
        assert broker.process is not None
        yield Target(broker.bootstrap, broker.process.pid)
    finally:
        broker.stop()


class Wire:
    """Raw requests to one partition's leader, as a client writes them (kafkacompat's blocking wire
    client and generated codecs, used strictly as a client)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from kafkacompat.client import KafkaClient

        self.topic = topic
        self.client = KafkaClient(bootstrap)
        self.leader = self.client.partition_leaders(topic)[0]

    def close(self) -> None:
        self.client.close()

    def max_produce_version(self) -> int:
        return self.client.version_for(PRODUCE, self.leader)

    def produce(self, records: bytes, acks: int, version: int = 8) -> Any:
        from kafkacompat.wire.messages import request_class

        produce = request_class(PRODUCE)
        request = produce(
            transactional_id=None,
            acks=acks,
            timeout_ms=10_000,
            topic_data=[
                produce.TopicProduceData(
                    name=self.topic,
                    partition_data=[produce.PartitionProduceData(index=0, records=records)],
                )
            ],
        )
        answer = self.client.send(PRODUCE, request, node_id=self.leader, version=version)
        (topic,) = answer.responses
        (partition,) = topic.partition_responses
        return partition

    def latest(self) -> int:
        from kafkacompat.wire.messages import request_class

        list_offsets = request_class(LIST_OFFSETS)
        partition = list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-1)
        request = list_offsets(
            replica_id=-1,
            isolation_level=0,
            topics=[list_offsets.ListOffsetsTopic(name=self.topic, partitions=[partition])],
        )
        answer = self.client.send(LIST_OFFSETS, request, node_id=self.leader, version=5)
        (result,) = answer.topics[0].partitions
        assert result.error_code == NONE, f"ListOffsets error {result.error_code}"
        return int(result.offset)

    def fetch(self, offset: int = 0) -> list[ReadRecord | str]:
        from kafkacompat.wire.messages import request_class

        fetch = request_class(FETCH)
        partition = fetch.FetchPartition(
            partition=0, fetch_offset=offset, log_start_offset=-1, partition_max_bytes=8 * MIB
        )
        request = fetch(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=8 * MIB,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[fetch.FetchTopic(topic=self.topic, partitions=[partition])],
            forgotten_topics_data=[],
            rack_id="",
        )
        answer = self.client.send(FETCH, request, node_id=self.leader, version=11)
        (result,) = answer.responses[0].partitions
        assert result.error_code == NONE, f"Fetch error {result.error_code}"
        return hostile.parse_batches(bytes(result.records or b""))


@pytest.fixture
def new_topic(target: Target, topic_name: str) -> Callable[..., str]:
    """Creates a fresh single-partition topic on the target broker, with these topic configs."""
    counter = iter(range(100))

    def make(configs: dict[str, str] | None = None) -> str:
        name = f"{topic_name}-{next(counter)}"
        create_topic(target.bootstrap, name, 1, configs)
        return name

    return make


@pytest.fixture
def wire_for(target: Target) -> Iterator[Callable[[str], Wire]]:
    opened: list[Wire] = []

    def open_wire(topic: str) -> Wire:
        opened.append(Wire(target.bootstrap, topic))
        return opened[-1]

    yield open_wire
    for wire in opened:
        wire.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def valid_records(prefix: str, count: int, first: int = 0) -> list[Rec]:
    return [
        Rec(f"k{first + i}".encode(), f"{prefix}-{first + i}".encode(), [(b"h", b"%d" % i)], i)
        for i in range(count)
    ]


def expected(prefix: str, count: int, first: int = 0) -> list[ReadRecord]:
    return [
        ReadRecord(first + i, f"k{first + i}".encode(), f"{prefix}-{first + i}".encode())
        for i in range(count)
    ]


def produce_valid(wire: Wire, prefix: str, count: int) -> None:
    answer = wire.produce(hostile.valid_batch(valid_records(prefix, count), now_ms()), acks=-1)
    assert (answer.error_code, answer.base_offset) == (NONE, 0), answer


def describe(answer: Any) -> str:
    errors = [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors or []]
    return (
        f"error_code={answer.error_code} base_offset={answer.base_offset} "
        f"record_errors={errors} error_message={answer.error_message!r}"
    )


def assert_nothing_appended(wire: Wire, before: list[ReadRecord]) -> None:
    end = wire.latest()
    assert end == len(before), f"ListOffsets latest moved from {len(before)} to {end}: a batch was appended"
    assert wire.fetch(0) == before, "a fetch from the start returns more than the valid records"


# --- the malformed shapes of the issue ------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """A malformed batch and the error code Kafka answers it with (for all of these Kafka names no
    record in record_errors and sends no error_message)."""

    name: str
    build: Callable[[int], bytes]  # base timestamp -> the batch
    code: int
    source: str  # where in Kafka's source the answer comes from


def _two(second: bytes, base_timestamp: int, **header: Any) -> bytes:
    """Two records, the first valid, the second given already framed; count 2 unless overridden."""
    first = hostile.framed(Rec(b"k0", b"v0").body(0))
    return hostile.batch(
        first + second, count=header.pop("count", 2), base_timestamp=base_timestamp, **header
    )


def _zeros_batch(codec: int, data: bytes, base_timestamp: int) -> bytes:
    return hostile.batch(data, count=1, attributes=codec, base_timestamp=base_timestamp)


@functools.cache
def gzip_bomb() -> bytes:
    return hostile.gzip_zeros(512 * MIB)  # about 510 KiB


SHAPES = [
    Shape(
        "negative-record-length",
        lambda ts: _two(hostile.framed(Rec(b"k1", b"v1").body(1), length=-5), ts),
        INVALID_RECORD,
        # DefaultRecord.java readFrom: bytes read != declared size -> InvalidRecordException
        "DefaultRecord.readFrom",
    ),
    Shape(
        "record-length-as-11-byte-varint",
        lambda ts: _two(hostile.framed(Rec(b"k1", b"v1").body(1), length_width=11), ts),
        UNKNOWN_SERVER_ERROR,
        # ByteUtils.java readVarint (outside DefaultRecord.readFrom's try) -> ReplicaManager.appendToLocalLog
        "ByteUtils.readVarint via DefaultRecordBatch.uncompressedIterator, ReplicaManager.appendToLocalLog",
    ),
    Shape(
        "timestamp-delta-as-11-byte-varlong",
        lambda ts: _two(hostile.framed(Rec(b"k1", b"v1", widths={"timestamp_delta": 11}).body(1)), ts),
        INVALID_RECORD,
        # DefaultRecord.java readFrom: readVarlong's IllegalArgumentException -> InvalidRecordException
        "DefaultRecord.readFrom",
    ),
    Shape(
        "count-1-with-two-records",
        lambda ts: _two(hostile.framed(Rec(b"k1", b"v1").body(1)), ts, count=1),
        INVALID_RECORD,
        # DefaultRecordBatch.java RecordIterator.next: "records still remaining" -> InvalidRecordException
        "DefaultRecordBatch.RecordIterator.next",
    ),
    Shape(
        "count-2**31-1-with-two-records",
        lambda ts: _two(hostile.framed(Rec(b"k1", b"v1").body(1)), ts, count=INT32_MAX),
        INVALID_RECORD,
        # DefaultRecordBatch.java uncompressedIterator: "premature EOF reached" -> InvalidRecordException
        "DefaultRecordBatch.uncompressedIterator",
    ),
    Shape(
        "compression-codec-7",
        lambda ts: hostile.valid_batch(valid_records("codec7", 2), ts, attributes=7),
        UNKNOWN_SERVER_ERROR,
        # CompressionType.java forId, called in UnifiedLog.analyzeAndValidateRecords -> catch-all
        "CompressionType.forId via UnifiedLog.analyzeAndValidateRecords",
    ),
    Shape(
        "gzip-bomb-512MiB-of-zeros",
        lambda ts: _zeros_batch(1, gzip_bomb(), ts),
        INVALID_RECORD,
        # LogValidator.java validateMessagesAndAssignOffsetsCompressed; RecordIterator.next "remaining"
        "LogValidator.validateMessagesAndAssignOffsetsCompressed, DefaultRecordBatch.RecordIterator.next",
    ),
    Shape(
        "zstd-rle-bomb-512MiB",
        lambda ts: _zeros_batch(4, hostile.zstd_rle(512 * MIB, declare_size=False), ts),
        INVALID_RECORD,
        # LogValidator.java validateMessagesAndAssignOffsetsCompressed; RecordIterator.next "remaining"
        "LogValidator.validateMessagesAndAssignOffsetsCompressed, DefaultRecordBatch.RecordIterator.next",
    ),
    Shape(
        "zstd-rle-bomb-declaring-512MiB",
        lambda ts: _zeros_batch(4, hostile.zstd_rle(512 * MIB, declare_size=True), ts),
        INVALID_RECORD,
        # LogValidator.java validateMessagesAndAssignOffsetsCompressed; RecordIterator.next "remaining"
        "LogValidator.validateMessagesAndAssignOffsetsCompressed, DefaultRecordBatch.RecordIterator.next",
    ),
]
BOMBS = [shape for shape in SHAPES if "bomb" in shape.name]


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.name for shape in SHAPES])
def test_malformed_batch_is_refused_and_nothing_appended(
    target: Target, wire_for: Callable[[str], Wire], topic_name: str, shape: Shape
) -> None:
    create_topic(target.bootstrap, topic_name)
    wire = wire_for(topic_name)
    produce_valid(wire, "valid", 2)
    before = expected("valid", 2)
    assert wire.fetch(0) == before
    for acks in (-1, 1):
        answer = wire.produce(shape.build(now_ms()), acks=acks)
        got = describe(answer)
        assert answer.error_code == shape.code, f"acks={acks}: {got}; Kafka: {shape.code} ({shape.source})"
        assert answer.base_offset == -1, f"acks={acks}: {got}"
        # structural errors are not RecordValidationExceptions: Kafka names no record, sends no message
        assert list(answer.record_errors or []) == [], f"acks={acks}: {got}"
        assert answer.error_message is None, f"acks={acks}: {got}"
        assert_nothing_appended(wire, before)


# --- per-record errors (KIP-467) -----------------------------------------------------------------

KAFKA_RECORD_ERRORS = "One or more records have been rejected due to {} record errors in total"
KAFKA_TIMESTAMP_ERRORS = "One or more records have been rejected due to invalid timestamp"


def keyless_message(topic: str) -> str:
    return f"Compacted topic cannot accept message without key in topic partition {topic}-0"


def assert_record_errors_as_librdkafka_reads_them(answer: Any, batch_size: int) -> list[int]:
    """librdkafka (rdkafka_request.c, rd_kafka_handle_Produce_parse and
    rd_kafka_msgbatch_handle_Produce_result_record_errors) walks the batch's messages once, in order,
    with one cursor into `record_errors`: a message whose index equals the current entry's batch_index
    takes that entry's message (and INVALID_RECORD when there are several entries, else the partition's
    error), every other message gets _INVALID_DIFFERENT_RECORD. So the entries must be in ascending
    batch_index order, without duplicates, inside the batch, each with a message; an entry out of order
    is silently lost. Returns the indices."""
    indices = [e.batch_index for e in answer.record_errors]
    assert indices == sorted(set(indices)), f"record_errors out of order or repeated: {describe(answer)}"
    assert all(0 <= i < batch_size for i in indices), describe(answer)
    assert all(e.batch_index_error_message for e in answer.record_errors), describe(answer)
    return indices


@pytest.mark.parametrize("acks", [-1, 1])
def test_keyless_records_on_a_compacted_topic_are_named(
    target: Target, wire_for: Callable[[str], Wire], new_topic: Callable[..., str], acks: int
) -> None:
    # LogValidator.validateKey, collected by LogValidator.processRecordErrors into a
    # RecordValidationException: INVALID_RECORD, record_errors naming each record, error_message set
    # (ReplicaManager.appendToLocalLog, hasCustomErrorMessage = true)
    topic = new_topic({"cleanup.policy": "compact"})
    wire = wire_for(topic)
    produce_valid(wire, "valid", 2)
    before = expected("valid", 2)
    records = [Rec(b"a", b"0"), Rec(None, b"1"), Rec(b"c", b"2"), Rec(None, b"3"), Rec(b"e", b"4")]
    for version in sorted({8, wire.max_produce_version()}):
        answer = wire.produce(hostile.valid_batch(records, now_ms()), acks=acks, version=version)
        got = f"Produce v{version}: {describe(answer)}"
        assert (answer.error_code, answer.base_offset) == (INVALID_RECORD, -1), got
        assert assert_record_errors_as_librdkafka_reads_them(answer, len(records)) == [1, 3], got
        assert [e.batch_index_error_message for e in answer.record_errors] == [keyless_message(topic)] * 2
        assert (answer.error_message or "").startswith(KAFKA_RECORD_ERRORS.format(2)), got
        assert_nothing_appended(wire, before)


@pytest.mark.parametrize("acks", [-1, 1])
def test_timestamp_out_of_range_is_named(
    target: Target, wire_for: Callable[[str], Wire], new_topic: Callable[..., str], acks: int
) -> None:
    # LogValidator.validateTimestamp (message.timestamp.after.max.ms), LogValidator.processRecordErrors:
    # INVALID_TIMESTAMP, record_errors naming the record, error_message set
    topic = new_topic({"message.timestamp.after.max.ms": "3600000"})
    wire = wire_for(topic)
    produce_valid(wire, "valid", 2)
    before = expected("valid", 2)
    base = now_ms()
    day = 86_400_000
    records = [Rec(b"a", b"0", timestamp_delta=0), Rec(b"b", b"1", timestamp_delta=1),
               Rec(b"c", b"2", timestamp_delta=day), Rec(b"d", b"3", timestamp_delta=2)]  # fmt: skip
    answer = wire.produce(hostile.valid_batch(records, base), acks=acks)
    got = describe(answer)
    assert (answer.error_code, answer.base_offset) == (INVALID_TIMESTAMP, -1), got
    assert assert_record_errors_as_librdkafka_reads_them(answer, len(records)) == [2], got
    message = answer.record_errors[0].batch_index_error_message
    assert message.startswith(f"Timestamp {base + day} of message with offset 2 is out of range"), got
    assert answer.error_message == KAFKA_TIMESTAMP_ERRORS, got
    assert_nothing_appended(wire, before)


def test_librdkafka_delivery_reports_name_the_keyless_records(
    target: Target, new_topic: Callable[..., str], ck_closing: Callable[[Any], Any]
) -> None:
    """A real librdkafka producer's batch with two keyless records on a compacted topic: with the
    broker's record_errors naming them, librdkafka reports INVALID_RECORD for exactly those two and
    _INVALID_DIFFERENT_RECORD for the others (rd_kafka_msgbatch_handle_Produce_result_record_errors);
    without record_errors every message would get the partition's error."""
    pytest.importorskip("confluent_kafka")
    from confluent_kafka import KafkaError, Producer

    topic = new_topic({"cleanup.policy": "compact"})
    config = {"bootstrap.servers": target.bootstrap, "acks": "all", "linger.ms": 500, "retries": 0}
    producer = ck_closing(Producer({**config, "enable.idempotence": False}))
    keys = [b"a", None, b"c", None, b"e"]
    reports: dict[int, Any] = {}
    for i, key in enumerate(keys):
        producer.produce(topic, key=key, value=b"%d" % i, partition=0,
                         on_delivery=lambda err, msg, i=i: reports.__setitem__(i, err))  # fmt: skip
    assert producer.flush(30) == 0
    codes = [None if reports[i] is None else reports[i].code() for i in range(len(keys))]
    different, invalid = KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD
    assert codes == [different, invalid, different, invalid, different], [reports[i] for i in range(5)]


# --- hypothesis: valid streams with one field broken --------------------------------------------

_bytes = st.binary(max_size=24)
_records = st.lists(
    st.builds(
        Rec,
        key=st.none() | _bytes,
        value=st.none() | _bytes,
        headers=st.lists(st.tuples(st.binary(min_size=1, max_size=6), st.none() | _bytes), max_size=2),
        timestamp_delta=st.integers(0, 10**6),
    ),
    min_size=1,
    max_size=6,
)
_VARINT_FIELDS = ["offset_delta", "key_length", "value_length", "header_count"]


@st.composite
def broken_batches(draw: st.DrawFn) -> tuple[str, Callable[[int], bytes]]:
    """(what was broken, base timestamp -> batch) for an uncompressed batch of generated records with
    exactly one field broken, among those that Kafka's uncompressed path refuses with INVALID_RECORD
    whatever the rest of the batch holds (DefaultRecord.readFrom, DefaultRecordBatch's RecordIterator
    and uncompressedIterator, LogValidator.validateBatch)."""
    records: list[Rec] = draw(_records)
    n = len(records)
    index = draw(st.integers(0, n - 1))
    kind = draw(st.sampled_from([
        "record-length", "overlong-timestamp-delta", "overlong-varint", "negative-header-count",
        "huge-header-count", "count", "last-offset-delta", "truncated-last-record", "trailing-bytes",
    ]))  # fmt: skip
    bodies = [r.body(i) for i, r in enumerate(records)]
    framed = [hostile.framed(b) for b in bodies]
    count, last_offset_delta = n, n - 1
    trailing = b""
    what = kind
    if kind == "record-length":  # DefaultRecord.readFrom: size check, or "Invalid record size"
        delta = draw(st.integers(-len(bodies[index]) - 40, 40).filter(lambda d: d != 0))
        framed[index] = hostile.framed(bodies[index], length=len(bodies[index]) + delta)
        what = f"record {index}'s length {delta:+d}"
    elif kind == "overlong-timestamp-delta":  # readVarlong's IllegalArgumentException in readFrom's try
        width = draw(st.integers(11, 12))
        records[index].widths = {"timestamp_delta": width}
        framed[index] = hostile.framed(records[index].body(index))
        what = f"record {index}'s timestamp delta as a {width}-byte varlong"
    elif kind == "overlong-varint":  # readVarint's IllegalArgumentException in readFrom's try
        name, width = draw(st.sampled_from(_VARINT_FIELDS)), draw(st.integers(6, 10))
        records[index].widths = {name: width}
        framed[index] = hostile.framed(records[index].body(index))
        what = f"record {index}'s {name} as a {width}-byte varint"
    elif kind == "negative-header-count":  # readFrom: "Found invalid number of record headers"
        records[index].header_count = draw(st.integers(-(2**31), -1))
        framed[index] = hostile.framed(records[index].body(index))
        what = f"record {index}'s header count {records[index].header_count}"
    elif kind == "huge-header-count":  # readFrom: "larger than the remaining size of the buffer"
        records[index].header_count = draw(st.integers(100_000, INT32_MAX))
        framed[index] = hostile.framed(records[index].body(index))
        what = f"record {index}'s header count {records[index].header_count}"
    elif kind == "count":  # RecordIterator: records remaining / premature EOF; validateBatch for <= 0
        count = draw(st.integers(0, n + 8).filter(lambda c: c != n) | st.just(INT32_MAX))
        last_offset_delta = count - 1
        what = f"records count {count} (and last_offset_delta {last_offset_delta}) for {n} records"
    elif kind == "last-offset-delta":  # validateBatch: "Inconsistent batch offset range"
        last_offset_delta = draw(st.integers(-(2**31), INT32_MAX).filter(lambda d: d != n - 1))
        what = f"last_offset_delta {last_offset_delta} for {n} records"
    elif kind == "truncated-last-record":  # readFrom: "Invalid record size ... only ... remaining"
        cut = draw(st.integers(1, len(bodies[-1])))
        framed[-1] = framed[-1][:-cut]
        what = f"the last record's body {cut} bytes short of its length"
    else:  # trailing bytes: RecordIterator.next "records still remaining in file"
        trailing = draw(st.binary(min_size=1, max_size=16))
        what = f"{len(trailing)} bytes after the last record"
    data = b"".join(framed) + trailing
    deltas = [r.timestamp_delta for r in records]

    def build(base: int) -> bytes:
        return hostile.batch(data, count=count, last_offset_delta=last_offset_delta,
                             base_timestamp=base, max_timestamp=base + max(deltas))  # fmt: skip

    return what, build


@pytest.fixture(scope="module")
def hypothesis_topic(target: Target) -> Iterator[tuple[str, Wire]]:
    import uuid

    topic = f"compat-hostile-hypothesis-{uuid.uuid4().hex[:8]}"
    create_topic(target.bootstrap, topic)
    wire = Wire(target.bootstrap, topic)
    produce_valid(wire, "valid", 3)
    try:
        yield topic, wire
    finally:
        wire.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken=broken_batches(), acks=st.sampled_from([-1, 1]), newest=st.booleans())
def test_one_broken_field_is_refused(
    hypothesis_topic: tuple[str, Wire], broken: tuple[str, Callable[[int], bytes]], acks: int, newest: bool
) -> None:
    _, wire = hypothesis_topic
    what, build = broken
    version = wire.max_produce_version() if newest else 8
    before = wire.latest()
    answer = wire.produce(build(now_ms()), acks=acks, version=version)
    got = f"{what}, Produce v{version} acks={acks}: {describe(answer)}"
    assert (answer.error_code, answer.base_offset) == (INVALID_RECORD, -1), got
    assert list(answer.record_errors or []) == [] and answer.error_message is None, got
    assert wire.latest() == before, f"{what}: appended"
    assert wire.fetch(before) == [], f"{what}: records after the valid ones"


def test_hypothesis_topic_holds_only_the_valid_records(hypothesis_topic: tuple[str, Wire]) -> None:
    _, wire = hypothesis_topic
    assert_nothing_appended(wire, expected("valid", 3))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.lists(st.none() | st.binary(max_size=8), min_size=1, max_size=10).filter(
    lambda keys: None in keys))  # fmt: skip
def test_keyless_records_are_named_whatever_their_places(
    compacted_wire: Wire, keys: list[bytes | None]
) -> None:
    # LogValidator.validateKey for every record, LogValidator.processRecordErrors
    records = [Rec(key, b"v%d" % i) for i, key in enumerate(keys)]
    before = compacted_wire.latest()
    answer = compacted_wire.produce(hostile.valid_batch(records, now_ms()), acks=-1)
    got = describe(answer)
    keyless = [i for i, key in enumerate(keys) if key is None]
    assert (answer.error_code, answer.base_offset) == (INVALID_RECORD, -1), got
    assert assert_record_errors_as_librdkafka_reads_them(answer, len(keys)) == keyless, got
    assert (answer.error_message or "").startswith(KAFKA_RECORD_ERRORS.format(len(keyless))), got
    assert compacted_wire.latest() == before, "appended"


@pytest.fixture(scope="module")
def compacted_wire(target: Target) -> Iterator[Wire]:
    import uuid

    topic = f"compat-hostile-compacted-{uuid.uuid4().hex[:8]}"
    create_topic(target.bootstrap, topic, 1, {"cleanup.policy": "compact"})
    wire = Wire(target.bootstrap, topic)
    try:
        yield wire
    finally:
        wire.close()


# --- decompression bombs and the broker's memory ----------------------------------------------------


def _status_kib(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field_name} in /proc/{pid}/status")


def test_bombs_are_refused_with_bounded_memory(
    target: Target, wire_for: Callable[[str], Wire], topic_name: str
) -> None:
    if target.pid is None:
        pytest.skip(f"RSS not measured: {target.no_pid_reason}")
    pid = target.pid
    create_topic(target.bootstrap, topic_name)
    wire = wire_for(topic_name)
    produce_valid(wire, "valid", 2)
    batches = [(shape, shape.build(now_ms())) for shape in BOMBS]  # built before measuring
    baseline = _status_kib(pid, "VmRSS")
    peak_before = _status_kib(pid, "VmHWM")
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(_status_kib(pid, "VmRSS"))
            stop.wait(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    answers = []
    try:
        for _ in range(2):
            for shape, data in batches:
                for acks in (-1, 1):
                    answers.append((shape, acks, wire.produce(data, acks=acks)))
    finally:
        stop.set()
        sampler.join()
    peak_after = _status_kib(pid, "VmHWM")
    highest = max([*samples, baseline, peak_after if peak_after > peak_before else baseline])
    growth = (highest - baseline) * 1024
    assert growth < RSS_GROWTH_LIMIT, (
        f"broker RSS grew by {growth / MIB:.1f} MiB (baseline {baseline / 1024:.1f} MiB) on "
        f"{len(answers)} bomb produces"
    )
    wrong = [
        f"{shape.name} acks={acks}: {describe(a)}" for shape, acks, a in answers if a.error_code != shape.code
    ]
    assert wrong == [], f"Kafka answers INVALID_RECORD ({BOMBS[0].source}); got {wrong}"
    assert_nothing_appended(wire, expected("valid", 2))


# --- the partition stays readable by every client ---------------------------------------------------


@dataclass
class Poisoned:
    topic: str
    answers: dict[str, int]  # shape -> error code answered
    after_offsets: list[int | str]  # where the valid records produced after the attacks landed


BEFORE, AFTER = 3, 3


@pytest.fixture(scope="module")
def poisoned(target: Target) -> Poisoned:
    """A topic with valid records, then every malformed shape attempted, then valid records produced by
    librdkafka. Nothing is asserted here: the readers below say what they see."""
    import uuid

    pytest.importorskip("confluent_kafka")
    from confluent_kafka import Producer

    topic = f"compat-hostile-readers-{uuid.uuid4().hex[:8]}"
    create_topic(target.bootstrap, topic)
    wire = Wire(target.bootstrap, topic)
    try:
        produce_valid(wire, "valid", BEFORE)
        answers = {shape.name: wire.produce(shape.build(now_ms()), acks=-1).error_code for shape in SHAPES}
    finally:
        wire.close()
    producer = Producer({"bootstrap.servers": target.bootstrap, "acks": "all", "linger.ms": 0})
    offsets: dict[int, int | str] = {}
    try:
        for i in range(BEFORE, BEFORE + AFTER):

            def report(err: Any, msg: Any, i: int = i) -> None:
                offsets[i] = str(err) if err else msg.offset()

            producer.produce(topic, key=b"k%d" % i, value=b"valid-%d" % i, partition=0, on_delivery=report)
            producer.flush(15)
    finally:
        producer.flush(15)
    return Poisoned(topic, answers, [offsets.get(i, "no report") for i in range(BEFORE, BEFORE + AFTER)])


ALL_VALID = [(i, b"k%d" % i, b"valid-%d" % i) for i in range(BEFORE + AFTER)]


def test_valid_records_after_refused_batches_continue_the_offsets(poisoned: Poisoned) -> None:
    assert poisoned.after_offsets == list(range(BEFORE, BEFORE + AFTER)), poisoned.answers


def _read_librdkafka(bootstrap: str, topic: str) -> tuple[list[tuple[int, bytes, bytes]], int]:
    from confluent_kafka import Consumer, TopicPartition

    messages = ck_consume_all(bootstrap, topic, 0, len(ALL_VALID), timeout=10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-hostile-watermarks"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    return [(m.offset(), m.key(), m.value()) for m in messages], high


def _read_kafka_python(bootstrap: str, topic: str) -> tuple[list[tuple[int, bytes, bytes]], int]:
    from kafka import KafkaConsumer, TopicPartition

    records = kp_consume_all(bootstrap, topic, 0, len(ALL_VALID), timeout=10)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        high = consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()
    return [(r.offset, r.key, r.value) for r in records], high


def _read_aiokafka(bootstrap: str, topic: str) -> tuple[list[tuple[int, bytes, bytes]], int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def read() -> tuple[list[tuple[int, bytes, bytes]], int]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            records: list[Any] = []
            deadline = time.monotonic() + 10
            while len(records) < len(ALL_VALID) and time.monotonic() < deadline:
                for batch in (await consumer.getmany(tp, timeout_ms=200)).values():
                    records.extend(batch)
            high = (await consumer.end_offsets([tp]))[tp]
            return [(r.offset, r.key, r.value) for r in records], high
        finally:
            await consumer.stop()

    result: tuple[list[tuple[int, bytes, bytes]], int] = run_async(read())
    return result


def _read_java(bootstrap: str, topic: str) -> tuple[list[tuple[int, bytes, bytes]], int]:
    from compat_tests.java_probe import probe_command, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    command = [*probe_command(), "consume-group", bootstrap, topic, f"{topic}-java", str(len(ALL_VALID))]
    result = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, f"Java consumer failed:\n{result.stdout[-2000:]}{result.stderr[-4000:]}"
    records = [line.split(" ") for line in result.stdout.splitlines() if line.startswith("record ")]
    read = [(int(f[2]), bytes.fromhex(f[4]), bytes.fromhex(f[5])) for f in records]
    committed = [line.split(" ") for line in result.stdout.splitlines() if line.startswith("committed ")]
    return read, int(committed[0][2]) if committed else -1


READERS = {
    "librdkafka": ("confluent_kafka", _read_librdkafka),
    "kafka-python": ("kafka", _read_kafka_python),
    "aiokafka": ("aiokafka", _read_aiokafka),
    "java": (None, _read_java),
}


@pytest.mark.parametrize("client", list(READERS))
def test_partition_stays_readable_by_every_client(target: Target, poisoned: Poisoned, client: str) -> None:
    module, read = READERS[client]
    if module is not None:
        pytest.importorskip(module)
    records, end = read(target.bootstrap, poisoned.topic)
    assert records == ALL_VALID, f"{client} read {records}; the shapes were answered {poisoned.answers}"
    # the Java reader reports its committed position, the others the partition's end offset
    assert end == len(ALL_VALID), f"{client}: end {end}; the shapes were answered {poisoned.answers}"
