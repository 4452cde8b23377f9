import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.records import (
    ABORT_MARKER,
    COMMIT_MARKER,
    HEADER_SIZE,
    InvalidRecordBatch,
    RecordBatchView,
    RecordInput,
    TimestampType,
    build_batch,
    build_control_batch,
    iter_batches,
    iter_records,
    parse_control_record_key,
    parse_end_txn_marker_value,
    validate_produce_records,
)

kafka_records = pytest.importorskip("kafka.record.default_records", reason="kafka-python not installed")
kafka_legacy = pytest.importorskip("kafka.record.legacy_records", reason="kafka-python not installed")
kafka_memory = pytest.importorskip("kafka.record.memory_records", reason="kafka-python not installed")
aiokafka_records = pytest.importorskip("aiokafka.record.default_records", reason="aiokafka not installed")

KpBuilder = kafka_records.DefaultRecordBatchBuilder
KpBatch = kafka_records.DefaultRecordBatch
AioBuilders = [aiokafka_records._DefaultRecordBatchBuilderPy, aiokafka_records.DefaultRecordBatchBuilder]
AioBatches = [aiokafka_records._DefaultRecordBatchPy, aiokafka_records.DefaultRecordBatch]

CODECS = [0, 1, 2, 3, 4]
# Compressible payloads: the client builders fall back to no compression when it does not pay.
SAMPLE = [
    (b"key-0", b"value " * 50, [("h1", b"v1"), ("h2", None)], 1_700_000_000_000),
    (None, b"value " * 60, [], 1_700_000_000_005),
    (b"key-2", None, [("", b"")], 1_699_999_999_990),
    (b"", b"x" * 300, [("\u00e9t\u00e9", b"\x00\xff")], 1_700_000_000_100),
]


def set_crc(buf: bytearray) -> None:
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))


def theirs_records(batch_cls, data):
    """Parse with a client's batch class; its CRC check must run before iteration."""
    batch = batch_cls(bytes(data))
    assert batch.validate_crc()
    return batch, [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


def ours_records(data):
    (view,) = list(iter_batches(data))
    return view, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(view)]


def expected_records(sample, base_offset=0):
    return [(base_offset + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(sample)]


# -- their batches, our parser -------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [0, 1])
def test_kafka_python_built_batches_parse(codec):
    builder = KpBuilder(
        magic=2, compression_type=codec, is_transactional=0, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 20,
    )
    for i, (k, v, h, ts) in enumerate(SAMPLE):
        builder.append(i, timestamp=ts, key=k, value=v, headers=h)
    data = builder.build()
    view, records = ours_records(data)
    assert view.compression == codec
    assert view.verify_crc()
    assert view.records_count == len(SAMPLE)
    assert view.last_offset_delta == len(SAMPLE) - 1
    assert view.base_timestamp == SAMPLE[0][3]
    assert view.max_timestamp == max(ts for *_, ts in SAMPLE)
    assert view.size == len(data)
    assert records == expected_records(SAMPLE)


@pytest.mark.parametrize("builder_cls", AioBuilders, ids=["aiokafka-py", "aiokafka-c"])
@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_built_batches_parse(builder_cls, codec):
    builder = builder_cls(
        magic=2, compression_type=codec, is_transactional=1, producer_id=4242, producer_epoch=7,
        base_sequence=2**31 - 2, batch_size=1 << 20,
    )
    for i, (k, v, h, ts) in enumerate(SAMPLE):
        builder.append(i, timestamp=ts, key=k, value=v, headers=h)
    data = builder.build()
    view, records = ours_records(data)
    assert view.compression == codec
    view.ensure_valid()
    assert view.is_transactional and not view.is_control
    assert (view.producer_id, view.producer_epoch, view.base_sequence) == (4242, 7, 2**31 - 2)
    assert view.last_sequence == 1  # 2**31-2 + 3 wraps past int32 max to 0, 1
    assert records == expected_records(SAMPLE)


def test_kafka_python_memory_records_agree_on_batch_walk():
    chunks = []
    for n in range(3):
        builder = KpBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
        for i in range(n + 1):
            builder.append(i, timestamp=1000 + i, key=None, value=b"v%d" % i, headers=[])
        chunk = bytearray(builder.build())
        struct.pack_into(">q", chunk, 0, 10 * n)
        chunks.append(bytes(chunk))
    data = b"".join(chunks)
    theirs = []
    mr = kafka_memory.MemoryRecords(data)
    while (b := mr.next_batch()) is not None:
        theirs.append((b.base_offset, [r.offset for r in b]))
    ours = [(v.base_offset, [r.offset for r in iter_records(v)]) for v in iter_batches(data)]
    assert ours == theirs
    assert [v.size for v in iter_batches(data)] == [len(c) for c in chunks]


# -- our batches, their parsers ------------------------------------------------------------------------


def _build_sample(codec, **kwargs):
    return build_batch(
        [RecordInput(k, v, h, ts) for k, v, h, ts in SAMPLE],
        compression=codec,
        base_offset=kwargs.pop("base_offset", 100),
        **kwargs,
    )


@pytest.mark.parametrize("codec", [0, 1])
def test_our_batches_parse_with_kafka_python(codec):
    data = _build_sample(codec, producer_id=9, producer_epoch=1, base_sequence=5)
    batch, records = theirs_records(KpBatch, data)
    assert batch.compression_type == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 1, 5)
    assert batch.base_offset == 100
    assert batch.max_timestamp == max(ts for *_, ts in SAMPLE)
    assert records == expected_records(SAMPLE, 100)


