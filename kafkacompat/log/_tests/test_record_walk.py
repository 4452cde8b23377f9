"""record_walk: the compiled walk gives the pure-Python walk's verdict on every record stream.

The reference is `record_validator._walk` (`record_walk.python_walk`). Hypothesis builds sound record
streams with `wire.records.build_batch` (every codec; the walk reads the inflated records) and broken
ones with the hand encoder of test_record_validator (one field replaced, lengths off, varints padded
past their limits, bytes flipped, cut, inserted, appended, counts off), and both walks must answer
alike: the same largest timestamp, record errors and record count, or the same `InvalidRecords` (code,
message, per_record, record_errors). Explicit cases then trigger each fault kind of the extension once.
Whole batches go through `check_batch_records` with `record_walk.walk` set to each walk in turn, which
covers the inflating, the gzip probe and LogAppendTime batches around the walk.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.log import record_walk
from kafkacompat.log._tests.test_record_validator import NOW, Rec, encode_record, wrap_batch, zigzag
from kafkacompat.log.record_validator import InvalidRecords, TimestampCheck, check_batch_records
from kafkacompat.log.record_walk import Fault
from kafkacompat.wire import compression
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.records import RecordBatchView, RecordInput, TimestampType, build_batch

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)

compiled = pytest.mark.skipif(
    not record_walk.COMPILED, reason="the compiled record walk did not build: " + record_walk.walk_in_use()
)
pytestmark = compiled


# -- comparing the two walks ----------------------------------------------------------------------------


def outcome(walk: Callable[..., Any], data: Any, **kwargs: Any) -> tuple[Any, ...]:
    try:
        max_ts, errors, walked = walk(data, **kwargs)
    except InvalidRecords as exc:
        return ("refused", exc.code, exc.message, exc.per_record, exc.record_errors)
    return ("accepted", max_ts, errors, walked)


def both(data: bytes, **kwargs: Any) -> tuple[Any, ...]:
    """The verdict of both walks on `data`, asserted equal (for the compiled one: on every buffer type)."""
    reference = outcome(record_walk.python_walk, data, **kwargs)
    for buffer in (data, bytearray(data), memoryview(bytearray(data))):
        assert outcome(record_walk.compiled_walk, buffer, **kwargs) == reference
    return reference


def walk_args(
    count: int,
    *,
    base_timestamp: int = NOW,
    last_offset_delta: int | None = None,
    from_client: bool = True,
    compacted: bool = False,
    check: TimestampCheck | None = None,
    plain: bool = True,
    partial: bool = False,
) -> dict[str, Any]:
    """`_walk`'s keyword arguments as check_batch_records passes them."""
    low, high = check.bounds() if check is not None else (-math.inf, math.inf)
    return dict(
        count=count,
        base_timestamp=base_timestamp,
        last_offset_delta=count - 1 if last_offset_delta is None else last_offset_delta,
        from_client=from_client,
        compacted=compacted,
        low=low,
        high=high,
        check=check,
        plain=plain,
        partial=partial,
    )


def kind(data: bytes, **kwargs: Any) -> Fault | None:
    """The fault kind the extension reports (None: it read every record)."""
    window, lo, hi = record_walk._window(kwargs["low"], kwargs["high"])
    assert record_walk._native is not None
    fault, *_ = record_walk._native.walk(
        data,
        kwargs["count"],
        kwargs["base_timestamp"],
        kwargs["last_offset_delta"],
        kwargs["from_client"],
        kwargs["compacted"],
        window,
        lo,
        hi,
        kwargs["partial"],
    )
    return Fault(fault) if fault else None


def batch_outcome(walk: Callable[..., Any], batch: bytes, **kwargs: Any) -> tuple[Any, ...]:
    saved = record_walk.walk
    record_walk.walk = walk
    try:
        return ("accepted", check_batch_records(RecordBatchView(bytearray(batch)), **kwargs))
    except InvalidRecords as exc:
        return ("refused", exc.code, exc.message, exc.per_record, exc.record_errors)
    finally:
        record_walk.walk = saved


def both_batches(batch: bytes, **kwargs: Any) -> tuple[Any, ...]:
    reference = batch_outcome(record_walk.python_walk, batch, **kwargs)
    assert batch_outcome(record_walk.compiled_walk, batch, **kwargs) == reference
    return reference


