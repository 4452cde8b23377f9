"""Wire primitives shared by the generated codecs (kafkacompat/wire/_generated/).

Theory of operation
-------------------
The generated code does the common cases inline: runs of fixed-width fields with one precompiled
`struct.Struct` per run, one-byte varint lengths, strings, bytes, records and arrays of fixed-width
primitives (`ARRAY_STRUCTS` holds precompiled structs for short arrays). It calls the helpers here
for the rest (multi-byte varints, tagged-field sections) and to build its errors (`truncated`,
`overrun`, `bad_length`), so every bounds violation surfaces as a `DecodeError` naming the field.
The `read_*`/`write_*` helpers are the same rules as plain functions, for hand-written code (headers,
record formats) and tests.

Decoding helpers take `(buf: memoryview, pos: int, field: str)` and return `(value, new_pos)`. They
check every length against the bytes that remain, so a hostile length can never make us allocate
more than the frame holds; an element count is checked against the smallest size one element can
have before any list is built.

Encoders append into a `bytearray`. A message is encoded into one bytearray plus a list of
"chunks": when a `records` field holds an object that is not bytes-like but carries `.size` (a log
`FileSlice`), the encoder moves the bytes written so far into the chunk list, appends the object
itself as its own chunk and carries on; the connection sends such chunks with sendfile. Bytes-like
records are copied into the bytearray, except into a `JoinChunks` list (encode_request), whose
owner joins everything once at the end, so large record sets are copied once, not twice.

Strings are decoded with the `surrogateescape` error handler (and encoded with it), so any byte
sequence a client sends survives a decode/encode round trip unchanged, where Kafka's own decoding
would also accept it.

`Struct` is the base of every generated class: equality, repr and `to_dict` over `__slots__`.

The generated decoders loop over an array of structs or strings with `elements(count)`: `range(count)`,
unless the array is large and a hook is installed (`set_elements_hook`). The broker installs one
that lets a decode running in shares give its event loop back between elements (broker/fairness.py);
this module knows nothing of that, and without a hook the loop is a plain range.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kafkacompat.wire.errors import DecodeError

__all__ = [
    "ARRAY_STRUCTS",
    "ZERO_UUID",
    "JoinChunks",
    "Struct",
    "bad_length",
    "elements",
    "flush_chunk",
    "overrun",
    "read_array_len",
    "read_bytes",
    "read_compact_array_len",
    "read_compact_bytes",
    "read_compact_nullable_bytes",
    "read_compact_nullable_string",
    "read_compact_records",
    "read_compact_string",
    "read_nullable_bytes",
    "read_nullable_string",
    "read_records",
    "read_string",
    "read_tags",
    "read_uvarint",
    "read_uvarlong",
    "read_varint",
    "read_varlong",
    "set_elements_hook",
    "string_too_long",
    "truncated",
    "uvarint_bytes",
    "write_array_len",
    "write_bytes",
    "write_compact_array_len",
    "write_compact_bytes",
    "write_compact_nullable_bytes",
    "write_compact_nullable_string",
    "write_compact_records",
    "write_compact_string",
    "write_nullable_bytes",
    "write_nullable_string",
    "write_records",
    "write_string",
    "write_tags",
    "write_uvarint",
    "write_varint",
    "write_varlong",
]

ZERO_UUID = uuid.UUID(int=0)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I16_PACK = _I16.pack
_I32_PACK = _I32.pack
_I16_UNPACK = _I16.unpack_from
_I32_UNPACK = _I32.unpack_from
_MAX_INT16 = 0x7FFF
_MAX_UINT32 = 0xFFFFFFFF
_UTF8 = "utf-8"
_SURR = "surrogateescape"

#: arrays of at least this many elements are looped over through the hook, when one is installed
LARGE_ARRAY = 64
_elements_hook: Callable[[int], Iterable[int]] | None = None


def elements(count: int) -> Iterable[int]:
    """The loop of a generated decoder over an array's `count` elements (see the module docstring)."""
    hook = _elements_hook
    if hook is None or count < LARGE_ARRAY:
        return range(count)
    return hook(count)


def set_elements_hook(hook: Callable[[int], Iterable[int]] | None) -> None:
    """Install (or with None remove) what `elements()` returns for large arrays."""
    global _elements_hook
    _elements_hook = hook


