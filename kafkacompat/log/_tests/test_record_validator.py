"""record_validator: every malformed record shape refused with Kafka's code and the right record index.

The batches here are assembled by hand (`encode_record`, `wrap_batch`) so that any field can be broken
while the batch header and CRC stay right, the way a hostile client would send them. The builders are
imported by the broker's produce tests too.
"""

from __future__ import annotations

import tracemalloc
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.log.config import LogConfig
from kafkacompat.log.record_validator import (
    KEYLESS,
    InvalidRecords,
    TimestampCheck,
    check_batch_records,
    validate_batch_records,
)
from kafkacompat.log.validator import validate_records
from kafkacompat.wire import compression
from kafkacompat.wire.crc import crc32c
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.records import (
    BATCH_HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    RecordBatchView,
    RecordInput,
    TimestampType,
    build_batch,
)

NOW = 1_700_000_000_000
MiB = 1024 * 1024

# -- hand encoders ---------------------------------------------------------------------------------


def zigzag(value: int, *, pad_to: int = 0) -> bytes:
    """Zigzag varint of `value`, padded with zero continuation groups to `pad_to` bytes when longer."""
    raw = ((value << 1) ^ (value >> 63)) & (2**64 - 1)
    groups = []
    while True:
        groups.append(raw & 0x7F)
        raw >>= 7
        if not raw:
            break
    while len(groups) < pad_to:
        groups.append(0)
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


@dataclass
class Rec:
    """One record's fields, each encodable on its own; `*_raw` replaces a field's bytes as given."""

    key: bytes | None = b"k"
    value: bytes | None = b"v"
    headers: Sequence[tuple[bytes, bytes | None]] = ()
    timestamp_delta: int = 0
    offset_delta: int = 0
    attributes: int = 0
    length_raw: bytes | None = None
    timestamp_raw: bytes | None = None
    offset_raw: bytes | None = None
    key_raw: bytes | None = None
    value_raw: bytes | None = None
    headers_raw: bytes | None = None
    extra: bytes = b""
    length_adjust: int = 0


def _bytes_field(data: bytes | None) -> bytes:
    return zigzag(-1) if data is None else zigzag(len(data)) + data


def encode_record(rec: Rec) -> bytes:
    body = bytearray([rec.attributes])
    body += rec.timestamp_raw if rec.timestamp_raw is not None else zigzag(rec.timestamp_delta)
    body += rec.offset_raw if rec.offset_raw is not None else zigzag(rec.offset_delta)
    body += rec.key_raw if rec.key_raw is not None else _bytes_field(rec.key)
    body += rec.value_raw if rec.value_raw is not None else _bytes_field(rec.value)
    if rec.headers_raw is not None:
        body += rec.headers_raw
    else:
        body += zigzag(len(rec.headers))
        for hkey, hvalue in rec.headers:
            body += zigzag(len(hkey)) + hkey + _bytes_field(hvalue)
    body += rec.extra
    length = rec.length_raw if rec.length_raw is not None else zigzag(len(body) + rec.length_adjust)
    return length + bytes(body)


def records(n: int, **fields: object) -> list[Rec]:
    return [Rec(offset_delta=i, **fields) for i in range(n)]  # type: ignore[arg-type]


def wrap_batch(
    stream: bytes,
    count: int,
    *,
    codec: int = 0,
    payload: bytes | None = None,
    last_offset_delta: int | None = None,
    base_timestamp: int = NOW,
    max_timestamp: int | None = None,
    timestamp_type: int = TimestampType.CREATE_TIME,
    base_offset: int = 0,
) -> bytes:
    """A batch around a record stream, header and CRC right; `payload` overrides the compressed bytes."""
    if payload is None:
        payload = compression.compress(codec, stream) if 1 <= codec <= 4 else stream
    out = bytearray(HEADER_SIZE) + payload
    attributes = codec | (0x08 if timestamp_type == TimestampType.LOG_APPEND_TIME else 0)
    BATCH_HEADER.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        -1,
        2,
        0,
        attributes,
        count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp,
        base_timestamp if max_timestamp is None else max_timestamp,
        -1,
        -1,
        -1,
        count,
    )
    out[17:21] = crc32c(memoryview(out)[21:]).to_bytes(4, "big")
    return bytes(out)


def hostile_batch(recs: Sequence[Rec], count: int | None = None, **kwargs: object) -> bytes:
    stream = b"".join(encode_record(r) for r in recs)
    return wrap_batch(stream, len(recs) if count is None else count, **kwargs)  # type: ignore[arg-type]