# -- strategies ------------------------------------------------------------------------------------------

# sizes on both sides of each varint width the walks treat apart (1, 2, 3 bytes)
_sizes = st.sampled_from([0, 1, 2, 5, 63, 64, 65, 100, 1024, 8191, 8192, 9000])
_payload = st.one_of(st.none(), _sizes.map(lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256)))
_header = st.tuples(st.sampled_from([b"", b"h", b"trace" * 20]), _payload)
_delta = st.one_of(
    st.integers(-64, 63), st.integers(-(2**40), 2**40), st.sampled_from([LONG_MIN, LONG_MAX, -1, 8191, -8192])
)
_record = st.builds(
    Rec,
    key=_payload,
    value=_payload,
    headers=st.lists(_header, max_size=3),
    timestamp_delta=_delta,
)
_timestamp_checks = st.one_of(
    st.none(),
    st.builds(
        TimestampCheck,
        now_ms=st.one_of(st.just(NOW), st.integers(LONG_MIN, LONG_MAX)),
        before_max_ms=st.one_of(st.just(LONG_MAX), st.integers(0, 2**41), st.just(0)),
        after_max_ms=st.one_of(st.just(LONG_MAX), st.integers(0, 2**41), st.just(0)),
    ),
)
_base_timestamps = st.one_of(
    st.just(NOW), st.just(-1), st.integers(LONG_MIN, LONG_MAX), st.sampled_from([LONG_MIN, LONG_MAX])
)
_codecs = st.sampled_from([0, 1, 2, 3, 4])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(
        st.tuples(_payload, _payload, st.lists(_header, max_size=3), st.integers(-(2**30), 2**30)),
        min_size=1,
        max_size=20,
    ),
    codec=_codecs,
    compacted=st.booleans(),
    check=_timestamp_checks,
)
def test_sound_batches_of_every_codec(
    recs: list[tuple[Any, ...]], codec: int, compacted: bool, check: TimestampCheck | None
) -> None:
    inputs = [
        RecordInput(key, value, [(k.decode(), v) for k, v in headers], NOW + delta)
        for key, value, headers, delta in recs
    ]
    batch = build_batch(inputs, base_timestamp=NOW, compression=codec)
    view = RecordBatchView(bytearray(batch))
    data = view.records_data if codec == 0 else compression.decompress(codec, view.records_data, 1 << 26)
    for from_client in (True, False):
        args = walk_args(
            len(recs), compacted=compacted, check=check, from_client=from_client, plain=codec == 0
        )
        verdict = both(bytes(data), **args)
        if not compacted and check is None:
            assert verdict == ("accepted", max(NOW + d for *_, d in recs), [], len(recs))
    both_batches(
        batch,
        compacted=compacted,
        timestamp_check=check,
        max_inflated_bytes=1 << 26,
        from_client=True,
    )


def _broken(rec: Rec, field: str, pad: int, number: int) -> Rec:
    """`rec` with one field's bytes replaced: padded to `pad` bytes, or set to `number` when pad is 0."""

    def encoded(value: int) -> bytes:
        return zigzag(value, pad_to=pad) if pad else zigzag(number)

    if field == "length":
        body = encode_record(replace(rec, length_raw=b""))
        return replace(rec, length_raw=zigzag(len(body), pad_to=pad) if pad else zigzag(number))
    if field == "length_adjust":
        return replace(rec, length_adjust=number)
    if field == "timestamp":
        return replace(rec, timestamp_raw=encoded(rec.timestamp_delta))
    if field == "offset":
        return replace(rec, offset_raw=encoded(rec.offset_delta))
    if field == "key":
        data = rec.key or b""
        return replace(rec, key_raw=encoded(-1 if rec.key is None else len(data)) + data)
    if field == "value":
        data = rec.value or b""
        return replace(rec, value_raw=encoded(-1 if rec.value is None else len(data)) + data)
    if field == "headers":
        body = b"".join(
            zigzag(len(k)) + k + (zigzag(-1) if v is None else zigzag(len(v)) + v) for k, v in rec.headers
        )
        return replace(rec, headers_raw=encoded(len(rec.headers)) + body)
    if field == "header_value" and rec.headers:
        body = b"".join(
            zigzag(len(k)) + k + encoded(-1 if v is None else len(v)) + (v or b"") for k, v in rec.headers
        )
        return replace(rec, headers_raw=zigzag(len(rec.headers)) + body)
    if field in ("timestamp_bytes", "offset_bytes"):
        # a varint of `pad` bytes (1-12) whose groups are all ones: past the limits, or overflowing
        raw = b"\xff" * (max(pad, 1) - 1) + bytes([number & 0x7F])
        return replace(rec, timestamp_raw=raw) if field == "timestamp_bytes" else replace(rec, offset_raw=raw)
    if field == "extra":
        return replace(rec, extra=bytes([number & 0xFF]) * (abs(number) % 7 + 1))
    return replace(rec, attributes=number & 0xFF)