@pytest.mark.parametrize("batch_cls", AioBatches, ids=["aiokafka-py", "aiokafka-c"])
@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_parse_with_aiokafka(batch_cls, codec):
    data = _build_sample(codec)
    batch, records = theirs_records(batch_cls, data)
    assert batch.compression_type == codec
    assert records == expected_records(SAMPLE, 100)


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch_parses_with_kafka_python(commit):
    data = build_control_batch(
        commit=commit, producer_id=77, producer_epoch=3, coordinator_epoch=12, timestamp=1234, base_offset=50
    )
    batch = KpBatch(data)
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    (rec,) = list(batch)
    assert isinstance(rec, kafka_records.ControlRecord)
    assert rec.commit is commit and rec.abort is (not commit)
    assert rec.offset == 50
    view = RecordBatchView(data)
    assert view.is_control and view.base_sequence == -1
    (ours,) = list(iter_records(view))
    assert parse_control_record_key(ours.key) == (0, COMMIT_MARKER if commit else ABORT_MARKER)
    assert parse_end_txn_marker_value(ours.value) == (0, 12)


# -- CRC and patching ----------------------------------------------------------------------------------


def test_crc_detects_tampering_anywhere_in_crc_range():
    data = bytearray(_build_sample(0))
    view = RecordBatchView(data)
    assert view.verify_crc()
    for index in range(21, len(data), 7):
        tampered = bytearray(data)
        tampered[index] ^= 0x01
        v = RecordBatchView(tampered)
        assert not v.verify_crc()
        with pytest.raises(InvalidRecordBatch) as info:
            v.ensure_valid()
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_patching_offset_and_epoch_keeps_crc_and_is_seen_by_clients():
    data = bytearray(_build_sample(2))
    view = next(iter_batches(data))
    crc_before = view.crc
    view.set_base_offset(123_456_789_012)
    view.set_partition_leader_epoch(17)
    assert view.verify_crc() and view.crc == crc_before
    assert bytes(data[17:21]) == struct.pack(">I", crc_before)
    fresh = RecordBatchView(data)
    assert (fresh.base_offset, fresh.partition_leader_epoch) == (123_456_789_012, 17)
    assert fresh.last_offset == 123_456_789_012 + len(SAMPLE) - 1
    batch = AioBatches[0](bytes(data))
    assert batch.validate_crc()
    assert [r.offset for r in batch] == [123_456_789_012 + i for i in range(len(SAMPLE))]
    view.set_last_offset(1000)
    assert RecordBatchView(data).base_offset == 1000 - (len(SAMPLE) - 1)


@pytest.mark.parametrize("codec", [0, 1])
def test_set_max_timestamp_log_append_time(codec):
    data = bytearray(_build_sample(codec, is_transactional=True, producer_id=1, producer_epoch=0,
                                   base_sequence=0))
    view = RecordBatchView(data)
    view.set_max_timestamp(1_800_000_000_000, TimestampType.LOG_APPEND_TIME)
    assert view.verify_crc()
    fresh = RecordBatchView(data)
    assert fresh.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert fresh.max_timestamp == 1_800_000_000_000
    assert fresh.compression == codec and fresh.is_transactional
    assert {r.timestamp for r in iter_records(fresh)} == {1_800_000_000_000}
    batch = KpBatch(bytes(data))
    assert batch.validate_crc()
    assert batch.timestamp_type == 1
    assert {r.timestamp for r in batch} == {1_800_000_000_000}
    # Back to create time: the stored deltas give the original timestamps again.
    fresh.set_max_timestamp(max(ts for *_, ts in SAMPLE), TimestampType.CREATE_TIME)
    assert fresh.verify_crc()
    assert [r.timestamp for r in iter_records(fresh)] == [ts for *_, ts in SAMPLE]


