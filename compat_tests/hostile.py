"""Record batches a hostile client sends: a v2 batch builder with every field in the caller's hands.

Everything here is written from Kafka's record format v2 (DefaultRecordBatch, DefaultRecord) as a client
would write it, not from the broker's code: a batch header whose CRC-32C is always right (so only the
records are wrong), records whose varints can be written overlong, lengths and counts that can lie,
and decompression bombs built as a stream (small on the wire, never held inflated here). A reader for
the answers (`parse_batches`) decodes uncompressed batches only: the tests read back what they wrote
uncompressed, and any compressed batch coming back is itself a finding.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import crc32c

# the v2 batch header after base_offset (int64) and batch_length (int32)
_HEADER_AFTER_LENGTH = struct.Struct(">ibIhiqqqhii")
BATCH_HEADER_SIZE = 61
CRC_START = 21  # attributes onwards are covered by the CRC


def uvarint(value: int, width: int = 0) -> bytes:
    """Unsigned LEB128 of `value` (which must be >= 0), padded with continuation bytes to `width`
    bytes when that is longer: an overlong encoding of the same value."""
    assert value >= 0
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte)
        if not value:
            break
    for i in range(len(out) - 1):
        out[i] |= 0x80
    while len(out) < width:
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def zigzag(value: int, bits: int = 64) -> int:
    return ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)


def varint(value: int, width: int = 0) -> bytes:
    """A signed varint (zigzag, 32-bit) as Kafka writes it; `width` pads it overlong."""
    return uvarint(zigzag(value, 32), width)


def varlong(value: int, width: int = 0) -> bytes:
    """A signed varlong (zigzag, 64-bit); `width` pads it overlong."""
    return uvarint(zigzag(value, 64), width)


@dataclass
class Rec:
    """One record's fields. `widths` writes named varints overlong (bytes per field: "attributes" is a
    byte, the others are "timestamp_delta", "offset_delta", "key_length", "value_length",
    "header_count"); `header_count` overrides the count written (the headers written stay these)."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[bytes, bytes | None]] = ()
    timestamp_delta: int = 0
    offset_delta: int | None = None  # None: the record's index
    attributes: int = 0
    header_count: int | None = None
    widths: dict[str, int] = field(default_factory=dict)

    def body(self, index: int) -> bytes:
        w = self.widths.get
        out = bytearray([self.attributes & 0xFF])
        out += varlong(self.timestamp_delta, w("timestamp_delta", 0))
        out += varint(index if self.offset_delta is None else self.offset_delta, w("offset_delta", 0))
        out += _bytes_field(self.key, w("key_length", 0))
        out += _bytes_field(self.value, w("value_length", 0))
        count = len(self.headers) if self.header_count is None else self.header_count
        out += varint(count, w("header_count", 0))
        for hkey, hvalue in self.headers:
            out += varint(len(hkey)) + hkey
            out += _bytes_field(hvalue, 0)
        return bytes(out)


def _bytes_field(data: bytes | None, width: int) -> bytes:
    if data is None:
        return varint(-1, width)
    return varint(len(data), width) + data


def framed(body: bytes, *, length: int | None = None, length_width: int = 0) -> bytes:
    """A record as it sits in a batch: its length varint (the body's, unless `length` says otherwise),
    then the body."""
    return varint(len(body) if length is None else length, length_width) + body


def encode_records(records: Sequence[Rec]) -> bytes:
    return b"".join(framed(r.body(i)) for i, r in enumerate(records))


