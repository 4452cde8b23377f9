"""Mutations: seeds turned into damaged request frames.

Theory of operation: `Mutator.frame()` applies one or two of
- structure-aware: the seed body is decoded to a request object, one to three fields anywhere in it are
  replaced by "interesting" values (extreme integers, empty/oversized/path-like/non-ASCII strings,
  emptied or multiplied arrays, damaged record batches, absent nullable fields), and it is encoded again,
  so the frame still parses and the handler itself meets the bad values;
- byte-level on the encoded frame: bit flips, interesting bytes, int16/int32 overwrites with extreme
  values, truncation, garbage appended, chunks deleted or duplicated, a wrong API version or key,
  an overlong varint inserted, a garbage tagged-field section, and length-prefix lies (a size larger
  than the bytes that follow, smaller, negative or beyond `socket.request.max.bytes`).
Each Mutator owns its random generator, so the frames of each of a run's tasks follow from the run's seed.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

from kafkacompat.fuzzing.seeds import INT16, INT32, SIZE, Seed
from kafkacompat.wire import messages
from kafkacompat.wire.header import (
    RequestHeader,
    encode_request_header,
)
from kafkacompat.wire.primitives import Struct as GeneratedStruct

__all__ = [
    "INTERESTING_BYTES",
    "INTERESTING_INTS",
    "INTERESTING_STRINGS",
    "MAX_STRUCTURED_BODY",
    "Mutator",
    "field_refs",
]


INTERESTING_INTS = (
    0, 1, -1, 2, 3, 7, 127, 128, 255, 256, 1000, 0x7FFF, -0x8000, 0xFFFF, 100_000, 1_000_000,
    0x7FFFFFFF, -0x80000000, 0xFFFFFFFF, 2**62, 2**63 - 1, -(2**63),
)  # fmt: skip
INTERESTING_STRINGS = (
    "", ".", "..", "/", "../../../tmp/kafkacompat-fuzz-escape", "a/b", "..\\..\\x", "a" * 249, "b" * 250,
    "c" * 300, "ü-topic", "名前", "topic\x00nul", "with space", "-1", "d" * 5000, "fuzz-t", "fuzz-g",
)  # fmt: skip
# a structure-aware mutation that multiplied nested arrays into a body larger than this is dropped
MAX_STRUCTURED_BODY = 4 << 20
INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)


def _slots(obj: Any) -> tuple[str, ...]:
    if not isinstance(obj, GeneratedStruct):
        return ()
    return tuple(s for s in getattr(type(obj), "__slots__", ()) if s != "unknown_tags")


def field_refs(obj: Any, out: list[tuple[Any, str, Any]], depth: int = 0) -> None:
    """Every (owner, attribute, value) reachable from a request object, nested structs included."""
    for name in _slots(obj):
        value = getattr(obj, name, None)
        out.append((obj, name, value))
        if depth > 4:
            continue
        if isinstance(value, list):
            for item in value[:4]:
                if _slots(item):
                    field_refs(item, out, depth + 1)
        elif _slots(value):
            field_refs(value, out, depth + 1)


def _damaged_batch(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    choice = rng.randrange(7)
    if not b:
        return bytes(rng.randbytes(rng.randrange(1, 80)))
    if choice == 0 and len(b) > 61:  # compression bits set on an uncompressed payload (or another codec)
        b[22] = (b[22] & ~0x07) | rng.randrange(1, 8)
    elif choice == 1 and len(b) > 12:  # batch length lies
        INT32.pack_into(b, 8, rng.choice(INTERESTING_INTS) & 0x7FFFFFFF if rng.random() < 0.5 else -5)
    elif choice == 2 and len(b) > 16:  # magic
        b[16] = rng.choice((0, 1, 3, 0xFF))
    elif choice == 3 and len(b) > 61:  # record count
        INT32.pack_into(b, 57, rng.choice((0, -1, 0x7FFFFFFF, 1000)))
    elif choice == 4:
        b = b[: rng.randrange(len(b))]
    elif choice == 5 and len(b) > 61:  # a byte of the records, CRC now wrong
        b[rng.randrange(61, len(b))] ^= 1 << rng.randrange(8)
    else:
        b = b + b  # two batches, both with base offset 0
    return bytes(b)


def _mutated_value(rng: random.Random, value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice(INTERESTING_INTS)
    if isinstance(value, str):
        return rng.choice(INTERESTING_STRINGS) if rng.random() < 0.9 else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        if rng.random() < 0.7:
            return _damaged_batch(rng, data)
        return rng.choice((b"", rng.randbytes(rng.randrange(1, 200)), None, data * 50))
    if isinstance(value, uuid.UUID):
        return rng.choice(
            (uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128)), uuid.UUID(int=(1 << 128) - 1))
        )
    if isinstance(value, list):
        choice = rng.randrange(4)
        if choice == 0:
            return []
        if choice == 1:
            return None
        if choice == 2 and value:
            return value * min(rng.choice((2, 10, 1000)), max(1, 1000 // len(value)))
        return value[::-1]
    if value is None:
        return rng.choice(("", -1, [], b"\x00"))
    return None


class Mutator:
    """Turns seeds into mutated request frames (size prefix included). Owns its random generator."""

    def __init__(self, seeds: list[Seed], rng: random.Random, client_id: str = "kafkacompat-fuzz") -> None:
        if not seeds:
            raise ValueError("no seeds")
        self.seeds = seeds
        self.rng = rng
        self.client_id = client_id
        self._correlation = 0
        self._byte_ops: list[Callable[[bytearray], int | None]] = [
            self._bit_flip,
            self._interesting_byte,
            self._interesting_int,
            self._truncate,
            self._append_garbage,
            self._delete_chunk,
            self._duplicate_chunk,
            self._wrong_version,
            self._wrong_key,
            self._overlong_varint,
            self._garbage_tags,
            self._size_lie,
        ]

    def _header(self, seed: Seed) -> bytes:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        header = RequestHeader(
            request_api_key=seed.api_key,
            request_api_version=seed.version,
            correlation_id=self._correlation,
            client_id=self.client_id,
        )
        return encode_request_header(header)

    def _struct_mutation(self, seed: Seed) -> bytes | None:
        rng = self.rng
        try:
            obj = messages.decode_request(seed.api_key, seed.version, memoryview(seed.body))
        except Exception:
            return None
        refs: list[tuple[Any, str, Any]] = []
        field_refs(obj, refs)
        if not refs:
            return None
        multiplied = False
        for _ in range(rng.randint(1, 3)):
            owner, name, value = rng.choice(refs)
            if isinstance(value, list) and multiplied:
                continue  # one multiplied array per frame: nested ones would multiply into gigabytes
            mutated = _mutated_value(rng, value)
            multiplied = multiplied or (isinstance(mutated, list) and len(mutated) > len(value or ()))
            setattr(owner, name, mutated)
        try:
            body = messages.encode_request(seed.api_key, seed.version, obj)
        except Exception:
            return None
        return body if len(body) <= MAX_STRUCTURED_BODY else None

    def frame(self) -> tuple[bytes, bool]:
        """A mutated frame, and whether its size prefix promises more bytes than follow it."""
        rng = self.rng
        seed = rng.choice(self.seeds)
        payload = bytearray(self._header(seed))
        structural = rng.random() < 0.45
        body = self._struct_mutation(seed) if structural else None
        if body == seed.body:
            body = None  # the fields drawn were replaced by equal values: mutate the bytes instead
        byte_ops = 1 if body is None else (1 if rng.random() < 0.2 else 0)
        payload += body if body is not None else seed.body
        size: int | None = None
        for _ in range(byte_ops + (rng.random() < 0.3)):
            lie = rng.choice(self._byte_ops)(payload)
            if lie is not None:
                size = lie
        if size is None:
            size = len(payload)
        return SIZE.pack(size) + bytes(payload), size > len(payload)

    # Each byte operation edits the payload (header + body) in place; a length-prefix lie returns the
    # size to announce instead of the true one.

    def _bit_flip(self, p: bytearray) -> None:
        for _ in range(self.rng.randint(1, 4)):
            if p:
                p[self.rng.randrange(len(p))] ^= 1 << self.rng.randrange(8)

    def _interesting_byte(self, p: bytearray) -> None:
        if p:
            p[self.rng.randrange(len(p))] = self.rng.choice(INTERESTING_BYTES)

    def _interesting_int(self, p: bytearray) -> None:
        if len(p) < 4:
            return
        at = self.rng.randrange(len(p) - 3)
        value = self.rng.choice(INTERESTING_INTS)
        if self.rng.random() < 0.5:
            INT16.pack_into(p, at, ((value + 0x8000) & 0xFFFF) - 0x8000)
        else:
            INT32.pack_into(p, at, ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000)

    def _truncate(self, p: bytearray) -> None:
        del p[self.rng.randrange(len(p) + 1) :]

    def _append_garbage(self, p: bytearray) -> None:
        p += self.rng.randbytes(self.rng.randrange(1, 64))

    def _delete_chunk(self, p: bytearray) -> None:
        if p:
            at = self.rng.randrange(len(p))
            del p[at : at + self.rng.randrange(1, 16)]

    def _duplicate_chunk(self, p: bytearray) -> None:
        if p:
            at = self.rng.randrange(len(p))
            p[at:at] = p[at : at + self.rng.randrange(1, 32)]

    def _wrong_version(self, p: bytearray) -> None:
        if len(p) >= 4:
            INT16.pack_into(p, 2, self.rng.choice((-1, 0, 1, 5, 13, 18, 100, 0x7FFF)))

    def _wrong_key(self, p: bytearray) -> None:
        if len(p) >= 2:
            INT16.pack_into(p, 0, self.rng.choice((-1, 4, 5, 6, 7, 17, 24, 50, 68, 74, 1000, 0x7FFF)))

    def _overlong_varint(self, p: bytearray) -> None:
        at = self.rng.randrange(len(p) + 1)
        p[at:at] = b"\xff" * self.rng.randint(5, 11)

    def _garbage_tags(self, p: bytearray) -> None:
        # a tagged-field section in place of the last byte (usually the body's empty one): a tag count,
        # then tags with lengths that may lie
        tags = bytearray([self.rng.randint(1, 5)])
        for _ in range(tags[0]):
            tags += bytes([self.rng.randrange(0, 128), self.rng.choice((0, 1, 5, 0x7F))])
            tags += self.rng.randbytes(self.rng.randrange(0, 6))
        if p:
            del p[-1:]
        p += tags

    def _size_lie(self, p: bytearray) -> int:
        choice = self.rng.randrange(4)
        if choice == 0:
            return len(p) + self.rng.randint(1, 100)
        if choice == 1:
            return max(0, len(p) - self.rng.randint(1, 20))
        if choice == 2:
            return self.rng.choice((-1, -0x80000000, 0))
        return self.rng.choice((0x7FFFFFFF, 200 * 1024 * 1024, 100 * 1024 * 1024 + 1))