def test_set_max_timestamp_unchanged_writes_nothing():
    data = _build_sample(0)
    view = RecordBatchView(data)  # read-only bytes: any write would raise TypeError
    view.set_max_timestamp(view.max_timestamp)
    with pytest.raises(TypeError):
        view.set_base_offset(1)


# -- walking record sets -------------------------------------------------------------------------------


def _legacy_message_set(magic):
    builder = kafka_legacy.LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1000, key=b"k", value=b"v")
    return bytes(builder.build())


def test_iter_batches_many_and_partial_tail():
    one = _build_sample(0)
    two = build_batch([(b"a", b"b", [], 5)], base_offset=4)
    data = one + two
    assert [v.base_offset for v in iter_batches(data)] == [100, 4]
    assert list(iter_batches(b"")) == []
    for cut in (1, 11, 12, 16, 17, 40, len(two) - 1):
        truncated = data[: len(one) + cut]
        with pytest.raises(InvalidRecordBatch) as info:
            list(iter_batches(truncated))
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE
        assert [v.base_offset for v in iter_batches(truncated, allow_partial_tail=True)] == [100]


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_sets_refused_with_invalid_record(magic):
    legacy = _legacy_message_set(magic)
    assert legacy[16] == magic
    with pytest.raises(InvalidRecordBatch) as info:
        list(iter_batches(legacy))
    assert info.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(InvalidRecordBatch) as info:
        validate_produce_records(3, legacy)
    assert info.value.code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize(
    ("length", "magic"),
    [(13, 2), (-5, 2), (60, 3), (60, 255)],
)
def test_bad_size_prefix_or_magic_is_corrupt(length, magic):
    data = bytearray(_build_sample(0))
    struct.pack_into(">i", data, 8, length)
    data[16] = magic
    with pytest.raises(InvalidRecordBatch) as info:
        list(iter_batches(data, allow_partial_tail=True))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_magic2_batch_shorter_than_header_is_corrupt():
    data = bytearray(_build_sample(0))[:40]
    struct.pack_into(">i", data, 8, 40 - 12)
    with pytest.raises(InvalidRecordBatch) as info:
        list(iter_batches(data))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_validate_produce_records():
    one = _build_sample(0)
    assert validate_produce_records(9, one).records_count == len(SAMPLE)
    # Trailing bytes that are not a whole batch are left to the caller (Kafka trims them).
    assert validate_produce_records(9, one + one[:30]).size == len(one)
    with pytest.raises(InvalidRecordBatch) as info:
        validate_produce_records(9, one + one)
    assert info.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(InvalidRecordBatch) as info:
        validate_produce_records(9, b"")
    assert info.value.code == ErrorCode.INVALID_RECORD
    zstd = _build_sample(4)
    with pytest.raises(InvalidRecordBatch) as info:
        validate_produce_records(6, zstd)
    assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert validate_produce_records(7, zstd).compression == 4


# -- record decoding edge cases ------------------------------------------------------------------------


def _patched(data: bytes, offset: int, fmt: str, value: int) -> RecordBatchView:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, value)
    set_crc(buf)
    view = RecordBatchView(buf)
    assert view.verify_crc()
    return view


@pytest.mark.parametrize("count", [-1, 3, 5, 100])
def test_records_count_mismatch_is_invalid_record(count):
    view = _patched(_build_sample(0), 57, ">i", count)
    with pytest.raises(InvalidRecordBatch) as info:
        list(iter_records(view))
    assert info.value.code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("count", [3, 5])
def test_records_count_mismatch_in_compressed_batch(count):
    view = _patched(_build_sample(1), 57, ">i", count)
    with pytest.raises(InvalidRecordBatch) as info:
        list(iter_records(view))
    assert info.value.code == ErrorCode.INVALID_RECORD


