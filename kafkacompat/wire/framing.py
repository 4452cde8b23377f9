"""Size-prefixed framing of the Kafka wire protocol, sans-io.

Theory of operation: every request and response on a Kafka connection is an int32 size followed by
that many bytes. `FrameBuffer` owns the bytes a connection has received but not yet handed out as
frames. The connection (the trio edge) asks it for a buffer to receive into (`receive_buffer()`), lets
the socket write into it (`recv_into`), reports how many bytes arrived (`commit()`), then drains complete
frames with `next_frame()` until it returns None. `receive_data()` does the same for bytes received
elsewhere (tests, clients).

The size prefix is checked as soon as its four bytes have arrived: a negative size or one above
`max_frame_size` (Kafka's `socket.request.max.bytes`, 100 MiB by default) raises `DecodeError` at once,
before any of the body is awaited or buffered, and the buffer stays failed afterwards (the connection
must be closed, as Kafka closes it).

Cost model: a large frame (a produce request of a megabyte) is received straight into a bytearray of
its own, sized to the frame: `receive_buffer()` lends exactly the bytes the frame still lacks, so the
socket never delivers the next request into it, and `next_frame()` hands that bytearray out as the
frame without copying anything. Its allocation grows with what has arrived (at most twice what has been
received plus `_FIRST_LARGE_ALLOCATION`, or plus `_SCRATCH_SIZE` while less than half a scratch buffer
of it has arrived), so a peer that announces a huge frame and sends little
cannot make the broker reserve the whole announced size; growing copies what is there, amortised
linear. Small frames share one scratch buffer that receives up to `_SCRATCH_SIZE` bytes per read (many
pipelined small requests per read) and are copied out, which for a few kilobytes is cheaper than a new
buffer per request. A connection waiting for its next request holds no scratch buffer: `release_idle()`
(called once everything received has been handed out) puts it on a process-wide free list of at most
`_POOL_SIZE` buffers, and the next `receive_buffer()` takes one from there, so idle connections cost no
receive memory and busy ones pay no allocation. Every frame is a writable memoryview that nothing else
refers to, so the caller may patch record batches in place (offset assignment) and keep the frame for as
long as it likes.
"""

from __future__ import annotations

import copy
import struct
from typing import NoReturn

from kafkacompat.wire.errors import DecodeError

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "SIZE_PREFIX", "FrameBuffer"]

#: Kafka's `socket.request.max.bytes` default (100 MiB).
DEFAULT_MAX_FRAME_SIZE = 104_857_600

#: Width of the int32 size prefix that precedes every frame.
SIZE_PREFIX = 4

_SIZE = struct.Struct(">i")

# Bytes lent per read while no large frame is in progress.
_SCRATCH_SIZE = 1 << 16
# Frames above this size are received into a buffer of their own and handed out without a copy; smaller
# ones are copied out of the scratch buffer.
_LARGE_FRAME = 1 << 14
# The first allocation for a large frame (or all of it, if smaller); later growth doubles what arrived.
_FIRST_LARGE_ALLOCATION = 1 << 20
# Idle scratch buffers kept for reuse (at most _POOL_SIZE * _SCRATCH_SIZE bytes = 16 MiB); list append
# and pop are atomic, so FrameBuffers of different threads may share it.
_POOL_SIZE = 256
_scratch_pool: list[bytearray] = []