def _byte_mutation(stream: bytes, how: str, at: int, junk: bytes) -> bytes:
    if not stream:
        return junk
    at %= len(stream) + 1
    if how == "flip":
        return stream[:at] + junk[:1] + stream[at + 1 :] if junk else stream
    if how == "cut":
        return stream[:at]
    if how == "insert":
        return stream[:at] + junk + stream[at:]
    if how == "delete":
        return stream[:at] + stream[at + len(junk) + 1 :]
    if how == "append":
        return stream + junk
    return stream


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(_record, min_size=1, max_size=8),
    where=st.integers(min_value=0),
    field=st.sampled_from(
        [
            "none",
            "length",
            "length_adjust",
            "timestamp",
            "offset",
            "key",
            "value",
            "headers",
            "header_value",
            "timestamp_bytes",
            "offset_bytes",
            "extra",
            "attributes",
        ]
    ),
    pad=st.integers(0, 12),
    number=st.one_of(st.integers(-70, 70), st.integers(-(2**31), 2**31 - 1), st.integers(LONG_MIN, LONG_MAX)),
    how=st.sampled_from(["none", "none", "flip", "cut", "insert", "delete", "append"]),
    at=st.integers(min_value=0),
    junk=st.binary(max_size=12),
    count_off=st.sampled_from([0, 0, 0, -1, 1, 2**31 - 1]),
    from_client=st.booleans(),
    compacted=st.booleans(),
    check=_timestamp_checks,
    base_timestamp=_base_timestamps,
    plain=st.booleans(),
    partial=st.sampled_from([False, False, True]),
    last_offset_delta=st.sampled_from([None, None, 0, 3, 2**31 - 1]),
)
def test_broken_streams_get_the_same_verdict(
    recs: list[Rec],
    where: int,
    field: str,
    pad: int,
    number: int,
    how: str,
    at: int,
    junk: bytes,
    count_off: int,
    from_client: bool,
    compacted: bool,
    check: TimestampCheck | None,
    base_timestamp: int,
    plain: bool,
    partial: bool,
    last_offset_delta: int | None,
) -> None:
    recs = [replace(rec, offset_delta=i) for i, rec in enumerate(recs)]
    index = where % len(recs)
    if field != "none":
        recs[index] = _broken(recs[index], field, pad, number)
    stream = _byte_mutation(b"".join(encode_record(r) for r in recs), how, at, junk)
    count = len(recs) + count_off if count_off != 2**31 - 1 else count_off
    args = walk_args(
        count,
        base_timestamp=base_timestamp,
        last_offset_delta=last_offset_delta,
        from_client=from_client,
        compacted=compacted,
        check=check,
        plain=plain,
        partial=partial,
    )
    both(stream, **args)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(_record, min_size=1, max_size=6),
    where=st.integers(min_value=0),
    field=st.sampled_from(["length", "timestamp", "offset", "key", "value", "headers", "length_adjust"]),
    pad=st.integers(0, 12),
    number=st.integers(-70, 70),
    codec=_codecs,
    lat=st.booleans(),
    compacted=st.booleans(),
    check=_timestamp_checks,
)
def test_broken_batches_get_the_same_answer(
    recs: list[Rec],
    where: int,
    field: str,
    pad: int,
    number: int,
    codec: int,
    lat: bool,
    compacted: bool,
    check: TimestampCheck | None,
) -> None:
    recs = [replace(rec, offset_delta=i) for i, rec in enumerate(recs)]
    index = where % len(recs)
    recs[index] = _broken(recs[index], field, pad, number)
    stream = b"".join(encode_record(r) for r in recs)
    batch = wrap_batch(
        stream,
        len(recs),
        codec=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
    )
    both_batches(
        batch, compacted=compacted, timestamp_check=check, max_inflated_bytes=1 << 24, from_client=True
    )


