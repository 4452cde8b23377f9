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
