import itertools
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkacompat.wire.errors import DecodeError
from kafkacompat.wire.framing import DEFAULT_MAX_FRAME_SIZE, FrameBuffer


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def drain(fb: FrameBuffer) -> list[bytes]:
    out = []
    while (f := fb.next_frame()) is not None:
        out.append(bytes(f))
    return out


def test_default_max_is_kafka_socket_request_max_bytes():
    assert DEFAULT_MAX_FRAME_SIZE == 100 * 1024 * 1024
    assert FrameBuffer().max_frame_size == DEFAULT_MAX_FRAME_SIZE


def test_single_frame_and_incomplete():
    fb = FrameBuffer()
    assert fb.next_frame() is None
    fb.receive_data(b"\x00\x00")
    assert fb.next_frame() is None
    fb.receive_data(b"\x00\x03ab")
    assert fb.next_frame() is None
    assert fb.buffered == 6
    fb.receive_data(b"c")
    f = fb.next_frame()
    assert isinstance(f, memoryview)
    assert bytes(f) == b"abc"
    assert fb.next_frame() is None
    assert fb.buffered == 0


def test_zero_length_frame():
    fb = FrameBuffer()
    fb.receive_data(frame(b"") + frame(b"x"))
    assert drain(fb) == [b"", b"x"]


def test_frame_is_writable_and_independent_of_later_data():
    fb = FrameBuffer()
    fb.receive_data(frame(b"hello") + frame(b"world") + b"\x00")
    first = fb.next_frame()
    second = fb.next_frame()
    assert first is not None and second is not None
    first[0:1] = b"J"  # records are patched in place (offset assignment)
    fb.receive_data(b"\x00\x00\x02zz" + frame(b"q" * 100_000))
    assert bytes(first) == b"Jello"
    assert bytes(second) == b"world"
    assert drain(fb) == [b"zz", b"q" * 100_000]


@pytest.mark.parametrize("size", [-1, -(2**31), 1001, 2**31 - 1])
def test_bad_size_raises_at_once_without_body(size):
    fb = FrameBuffer(max_frame_size=1000)
    fb.receive_data(struct.pack(">i", size))  # nothing of the body has arrived
    with pytest.raises(DecodeError):
        fb.next_frame()
    # The buffer stays failed: the connection must close.
    with pytest.raises(DecodeError):
        fb.next_frame()
    with pytest.raises(DecodeError):
        fb.receive_data(b"more")


def test_bad_size_after_good_frames():
    fb = FrameBuffer(max_frame_size=10)
    fb.receive_data(frame(b"ok") + struct.pack(">i", 11))
    assert bytes(fb.next_frame()) == b"ok"
    with pytest.raises(DecodeError):
        fb.next_frame()


def test_max_size_is_inclusive():
    fb = FrameBuffer(max_frame_size=10)
    fb.receive_data(frame(b"0123456789"))
    assert drain(fb) == [b"0123456789"]


def test_negative_max_rejected():
    with pytest.raises(ValueError):
        FrameBuffer(max_frame_size=-1)


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
    drain_every_chunk=st.booleans(),
)
def test_random_chunking_roundtrip(payloads, cuts, drain_every_chunk):
    stream = b"".join(frame(p) for p in payloads)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    fb = FrameBuffer(max_frame_size=300)
    out: list[bytes] = []
    for a, b in itertools.pairwise(points):
        fb.receive_data(stream[a:b])
        if drain_every_chunk:
            out.extend(drain(fb))
    out.extend(drain(fb))
    assert out == payloads
    assert fb.buffered == 0


@settings(max_examples=100, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=50), max_size=10),
    bad=st.one_of(
        st.integers(max_value=-1, min_value=-(2**31)), st.integers(min_value=51, max_value=2**31 - 1)
    ),
    chunk=st.integers(min_value=1, max_value=7),
)
def test_bad_size_detected_after_any_chunking(payloads, bad, chunk):
    stream = b"".join(frame(p) for p in payloads) + struct.pack(">i", bad)
    fb = FrameBuffer(max_frame_size=50)
    out: list[bytes] = []
    with pytest.raises(DecodeError):
        for i in range(0, len(stream), chunk):
            fb.receive_data(stream[i : i + chunk])
            while (f := fb.next_frame()) is not None:
                out.append(bytes(f))
    assert out == payloads


