"""Kafka's record compression codecs: gzip, snappy, lz4, zstd (both directions), bounded.

Theory of operation
-------------------
The broker keeps record batches compressed exactly as producers sent them. It inflates only where a
feature must see records (validation of compressed batches, compaction, coordinators, tools) and
deflates only batches it writes itself. Codec ids are Kafka's: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

Every decompressor is bounded by `max_output_size` and never allocates more than that, so a small
"decompression bomb" cannot exhaust memory:

* gzip: zlib in streaming mode with `max_length`, 256 KiB per step; concatenated members are read (Java's
  GZIPInputStream does); bytes after the last member that do not start a new member are ignored, as Java
  ignores them.
* snappy: Java's snappy-java, and kafka-python, write the xerial block framing (magic `\\x82SNAPPY\\x00`,
  int32 version, int32 compat, then repeated [int32 length][raw snappy block]); librdkafka writes one
  raw snappy block. Both are read: each raw block declares its uncompressed length up front, so the
  total is known and checked before anything is inflated. Concatenated xerial streams (a header again
  at a block boundary) are accepted, as snappy-java accepts them. Output is encoded the way Java does:
  xerial framing with 32 KiB input blocks.
* lz4: the standard LZ4 frame format with independent blocks (KIP-57); linked blocks are refused, as
  Java's KafkaLZ4BlockInputStream refuses them. The frame is walked here and each block inflated with
  cramjam's block decoder into a buffer capped by what is left of the budget; a block that fails in
  that room has its inflated length counted from its sequences (without inflating it) to tell "too
  big" from "damaged". A declared frame content size past the budget is refused before any block is
  read. Header, block and content checksums (xxHash32) are not verified: the batch CRC32C already
  covers the compressed bytes.
* zstd: the frames are walked without inflating to bound the output (the frame content size when
  present, else per block: raw and RLE sizes exactly, compressed blocks at most min(window, 128 KiB)),
  then cramjam inflates into a buffer of exactly that bound.

`decompress_prefix()` returns only the first bytes a gzip or lz4 batch inflates to, holding about that
much, so that a validator can walk the start of a batch before inflating it whole (gzip and lz4 have no
up-front size for a bound: a zero-filled bomb would otherwise fill the whole budget before the records
are read; record_validator refuses it from its first record, as Kafka's streaming reader does).

Corrupt or over-long input raises `InvalidRecordBatch(CORRUPT_MESSAGE)`; nothing else escapes. Output over
the cap raises its subclass `InflatedTooLarge`, so a caller can tell "too big to hold" from "damaged".
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import cramjam

from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.records import CompressionCodec, InvalidRecordBatch

__all__ = [
    "CODEC_NAMES",
    "DEFAULT_MAX_OUTPUT_SIZE",
    "InflatedTooLarge",
    "compress",
    "decompress",
    "decompress_prefix",
]

#: Default cap on inflated size (64 MiB): far above any batch a producer builds under Kafka's default
#: size limits, far below what a bomb could claim. Callers with a known limit pass their own.
DEFAULT_MAX_OUTPUT_SIZE = 64 * 1024 * 1024

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

Buffer = bytes | bytearray | memoryview

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE = 16
_XERIAL_BLOCK_SIZE = 32 * 1024
_I32 = struct.Struct(">i")
_LE32 = struct.Struct("<I")
_LE64 = struct.Struct("<Q")

_LZ4_MAGIC = 0x184D2204
_SKIPPABLE_MASK = 0xFFFFFFF0
_SKIPPABLE_MAGIC = 0x184D2A50
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
#: In `decompress_prefix`, a block of at most this size is inflated whole and cut; a larger one only as
#: far as the prefix needs.
_LZ4_PREFIX_SCRATCH = 1024 * 1024

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024

_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_STEP = 256 * 1024


class _Corrupt(Exception):
    """Internal: a framing error found while walking compressed data."""


class _TooLarge(_Corrupt):
    """Internal: output that would pass the caller's cap."""


class InflatedTooLarge(InvalidRecordBatch):
    """CORRUPT_MESSAGE raised because the output would pass `max_output_size` (the data may be sound)."""