def test_overlong_varint_is_invalid_record():
    data = bytearray(build_batch([(b"k", b"v", [], 1)]))
    data[HEADER_SIZE] = 0xFF  # the record's length varint
    data[HEADER_SIZE + 1 : HEADER_SIZE + 6] = b"\xff\xff\xff\xff\xff"
    set_crc(data)
    with pytest.raises(InvalidRecordBatch) as info:
        list(iter_records(RecordBatchView(data)))
    assert info.value.code == ErrorCode.INVALID_RECORD


def test_corrupt_compressed_payload_is_corrupt_message():
    data = bytearray(_build_sample(4))
    data[HEADER_SIZE + 8 : HEADER_SIZE + 40] = bytes(32)
    set_crc(data)
    with pytest.raises(InvalidRecordBatch) as info:
        list(iter_records(RecordBatchView(data)))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_empty_batch_and_delete_horizon():
    data = build_batch([], base_offset=10, last_offset_delta=4, max_timestamp=99, producer_id=3,
                       producer_epoch=0, base_sequence=20)
    view = RecordBatchView(data)
    assert view.verify_crc()
    assert (view.records_count, view.last_offset, view.base_timestamp, view.max_timestamp) == (0, 14, -1, 99)
    assert view.last_sequence == 24
    assert list(iter_records(view)) == []
    kept = [RecordInput(b"k", None, (), 5000, offset_delta=3)]
    data = build_batch(kept, base_offset=10, delete_horizon_ms=9000)
    view = RecordBatchView(data)
    assert view.has_delete_horizon and view.delete_horizon_ms == 9000
    (rec,) = list(iter_records(view))
    assert (rec.offset, rec.timestamp, rec.key, rec.value) == (13, 5000, b"k", None)
    assert view.last_offset_delta == 3


def test_build_batch_rejects_bad_arguments():
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v")])  # no timestamp anywhere
    with pytest.raises(ValueError):
        build_batch([RecordInput(b"a", b"", (), 1, 2), RecordInput(b"b", b"", (), 1, 2)])
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v", [], 1)], compression=5)


# -- property tests ------------------------------------------------------------------------------------

header_st = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))
record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=200)),
    st.lists(header_st, max_size=3),
    st.integers(min_value=0, max_value=2**42),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record_st, min_size=1, max_size=12),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(min_value=0, max_value=2**62),
    pid=st.integers(min_value=-1, max_value=2**63 - 1),
)
def test_roundtrip_and_cross_parse(records, codec, base_offset, pid):
    data = build_batch(
        [RecordInput(k, v, h, ts) for k, v, h, ts in records], base_offset=base_offset, compression=codec,
        producer_id=pid,
    )
    view, ours = ours_records(data)
    assert view.verify_crc()
    assert view.producer_id == pid
    expected = expected_records(records, base_offset)
    assert ours == expected
    _, theirs = theirs_records(AioBatches[1], data)
    assert theirs == expected


def _sample_batch_for_fuzz(codec):
    return build_batch([RecordInput(k, v, h, ts) for k, v, h, ts in SAMPLE], compression=codec)


FUZZ_SOURCES = {codec: _sample_batch_for_fuzz(codec) for codec in CODECS}


def _consume(data, fix_crc):
    buf = bytearray(data)
    if fix_crc and len(buf) >= HEADER_SIZE:
        set_crc(buf)
    for view in iter_batches(buf, allow_partial_tail=True):
        view.ensure_valid()
        for _ in iter_records(view, max_decompressed_size=1 << 20):
            pass


@settings(max_examples=400, deadline=None)
@given(
    codec=st.sampled_from(CODECS),
    edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=255)), max_size=6),
    cut=st.one_of(st.none(), st.integers(min_value=0)),
    fix_crc=st.booleans(),
)
def test_mutated_batches_only_raise_invalid_record_batch(codec, edits, cut, fix_crc):
    buf = bytearray(FUZZ_SOURCES[codec])
    for position, value in edits:
        buf[position % len(buf)] = value
    if cut is not None:
        buf = buf[: cut % (len(buf) + 1)]
    try:
        _consume(buf, fix_crc)
    except InvalidRecordBatch as exc:
        assert exc.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=200), count=st.integers(min_value=-2, max_value=300),
       codec=st.sampled_from(CODECS))
def test_random_record_payloads_only_raise_invalid_record_batch(payload, count, codec):
    buf = bytearray(build_batch([], compression=0)) + payload
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">i", buf, 57, count)
    buf[22] = codec  # low byte of attributes
    set_crc(buf)
    try:
        _consume(buf, fix_crc=False)
    except InvalidRecordBatch as exc:
        assert exc.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
