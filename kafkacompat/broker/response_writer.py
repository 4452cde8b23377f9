"""How a connection writes its responses: gather-writes for bytes, sendfile for log data, staging on TLS.

Theory of operation
-------------------
A connection has one writer, used only by its request loop, which writes one framed response at a time
(`frame_response`: size prefix, header, body chunks). Bytes chunks go out as gather-writes
(`os.writev`); a chunk that is not bytes-like is a log `FileSlice` and goes out with `os.sendfile` from
the segment's fd straight to the socket fd, waiting for writability on EAGAIN and resuming after partial
sends, so fetched record data never passes through Python. Both call the socket's fd directly rather
than trio's socket methods, which give the loop back after every call that succeeded: a fetch answer
(header bytes, then a slice) would reach the client a whole turn of the loop after its header, and a
turn beside 64 busy connections takes 10-50 ms. A response yields only when the socket is full, or once
`_SEND_BYTES_PER_STEP` have gone out in one step. A slice that comes up short (segment truncated
meanwhile) closes the connection: the length prefix already promised those bytes. The bytes ahead of a
slice are not sent with MSG_MORE: it gains nothing measurable, and a partial sendfile with data held
back stalls a fetch for the kernel's 200 ms cork timeout.

TLS cannot go through sendfile, so `TlsResponseWriter` stages a response into large TLS writes (file
slices read with `preadv`). Whatever ends a write, the file slices of the response are released
(`release_file_slices`). `sending` and `progress_at` let the connection's idle reaper tell a stuck
write (a client that stopped reading) from a slow event loop.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Sequence
from typing import Any

import trio

from kafkacompat.broker.errors import CloseConnection

__all__ = [
    "FRAME_SIZE",
    "MERGED_FIRST_CHUNK_BYTES",
    "ResponseWriter",
    "TlsResponseWriter",
    "chunk_size",
    "frame_response",
    "release_file_slices",
]

FRAME_SIZE = struct.Struct(">i")  # the size prefix of every Kafka frame
_MAX_IOV = 512  # stay well under IOV_MAX (1024 on Linux)
# bytes one response writes in a step before it gives the loop back (a client reading as fast as the
# broker writes would otherwise let a response of hundreds of MB go out in one step)
_SEND_BYTES_PER_STEP = 1 << 20
_PEER_GONE_ERRNOS = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN)
_BYTES_LIKE = (bytes, bytearray, memoryview)


def chunk_size(chunk: Any) -> int:
    if isinstance(chunk, memoryview):
        return chunk.nbytes
    if isinstance(chunk, _BYTES_LIKE):
        return len(chunk)
    return int(chunk.size)


class ResponseWriter:
    """The single writer of one connection: gather-writes bytes, sendfile()s file slices.

    Owned by the connection loop; nothing else writes to the socket. `sending` and `progress_at` tell
    the connection's idle reaper whether a write is stuck (a client that stopped reading).
    """

    sending = False  # a response is being written
    progress_at = 0.0  # trio time of the last write progress (or of the start of this response)
    _unyielded = 0  # bytes this response has written since it last gave the loop back

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._sock = stream.socket

    async def send(self, chunks: Sequence[Any]) -> None:
        """Write one response; file slices that carry `release()` are released afterwards, sent or not."""
        self.progress_at = trio.current_time()
        self.sending = True
        try:
            await self._send(chunks)
        finally:
            self.sending = False
            release_file_slices(chunks)

    async def _send(self, chunks: Sequence[Any]) -> None:
        self._unyielded = 0
        pending: list[memoryview] = []
        for chunk in chunks:
            if isinstance(chunk, _BYTES_LIKE):
                if len(chunk):
                    pending.append(memoryview(chunk).cast("B"))
                continue
            if pending:
                await self._send_buffers(pending)
                pending = []
            await self._sendfile(chunk)
        if pending:
            await self._send_buffers(pending)

    async def _wrote(self, sent: int) -> None:
        """Account for bytes written; give the loop back once a step has written enough of them."""
        self.progress_at = trio.current_time()
        self._unyielded += sent
        if self._unyielded >= _SEND_BYTES_PER_STEP:
            self._unyielded = 0
            await trio.lowlevel.checkpoint()

    def _fileno(self) -> int:
        fd = self._sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the connection's socket was closed")
        return fd

    async def _send_buffers(self, buffers: list[memoryview]) -> None:
        sock = self._sock
        index = 0
        while index < len(buffers):
            batch = buffers[index : index + _MAX_IOV]
            try:
                sent = os.writev(self._fileno(), batch)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
                continue
            except OSError as exc:
                if exc.errno in _PEER_GONE_ERRNOS:
                    raise trio.BrokenResourceError(str(exc)) from exc
                raise
            await self._wrote(sent)
            # advance past what went out; a partial send leaves a tail of one buffer
            while sent > 0:
                head = buffers[index]
                if sent >= head.nbytes:
                    sent -= head.nbytes
                    index += 1
                else:
                    buffers[index] = head[sent:]
                    sent = 0

    async def _sendfile(self, file_slice: Any) -> None:
        position = file_slice.position
        remaining = file_slice.size
        while remaining > 0:
            try:
                sent = os.sendfile(self._fileno(), file_slice.fd, position, remaining)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self._sock)
                continue
            except OSError as exc:
                if exc.errno in _PEER_GONE_ERRNOS:
                    raise trio.BrokenResourceError(str(exc)) from exc
                raise
            if sent == 0:
                raise CloseConnection(f"file slice came up short by {remaining} bytes (segment truncated)")
            position += sent
            remaining -= sent
            await self._wrote(sent)


class TlsResponseWriter(ResponseWriter):
    """The single writer of a TLS connection: no sendfile through TLS, so responses are staged.

    Bytes chunks and file slices are gathered into one reusable staging buffer (file slices read into it
    with `os.preadv`, straight from the page cache: the only copy before encryption), which goes out as
    one TLS write whenever it fills and at the end of the response; a bytes chunk larger than the buffer
    goes out on its own. Large TLS writes mean full 16 KiB records and few system calls.

    Memory: the staging buffer exists only while a response is written. A response smaller than
    STAGING_BYTES is staged in a buffer of its own size; a larger one borrows a STAGING_BYTES buffer
    from a process-wide free list (at most STAGING_POOL kept), so an idle TLS connection holds none
    (before, each kept 1 MiB for life).
    """

    STAGING_BYTES = 1 << 20
    STAGING_POOL = 4
    _free_staging: list[bytearray] = []  # process-wide; list append and pop are atomic

    def __init__(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        self._tls = stream

    async def _send(self, chunks: Sequence[Any]) -> None:
        total = sum(chunk_size(chunk) for chunk in chunks)
        free = self._free_staging
        if total < self.STAGING_BYTES:
            staging = bytearray(total)
        else:
            staging = free.pop() if free else bytearray(self.STAGING_BYTES)
        try:
            await self._send_staged(chunks, memoryview(staging))
        finally:
            if len(staging) == self.STAGING_BYTES and len(free) < self.STAGING_POOL:
                free.append(staging)

    async def _send_staged(self, chunks: Sequence[Any], view: memoryview) -> None:
        limit = len(view)
        filled = 0
        for chunk in chunks:
            if isinstance(chunk, _BYTES_LIKE):
                data = memoryview(chunk).cast("B")
                size = data.nbytes
                if filled + size > limit:
                    if filled:
                        await self._tls.send_all(view[:filled])
                        self.progress_at = trio.current_time()
                        filled = 0
                    if size > limit:
                        await self._tls.send_all(data)
                        self.progress_at = trio.current_time()
                        continue
                view[filled : filled + size] = data
                filled += size
                continue
            position = chunk.position
            remaining = chunk.size
            while remaining > 0:
                if filled == limit:
                    await self._tls.send_all(view)
                    self.progress_at = trio.current_time()
                    filled = 0
                want = min(remaining, limit - filled)
                got = os.preadv(chunk.fd, [view[filled : filled + want]], position)
                if got <= 0:
                    raise CloseConnection(f"file slice came up short by {remaining} bytes (truncated)")
                filled += got
                position += got
                remaining -= got
        if filled:
            await self._tls.send_all(view[:filled])


#: a first body chunk of up to this many bytes is merged with the size prefix and header (one piece to
#: write); a larger one is written as it is, beside them: merging copied a 13 MB DescribeGroups answer
#: twice, 15 ms of one loop step (the writer gathers the pieces in one writev either way)
MERGED_FIRST_CHUNK_BYTES = 64 * 1024


def frame_response(header: bytes, body: list[Any]) -> list[Any]:
    """Size prefix + response header + encoded body chunks (a small first bytes chunk is merged in)."""
    size = len(header) + sum(chunk_size(chunk) for chunk in body)
    if body and isinstance(body[0], _BYTES_LIKE) and chunk_size(body[0]) <= MERGED_FIRST_CHUNK_BYTES:
        return [FRAME_SIZE.pack(size) + header + bytes(body[0]), *body[1:]]
    return [FRAME_SIZE.pack(size) + header, *body]


def release_file_slices(chunks: Sequence[Any]) -> None:
    """Give back the file descriptors that a response's file slices hold (fetch's HeldSlice)."""
    for chunk in chunks:
        release = getattr(chunk, "release", None)
        if release is not None and not isinstance(chunk, _BYTES_LIKE):
            release()