def test_many_small_frames_is_linear():
    n = 200_000
    stream = b"".join(frame(b"%06d" % i) for i in range(n))
    fb = FrameBuffer()
    t0 = time.perf_counter()
    count = 0
    for i in range(0, len(stream), 65536):
        fb.receive_data(stream[i : i + 65536])
        while (f := fb.next_frame()) is not None:
            count += 1
            last = f
    elapsed = time.perf_counter() - t0
    assert count == n
    assert bytes(last) == b"%06d" % (n - 1)
    assert elapsed < 5.0, elapsed


def test_huge_frame_in_many_chunks_is_linear():
    size = 32 * 1024 * 1024
    payload = bytes(range(256)) * (size // 256)
    stream = frame(payload) + frame(b"tail")
    fb = FrameBuffer()
    chunk = 1024  # 32k chunks: a quadratic re-join would copy ~0.5 TB
    t0 = time.perf_counter()
    got = []
    view = memoryview(stream)
    for i in range(0, len(stream), chunk):
        fb.receive_data(view[i : i + chunk])
        got.extend(drain(fb))
    elapsed = time.perf_counter() - t0
    assert len(got) == 2
    assert got[0] == payload
    assert got[1] == b"tail"
    assert elapsed < 10.0, elapsed


def test_missing_counts_the_rest_of_the_frame_in_progress():
    fb = FrameBuffer(max_frame_size=1000)
    assert fb.missing == 0  # nothing yet: size unknown
    fb.receive_data(struct.pack(">i", 10)[:3])
    assert fb.missing == 0  # size prefix incomplete
    fb.receive_data(struct.pack(">i", 10)[3:] + b"abc")
    assert fb.missing == 7
    fb.receive_data(b"defghij" + struct.pack(">i", 500))
    assert fb.missing == 0  # first frame complete
    assert bytes(fb.next_frame()) == b"abcdefghij"
    assert fb.missing == 500
    fb.receive_data(bytes(100))
    assert fb.missing == 400


def test_missing_is_zero_for_an_oversized_or_negative_size():
    for size in (-5, 1001):
        fb = FrameBuffer(max_frame_size=1000)
        fb.receive_data(struct.pack(">i", size))
        assert fb.missing == 0
        with pytest.raises(DecodeError):
            fb.next_frame()
        assert fb.missing == 0


@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=5),
    cut=st.integers(min_value=0, max_value=2000),
)
def test_missing_bytes_complete_exactly_one_frame(payloads, cut):
    stream = b"".join(frame(p) for p in payloads)
    cut = min(cut, len(frame(payloads[0])) - 1)
    fb = FrameBuffer()
    fb.receive_data(stream[:cut])
    missing = fb.missing
    if cut < 4:
        assert missing == 0
        return
    assert missing == len(frame(payloads[0])) - cut
    fb.receive_data(stream[cut : cut + missing - 1] if missing > 1 else b"")
    if missing > 1:
        assert fb.next_frame() is None
    fb.receive_data(stream[cut + max(missing - 1, 0) : cut + missing])
    assert bytes(fb.next_frame()) == payloads[0]


# --- receiving through lent buffers (receive_buffer / commit), as the broker's connection does ---


def feed_by_lending(fb: FrameBuffer, stream: bytes, reads: list[int]) -> tuple[list[bytes], list[int]]:
    """Play a socket that delivers `stream` into lent buffers, at most reads[i] bytes per read."""
    out: list[bytes] = []
    lent_sizes: list[int] = []
    pos = 0
    i = 0
    while pos < len(stream):
        target = fb.receive_buffer()
        lent_sizes.append(target.nbytes)
        assert target.nbytes > 0
        limit = max(1, reads[i % len(reads)]) if reads else target.nbytes
        count = min(target.nbytes, len(stream) - pos, limit)
        i += 1
        target[:count] = stream[pos : pos + count]
        fb.commit(count)
        pos += count
        out.extend(drain(fb))
    return out, lent_sizes


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(
        st.sampled_from([0, 1, 100, 16_383, 16_384, 16_385, 70_000, 300_000, 1_200_000]), max_size=6
    ),
    reads=st.lists(st.integers(min_value=1, max_value=2_000_000), max_size=8),
)
def test_lent_buffers_roundtrip_small_and_large_frames(sizes, reads):
    payloads = [bytes([n % 251]) * n for n in sizes]
    stream = b"".join(frame(p) for p in payloads)
    fb = FrameBuffer()
    out, _ = feed_by_lending(fb, stream, reads)
    assert out == payloads
    assert fb.buffered == 0