class Struct:
    """Base of every generated message/struct class: equality and repr over `__slots__`.

    Generated subclasses own their attributes; nothing else here holds state.
    """

    __slots__: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for name in self.__slots__:
            if getattr(self, name) != getattr(other, name):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = []
        for name in self.__slots__:
            value = getattr(self, name)
            if name == "unknown_tags" and value is None:
                continue
            if isinstance(value, memoryview):
                value = f"<memoryview {value.nbytes} bytes>"
            else:
                value = repr(value)
            parts.append(f"{name}={value}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        """Plain-data view (nested structs become dicts); handy for logging and tests."""
        out: dict[str, Any] = {}
        for name in self.__slots__:
            out[name] = _plain(getattr(self, name))
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def _short(field: str, pos: int, need: int, have: int) -> DecodeError:
    return DecodeError(f"truncated input: need {need} bytes at offset {pos}, {have} left", field=field)


def truncated(field: str, buf: memoryview, pos: int, need: int) -> DecodeError:
    """The error generated code raises when a fixed-width run does not fit."""
    return _short(field, pos, need, len(buf) - pos)


def overrun(field: str, buf: memoryview, pos: int, count: int, unit: int) -> DecodeError:
    """A length or element count (of at least `unit` bytes each) larger than what remains."""
    what = "length" if unit == 1 else "element count"
    return DecodeError(f"{what} {count} at offset {pos} exceeds the {len(buf) - pos} bytes left", field=field)


def bad_length(field: str, n: int) -> DecodeError:
    """A negative length where null is not allowed (or below -1)."""
    if n == -1:
        return DecodeError("null where the field is not nullable", field=field)
    return DecodeError(f"negative length {n}", field=field)


def string_too_long(field: str, n: int) -> ValueError:
    return ValueError(f"{field}: string of {n} bytes is longer than {_MAX_INT16}")


# Precompiled structs for short arrays of fixed-width primitives: ARRAY_STRUCTS[code][n] packs n items.
ARRAY_STRUCTS = {
    code: tuple(struct.Struct(f">{n}{code}") for n in range(17))
    for code in ("b", "h", "H", "i", "I", "q", "d")
}


# ---------------------------------------------------------------------------------------------
# varints


def read_uvarint(buf: memoryview, pos: int, field: str) -> tuple[int, int]:
    """Unsigned LEB128 varint of at most 5 bytes (32 bits)."""
    end = len(buf)
    if pos >= end:
        raise _short(field, pos, 1, 0)
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    p = pos + 1
    while True:
        if p >= end:
            raise _short(field, p, 1, 0)
        b = buf[p]
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value > _MAX_UINT32:
                raise DecodeError("varint exceeds 32 bits", field=field)
            return value, p
        shift += 7
        if shift >= 35:
            raise DecodeError("varint longer than 5 bytes", field=field)


def read_uvarlong(buf: memoryview, pos: int, field: str) -> tuple[int, int]:
    """Unsigned LEB128 varint of at most 10 bytes (64 bits)."""
    end = len(buf)
    value = 0
    shift = 0
    p = pos
    while True:
        if p >= end:
            raise _short(field, p, 1, 0)
        b = buf[p]
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value >> 64:
                raise DecodeError("varlong exceeds 64 bits", field=field)
            return value, p
        shift += 7
        if shift >= 70:
            raise DecodeError("varlong longer than 10 bytes", field=field)


def read_varint(buf: memoryview, pos: int, field: str) -> tuple[int, int]:
    """Zigzag-encoded signed 32-bit varint."""
    u, pos = read_uvarint(buf, pos, field)
    return (u >> 1) ^ -(u & 1), pos


def read_varlong(buf: memoryview, pos: int, field: str) -> tuple[int, int]:
    """Zigzag-encoded signed 64-bit varint."""
    u, pos = read_uvarlong(buf, pos, field)
    return (u >> 1) ^ -(u & 1), pos


_UVARINT_CACHE = [bytes([i]) for i in range(128)]


def uvarint_bytes(value: int) -> bytes:
    if value < 0x80:
        if value < 0:
            raise ValueError(f"unsigned varint cannot hold {value}")
        return _UVARINT_CACHE[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_uvarint(out: bytearray, value: int) -> None:
    if 0 <= value < 0x80:
        out.append(value)
        return
    if value < 0 or value > _MAX_UINT32:
        raise ValueError(f"unsigned varint cannot hold {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise ValueError(f"varint cannot hold {value}")
    write_uvarint(out, ((value << 1) ^ (value >> 31)) & _MAX_UINT32)


def write_varlong(out: bytearray, value: int) -> None:
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varlong cannot hold {value}")
    u = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


# ---------------------------------------------------------------------------------------------
# strings


def _take(buf: memoryview, pos: int, n: int, field: str) -> int:
    end = pos + n
    if end > len(buf):
        raise DecodeError(f"length {n} at offset {pos} exceeds the {len(buf) - pos} bytes left", field=field)
    return end


def read_string(buf: memoryview, pos: int, field: str) -> tuple[str, int]:
    if pos + 2 > len(buf):
        raise _short(field, pos, 2, len(buf) - pos)
    (n,) = _I16_UNPACK(buf, pos)
    pos += 2
    if n < 0:
        raise DecodeError(f"negative string length {n}", field=field)
    end = _take(buf, pos, n, field)
    return str(buf[pos:end], _UTF8, _SURR), end


def read_nullable_string(buf: memoryview, pos: int, field: str) -> tuple[str | None, int]:
    if pos + 2 > len(buf):
        raise _short(field, pos, 2, len(buf) - pos)
    (n,) = _I16_UNPACK(buf, pos)
    pos += 2
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"negative string length {n}", field=field)
    end = _take(buf, pos, n, field)
    return str(buf[pos:end], _UTF8, _SURR), end


def read_compact_string(buf: memoryview, pos: int, field: str) -> tuple[str, int]:
    n, pos = read_uvarint(buf, pos, field)
    if n == 0:
        raise DecodeError("null where a string is required", field=field)
    end = _take(buf, pos, n - 1, field)
    return str(buf[pos:end], _UTF8, _SURR), end


def read_compact_nullable_string(buf: memoryview, pos: int, field: str) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos, field)
    if n == 0:
        return None, pos
    end = _take(buf, pos, n - 1, field)
    return str(buf[pos:end], _UTF8, _SURR), end


def _encode_str(value: str) -> bytes:
    return value.encode(_UTF8, _SURR)


def write_string(out: bytearray, value: str) -> None:
    b = value.encode(_UTF8, _SURR)
    if len(b) > _MAX_INT16:
        raise ValueError(f"string of {len(b)} bytes is longer than {_MAX_INT16}")
    out += _I16_PACK(len(b))
    out += b


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\xff\xff"
    else:
        write_string(out, value)


def write_compact_string(out: bytearray, value: str) -> None:
    b = value.encode(_UTF8, _SURR)
    n = len(b) + 1
    if n < 0x80:
        out.append(n)
    else:
        if n > _MAX_INT16 + 1:
            raise ValueError(f"string of {len(b)} bytes is longer than {_MAX_INT16}")
        write_uvarint(out, n)
    out += b


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_string(out, value)


# ---------------------------------------------------------------------------------------------
# bytes and records


def read_bytes(buf: memoryview, pos: int, field: str) -> tuple[bytes, int]:
    if pos + 4 > len(buf):
        raise _short(field, pos, 4, len(buf) - pos)
    (n,) = _I32_UNPACK(buf, pos)
    pos += 4
    if n < 0:
        raise DecodeError(f"negative bytes length {n}", field=field)
    end = _take(buf, pos, n, field)
    return bytes(buf[pos:end]), end


def read_nullable_bytes(buf: memoryview, pos: int, field: str) -> tuple[bytes | None, int]:
    if pos + 4 > len(buf):
        raise _short(field, pos, 4, len(buf) - pos)
    (n,) = _I32_UNPACK(buf, pos)
    pos += 4
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"negative bytes length {n}", field=field)
    end = _take(buf, pos, n, field)
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: memoryview, pos: int, field: str) -> tuple[bytes, int]:
    n, pos = read_uvarint(buf, pos, field)
    if n == 0:
        raise DecodeError("null where bytes are required", field=field)
    end = _take(buf, pos, n - 1, field)
    return bytes(buf[pos:end]), end


def read_compact_nullable_bytes(buf: memoryview, pos: int, field: str) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos, field)
    if n == 0:
        return None, pos
    end = _take(buf, pos, n - 1, field)
    return bytes(buf[pos:end]), end


def read_records(buf: memoryview, pos: int, field: str) -> tuple[memoryview | None, int]:
    """Records: a zero-copy slice of the input; -1 means null."""
    if pos + 4 > len(buf):
        raise _short(field, pos, 4, len(buf) - pos)
    (n,) = _I32_UNPACK(buf, pos)
    pos += 4
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"negative records length {n}", field=field)
    end = _take(buf, pos, n, field)
    return buf[pos:end], end


def read_compact_records(buf: memoryview, pos: int, field: str) -> tuple[memoryview | None, int]:
    n, pos = read_uvarint(buf, pos, field)
    if n == 0:
        return None, pos
    end = _take(buf, pos, n - 1, field)
    return buf[pos:end], end


def write_bytes(out: bytearray, value: bytes) -> None:
    out += _I32_PACK(len(value))
    out += value


def write_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += b"\xff\xff\xff\xff"
    else:
        out += _I32_PACK(len(value))
        out += value


def write_compact_bytes(out: bytearray, value: bytes) -> None:
    write_uvarint(out, len(value) + 1)
    out += value


def write_compact_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_uvarint(out, len(value) + 1)
        out += value


_BYTES_LIKE = (bytes, bytearray, memoryview)


def move_out(out: bytearray, chunks: list[Any]) -> None:
    """Move what `out` holds (if anything) into `chunks` as one chunk."""
    if out:
        chunks.append(bytes(out))
        out.clear()


def flush_chunk(out: bytearray, chunks: list[Any], passthrough: Any) -> None:
    """Move what `out` holds into `chunks`, then append `passthrough` as a chunk of its own."""
    move_out(out, chunks)
    chunks.append(passthrough)


def _records_size(value: Any) -> int:
    if isinstance(value, memoryview):
        return value.nbytes
    if isinstance(value, _BYTES_LIKE):
        return len(value)
    size = getattr(value, "size", None)
    if not isinstance(size, int):
        raise TypeError(f"records value {type(value).__name__} is neither bytes-like nor has .size")
    return size


class JoinChunks(list[Any]):
    """A chunk list whose owner joins it into one bytes object at the end (encode_request).

    Large bytes-like records are then kept as chunks of their own instead of being copied twice.
    """

    __slots__ = ()


_JOIN_MIN = 4096


def write_records(out: bytearray, chunks: list[Any], value: Any) -> None:
    if value is None:
        out += b"\xff\xff\xff\xff"
        return
    size = _records_size(value)
    out += _I32_PACK(size)
    if isinstance(value, _BYTES_LIKE):
        if size >= _JOIN_MIN and chunks.__class__ is JoinChunks:
            flush_chunk(out, chunks, value)
        else:
            out += value
    else:
        flush_chunk(out, chunks, value)


def write_compact_records(out: bytearray, chunks: list[Any], value: Any) -> None:
    if value is None:
        out.append(0)
        return
    size = _records_size(value)
    write_uvarint(out, size + 1)
    if isinstance(value, _BYTES_LIKE):
        if size >= _JOIN_MIN and chunks.__class__ is JoinChunks:
            flush_chunk(out, chunks, value)
        else:
            out += value
    else:
        flush_chunk(out, chunks, value)


# ---------------------------------------------------------------------------------------------
# arrays


def read_array_len(buf: memoryview, pos: int, field: str, min_size: int) -> tuple[int, int]:
    """int32 element count; -1 (null) is returned as -1 and the caller decides if it is allowed.

    `min_size` is the fewest bytes one element can take (at least 1): a count the remaining
    bytes cannot hold fails here, before anything is allocated.
    """
    if pos + 4 > len(buf):
        raise _short(field, pos, 4, len(buf) - pos)
    (n,) = _I32_UNPACK(buf, pos)
    pos += 4
    if n < 0:
        if n == -1:
            return -1, pos
        raise DecodeError(f"negative array length {n}", field=field)
    if n * min_size > len(buf) - pos:
        raise DecodeError(f"array of {n} elements cannot fit in {len(buf) - pos} bytes", field=field)
    return n, pos


def read_compact_array_len(buf: memoryview, pos: int, field: str, min_size: int) -> tuple[int, int]:
    """Unsigned varint count+1; 0 (null) is returned as -1."""
    n, pos = read_uvarint(buf, pos, field)
    n -= 1
    if n > 0 and n * min_size > len(buf) - pos:
        raise DecodeError(f"array of {n} elements cannot fit in {len(buf) - pos} bytes", field=field)
    return n, pos


def write_array_len(out: bytearray, n: int) -> None:
    out += _I32_PACK(n)


def write_compact_array_len(out: bytearray, n: int) -> None:
    if n < 0x7F:
        out.append(n + 1)
    else:
        write_uvarint(out, n + 1)


# ---------------------------------------------------------------------------------------------
# tagged fields


def read_tags(buf: memoryview, pos: int, field: str) -> tuple[list[tuple[int, int, int]], int]:
    """Parse a tagged-field section into (tag, start, end) triples; bounds and order checked."""
    n, pos = read_uvarint(buf, pos, field)
    if n > len(buf) - pos:
        raise DecodeError(f"{n} tagged fields cannot fit in {len(buf) - pos} bytes", field=field)
    out = []
    last = -1
    for _ in range(n):
        tag, pos = read_uvarint(buf, pos, field)
        if tag <= last:
            raise DecodeError(f"tagged field {tag} out of order or repeated", field=field)
        last = tag
        size, pos = read_uvarint(buf, pos, field)
        end = _take(buf, pos, size, field)
        out.append((tag, pos, end))
        pos = end
    return out, pos


def write_tags(out: bytearray, tags: list[tuple[int, bytes]]) -> None:
    """Write a tagged-field section from (tag, encoded value) pairs, sorted by tag."""
    if len(tags) > 1:
        tags = sorted(tags, key=_first)
    write_uvarint(out, len(tags))
    for tag, value in tags:
        write_uvarint(out, tag)
        write_uvarint(out, len(value))
        out += value


def _first(item: tuple[int, bytes]) -> int:
    return item[0]
