import gzip
import os
import struct
import tracemalloc
import zlib

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkacompat.wire.compression import (
    DEFAULT_MAX_OUTPUT_SIZE,
    InflatedTooLarge,
    compress,
    decompress,
    decompress_prefix,
)
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.records import InvalidRecordBatch

kafka_codec = pytest.importorskip("kafka.codec", reason="kafka-python not installed")
aio_codec = pytest.importorskip("aiokafka.codec", reason="aiokafka not installed")

CODECS = [0, 1, 2, 3, 4]
TEXT = b"".join(b"record %d: the quick brown fox jumps over the lazy dog\n" % i for i in range(5000))
MIXED = TEXT[:50_000] + os.urandom(20_000) + TEXT[:100_000]


def raises_corrupt(codec, data, **kwargs):
    with pytest.raises(InvalidRecordBatch) as info:
        decompress(codec, data, **kwargs)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    return info.value


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("payload", [b"", b"x", TEXT, MIXED], ids=["empty", "one", "text", "mixed"])
def test_roundtrip(codec, payload):
    packed = compress(codec, payload)
    assert bytes(decompress(codec, packed)) == payload
    assert bytes(decompress(codec, memoryview(bytearray(packed)))) == payload


@settings(max_examples=100, deadline=None)
@given(payload=st.binary(max_size=100_000), codec=st.sampled_from(CODECS))
def test_roundtrip_property(payload, codec):
    assert bytes(decompress(codec, compress(codec, payload))) == payload


# -- cross-checks with the clients' codecs -------------------------------------------------------------


def test_gzip_with_kafka_python_both_ways():
    assert bytes(decompress(1, kafka_codec.gzip_encode(MIXED))) == MIXED
    assert kafka_codec.gzip_decode(compress(1, MIXED)) == MIXED


@pytest.mark.parametrize("name", ["snappy", "lz4", "zstd"])
def test_kafka_python_other_codecs(name):
    if not getattr(kafka_codec, f"has_{name}")():
        pytest.skip(f"kafka-python has no {name} library installed here (aiokafka's codec is used instead)")
    codec = {"snappy": 2, "lz4": 3, "zstd": 4}[name]
    encode = getattr(kafka_codec, f"{name}_encode")
    decode = getattr(kafka_codec, f"{name}_decode")
    assert bytes(decompress(codec, encode(MIXED))) == MIXED
    assert decode(compress(codec, MIXED)) == MIXED


@pytest.mark.parametrize("blocksize", [1024, 32 * 1024, 1 << 20])
def test_snappy_xerial_from_aiokafka(blocksize):
    packed = aio_codec.snappy_encode(MIXED, xerial_compatible=True, xerial_blocksize=blocksize)
    assert packed[:8] == b"\x82SNAPPY\x00"
    assert bytes(decompress(2, packed)) == MIXED


def test_snappy_raw_as_librdkafka_sends_it():
    packed = aio_codec.snappy_encode(MIXED, xerial_compatible=False)
    assert bytes(decompress(2, packed)) == MIXED
    assert bytes(decompress(2, bytes(cramjam.snappy.compress_raw(TEXT)))) == TEXT


def test_snappy_we_write_xerial_like_java():
    packed = compress(2, MIXED)
    # snappy-java's stream header: magic, then int32 version 1 and int32 minimum compatible version 1.
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    assert aio_codec.snappy_decode(packed) == MIXED
    pos, blocks = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(packed)
    assert b"".join(blocks) == MIXED
    assert all(len(b) == 32 * 1024 for b in blocks[:-1]) and 0 < len(blocks[-1]) <= 32 * 1024


def test_snappy_concatenated_xerial_streams():
    packed = aio_codec.snappy_encode(TEXT[:1000]) + aio_codec.snappy_encode(TEXT[1000:5000])
    assert bytes(decompress(2, packed)) == TEXT[:5000]


def test_lz4_with_aiokafka_both_ways():
    assert bytes(decompress(3, aio_codec.lz4_encode(MIXED))) == MIXED
    assert aio_codec.lz4_decode(compress(3, MIXED)) == MIXED


def test_lz4_we_write_independent_blocks_of_64k():
    packed = compress(3, MIXED)
    assert packed[:4] == struct.pack("<I", 0x184D2204)
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1 and flg & 0x20  # version 1, independent blocks (KIP-57)
    assert bd >> 4 == 4  # 64 KiB blocks, Java's default
    assert bytes(cramjam.lz4.decompress(packed)) == MIXED


def test_lz4_linked_blocks_refused_like_java():
    linked = bytes(cramjam.lz4.compress(MIXED))  # cramjam's one-shot frame links blocks
    assert not linked[4] & 0x20
    err = raises_corrupt(3, linked)
    assert "independent" in str(err)