# -- each fault kind -------------------------------------------------------------------------------------


def stream(*recs: Rec) -> bytes:
    return b"".join(encode_record(r) for r in recs)


def good(n: int) -> list[Rec]:
    return [Rec(offset_delta=i) for i in range(n)]


CASES: list[tuple[Fault, bytes, dict[str, Any], ErrorCode]] = [
    (Fault.PREMATURE_EOF, stream(*good(2)), {"count": 3}, ErrorCode.INVALID_RECORD),
    (Fault.RUNS_PAST_END, stream(*good(1)) + b"\x80", {"count": 2}, ErrorCode.INVALID_RECORD),
    (Fault.RUNS_PAST_END, stream(Rec(key_raw=b"\x08")), {}, ErrorCode.INVALID_RECORD),
    (Fault.ENDS_INSIDE_VARINT, b"\x80\x80\x80", {}, ErrorCode.INVALID_RECORD),
    (Fault.ENDS_INSIDE_VARINT, zigzag(3) + b"\x00\x80\x80", {}, ErrorCode.INVALID_RECORD),
    (Fault.LENGTH_OVERLONG, stream(Rec(length_raw=zigzag(9, pad_to=6))), {}, ErrorCode.UNKNOWN_SERVER_ERROR),
    (
        Fault.LENGTH_OVERLONG,
        stream(Rec(length_raw=zigzag(9, pad_to=6))),
        {"plain": False},
        ErrorCode.INVALID_RECORD,
    ),
    (Fault.VARINT_OVERLONG, stream(Rec(offset_raw=zigzag(0, pad_to=6))), {}, ErrorCode.INVALID_RECORD),
    (Fault.VARLONG_OVERLONG, stream(Rec(timestamp_raw=zigzag(0, pad_to=11))), {}, ErrorCode.INVALID_RECORD),
    (Fault.VARINT_OVERFLOW, stream(Rec(offset_raw=b"\xff\xff\xff\xff\x1f")), {}, ErrorCode.INVALID_RECORD),
    (
        Fault.VARLONG_OVERFLOW,
        stream(Rec(timestamp_raw=b"\xff" * 9 + b"\x03")),
        {},
        ErrorCode.INVALID_RECORD,
    ),
    (Fault.RECORD_SIZE, stream(Rec(length_raw=zigzag(-5))), {}, ErrorCode.INVALID_RECORD),
    (Fault.RECORD_SIZE, stream(Rec(length_adjust=3)), {}, ErrorCode.INVALID_RECORD),
    (Fault.KEY_LENGTH, stream(Rec(key_raw=zigzag(-2))), {}, ErrorCode.INVALID_RECORD),
    (Fault.KEY_LENGTH, stream(Rec(key_raw=zigzag(-1, pad_to=2))), {}, ErrorCode.INVALID_RECORD),
    (Fault.VALUE_LENGTH, stream(Rec(value_raw=zigzag(-7))), {}, ErrorCode.INVALID_RECORD),
    (Fault.VALUE_LENGTH, stream(Rec(value_raw=zigzag(-2, pad_to=3))), {}, ErrorCode.INVALID_RECORD),
    (Fault.VALUE_LENGTH_SHORT, stream(Rec(value_raw=zigzag(-100))), {}, ErrorCode.INVALID_RECORD),
    (Fault.PAST_RECORD_END, stream(Rec(length_adjust=-2)), {}, ErrorCode.INVALID_RECORD),
    (Fault.HEADERS_NEGATIVE, stream(Rec(headers_raw=zigzag(-3))), {}, ErrorCode.INVALID_RECORD),
    (Fault.HEADERS_TOO_MANY, stream(Rec(headers_raw=zigzag(40))), {}, ErrorCode.INVALID_RECORD),
    (Fault.HEADER_KEY_LENGTH, stream(Rec(headers_raw=b"\x02" + zigzag(-2))), {}, ErrorCode.INVALID_RECORD),
    (
        Fault.HEADER_VALUE_LENGTH,
        stream(Rec(headers_raw=b"\x02\x02h" + zigzag(-4))),
        {},
        ErrorCode.INVALID_RECORD,
    ),
    (Fault.RECORD_END, stream(Rec(extra=b"\x00\x00")), {}, ErrorCode.INVALID_RECORD),
    (
        Fault.OFFSET_DELTA_INDEX,
        stream(Rec(offset_delta=1), Rec(offset_delta=1)),
        {},
        ErrorCode.INVALID_RECORD,
    ),
    (
        Fault.OFFSET_DELTA_ORDER,
        stream(Rec(offset_delta=2), Rec(offset_delta=2)),
        {"from_client": False, "last_offset_delta": 5},
        ErrorCode.INVALID_RECORD,
    ),
    (
        Fault.OFFSET_DELTA_ORDER,
        stream(Rec(offset_delta=0), Rec(offset_delta=9)),
        {"from_client": False, "last_offset_delta": 5},
        ErrorCode.INVALID_RECORD,
    ),
    (Fault.TRAILING, stream(*good(2)), {"count": 1}, ErrorCode.INVALID_RECORD),
]