def _corrupt(codec: int, message: str) -> InvalidRecordBatch:
    name = CODEC_NAMES.get(codec, str(codec))
    return InvalidRecordBatch(ErrorCode.CORRUPT_MESSAGE, f"{name}: {message}")


# -- decompression -------------------------------------------------------------------------------------


def decompress(codec: int, data: Buffer, max_output_size: int = DEFAULT_MAX_OUTPUT_SIZE) -> bytes | bytearray:
    """Inflate `data` compressed with Kafka codec `codec`; at most `max_output_size` bytes come out.

    Raises InvalidRecordBatch(CORRUPT_MESSAGE) for an unknown codec, corrupt data, or output that would
    exceed the cap.
    """
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    try:
        if codec == CompressionCodec.NONE:
            if len(mv) > max_output_size:
                raise _TooLarge(f"{len(mv)} bytes exceed the limit of {max_output_size}")
            return mv.tobytes()
        if codec == CompressionCodec.GZIP:
            return _gzip_decompress(mv, max_output_size)
        if codec == CompressionCodec.SNAPPY:
            return _snappy_decompress(mv, max_output_size)
        if codec == CompressionCodec.LZ4:
            return _lz4_decompress(mv, max_output_size)
        if codec == CompressionCodec.ZSTD:
            return _zstd_decompress(mv, max_output_size)
    except _TooLarge as exc:
        raise InflatedTooLarge(ErrorCode.CORRUPT_MESSAGE, f"{CODEC_NAMES[codec]}: {exc}") from None
    except _Corrupt as exc:
        raise _corrupt(codec, str(exc)) from None
    except (cramjam.DecompressionError, zlib.error, ValueError, OverflowError, struct.error) as exc:
        raise _corrupt(codec, f"corrupt compressed data ({exc})") from None
    raise _corrupt(codec, "unknown compression codec id")


def _gzip_decompress(data: memoryview, limit: int) -> bytearray:
    out = bytearray()
    source: bytes | memoryview = data
    inflater = zlib.decompressobj(wbits=31)
    while True:
        # At most _GZIP_STEP bytes per call, so the chunk being appended adds little to the output held
        # (one call of the whole budget would briefly hold twice the cap). max_length=0 would mean "no
        # limit", hence the +1, which also detects overflow.
        chunk = inflater.decompress(source, min(limit - len(out) + 1, _GZIP_STEP))
        out += chunk
        if len(out) > limit:
            raise _TooLarge(f"inflated data exceeds the limit of {limit} bytes")
        if inflater.eof:
            rest = inflater.unused_data
            if rest[:2] == _GZIP_MAGIC:
                inflater = zlib.decompressobj(wbits=31)
                source = rest
                continue
            return out
        source = inflater.unconsumed_tail
        if not source and not chunk:  # no input left and nothing more comes out: the stream is cut short
            raise _Corrupt("truncated gzip stream")


def _snappy_decompress(data: memoryview, limit: int) -> bytearray:
    if len(data) >= _XERIAL_HEADER_SIZE and data[:8] == _XERIAL_MAGIC:
        blocks: list[memoryview] = []
        sizes: list[int] = []
        total = 0
        pos = _XERIAL_HEADER_SIZE
        end = len(data)
        while pos < end:
            if end - pos >= _XERIAL_HEADER_SIZE and data[pos : pos + 8] == _XERIAL_MAGIC:
                pos += _XERIAL_HEADER_SIZE  # a concatenated stream starts here
                continue
            if end - pos < 4:
                raise _Corrupt("truncated xerial block length")
            (length,) = _I32.unpack_from(data, pos)
            pos += 4
            if length < 0 or length > end - pos:
                raise _Corrupt(f"xerial block length {length} outside the {end - pos} remaining bytes")
            block = data[pos : pos + length]
            pos += length
            size = cramjam.snappy.decompress_raw_len(block)
            total += size
            if total > limit:
                raise _TooLarge(f"inflated data exceeds the limit of {limit} bytes")
            blocks.append(block)
            sizes.append(size)
        out = bytearray(total)
        view = memoryview(out)
        at = 0
        for block, size in zip(blocks, sizes, strict=True):
            if size:
                written = cramjam.snappy.decompress_raw_into(block, view[at : at + size])
                if written != size:
                    raise _Corrupt("snappy block shorter than its declared length")
            at += size
        return out
    size = cramjam.snappy.decompress_raw_len(data)
    if size > limit:
        raise _TooLarge(f"declared length {size} exceeds the limit of {limit} bytes")
    out = bytearray(size)
    if size:
        written = cramjam.snappy.decompress_raw_into(data, out)
        if written != size:
            raise _Corrupt("snappy data shorter than its declared length")
    elif len(data) != 1:
        raise _Corrupt("trailing bytes after an empty snappy block")
    return out