def test_lz4_uncompressed_blocks_and_content_size():
    # A hand-made frame: FLG version 1 + independent blocks + content size, BD 64 KiB, header checksum
    # byte (not verified), one stored block, end mark.
    payload = b"stored block payload"
    frame = (
        struct.pack("<I", 0x184D2204)
        + bytes([0x68, 0x40])
        + struct.pack("<Q", len(payload))
        + b"\x00"
        + struct.pack("<I", len(payload) | 0x80000000)
        + payload
        + struct.pack("<I", 0)
    )
    assert bytes(decompress(3, frame)) == payload
    wrong_size = frame[:6] + struct.pack("<Q", len(payload) + 1) + frame[14:]
    raises_corrupt(3, wrong_size)


def test_zstd_with_aiokafka_both_ways():
    assert bytes(decompress(4, aio_codec.zstd_encode(MIXED))) == MIXED
    assert aio_codec.zstd_decode(compress(4, MIXED)) == MIXED


def test_zstd_streamed_frames_without_content_size():
    # Java's zstd-jni output stream does not record the content size in the frame header.
    compressor = cramjam.zstd.Compressor()
    compressor.compress(MIXED)
    packed = bytes(compressor.finish())
    assert packed[4] >> 6 == 0 and not packed[4] & 0x20  # no content size field
    assert bytes(decompress(4, packed)) == MIXED


def test_zstd_concatenated_and_skippable_frames():
    skippable = struct.pack("<II", 0x184D2A53, 5) + b"12345"
    packed = compress(4, b"abc") + skippable + compress(4, TEXT)
    assert bytes(decompress(4, packed)) == b"abc" + TEXT


def test_gzip_concatenated_members_and_trailing_bytes():
    packed = gzip.compress(b"first ") + gzip.compress(b"second")
    assert bytes(decompress(1, packed)) == b"first second"
    assert bytes(decompress(1, packed + b"\x00\x00junk")) == b"first second"


# -- corrupt input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_truncated_input_is_corrupt(codec):
    packed = compress(codec, MIXED)
    for cut in (0, 1, 5, 17, len(packed) // 2, len(packed) - 1):
        if codec == 1 and cut == len(packed) - 1:
            continue  # gzip: only the trailer's last byte is missing; zlib may still report end
        raises_corrupt(codec, packed[:cut])


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec_is_corrupt(codec):
    raises_corrupt(codec, b"anything")


@settings(max_examples=300, deadline=None)
@given(
    codec=st.sampled_from([1, 2, 3, 4]),
    edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=255)), max_size=5),
    cut=st.one_of(st.none(), st.integers(min_value=0)),
)
def test_mutated_input_raises_only_corrupt_message(codec, edits, cut):
    packed = bytearray(compress(codec, TEXT[:20_000]))
    for position, value in edits:
        packed[position % len(packed)] = value
    if cut is not None:
        packed = packed[: cut % (len(packed) + 1)]
    try:
        out = decompress(codec, packed, max_output_size=1 << 20)
    except InvalidRecordBatch as exc:
        assert exc.code == ErrorCode.CORRUPT_MESSAGE
    else:
        assert len(out) <= 1 << 20


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from([1, 2, 3, 4]), junk=st.binary(max_size=300))
def test_random_input_raises_only_corrupt_message(codec, junk):
    try:
        out = decompress(codec, junk, max_output_size=1 << 16)
    except InvalidRecordBatch as exc:
        assert exc.code == ErrorCode.CORRUPT_MESSAGE
    else:
        assert len(out) <= 1 << 16


# -- decompression bombs -------------------------------------------------------------------------------

BOMB_SIZE = 32 * 1024 * 1024


def _bombs():
    zeros = bytes(BOMB_SIZE)
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    return {
        1: gz.compress(zeros) + gz.flush(),
        2: compress(2, zeros),
        3: compress(3, zeros),
        4: compress(4, zeros),
    }


@pytest.fixture(scope="module")
def bombs():
    return _bombs()


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_bombs_are_refused_above_the_cap(bombs, codec):
    packed = bombs[codec]
    assert len(packed) < BOMB_SIZE // 15  # snappy tops out near 21:1; the others go far beyond
    err = raises_corrupt(codec, packed, max_output_size=1 << 20)
    assert "limit" in str(err) or "exceeds" in str(err)
    assert len(decompress(codec, packed, max_output_size=BOMB_SIZE)) == BOMB_SIZE


def test_snappy_declared_length_checked_before_inflating():
    # A raw snappy stream that claims 4 GiB in its length prefix and carries nothing.
    claim = b"\xff\xff\xff\xff\x0f" + b"\x00" * 8
    err = raises_corrupt(2, claim)
    assert str(DEFAULT_MAX_OUTPUT_SIZE) in str(err)