def test_large_frame_is_received_in_place_and_never_reads_into_the_next_request():
    big = bytes(range(256)) * 4096  # 1 MiB
    stream = frame(big) + frame(b"next request")
    fb = FrameBuffer()
    prefix = fb.receive_buffer()
    first_read = 40_000  # what a first read of a fast sender brings (a slow one: see below)
    prefix[:first_read] = stream[:first_read]
    fb.commit(first_read)
    target = fb.receive_buffer()
    # exactly the rest of the frame: a read cannot swallow the start of the next request
    assert target.nbytes == len(big) + 4 - first_read
    target[:] = stream[first_read : 4 + len(big)]
    fb.commit(target.nbytes)
    got = fb.next_frame()
    assert got is not None
    assert got.obj is target.obj  # handed out without a copy
    assert bytes(got) == big
    got[0] = 0xFF  # the frame is the caller's: writing it must not disturb what comes next
    rest = fb.receive_buffer()
    rest[: len(stream) - 4 - len(big)] = stream[4 + len(big) :]
    fb.commit(len(stream) - 4 - len(big))
    assert drain(fb) == [b"next request"]


def test_a_trickling_large_frame_grows_from_a_small_buffer():
    """A sender that announces a large frame and sends little (slow-loris) gets a 64 KiB buffer, not
    1 MiB; the buffer then doubles with what arrives."""
    fb = FrameBuffer()
    fb.receive_data(struct.pack(">i", 1 << 20) + b"abc")
    target = fb.receive_buffer()
    assert target.nbytes <= 1 << 16
    target[:] = b"x" * target.nbytes
    fb.commit(target.nbytes)
    assert fb.receive_buffer().nbytes >= 1 << 16  # a fast sender from here on gets room at once


def test_announced_huge_frame_does_not_reserve_its_whole_size():
    fb = FrameBuffer()
    fb.receive_data(struct.pack(">i", DEFAULT_MAX_FRAME_SIZE))
    target = fb.receive_buffer()
    assert 0 < target.nbytes <= 1 << 20
    assert fb.missing == DEFAULT_MAX_FRAME_SIZE
    # the allocation only doubles with what has arrived
    target[:] = b"x" * target.nbytes
    fb.commit(target.nbytes)
    second = fb.receive_buffer()
    assert second.nbytes <= fb.buffered + 4


def test_commit_more_than_lent_is_refused():
    fb = FrameBuffer()
    target = fb.receive_buffer()
    with pytest.raises(ValueError):
        fb.commit(target.nbytes + 1)
    with pytest.raises(ValueError):
        fb.commit(-1)


def test_bad_prefix_through_lent_buffer_fails_before_body():
    fb = FrameBuffer(max_frame_size=100)
    target = fb.receive_buffer()
    target[:4] = struct.pack(">i", 101)
    fb.commit(4)
    with pytest.raises(DecodeError):
        fb.next_frame()
    with pytest.raises(DecodeError):
        fb.receive_buffer()


def test_complete_frames_counts_what_next_frame_would_hand_out():
    fb = FrameBuffer(max_frame_size=1 << 20)
    assert fb.complete_frames() == 0
    fb.receive_data(frame(b"a") + frame(b"bb") + frame(b"x" * 40_000) + frame(b"tail")[:5])
    assert fb.complete_frames() == 3
    assert fb.next_frame() is not None
    assert fb.complete_frames() == 2
    drain(fb)
    assert fb.complete_frames() == 0  # only the incomplete tail is left
    fb.receive_data(frame(b"tail")[5:])
    assert fb.complete_frames() == 1
    assert drain(fb) == [b"tail"]