class FrameBuffer:
    """Reassembles size-prefixed frames from a byte stream.

    Owns the receive buffer of one connection; only that connection's reader touches it. Not thread-safe.
    `_buf[_start:_end]` holds the bytes received and not yet handed out; `_buf[_end:]` is free space.
    """

    __slots__ = ("_buf", "_dedicated", "_end", "_error", "_lent", "_max_frame_size", "_start")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {max_frame_size}")
        self._max_frame_size = max_frame_size
        self._buf = bytearray()
        self._start = 0  # offset in _buf of the first byte not yet handed out
        self._end = 0  # offset in _buf just past the last byte received
        self._lent = 0  # size of the region the last receive_buffer() lent
        self._dedicated = False  # True while _buf was allocated for the large frame in progress
        self._error: DecodeError | None = None

    @property
    def max_frame_size(self) -> int:
        return self._max_frame_size

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as (part of) a frame."""
        return self._end - self._start

    def _frame_size(self) -> int:
        """Payload size of the frame in progress, or -1 if its prefix is incomplete or invalid."""
        if self._error is not None or self._end - self._start < SIZE_PREFIX:
            return -1
        (size,) = _SIZE.unpack_from(self._buf, self._start)
        if size < 0 or size > self._max_frame_size:
            return -1
        return size

    @property
    def missing(self) -> int:
        """Bytes still to arrive before the next frame is complete; 0 if its size is not yet known.

        Never more than `max_frame_size` + 4 (a size above the limit makes `next_frame()` fail instead).
        """
        size = self._frame_size()
        if size < 0:
            return 0
        return max(0, SIZE_PREFIX + size - (self._end - self._start))

    @property
    def announced(self) -> int:
        """The size the prefix of the first frame not yet handed out announces, or -1 if its prefix has
        not arrived (or is invalid: `next_frame()` reports that)."""
        return self._frame_size()

    def complete_frames(self) -> int:
        """How many complete frames are buffered and not yet handed out (for the metrics endpoint)."""
        if self._error is not None:
            return 0
        count = 0
        position = self._start
        while self._end - position >= SIZE_PREFIX:
            (size,) = _SIZE.unpack_from(self._buf, position)
            if size < 0 or size > self._max_frame_size or position + SIZE_PREFIX + size > self._end:
                break
            count += 1
            position += SIZE_PREFIX + size
        return count

    def receive_buffer(self) -> memoryview:
        """A writable region to receive the next bytes into; report what was written with `commit()`.

        While a large frame is in progress the region is at most the rest of that frame, so a read
        never runs into the next request; otherwise it is up to `_SCRATCH_SIZE` bytes.
        """
        if self._error is not None:
            raise self._failure()
        held = self._end - self._start
        size = self._frame_size()
        if size > _LARGE_FRAME and held < SIZE_PREFIX + size:
            # lend no more than the frame lacks: the next request must not land in this buffer
            want = SIZE_PREFIX + size - held
            free = len(self._buf) - self._end
            if not self._dedicated or free == 0:
                # a buffer of the frame's own, grown with what has arrived, not with what the prefix
                # announces; a frame whose first read brought little (a slow or hostile sender) starts
                # at a scratch buffer's size, not at 1 MiB
                fast = not self._dedicated and held >= _SCRATCH_SIZE // 2
                want = min(want, max(_FIRST_LARGE_ALLOCATION if fast else _SCRATCH_SIZE, held))
                self._move_to(bytearray(held + want))
                self._dedicated = True
            else:
                want = min(want, free)
        else:
            free = len(self._buf) - self._end
            if free < _SCRATCH_SIZE // 4:
                if _scratch_pool and held <= _SCRATCH_SIZE // 2:
                    self._move_to(_scratch_pool.pop())
                else:
                    self._move_to(bytearray(held + _SCRATCH_SIZE))
            want = len(self._buf) - self._end
        self._lent = want
        return memoryview(self._buf)[self._end : self._end + want]

    def release_idle(self) -> None:
        """Give the scratch buffer back to the free list before waiting for more bytes: an idle
        connection then holds no receive buffer, and one holding only part of a small frame keeps
        just those bytes (copied into a buffer of their own). A large frame's own buffer is kept."""
        if self._dedicated or not self._buf:
            return
        held = self._end - self._start
        if held > _LARGE_FRAME:
            return  # a buffer this full is about to become a large frame's anyway
        scratch = self._buf
        self._buf = bytearray(scratch[self._start : self._end]) if held else bytearray()
        self._start, self._end = 0, held
        if len(scratch) == _SCRATCH_SIZE and len(_scratch_pool) < _POOL_SIZE:
            _scratch_pool.append(scratch)

    def _move_to(self, new: bytearray) -> None:
        held = self._end - self._start
        new[:held] = memoryview(self._buf)[self._start : self._end]
        self._buf = new
        self._start = 0
        self._end = held

    def commit(self, count: int) -> None:
        """Record that `count` bytes were written at the start of the last `receive_buffer()` region."""
        if not 0 <= count <= self._lent:
            raise ValueError(f"committed {count} bytes of a {self._lent}-byte receive buffer")
        self._end += count
        self._lent = 0

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes received from the peer (may be empty; may split frames anywhere)."""
        if self._error is not None:
            raise self._failure()
        view = memoryview(data).cast("B")
        done = 0
        while done < view.nbytes:
            target = self.receive_buffer()
            count = min(target.nbytes, view.nbytes - done)
            target[:count] = view[done : done + count]
            target.release()
            self.commit(count)
            done += count

    def _failure(self) -> DecodeError:
        """A fresh copy of the stored error to raise: the stored one never carries a traceback, whose
        frames (holding this buffer) would make a reference cycle through `_error` that only the cyclic
        garbage collector frees, one per connection closed for a bad size."""
        assert self._error is not None
        return copy.copy(self._error)

    def _fail(self, size: int) -> NoReturn:
        self._error = DecodeError(f"frame size {size} outside 0..{self._max_frame_size}", field="size")
        # The rest of the stream is meaningless now; free it.
        self._buf = bytearray()
        self._start = self._end = 0
        self._dedicated = False
        raise self._failure()

    def next_frame(self) -> memoryview | None:
        """Return the next complete frame's payload (without its size prefix), or None if incomplete.

        Raises DecodeError as soon as a size prefix is negative or exceeds `max_frame_size`.
        """
        if self._error is not None:
            raise self._failure()
        buf = self._buf
        start = self._start
        if self._end - start < SIZE_PREFIX:
            return None
        (size,) = _SIZE.unpack_from(buf, start)
        if size < 0 or size > self._max_frame_size:
            self._fail(size)
        end = start + SIZE_PREFIX + size
        if end > self._end:
            return None
        if size <= _LARGE_FRAME:
            frame = buf[start + SIZE_PREFIX : end]
            if end == self._end:
                self._start = self._end = 0  # all handed out: reuse the space from the front
            else:
                self._start = end
            return memoryview(frame)
        # A large frame keeps its buffer; whatever arrived after it moves to a fresh one.
        tail = self._end - end
        self._buf = bytearray(max(tail, _SCRATCH_SIZE))
        self._buf[:tail] = memoryview(buf)[end : self._end]
        self._start, self._end = 0, tail
        self._dedicated = False
        return memoryview(buf)[start + SIZE_PREFIX : end]

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else f"{self.buffered} bytes buffered"
        return f"<FrameBuffer max_frame_size={self._max_frame_size} {state}>"