def test_zstd_bound_from_streamed_frame():
    compressor = cramjam.zstd.Compressor()
    compressor.compress(bytes(4 * 1024 * 1024))
    packed = bytes(compressor.finish())
    raises_corrupt(4, packed, max_output_size=1 << 20)
    assert len(decompress(4, packed, max_output_size=5 * 1024 * 1024)) == 4 * 1024 * 1024


def test_none_codec_respects_cap():
    assert decompress(0, b"abc") == b"abc"
    raises_corrupt(0, b"abcd", max_output_size=3)


# -- lz4: bombs refused early, prefixes ------------------------------------------------------------------

MiB = 1024 * 1024


def _lz4_frame(blocks: list[bytes], *, block_id: int, content_size: int | None = None) -> bytes:
    """A frame of the given compressed blocks (independent), optionally declaring its content size."""
    flg = 0x60 | (0x08 if content_size is not None else 0)
    out = bytearray(struct.pack("<I", 0x184D2204) + bytes([flg, block_id << 4]))
    if content_size is not None:
        out += struct.pack("<Q", content_size)
    out += b"\x00"  # header checksum byte (not verified)
    for block in blocks:
        out += struct.pack("<I", len(block)) + block
    return bytes(out + struct.pack("<I", 0))


def _zero_block(size: int) -> bytes:
    return bytes(cramjam.lz4.compress_block(bytes(size), store_size=False))


def _peak(action) -> int:
    tracemalloc.start()
    try:
        action()
    except InvalidRecordBatch:
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize("block_id", [4, 7])
def test_lz4_bomb_is_refused_and_cut_within_a_few_mib(block_id):
    """An lz4 frame without a content size says nothing of how far it inflates: a block that does not
    fit the room left is measured from its sequences, not inflated, and a prefix holds about its size."""
    block_size = 64 * 1024 if block_id == 4 else 4 * MiB
    bomb = _lz4_frame([_zero_block(block_size)] * (256 * MiB // block_size), block_id=block_id)
    assert len(bomb) < 2 * MiB
    peak = _peak(lambda: raises_corrupt(3, bomb, max_output_size=MiB))
    assert isinstance(raises_corrupt(3, bomb, max_output_size=MiB), InflatedTooLarge)
    assert peak < 4 * MiB
    peak = _peak(lambda: decompress_prefix(3, bomb, MiB))
    assert decompress_prefix(3, bomb, MiB) == bytes(MiB)
    assert peak < 4 * MiB


def test_lz4_declared_content_size_is_refused_before_any_block():
    bomb = _lz4_frame([_zero_block(4 * MiB)] * 4, block_id=7, content_size=16 * MiB)
    peak = _peak(lambda: raises_corrupt(3, bomb, max_output_size=MiB))
    assert "declared content size" in str(raises_corrupt(3, bomb, max_output_size=MiB))
    assert peak < MiB


def test_lz4_damaged_block_in_too_little_room_is_corrupt_not_too_large():
    def block(offset: int) -> bytes:
        # one zero literal, then a match of about 4 MiB at `offset`, then five literals
        return bytes([0x1F, 0x00, offset, 0x00]) + b"\xff" * 16_000 + bytes([0x00, 0x50]) + bytes(5)

    sound = _lz4_frame([block(1)], block_id=7)
    assert len(decompress(3, sound)) > 4_000_000
    assert isinstance(raises_corrupt(3, sound, max_output_size=MiB), InflatedTooLarge)
    err = raises_corrupt(3, _lz4_frame([block(16)], block_id=7), max_output_size=MiB)  # offset past the start
    assert not isinstance(err, InflatedTooLarge)


@settings(max_examples=60, deadline=None)
@given(
    payload=st.binary(max_size=40_000) | st.sampled_from([MIXED, TEXT, bytes(300_000)]),
    size=st.integers(min_value=1, max_value=400_000),
    block_id=st.sampled_from([4, 7]),
)
def test_lz4_prefix_matches_the_whole(payload, size, block_id):
    """Blocks cut by `decompress_prefix` (inflated whole and cut, or decoded sequence by sequence when
    large) give exactly the first bytes of the full inflate; gzip likewise."""
    block_size = 64 * 1024 if block_id == 4 else 4 * MiB
    chunks = [payload[i : i + block_size] for i in range(0, len(payload), block_size)] or [b""]
    frame = _lz4_frame(
        [bytes(cramjam.lz4.compress_block(chunk, store_size=False)) for chunk in chunks], block_id=block_id
    )
    assert bytes(decompress(3, frame)) == payload
    assert bytes(decompress_prefix(3, frame, size)) == payload[:size]
    assert bytes(decompress_prefix(1, compress(1, payload), size)) == payload[:size]
