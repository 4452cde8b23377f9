"""Primitive encodings: varints, zigzag, (compact) (nullable) strings/bytes/records, arrays, tags."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkacompat.wire import primitives as p
from kafkacompat.wire.errors import DecodeError


def _mv(b: bytes | bytearray) -> memoryview:
    return memoryview(bytes(b))


@pytest.mark.parametrize(
    ("value", "wire"),
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
     (2**32 - 1, b"\xff\xff\xff\xff\x0f")],
)
def test_uvarint_known_encodings(value: int, wire: bytes) -> None:
    out = bytearray()
    p.write_uvarint(out, value)
    assert bytes(out) == wire
    assert p.read_uvarint(_mv(wire), 0, "f") == (value, len(wire))
    assert p.uvarint_bytes(value) == wire


@pytest.mark.parametrize(
    ("value", "wire"), [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01")]
)
def test_zigzag_varint_known_encodings(value: int, wire: bytes) -> None:
    out = bytearray()
    p.write_varint(out, value)
    assert bytes(out) == wire
    assert p.read_varint(_mv(wire), 0, "f") == (value, len(wire))


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    out = bytearray()
    p.write_varint(out, value)
    assert len(out) <= 5
    assert p.read_varint(_mv(out), 0, "f") == (value, len(out))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    out = bytearray()
    p.write_varlong(out, value)
    assert len(out) <= 10
    assert p.read_varlong(_mv(out), 0, "f") == (value, len(out))


def test_bad_varints() -> None:
    with pytest.raises(DecodeError, match="longer than 5"):
        p.read_uvarint(_mv(b"\x80\x80\x80\x80\x80\x01"), 0, "f")
    with pytest.raises(DecodeError, match="32 bits"):
        p.read_uvarint(_mv(b"\xff\xff\xff\xff\x1f"), 0, "f")
    with pytest.raises(DecodeError, match="longer than 10"):
        p.read_uvarlong(_mv(b"\x80" * 10 + b"\x01"), 0, "f")
    with pytest.raises(DecodeError) as exc:
        p.read_uvarint(_mv(b"\x80\x80"), 0, "some.field")
    assert exc.value.field == "some.field"
    with pytest.raises(ValueError):
        p.write_varint(bytearray(), 2**31)
    with pytest.raises(ValueError):
        p.write_uvarint(bytearray(), -1)


@given(st.one_of(st.none(), st.text(max_size=40)))
def test_strings_round_trip(value: str | None) -> None:
    for write, read in (
        (p.write_nullable_string, p.read_nullable_string),
        (p.write_compact_nullable_string, p.read_compact_nullable_string),
    ):
        out = bytearray()
        write(out, value)
        assert read(_mv(out), 0, "f") == (value, len(out))
    if value is not None:
        for write, read in ((p.write_string, p.read_string), (p.write_compact_string, p.read_compact_string)):
            out = bytearray()
            write(out, value)
            assert read(_mv(out), 0, "f") == (value, len(out))


def test_string_wire_forms() -> None:
    out = bytearray()
    p.write_string(out, "ab")
    assert out == b"\x00\x02ab"
    out = bytearray()
    p.write_compact_string(out, "ab")
    assert out == b"\x03ab"
    out = bytearray()
    p.write_nullable_string(out, None)
    assert out == b"\xff\xff"
    out = bytearray()
    p.write_compact_nullable_string(out, None)
    assert out == b"\x00"
    with pytest.raises(ValueError):
        p.write_string(bytearray(), "x" * 40000)


def test_invalid_utf8_survives_a_round_trip() -> None:
    raw = b"\x00\x03a\xffb"
    value, _ = p.read_string(_mv(raw), 0, "f")
    out = bytearray()
    p.write_string(out, value)
    assert bytes(out) == raw


@pytest.mark.parametrize(
    ("reader", "wire"),
    [
        (p.read_string, b"\xff\xff"),  # null for a non-nullable string
        (p.read_string, b"\xff\xfe"),
        (p.read_string, b"\x00\x05abc"),
        (p.read_string, b"\x00"),
        (p.read_compact_string, b"\x00"),
        (p.read_compact_string, b"\x05ab"),
        (p.read_nullable_string, b"\xff\xfe"),
        (p.read_bytes, b"\xff\xff\xff\xff"),
        (p.read_nullable_bytes, b"\xff\xff\xff\xfe"),
        (p.read_bytes, b"\x7f\xff\xff\xff\x00"),
        (p.read_compact_bytes, b"\x00"),
        (p.read_records, b"\x00\x00\x00\x09abc"),
        (p.read_records, b"\x80\x00\x00\x00"),
        (p.read_compact_records, b"\x09abc"),
    ],
)
def test_bad_lengths_are_decode_errors(reader: Any, wire: bytes) -> None:
    with pytest.raises(DecodeError):
        reader(_mv(wire), 0, "f")


def test_records_are_zero_copy_slices() -> None:
    buf = memoryview(bytearray(b"\x00\x00\x00\x03xyz!"))
    value, pos = p.read_records(buf, 0, "f")
    assert isinstance(value, memoryview) and value.obj is buf.obj
    assert bytes(value) == b"xyz" and pos == 7
    assert p.read_records(_mv(b"\xff\xff\xff\xff"), 0, "f") == (None, 4)
    assert p.read_compact_records(_mv(b"\x00"), 0, "f") == (None, 1)


class _Slice:
    def __init__(self, size: int) -> None:
        self.size = size


def test_records_chunks() -> None:
    out = bytearray(b"head")
    chunks: list[Any] = []
    p.write_records(out, chunks, b"abc")
    assert out == b"head\x00\x00\x00\x03abc" and chunks == []
    s = _Slice(10)
    p.write_compact_records(out, chunks, s)
    assert chunks == [b"head\x00\x00\x00\x03abc\x0b", s]
    assert out == b""
    joined = p.JoinChunks()
    big = b"r" * 5000
    p.write_records(out, joined, big)
    assert joined[-1] is big  # passed through, copied once by the owner's final join
    with pytest.raises(TypeError):
        p.write_records(bytearray(), [], object())


def test_array_lengths() -> None:
    assert p.read_array_len(_mv(b"\xff\xff\xff\xff"), 0, "f", 1) == (-1, 4)
    assert p.read_compact_array_len(_mv(b"\x00"), 0, "f", 1) == (-1, 1)
    assert p.read_compact_array_len(_mv(b"\x03ab"), 0, "f", 1) == (2, 1)
    with pytest.raises(DecodeError):
        p.read_array_len(_mv(b"\x7f\xff\xff\xff" + b"\x00" * 10), 0, "f", 1)
    with pytest.raises(DecodeError):
        p.read_array_len(_mv(b"\x00\x00\x00\x03" + b"\x00" * 10), 0, "f", 4)  # 3 x 4 bytes > 10
    with pytest.raises(DecodeError):
        p.read_array_len(_mv(b"\xff\xff\xff\xfe"), 0, "f", 1)
    out = bytearray()
    p.write_compact_array_len(out, 200)
    assert p.read_compact_array_len(_mv(bytes(out) + b"\x00" * 200), 0, "f", 1) == (200, 2)


def test_tags() -> None:
    out = bytearray()
    p.write_tags(out, [(5, b"xy"), (1, b"")])
    assert out == b"\x02\x01\x00\x05\x02xy"
    tags, pos = p.read_tags(_mv(out), 0, "f")
    assert [(t, bytes(out[s:e])) for t, s, e in tags] == [(1, b""), (5, b"xy")]
    assert pos == len(out)
    with pytest.raises(DecodeError):
        p.read_tags(_mv(b"\x02\x05\x00\x01\x00"), 0, "f")  # out of order
    with pytest.raises(DecodeError):
        p.read_tags(_mv(b"\x01\x05\x09ab"), 0, "f")  # value longer than the input
    with pytest.raises(DecodeError):
        p.read_tags(_mv(b"\x7f"), 0, "f")  # more tags than bytes


def test_struct_base_equality_and_repr() -> None:
    from kafkacompat.wire._generated.api_versions_response import ApiVersion

    a = ApiVersion(api_key=1, min_version=0, max_version=3)
    b = ApiVersion(api_key=1, min_version=0, max_version=3)
    assert a == b and a != ApiVersion(api_key=2)
    assert "max_version=3" in repr(a)
    assert a.to_dict() == {"api_key": 1, "min_version": 0, "max_version": 3, "unknown_tags": None}