def _need(data: memoryview, pos: int, count: int, what: str) -> None:
    if len(data) - pos < count:
        raise _Corrupt(f"truncated {what}")


def _lz4_decompress(data: memoryview, limit: int, *, prefix: bool = False) -> bytearray:
    """The frames of `data` inflated, at most `limit` bytes. With `prefix`, the first `limit` bytes
    instead: output past `limit` is not an error but the end, and a block that would cross it is
    inflated only as far as needed (`_lz4_block_prefix` when its full size would be a big allocation)."""
    out = bytearray()
    end = len(data)
    pos = 0
    frames = 0
    scratch: bytearray | None = None
    while pos < end or frames == 0:
        _need(data, pos, 4, "lz4 frame magic")
        (magic,) = _LE32.unpack_from(data, pos)
        pos += 4
        if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
            _need(data, pos, 4, "lz4 skippable frame size")
            (skip,) = _LE32.unpack_from(data, pos)
            pos += 4
            _need(data, pos, skip, "lz4 skippable frame")
            pos += skip
            frames += 1
            continue
        if magic != _LZ4_MAGIC:
            raise _Corrupt(f"bad lz4 frame magic {magic:#010x}")
        frames += 1
        _need(data, pos, 3, "lz4 frame descriptor")
        flg = data[pos]
        bd = data[pos + 1]
        pos += 2
        if flg >> 6 != 1:
            raise _Corrupt(f"unsupported lz4 frame version {flg >> 6}")
        if flg & 0x02 or bd & 0x8F:
            raise _Corrupt("reserved lz4 descriptor bits are set")
        if not flg & 0x20:
            raise _Corrupt("linked lz4 blocks are not supported (Kafka requires independent blocks)")
        block_checksum = bool(flg & 0x10)
        content_checksum = bool(flg & 0x04)
        block_max = _LZ4_BLOCK_MAX.get(bd >> 4)
        if block_max is None:
            raise _Corrupt(f"invalid lz4 block maximum size id {bd >> 4}")
        content_size: int | None = None
        if flg & 0x08:
            _need(data, pos, 8, "lz4 content size")
            (content_size,) = _LE64.unpack_from(data, pos)
            pos += 8
            if content_size > limit - len(out) and not prefix:
                raise _TooLarge(f"declared content size {content_size} exceeds the limit of {limit} bytes")
        if flg & 0x01:
            raise _Corrupt("lz4 preset dictionaries are not supported")
        _need(data, pos, 1, "lz4 header checksum")
        pos += 1
        frame_start = len(out)
        while True:
            _need(data, pos, 4, "lz4 block size")
            (word,) = _LE32.unpack_from(data, pos)
            pos += 4
            if word == 0:
                break
            size = word & 0x7FFFFFFF
            if size > block_max:
                raise _Corrupt(f"lz4 block of {size} bytes exceeds the frame's maximum of {block_max}")
            _need(data, pos, size, "lz4 block")
            block = data[pos : pos + size]
            pos += size
            if block_checksum:
                _need(data, pos, 4, "lz4 block checksum")
                pos += 4
            room = limit - len(out)
            if word & 0x80000000:  # stored uncompressed
                if size > room:
                    if prefix:
                        out += block[:room]
                        return out
                    raise _TooLarge(f"inflated data exceeds the limit of {limit} bytes")
                out += block
                continue
            if prefix and room < block_max:
                if block_max <= _LZ4_PREFIX_SCRATCH:
                    scratch = bytearray(block_max)
                    written = cramjam.lz4.decompress_block_into(block, memoryview(scratch))
                    out += memoryview(scratch)[: min(written, room)]
                else:
                    out += _lz4_block_prefix(block, room)
                if len(out) >= limit:
                    return out
                continue
            cap = min(block_max, room)
            if scratch is None or len(scratch) < cap:
                scratch = bytearray(cap)
            try:
                written = cramjam.lz4.decompress_block_into(block, memoryview(scratch)[:cap])
            except cramjam.DecompressionError:
                if cap < block_max:
                    # too little room, or a damaged block: its inflated length, counted without
                    # inflating it, tells which
                    length = _lz4_block_length(block)
                    if length is not None and length > room:
                        raise _TooLarge(f"inflated data exceeds the limit of {limit} bytes") from None
                raise
            out += memoryview(scratch)[:written]
        if content_checksum:
            _need(data, pos, 4, "lz4 content checksum")
            pos += 4
        if content_size is not None and len(out) - frame_start != content_size:
            raise _Corrupt("lz4 frame content size does not match its blocks")
    return out