def gzip_bomb(inflated: int) -> bytes:
    """A gzip stream of `inflated` zero bytes, built in 1 MiB steps (never holding it whole)."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MiB)
    parts = [deflater.compress(zeros) for _ in range(inflated // MiB)]
    parts.append(deflater.flush())
    return b"".join(parts)


def zstd_rle_bomb(inflated: int, *, declare_size: bool) -> bytes:
    """A zstd frame of 128 KiB RLE blocks of zeros (4 bytes each), optionally declaring its content size."""
    block = 128 * 1024
    blocks = inflated // block
    out = bytearray((0xFD2FB528).to_bytes(4, "little"))
    window = (17 - 10) << 3  # a 128 KiB window
    if declare_size:
        out += bytes([0x80, window]) + inflated.to_bytes(4, "little")  # 4-byte frame content size
    else:
        out += bytes([0x00, window])
    for i in range(blocks):
        last = 1 if i == blocks - 1 else 0
        header = last | (1 << 1) | (block << 3)  # RLE
        out += header.to_bytes(3, "little") + b"\x00"
    return bytes(out)


def lz4_bomb(inflated: int, *, block_id: int = 7) -> bytes:
    """An lz4 frame of independent blocks of zeros (4 MiB each for block id 7, 64 KiB for 4), no
    declared content size: nothing in its framing says how far it inflates."""
    block_size = {4: 64 * 1024, 5: 256 * 1024, 6: MiB, 7: 4 * MiB}[block_id]
    block = bytes(cramjam.lz4.compress_block(bytes(block_size), store_size=False))
    out = bytearray((0x184D2204).to_bytes(4, "little"))
    out += bytes([0x60, block_id << 4, 0])  # version 1, independent blocks; header checksum unchecked
    out += (len(block).to_bytes(4, "little") + block) * (inflated // block_size)
    out += bytes(4)  # end mark
    return bytes(out)


# -- helpers -------------------------------------------------------------------------------------------


def refusal(
    data: bytes,
    *,
    compacted: bool = False,
    check: TimestampCheck | None = None,
    bound: int = 8 * MiB,
    from_client: bool = True,
) -> InvalidRecords:
    with pytest.raises(InvalidRecords) as info:
        validate_batch_records(
            RecordBatchView(bytearray(data)),
            compacted=compacted,
            timestamp_check=check,
            max_inflated_bytes=bound,
            from_client=from_client,
        )
    return info.value


def accepted(
    data: bytes,
    *,
    compacted: bool = False,
    check: TimestampCheck | None = None,
    from_client: bool = True,
    bound: int = 8 * MiB,
) -> int:
    return check_batch_records(
        RecordBatchView(bytearray(data)),
        compacted=compacted,
        timestamp_check=check,
        max_inflated_bytes=bound,
        from_client=from_client,
    )


def indexes(exc: InvalidRecords) -> list[int]:
    return [index for index, _ in exc.record_errors]


# -- the shapes of issue 35 --------------------------------------------------------------------------


def test_negative_record_length() -> None:
    recs = records(3)
    recs[1].length_raw = zigzag(-5)
    exc = refusal(hostile_batch(recs))
    assert exc.code == ErrorCode.INVALID_RECORD and indexes(exc) == [1]


def test_record_length_as_an_eleven_byte_varint() -> None:
    recs = records(2)
    recs[1].length_raw = zigzag(len(encode_record(replace(recs[1], length_raw=b""))), pad_to=11)
    # Kafka reads an uncompressed batch's length varints outside its record reader: its catch-all answers
    exc = refusal(hostile_batch(recs))
    assert exc.code == ErrorCode.UNKNOWN_SERVER_ERROR and "longer than 5 bytes" in exc.message
    for codec in (1, 2, 3, 4):  # its stream reader wraps the same fault as INVALID_RECORD
        exc = refusal(hostile_batch(recs, codec=codec))
        assert exc.code == ErrorCode.INVALID_RECORD and indexes(exc) == [1] and not exc.per_record


def test_timestamp_delta_as_an_eleven_byte_varlong() -> None:
    recs = records(2)
    recs[1].timestamp_raw = zigzag(0, pad_to=11)
    exc = refusal(hostile_batch(recs))
    assert exc.code == ErrorCode.INVALID_RECORD and indexes(exc) == [1] and not exc.per_record
    assert "longer than 10 bytes" in exc.message


def test_count_smaller_than_the_records_present() -> None:
    exc = refusal(hostile_batch(records(2), count=1))
    assert exc.code == ErrorCode.INVALID_RECORD and indexes(exc) == [1]
    assert "remaining" in exc.message


def test_count_of_int32_max_with_matching_last_offset_delta() -> None:
    data = hostile_batch(records(2), count=2**31 - 1)
    assert RecordBatchView(data).last_offset_delta == 2**31 - 2
    exc = refusal(data)
    assert exc.code == ErrorCode.INVALID_RECORD and indexes(exc) == [2]
    assert "premature EOF" in exc.message


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec: int) -> None:
    stream = b"".join(encode_record(r) for r in records(2))
    exc = refusal(wrap_batch(stream, 2, codec=codec))
    assert exc.code == ErrorCode.UNKNOWN_SERVER_ERROR


def _peak_while(action: object) -> int:
    tracemalloc.start()
    try:
        action()  # type: ignore[operator]
    except Exception:
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize(
    ("codec", "payload"),
    [
        pytest.param(1, lambda: gzip_bomb(64 * MiB), id="gzip"),
        pytest.param(4, lambda: zstd_rle_bomb(512 * MiB, declare_size=True), id="zstd-declared-512MiB"),
        pytest.param(4, lambda: zstd_rle_bomb(512 * MiB, declare_size=False), id="zstd-rle-blocks"),
        pytest.param(3, lambda: lz4_bomb(200 * MiB), id="lz4-4MiB-blocks"),
        pytest.param(3, lambda: lz4_bomb(80 * MiB, block_id=4), id="lz4-64KiB-blocks"),
    ],
)
def test_bombs_refused_within_the_bound(codec: int, payload: object) -> None:
    compressed = payload()  # type: ignore[operator]
    assert len(compressed) < MiB
    data = wrap_batch(b"", 1, codec=codec, payload=compressed)
    bound = 64 * MiB
    peak = _peak_while(lambda: refusal(data, bound=bound))
    exc = refusal(data, bound=bound)
    # Kafka's streaming reader fails the first zero-filled record: INVALID_RECORD, nothing inflated whole
    assert exc.code == ErrorCode.INVALID_RECORD and not exc.per_record
    assert peak < 4 * MiB


def test_sound_records_past_the_bound_are_refused_within_it() -> None:
    stream = encode_record(Rec(value=bytes(12 * MiB)))
    for codec in (1, 3, 4):
        data = wrap_batch(stream, 1, codec=codec)
        bound = 8 * MiB
        peak = _peak_while(lambda data=data, bound=bound: refusal(data, bound=bound))
        exc = refusal(data, bound=bound)
        assert exc.code == ErrorCode.INVALID_RECORD and "bound" in exc.message
        assert peak < bound + 3 * MiB, codec
        assert accepted(data, bound=16 * MiB) == NOW


def test_corrupt_compressed_data() -> None:
    stream = b"".join(encode_record(r) for r in records(2))
    good = compression.compress(1, stream)
    exc = refusal(wrap_batch(stream, 2, codec=1, payload=good[:-9]))
    assert exc.code == ErrorCode.CORRUPT_MESSAGE


# -- more record faults ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda r: setattr(r, "length_adjust", 1), "Invalid record size"),
        (lambda r: setattr(r, "length_adjust", -1), ""),
        (lambda r: setattr(r, "extra", b"\x00"), "Invalid record size"),
        (lambda r: setattr(r, "offset_delta", 7), "offset delta"),
        (lambda r: setattr(r, "key_raw", zigzag(-2)), "key length"),
        (lambda r: setattr(r, "value_raw", zigzag(-3)), "value length"),
        (lambda r: setattr(r, "value_raw", zigzag(500) + b"x"), ""),
        (lambda r: setattr(r, "headers_raw", zigzag(-1)), "number of record headers"),
        (lambda r: setattr(r, "headers_raw", zigzag(50)), "number of record headers"),
        (lambda r: setattr(r, "headers_raw", zigzag(1) + zigzag(-1) + zigzag(-1)), "header key size"),
        (lambda r: setattr(r, "headers_raw", zigzag(1) + zigzag(1) + b"h" + zigzag(-7)), "header value"),
        (lambda r: setattr(r, "offset_raw", zigzag(1, pad_to=6)), "longer than 5 bytes"),
        (lambda r: setattr(r, "offset_raw", b"\xff\xff\xff\xff\x7f"), "overflows int32"),
        (lambda r: setattr(r, "timestamp_raw", b"\xff" * 9 + b"\x7f"), "overflows int64"),
    ],
)
def test_record_faults_name_the_record(mutate: object, needle: str) -> None:
    recs = records(4, headers=[(b"h", b"x")])
    mutate(recs[2])  # type: ignore[operator]
    for codec in (0, 1, 4):
        exc = refusal(hostile_batch(recs, codec=codec))
        assert exc.code == ErrorCode.INVALID_RECORD and not exc.per_record
        assert indexes(exc) == [2], exc.message
        assert needle in exc.message


def test_negative_count() -> None:
    exc = refusal(hostile_batch(records(1), count=-1, last_offset_delta=0))
    assert exc.code == ErrorCode.INVALID_RECORD


def test_record_attributes_are_not_checked() -> None:
    recs = records(2)
    recs[1].attributes = 0xFF
    accepted(hostile_batch(recs))


def test_non_canonical_varints_within_the_limits_are_accepted() -> None:
    recs = records(2)
    recs[0].offset_raw = zigzag(0, pad_to=5)
    recs[1].timestamp_raw = zigzag(3, pad_to=10)
    recs[1].length_raw = zigzag(len(encode_record(replace(recs[1], length_raw=b""))), pad_to=5)
    assert accepted(hostile_batch(recs)) == NOW + 3


def test_other_origins_allow_gaps_in_offset_deltas() -> None:
    recs = [Rec(offset_delta=d) for d in (0, 3, 9)]
    data = hostile_batch(recs, last_offset_delta=9)
    accepted(data, from_client=False)
    assert indexes(refusal(data)) == [1]  # a client must number its records 0..count-1
    backwards = hostile_batch([Rec(offset_delta=d) for d in (0, 3, 2)], last_offset_delta=9)
    assert indexes(refusal(backwards, from_client=False)) == [2]
    beyond = hostile_batch([Rec(offset_delta=d) for d in (0, 10)], last_offset_delta=9)
    assert indexes(refusal(beyond, from_client=False)) == [1]


def test_an_empty_batch_reads_nothing() -> None:
    assert accepted(wrap_batch(b"", 0, last_offset_delta=4), from_client=False) == -1


# -- keys and timestamps -----------------------------------------------------------------------------


def test_compacted_topics_need_keys_in_every_record() -> None:
    recs = records(5)
    recs[1].key = None
    recs[3].key = None
    for codec in (0, 3):
        exc = refusal(hostile_batch(recs, codec=codec), compacted=True)
        assert exc.code == ErrorCode.INVALID_RECORD and indexes(exc) == [1, 3] and exc.per_record
        assert exc.record_errors[0][1] == KEYLESS
        message, located = exc.located("t-0")
        assert located == [(1, f"{KEYLESS} in topic partition t-0"), (3, f"{KEYLESS} in topic partition t-0")]
        assert message.startswith("One or more records have been rejected due to 2 record errors in total")
    accepted(hostile_batch(recs))


def test_timestamps_are_checked_per_record() -> None:
    check = TimestampCheck(NOW, 1000, 500)
    recs = [Rec(offset_delta=i, timestamp_delta=d) for i, d in enumerate((0, -1001, 400, 501, -1000))]
    exc = refusal(hostile_batch(recs), check=check)
    assert exc.code == ErrorCode.INVALID_TIMESTAMP and indexes(exc) == [1, 3] and exc.per_record
    assert exc.record_errors[0][1] == (
        f"Timestamp {NOW - 1001} of message with offset 1 is out of range. "
        f"The timestamp should be within [{NOW - 1000}, {NOW + 500}]"
    )
    assert exc.located("t-0") == (
        "One or more records have been rejected due to invalid timestamp",
        exc.record_errors,
    )
    kept = [replace(rec, offset_delta=i) for i, rec in enumerate((recs[0], recs[2], recs[4]))]
    assert accepted(hostile_batch(kept), check=check) == NOW + 400


def test_timestamp_errors_win_over_key_errors() -> None:
    check = TimestampCheck(NOW, 10, 10)
    recs = [
        Rec(offset_delta=0, key=None),
        Rec(offset_delta=1, key=None, timestamp_delta=100),
        Rec(offset_delta=2),
    ]
    exc = refusal(hostile_batch(recs), compacted=True, check=check)
    assert exc.code == ErrorCode.INVALID_TIMESTAMP
    assert indexes(exc) == [0, 1]
    assert exc.record_errors[0][1] == KEYLESS and "Timestamp" in exc.record_errors[1][1]  # type: ignore[operator]


def test_records_without_timestamps_pass() -> None:
    recs = records(2)
    data = hostile_batch(recs, base_timestamp=-1)
    assert accepted(data, check=TimestampCheck(NOW, 10, 10)) == -1


def test_timestamp_overflow_is_refused_under_timestamp_rules() -> None:
    recs = records(2)
    recs[1].timestamp_delta = 2**62
    data = hostile_batch(recs, base_timestamp=2**62)
    exc = refusal(data, check=TimestampCheck(NOW))
    assert exc.code == ErrorCode.INVALID_TIMESTAMP and indexes(exc) == [1]
    accepted(data)  # without timestamp rules (replication, recovery) nothing looks at it


def test_producer_log_append_time_batches() -> None:
    data = hostile_batch(records(3), timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=NOW)
    lat_topic = TimestampCheck(NOW, log_append_time=True)
    exc = refusal(data, check=lat_topic)
    assert exc.code == ErrorCode.INVALID_TIMESTAMP and indexes(exc) == [0, 1, 2]
    # on a CreateTime topic, the records carry the batch's max timestamp, checked like any other
    assert accepted(data, check=TimestampCheck(NOW, 10, 10)) == NOW
    far = hostile_batch(records(2), timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=NOW + 99)
    assert indexes(refusal(far, check=TimestampCheck(NOW, 10, 10))) == [0, 1]
    unset = hostile_batch(records(2), timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=-1)
    assert indexes(refusal(unset, check=TimestampCheck(NOW))) == [0, 1]


def test_java_long_arithmetic_at_the_edges() -> None:
    check = TimestampCheck(NOW, 2**63 - 1, 2**63 - 1)
    assert not check.refuses(-(2**63))  # now - MIN wraps negative in Java: within any window
    assert TimestampCheck(NOW, 5, 5).refuses(NOW + 6)
    assert not TimestampCheck(NOW, 5, 5).refuses(NOW - 5)


# -- valid batches -----------------------------------------------------------------------------------

VALID = [
    RecordInput(b"key", b"value", [("h1", b"a"), ("h2", None)], NOW),
    RecordInput(None, b"no key", (), NOW + 1),
    RecordInput(b"no value", None, [("", b"")], NOW - 3),
    RecordInput(None, None, (), NOW + 2),
    RecordInput(b"k" * 300, b"v" * 20000, [("big", b"h" * 70000)], NOW),
]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_valid_batches_of_every_codec(codec: int) -> None:
    data = build_batch(VALID, compression=codec)
    assert accepted(data, check=TimestampCheck(NOW, 10, 10)) == NOW + 2
    many = build_batch(
        [RecordInput(b"%d" % i, b"x" * (i % 300), (), NOW + i) for i in range(1000)], compression=codec
    )
    assert accepted(many, check=TimestampCheck(NOW, 0, 1000)) == NOW + 999


# -- through validate_records ------------------------------------------------------------------------


def test_validate_records_walks_client_batches() -> None:
    config = LogConfig.from_properties({})
    buf = bytearray(hostile_batch(records(2), count=1))
    with pytest.raises(InvalidRecords) as info:
        validate_records(memoryview(buf), config, NOW)
    assert info.value.code == ErrorCode.INVALID_RECORD and indexes(info.value) == [1]
    # every other origin (followers, markers, coordinators) is walked too, with the structural rules
    validate_records(memoryview(bytearray(build_batch(VALID))), config, NOW, from_client=False)
    with pytest.raises(InvalidRecords) as info:
        validate_records(memoryview(buf), config, NOW, from_client=False)
    assert info.value.code == ErrorCode.INVALID_RECORD and indexes(info.value) == [1]


def test_validate_records_sets_the_max_timestamp_from_the_records() -> None:
    config = LogConfig.from_properties({})
    recs = [Rec(offset_delta=0, timestamp_delta=5), Rec(offset_delta=1, timestamp_delta=2)]
    buf = bytearray(hostile_batch(recs, max_timestamp=NOW + 10_000_000))
    (batch,) = validate_records(memoryview(buf), config, NOW)
    assert batch.max_timestamp == NOW + 5 and batch.verify_crc()
    honest = bytearray(build_batch(VALID))
    before = bytes(honest)
    validate_records(memoryview(honest), config, NOW)
    assert bytes(honest) == before  # a truthful header is left as it is


def test_validate_records_compacted_and_timestamps() -> None:
    compacted = LogConfig.from_properties({"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecords) as info:
        validate_records(memoryview(bytearray(build_batch(VALID))), compacted, NOW)
    assert indexes(info.value) == [1, 3]
    windowed = LogConfig.from_properties({"message.timestamp.difference.max.ms": "1"})
    with pytest.raises(InvalidRecords) as info:
        validate_records(memoryview(bytearray(build_batch(VALID))), windowed, NOW)
    assert info.value.code == ErrorCode.INVALID_TIMESTAMP and indexes(info.value) == [2, 3]
    lat = LogConfig.from_properties(
        {"message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": "1"}
    )
    validate_records(memoryview(bytearray(build_batch(VALID))), lat, NOW)


# -- generated record streams, one field broken -------------------------------------------------------

_payload = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=60, max_size=200))
_header = st.tuples(
    st.text(alphabet="abcxyz-_.0123", max_size=8).map(str.encode),
    st.one_of(st.none(), st.binary(max_size=70)),
)
_record = st.builds(
    Rec,
    key=_payload,
    value=_payload,
    headers=st.lists(_header, max_size=3),
    timestamp_delta=st.integers(-(2**40), 2**40),
)


@dataclass
class Mutation:
    """What a broken field should do: refused at `index` with `code`, or accepted (code None)."""

    code: ErrorCode | None
    index: int = 0
    notes: list[str] = field(default_factory=list)


def _mutate(recs: list[Rec], index: int, kind: str, amount: int, codec: int) -> Mutation:
    rec = recs[index]
    refused = Mutation(ErrorCode.INVALID_RECORD, index)
    if kind == "length":
        rec.length_adjust = amount if amount else 1
        return refused
    if kind == "pad_length":
        rec.length_raw = zigzag(len(encode_record(replace(rec, length_raw=b""))), pad_to=amount)
        if amount <= 5:
            return Mutation(None)
        return Mutation(ErrorCode.UNKNOWN_SERVER_ERROR, -1) if codec == 0 else refused
    if kind == "pad_timestamp":
        rec.timestamp_raw = zigzag(rec.timestamp_delta, pad_to=amount + 5)
        return Mutation(None) if amount + 5 <= 10 else refused
    if kind == "pad_offset":
        rec.offset_raw = zigzag(rec.offset_delta, pad_to=amount)
        return Mutation(None) if amount <= 5 else refused
    if kind == "offset":
        rec.offset_delta += amount if amount else 1
        return refused
    if kind == "key_length":
        rec.key_raw = zigzag(-2 - abs(amount))
        return refused
    if kind == "header_count":
        encoded = b"".join(zigzag(len(k)) + k + _bytes_field(v) for k, v in rec.headers)
        rec.headers_raw = zigzag(len(rec.headers) + (amount if amount else 1)) + encoded
        return refused
    if kind == "attributes":
        rec.attributes = amount & 0xFF
        return Mutation(None)
    raise AssertionError(kind)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(_record, min_size=1, max_size=12),
    where=st.integers(min_value=0),
    kind=st.sampled_from(
        [
            "length",
            "pad_length",
            "pad_timestamp",
            "pad_offset",
            "offset",
            "key_length",
            "header_count",
            "attributes",
        ]
    ),
    amount=st.integers(-6, 6),
    codec=st.sampled_from([0, 0, 1, 2, 3, 4]),
)
def test_one_broken_field_is_found(recs: list[Rec], where: int, kind: str, amount: int, codec: int) -> None:
    recs = [replace(rec, offset_delta=i) for i, rec in enumerate(recs)]  # copies: the test mutates them
    inputs = [
        RecordInput(r.key, r.value, [(k.decode(), v) for k, v in r.headers], NOW + r.timestamp_delta)
        for r in recs
    ]
    built = build_batch(inputs, base_timestamp=NOW, compression=codec)
    assert accepted(built) == NOW + max(r.timestamp_delta for r in recs)
    # the hand encoder, which breaks the field below, writes the builder's stream byte for byte
    plain = RecordBatchView(build_batch(inputs, base_timestamp=NOW)).records_data
    assert bytes(plain) == b"".join(encode_record(r) for r in recs)
    index = where % len(recs)
    expected = _mutate(recs, index, kind, amount, codec)
    data = hostile_batch(recs, codec=codec)
    if expected.code is None:
        accepted(data)
        return
    exc = refusal(data)
    assert exc.code == expected.code
    if expected.index >= 0:
        assert exc.record_errors[0][0] == expected.index, (exc.message, kind, amount)