def batch(
    records_data: bytes,
    *,
    count: int,
    last_offset_delta: int | None = None,
    attributes: int = 0,
    base_timestamp: int,
    max_timestamp: int | None = None,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A v2 batch around `records_data` (already compressed if `attributes` names a codec), its
    length and CRC-32C computed from what is there, so that only what the caller put wrong is wrong."""
    body = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            count - 1 if last_offset_delta is None else last_offset_delta,
            base_timestamp,
            base_timestamp if max_timestamp is None else max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + records_data
    )
    crc = crc32c.crc32c(body)
    length = 4 + 1 + 4 + len(body)  # leader epoch, magic, crc, then the CRC-covered part
    return struct.pack(">qiibI", base_offset, length, partition_leader_epoch, 2, crc) + body


def valid_batch(records: Sequence[Rec], base_timestamp: int, *, attributes: int = 0) -> bytes:
    deltas = [r.timestamp_delta for r in records]
    return batch(
        encode_records(records),
        count=len(records),
        attributes=attributes,
        base_timestamp=base_timestamp,
        max_timestamp=base_timestamp + max(deltas),
    )


# --- decompression bombs ------------------------------------------------------------------------

MIB = 1024 * 1024


def gzip_zeros(size: int, chunk: int = 4 * MIB) -> bytes:
    """A gzip member that inflates to `size` zero bytes, compressed as a stream (never held inflated)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(chunk)
    out = bytearray()
    left = size
    while left:
        step = min(left, chunk)
        out += compressor.compress(zeros if step == chunk else bytes(step))
        left -= step
    out += compressor.flush()
    return bytes(out)


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_MAX_BLOCK = 128 * 1024


def zstd_rle(size: int, *, declare_size: bool, byte: int = 0) -> bytes:
    """A zstd frame of RLE blocks (4 bytes each on the wire, 128 KiB each inflated) that inflates to
    `size` copies of `byte`; with `declare_size` its header declares that content size (a 4-byte
    Frame_Content_Size, so `size` < 4 GiB), otherwise it declares none. The window is 128 KiB."""
    assert size % ZSTD_MAX_BLOCK == 0 and size > 0
    if declare_size:
        assert size < 1 << 32
        header = bytes([0x80, 0x38]) + struct.pack("<I", size)  # FCS 4 bytes, window 2**17
    else:
        header = bytes([0x00, 0x38])  # no FCS, window 2**17
    blocks = size // ZSTD_MAX_BLOCK
    rle = (ZSTD_MAX_BLOCK << 3) | (1 << 1)  # Block_Size, Block_Type 1 (RLE), not last
    body = (struct.pack("<I", rle)[:3] + bytes([byte])) * (blocks - 1)
    body += struct.pack("<I", rle | 1)[:3] + bytes([byte])  # the last block
    return ZSTD_MAGIC + header + body


# --- reading answers back -----------------------------------------------------------------------


@dataclass
class ReadRecord:
    offset: int
    key: bytes | None
    value: bytes | None


def parse_batches(data: bytes) -> list[ReadRecord | str]:
    """The records of the uncompressed v2 batches in `data` (a Fetch answer's records), in order; a
    compressed or unreadable batch is returned as a description (str) instead. A trailing partial
    batch (a Fetch may end in one) is ignored."""
    out: list[ReadRecord | str] = []
    pos = 0
    while pos + 12 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + length
        if end > len(data):
            break
        (_, magic, _, attributes, _, _, _, _, _, _, count) = _HEADER_AFTER_LENGTH.unpack_from(data, pos + 12)
        if magic != 2 or attributes & 0x07:
            out.append(f"batch at offset {base_offset}: magic {magic}, attributes {attributes:#x}")
        else:
            try:
                out.extend(_parse_records(data[pos + BATCH_HEADER_SIZE : end], base_offset, count))
            except (IndexError, ValueError) as exc:
                out.append(f"batch at offset {base_offset}: unreadable records ({exc})")
        pos = end
    return out


def _parse_records(data: bytes, base_offset: int, count: int) -> list[ReadRecord]:
    pos = 0

    def read_varint() -> int:
        nonlocal pos
        shift = raw = 0
        while True:
            byte = data[pos]
            pos += 1
            raw |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (raw >> 1) ^ -(raw & 1)
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def read_bytes() -> bytes | None:
        nonlocal pos
        size = read_varint()
        if size < 0:
            return None
        if pos + size > len(data):
            raise ValueError("field beyond the record")
        pos += size
        return data[pos - size : pos]

    records = []
    for _ in range(count):
        size = read_varint()
        start = pos
        pos += 1  # attributes
        read_varint()  # timestamp delta
        offset_delta = read_varint()
        key = read_bytes()
        value = read_bytes()
        for _ in range(read_varint()):
            read_bytes()
            read_bytes()
        if pos - start != size:
            raise ValueError(f"record size {size}, read {pos - start}")
        records.append(ReadRecord(base_offset + offset_delta, key, value))
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes after {count} records")
    return records