@pytest.mark.parametrize(
    ("fault", "data", "options", "code"), CASES, ids=[f"{c[0].name}-{i}" for i, c in enumerate(CASES)]
)
def test_each_fault_kind(fault: Fault, data: bytes, options: dict[str, Any], code: ErrorCode) -> None:
    options = {"count": 2 if fault.name.startswith("OFFSET_DELTA") else 1, **options}
    args = walk_args(**options)
    assert kind(data, **args) == fault
    verdict = both(data, **args)
    assert verdict[:2] == ("refused", code), verdict
    _, _, message, per_record, record_errors = verdict
    assert not per_record  # a structural fault: the code alone reaches the producer
    index = int(message.split(":")[0].removeprefix("record "))
    if code == ErrorCode.INVALID_RECORD:
        assert record_errors == [(index, message.split(": ", 1)[1])]
    else:
        assert record_errors == []


def test_every_fault_kind_has_a_case() -> None:
    assert {fault for fault, *_ in CASES} == set(Fault)


def test_flagged_records_are_judged_by_the_python_rules() -> None:
    recs = [Rec(key=None, offset_delta=0), Rec(offset_delta=1, timestamp_delta=10**9), Rec(offset_delta=2)]
    check = TimestampCheck(NOW, 1000, 1000)
    verdict = both(stream(*recs), **walk_args(3, compacted=True, check=check))
    assert verdict[0] == "accepted"
    assert [(index, is_ts) for index, _, is_ts in verdict[2]] == [(0, False), (1, True)]
    # the timestamp error replaces the key error of the same record
    recs[1] = replace(recs[1], key=None)
    verdict = both(stream(*recs), **walk_args(3, compacted=True, check=check))
    assert [(index, is_ts) for index, _, is_ts in verdict[2]] == [(0, False), (1, True)]
    # -1 is no timestamp: flagged by the extension, passed by the rules
    verdict = both(stream(Rec()), **walk_args(1, base_timestamp=-1, check=check))
    assert verdict == ("accepted", -1, [], 1)


def test_timestamp_overflow_only_under_a_window() -> None:
    data = stream(Rec(timestamp_delta=10))
    assert both(data, **walk_args(1, base_timestamp=LONG_MAX))[1] == LONG_MAX + 10
    verdict = both(data, **walk_args(1, base_timestamp=LONG_MAX, check=TimestampCheck(NOW)))
    assert verdict[2][0][1].startswith("timestamp overflows int64")


def test_partial_walks_stop_quietly_at_a_cut_record() -> None:
    data = stream(*good(3))
    verdict = both(data[:-2], **walk_args(3, partial=True))
    assert verdict == ("accepted", NOW, [], 2)
    assert both(b"\x80", **walk_args(1, partial=True)) == ("accepted", -1, [], 0)
    assert both(zigzag(-3), **walk_args(1, partial=True))[0] == "refused"


def test_wrong_arguments_are_refused() -> None:
    assert record_walk._native is not None
    with pytest.raises(TypeError):
        record_walk._native.walk(b"")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        record_walk._native.walk("text", 1, 0, 0, True, False, False, 0, 0, False)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        record_walk._native.walk(b"", 2**64, 0, 0, True, False, False, 0, 0, False)