def _lz4_sequences(block: memoryview) -> Iterator[tuple[int, int, int, int]]:
    """The sequences of an LZ4 block: (literals position, literal count, match offset, match length);
    the last sequence has offset and length 0. Raises IndexError or _Corrupt on a malformed block."""
    pos = 0
    end = len(block)
    while True:
        token = block[pos]
        pos += 1
        literals = token >> 4
        if literals == 15:
            while True:
                byte = block[pos]
                pos += 1
                literals += byte
                if byte != 255:
                    break
        start = pos
        pos += literals
        if pos > end:
            raise _Corrupt("lz4 literals run past the block")
        if pos == end:
            yield start, literals, 0, 0
            return
        offset = block[pos] | block[pos + 1] << 8
        pos += 2
        length = token & 15
        if length == 15:
            while True:
                byte = block[pos]
                pos += 1
                length += byte
                if byte != 255:
                    break
        yield start, literals, offset, length + 4


def _lz4_block_length(block: memoryview) -> int | None:
    """How many bytes an LZ4 block inflates to, counted from its sequences without inflating it (a
    bomb's few long matches cost a few steps); None when the block is malformed."""
    total = 0
    try:
        for _, literals, offset, length in _lz4_sequences(block):
            total += literals
            if offset == 0 and length:
                return None
            if offset > total:
                return None
            total += length
    except (IndexError, _Corrupt):
        return None
    return total


def _lz4_block_prefix(block: memoryview, size: int) -> bytearray:
    """The first `size` bytes an LZ4 block inflates to (fewer when it is shorter, or damaged: a full
    inflate then says why), holding no more than about twice `size`."""
    out = bytearray()
    try:
        for start, literals, offset, length in _lz4_sequences(block):
            out += block[start : start + min(literals, size - len(out))]
            if len(out) >= size:
                break
            if not length:
                continue
            if offset == 0 or offset > len(out):
                break
            length = min(length, size - len(out))
            origin = len(out) - offset
            while length > 0:  # an overlapping match repeats its pattern: copy it in doubling steps
                step = min(length, len(out) - origin)
                out += out[origin : origin + step]
                length -= step
            if len(out) >= size:
                break
    except (IndexError, _Corrupt):
        pass
    return out[:size] if len(out) > size else out


