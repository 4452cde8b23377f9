"""Size-prefixed framing of the Kafka wire protocol, sans-io.

Theory of operation: every request and response on a Kafka connection is an int32 size followed by
that many bytes. `FrameBuffer` owns the bytes a connection has received but not yet handed out as
frames. The connection (the trio edge) feeds it whatever `receive_some()` returned via
`receive_data()`, then drains complete frames with `next_frame()` until it returns None.

The size prefix is checked as soon as its four bytes have arrived: a negative size or one above
`max_frame_size` (Kafka's `socket.request.max.bytes`, 100 MiB by default) raises `DecodeError` at once,
before any of the body is awaited or buffered, and the buffer stays failed afterwards (the connection
must be closed, as Kafka closes it).

Cost model: received bytes are appended to one `bytearray`; consumed frames advance a read offset and
the consumed prefix is dropped only when it is large (or the buffer is empty), so many small frames do
not shift the buffer each time and a huge frame arriving in many chunks is appended in amortised linear
time (no re-joining of chunks). A frame is returned as a writable memoryview over its own `bytearray`
(one copy out of the receive buffer; none at all when the frame is the whole buffered tail), so the
caller may patch record batches in place (offset assignment) and keep the frame for as long as it likes.
`missing` tells the reader how many bytes the frame in progress still lacks, so it can size its reads.
"""

from __future__ import annotations

import struct

from kafkacompat.wire.errors import DecodeError

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "SIZE_PREFIX", "FrameBuffer"]

#: Kafka's `socket.request.max.bytes` default (100 MiB).
DEFAULT_MAX_FRAME_SIZE = 104_857_600

#: Width of the int32 size prefix that precedes every frame.
SIZE_PREFIX = 4

_SIZE = struct.Struct(">i")

# Drop the consumed prefix of the receive buffer once it is at least this large and at least half of
# the buffer: deleting a prefix costs a move of what follows, so doing it rarely keeps the total linear.
_COMPACT_THRESHOLD = 1 << 16


class FrameBuffer:
    """Reassembles size-prefixed frames from a byte stream.

    Owns the receive buffer of one connection; only that connection's reader touches it. Not thread-safe.
    """

    __slots__ = ("_buf", "_error", "_max_frame_size", "_start")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {max_frame_size}")
        self._max_frame_size = max_frame_size
        self._buf = bytearray()
        self._start = 0  # offset in _buf of the first byte not yet handed out
        self._error: DecodeError | None = None

    @property
    def max_frame_size(self) -> int:
        return self._max_frame_size

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as (part of) a frame."""
        return len(self._buf) - self._start

    @property
    def missing(self) -> int:
        """Bytes still to arrive before the next frame is complete; 0 if its size is not yet known.

        A hint for how much to ask the socket for. Never more than `max_frame_size` + 4 (a size above
        the limit makes `next_frame()` fail instead), so it cannot justify an outsized read.
        """
        start = self._start
        available = len(self._buf) - start
        if self._error is not None or available < SIZE_PREFIX:
            return 0
        (size,) = _SIZE.unpack_from(self._buf, start)
        if size < 0 or size > self._max_frame_size:
            return 0
        return max(0, SIZE_PREFIX + size - available)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes received from the peer (may be empty; may split frames anywhere)."""
        if self._error is not None:
            raise self._error
        if data:
            self._buf += data

    def next_frame(self) -> memoryview | None:
        """Return the next complete frame's payload (without its size prefix), or None if incomplete.

        Raises DecodeError as soon as a size prefix is negative or exceeds `max_frame_size`.
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        start = self._start
        available = len(buf) - start
        if available < SIZE_PREFIX:
            return None
        (size,) = _SIZE.unpack_from(buf, start)
        if size < 0 or size > self._max_frame_size:
            self._error = DecodeError(
                f"frame size {size} outside 0..{self._max_frame_size}", field="size"
            )
            # The rest of the stream is meaningless now; free it.
            self._buf = bytearray()
            self._start = 0
            raise self._error
        end = start + SIZE_PREFIX + size
        if end > len(buf):
            return None
        if end == len(buf):
            # The frame is everything that is buffered: hand over the buffer itself rather than copy
            # it (this is the common case for a large frame that arrived in many chunks).
            del buf[: start + SIZE_PREFIX]
            self._buf = bytearray()
            self._start = 0
            return memoryview(buf)
        frame = buf[start + SIZE_PREFIX : end]
        self._start = end
        if end >= _COMPACT_THRESHOLD and end * 2 >= len(buf):
            del buf[:end]
            self._start = 0
        return memoryview(frame)

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else f"{self.buffered} bytes buffered"
        return f"<FrameBuffer max_frame_size={self._max_frame_size} {state}>"