def decompress_prefix(codec: int, data: Buffer, size: int) -> bytes | bytearray:
    """The first `size` bytes (fewer if it inflates to less, or is damaged) `data` inflates to, for
    gzip and lz4, holding about `size` bytes however far the whole would inflate; a validator walks
    this before deciding to inflate a big batch whole. Damage is left to `decompress` to report."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    try:
        if codec == CompressionCodec.GZIP:
            return zlib.decompressobj(wbits=31).decompress(mv, size)
        if codec == CompressionCodec.LZ4:
            return _lz4_decompress(mv, size, prefix=True)
    except (_Corrupt, cramjam.DecompressionError, zlib.error, ValueError, OverflowError, struct.error):
        return b""
    raise ValueError(f"no prefix decompression for codec {codec}")


def _zstd_output_bound(data: memoryview, limit: int) -> int:
    """Upper bound of the inflated size of zstd frames, from their headers and block headers."""
    end = len(data)
    pos = 0
    bound = 0
    frames = 0
    while pos < end or frames == 0:
        _need(data, pos, 4, "zstd frame magic")
        (magic,) = _LE32.unpack_from(data, pos)
        pos += 4
        frames += 1
        if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
            _need(data, pos, 4, "zstd skippable frame size")
            (skip,) = _LE32.unpack_from(data, pos)
            pos += 4
            _need(data, pos, skip, "zstd skippable frame")
            pos += skip
            continue
        if magic != _ZSTD_MAGIC:
            raise _Corrupt(f"bad zstd frame magic {magic:#010x}")
        _need(data, pos, 1, "zstd frame header")
        fhd = data[pos]
        pos += 1
        if fhd & 0x08:
            raise _Corrupt("reserved zstd frame header bit is set")
        single_segment = bool(fhd & 0x20)
        window = 0
        if not single_segment:
            _need(data, pos, 1, "zstd window descriptor")
            wd = data[pos]
            pos += 1
            base = 1 << (10 + (wd >> 3))
            window = base + (base >> 3) * (wd & 7)
        pos += (0, 1, 2, 4)[fhd & 3]  # dictionary id
        fcs_size = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
        content_size: int | None = None
        if fcs_size:
            _need(data, pos, fcs_size, "zstd frame content size")
            content_size = int.from_bytes(data[pos : pos + fcs_size], "little")
            if fcs_size == 2:
                content_size += 256
            pos += fcs_size
        if single_segment:
            window = content_size or 0
        block_max = min(window, _ZSTD_BLOCK_MAX)
        frame_bound = 0
        while True:
            _need(data, pos, 3, "zstd block header")
            header = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
            pos += 3
            last = header & 1
            block_type = (header >> 1) & 3
            size = header >> 3
            if block_type == 3:
                raise _Corrupt("reserved zstd block type")
            if size > block_max:
                raise _Corrupt(f"zstd block of {size} bytes exceeds the frame's maximum of {block_max}")
            if block_type == 0:  # raw
                _need(data, pos, size, "zstd raw block")
                pos += size
                frame_bound += size
            elif block_type == 1:  # RLE: one byte repeated `size` times
                _need(data, pos, 1, "zstd RLE block")
                pos += 1
                frame_bound += size
            else:
                _need(data, pos, size, "zstd compressed block")
                pos += size
                frame_bound += block_max
            if frame_bound > limit and content_size is None:
                raise _TooLarge(f"inflated data may exceed the limit of {limit} bytes")
            if last:
                break
        if fhd & 0x04:
            _need(data, pos, 4, "zstd content checksum")
            pos += 4
        bound += frame_bound if content_size is None else min(content_size, frame_bound)
        if bound > limit:
            raise _TooLarge(f"inflated data exceeds the limit of {limit} bytes")
    return bound


def _zstd_decompress(data: memoryview, limit: int) -> bytearray:
    bound = _zstd_output_bound(data, limit)
    out = bytearray(bound)
    if bound == 0:
        return out
    written = cramjam.zstd.decompress_into(data, out)
    del out[written:]
    return out


# -- compression ---------------------------------------------------------------------------------------


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """Deflate `data` with Kafka codec `codec`, in the framing Java clients read and write."""
    if codec == CompressionCodec.NONE:
        return bytes(data)
    if codec == CompressionCodec.GZIP:
        deflater = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
        return deflater.compress(data) + deflater.flush()
    if codec == CompressionCodec.SNAPPY:
        mv = memoryview(data).cast("B")
        parts = [_XERIAL_HEADER]
        for start in range(0, len(mv), _XERIAL_BLOCK_SIZE):
            block = bytes(cramjam.snappy.compress_raw(mv[start : start + _XERIAL_BLOCK_SIZE]))
            parts.append(_I32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == CompressionCodec.LZ4:
        compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        # The streaming compressor takes only `bytes` (no other buffer types).
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())
    if codec == CompressionCodec.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None else level))
    raise ValueError(f"unknown compression codec id {codec}")
