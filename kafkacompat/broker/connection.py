"""One client connection: read frames, dispatch requests one at a time, write responses in order.

Theory of operation
-------------------
`Connection.run()` owns the stream of one accepted socket. It receives straight into the buffers a
sans-io `FrameBuffer` (limit `socket.request.max.bytes`) lends it (`recv_into`; a large produce request
lands in a buffer of its own and is never copied in Python) and handles each complete frame before it
reads the next one, which is exactly Kafka's "muted channel": requests of one connection are
processed one at a time and answered in the order they arrived; an acks=0 produce is processed in its
turn but answered with nothing. There is a single writer (`ResponseWriter`), used only by this loop.

Per frame: the fixed prefix (api key, version, correlation id) is read first. If the (key, version)
pair is not served (`dispatch.lookup`), ApiVersions gets a v0-format UNSUPPORTED_VERSION answer listing
every served key (KIP-511: the client retries with a version from that list); any other API makes the
connection close, as Kafka's socket server closes it. Otherwise the header and body are decoded with the
generated codecs, the handler runs, and its response object is encoded into a list of chunks.

Writing: bytes chunks go out as gather-writes (`os.writev`); a chunk that is not bytes-like is a log
`FileSlice` and goes out with `os.sendfile` from the segment's fd straight to the socket fd, waiting
for writability on EAGAIN and resuming after partial sends, so fetched record data never passes
through Python. Both call the socket's fd directly rather than trio's socket methods: those give the
loop back after every call that succeeded, so a fetch answer (header bytes, then a slice) reached the
client a whole turn of the loop after its header, and a turn beside 64 busy connections took 10-50 ms.
A response yields only when the socket is full, or once `_SEND_BYTES_PER_STEP` have gone out in one
step. A slice that comes up short (segment truncated meanwhile) closes the connection: the length prefix
already promised those bytes. (Sending the bytes ahead of a slice with MSG_MORE was tried:
no measurable gain, and a partial sendfile with data held back stalled fetches for the kernel's 200 ms
cork timeout.)

TLS and SASL (listeners of protocol SSL, SASL_PLAINTEXT, SASL_SSL; kafkacompat.security): a TLS
listener wraps the socket in a `trio.SSLStream` and completes the handshake (under the idle limit) before
the first request; the client certificate's subject becomes the principal when `ssl.client.auth` asks for
one. Receiving then copies decrypted bytes into the frame buffer, and `TlsResponseWriter` stages responses
(file slices read with `preadv`) into large TLS writes, since sendfile cannot encrypt. PLAINTEXT
listeners keep the raw-socket paths above untouched. A SASL listener gives the connection a `SaslSession`
(`info.sasl_session`): until it completes only ApiVersions, SaslHandshake and SaslAuthenticate pass, any
other request closes the connection unanswered; bare tokens after a v0 handshake are answered here; a
failed authentication is answered and the connection closes `connection.failed.authentication.delay.ms`
later. The only cost on a non-SASL connection is one `is not None` per request.

A handler that parks (a fetch short of min_bytes, for up to its max_wait_ms) parks through
`Connection.park`, which, once the park has lasted a few milliseconds, watches the socket: if the client
disconnects, the parked request is abandoned (`PeerGone`) instead of holding the connection. Requests
that do not park, and parks that end within those milliseconds (a consumer at the log end woken by the
next produce), pay for no second task.

Failure policy: a frame that cannot be decoded (bad size, bad header, bad body) closes this connection
only, logged at info; a handler exception is logged with its traceback and closes the connection; a
peer that goes away is not an error. Idle and stalled connections are closed: a reaper task per
connection cancels the loop once, for `connections.max.idle.ms`, (a) it has waited for a request that
has not arrived whole (bytes of an unfinished request do not restart the count, so a slow-loris sender
trickling one byte at a time is closed too: stricter than Kafka, which counts any byte as activity), or
(b) a response write has made no progress (a client that stopped reading its socket). Time spent
handling requests (a parked fetch, a join) does not count.

`queued.max.requests`: at most that many requests are handled at once, broker-wide (decoded and in
their handler; a parked request and a response being written hold no slot). A complete request that
finds no free slot waits for one, and its connection reads nothing more meanwhile: Kafka's network
threads likewise stop reading when its request queue of that size is full. The slots are a
`trio.Semaphore` the server puts on the broker state (`request_slots`).

Memory: a connection waiting for its next request holds no receive buffer (PLAINTEXT waits for
readability, then borrows a scratch buffer from FrameBuffer's free list; TLS waits in trio's
receive_some and copies what arrives; the scratch buffer goes back before a request is handled) and,
since requests are handled one at a time and the next bytes are read only after the response is
written, at most one response in flight: a client that pipelines requests without reading answers
stops being read once the kernel buffers fill. With `queued.max.request.bytes` set, each request is
charged against the broker-wide `RequestMemoryPool` (request_memory.py) before the rest of it is read
or it is handled, and the connection reads nothing while the budget is spent. The idle reaper looks at
the socket before closing: a request already in the kernel, or room to write, means the event loop is
behind, not the client.

Fairness (one event loop serves every connection; see also broker/fairness.py): each turn of the loop
runs every runnable connection once, one request each. A connection that pipelines far more requests
than any client library keeps in flight (PIPELINE_FAIR_SHARE in a row, each already received when the
one before was answered) handles its further requests through a broker-wide gate (`pipeline_gate`,
opened before its response is written and while it is parked), so a flood of such clients cannot make
every turn, and every other client's round trip, thousands of requests long. With the loop-lag monitor
on (broker/loop_lag.py), the request being handled is recorded for it.

Request log: at DEBUG, the `kafkacompat.request` logger gets one line per completed request (API,
version, correlation id, client id, peer, size, time from decoded request to response written), the
counterpart of Kafka's `kafka.request.logger`. When it is off the cost is one level check per request.

Quotas: while any client quota is configured (kafkacompat.security.quotas; `store.enforced`), each
request goes through `_handle_within_quotas`: produce bytes, fetch response bytes and handler time are
recorded against the connection's (user, client-id) quotas, the throttle time goes into the response's
throttle_time_ms, and after writing the response the loop sleeps that long before it reads on: Kafka's
muted channel (KIP-219; older Produce/Fetch versions get the delay before the response). A follower's
fetch in cluster mode is exempt. With no quota configured the cost is one attribute check per request.

Metrics: with `metrics.listener` set, `BrokerState.request_metrics` times each request (arrival of its
frame, handler start and end, parked time, response written) and counts it (broker/metrics.py); unset,
the cost is a None check per request.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import ssl
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.broker import dispatch, lock_wait, loop_lag
from kafkacompat.broker.context import ConnectionInfo, RequestContext
from kafkacompat.broker.errors import CloseConnection
from kafkacompat.broker.fairness import decode_off_loop, encode_off_loop
from kafkacompat.security.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    user_of,
)
from kafkacompat.security.sasl import FAILED, AuthenticationFailed
from kafkacompat.wire import header as wire_header
from kafkacompat.wire import messages
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import DecodeError, ErrorCode
from kafkacompat.wire.framing import FrameBuffer

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.security.listeners import ListenerSecurity

__all__ = ["Connection", "ResponseWriter", "TlsResponseWriter", "frame_response"]

log = logging.getLogger("kafkacompat.broker.connection")
# One line per completed request at DEBUG, like Kafka's `kafka.request.logger`; off by default, and
# switched on at run time as a BROKER_LOGGER config (kafka-configs --entity-type broker-loggers).
request_log = logging.getLogger("kafkacompat.request")

# how long a parked request waits before it also watches its socket for a departed client (see park)
_UNWATCHED_PARK_SECONDS = 0.005
# how long a closing TLS connection may take to send its close_notify
_CLOSE_NOTIFY_SECONDS = 1.0

# ApiVersions, SaslHandshake, SaslAuthenticate: never throttled by request_percentage (as in Kafka)
_REQUEST_QUOTA_EXEMPT = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# the first version whose client throttles itself on throttle_time_ms (KIP-219); older ones are delayed
_KIP_219_VERSIONS: dict[int, int] = {ApiKey.PRODUCE: 6, ApiKey.FETCH: 8}
_PREFIX = struct.Struct(">hhi")
_KEY = struct.Struct(">h")
_SIZE = struct.Struct(">i")
_MAX_IOV = 512  # stay well under IOV_MAX (1024 on Linux)
# bytes one response writes in a step before it gives the loop back (a client reading as fast as the
# broker writes would otherwise let a response of hundreds of MB go out in one step)
_SEND_BYTES_PER_STEP = 1 << 20
_PEER_GONE_ERRNOS = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN)
# Fairness to other clients: every turn of the event loop runs each runnable task once, so 1,000
# connections that each pipeline requests without waiting for answers made every turn, and so every other
# client's round trip, 1,000 requests long. A connection whose last PIPELINE_FAIR_SHARE requests were each
# already here when the one before was answered (more in flight than any client library keeps: 5 by
# default) passes a broker-wide gate (`BrokerState.pipeline_gate`, PIPELINED_AT_ONCE requests at a time)
# for its further requests, until it has none buffered; a connection waiting at the gate is not runnable.
PIPELINE_FAIR_SHARE = 16
# Slow senders: a PLAINTEXT connection whose last _TRICKLE_READS reads each brought fewer than
# _TRICKLE_BYTES of a request and completed none (a slow-loris sender; a client library writes a request
# at once, and even a slow link delivers a segment of about 1.4 KiB per read) is read at most once per
# delay, doubling from _TRICKLE_FIRST_DELAY up to _TRICKLE_MAX_DELAY (and a quarter of
# connections.max.idle.ms), while its bytes gather in the kernel. 19,000 such senders trickling a byte a
# second each otherwise cost the event loop 19,000 task steps a second, which on this machine delayed
# every other client by seconds. Its deadline (the idle limit) is unchanged.
_TRICKLE_READS = 4
_TRICKLE_BYTES = 1024
_TRICKLE_FIRST_DELAY = 0.25
_TRICKLE_MAX_DELAY = 8.0
_BYTES_LIKE = (bytes, bytearray, memoryview)
_TLS_RECEIVE_BYTES = 1 << 16  # decrypted bytes asked of trio's SSLStream per wait


def _chunk_size(chunk: Any) -> int:
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
        total = sum(_chunk_size(chunk) for chunk in chunks)
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
    size = len(header) + sum(_chunk_size(chunk) for chunk in body)
    if body and isinstance(body[0], _BYTES_LIKE) and _chunk_size(body[0]) <= MERGED_FIRST_CHUNK_BYTES:
        return [_SIZE.pack(size) + header + bytes(body[0]), *body[1:]]
    return [_SIZE.pack(size) + header, *body]


class _GateOpener(ResponseWriter):
    """The writer a gated request is handled with: opens the pipelining gate, then writes with the
    connection's own writer (see Connection._handle_pipelined)."""

    def __init__(self, connection: Connection) -> None:  # no socket of its own: super() is not called
        self._connection = connection

    async def send(self, chunks: Sequence[Any]) -> None:
        self._connection.release_gate()
        await self._connection.writer.send(chunks)


class PeerGone(Exception):
    """The client went away while a request was parked; the request is abandoned, the connection ends."""


class Connection:
    """One accepted connection and its request loop. Owned by the server, which may `drain()` it.

    Everything here runs in the connection's own task; `drain()` is called from the server's task.
    """

    def __init__(
        self,
        broker: BrokerState,
        stream: trio.SocketStream,
        listener_name: str,
        connection_id: int,
        security: ListenerSecurity | None = None,
    ):
        self.broker = broker
        self.stream = stream
        try:
            address = stream.socket.getpeername()
            peer = f"{address[0]}:{address[1]}"
        except OSError:
            peer = "?"
        self.info = ConnectionInfo(
            listener_name=listener_name,
            peer=peer,
            connection_id=connection_id,
            security_protocol=security.protocol if security is not None else "PLAINTEXT",
        )
        # TLS listeners wrap the socket; PLAINTEXT ones keep recv_into and sendfile on the raw socket
        self.tls: trio.SSLStream[trio.SocketStream] | None = None
        self._tls_ready = False  # the TLS handshake completed
        self._ssl_object: ssl.SSLObject | None = None
        self.writer: ResponseWriter
        if security is not None and security.tls is not None:
            self.tls = trio.SSLStream(stream, security.tls, server_side=True)
            # trio's SSLObject, read directly by _tls_recv_into to drain buffered records (a private
            # attribute: without it every record costs a trip through receive_some)
            self._ssl_object = getattr(self.tls, "_ssl_object", None)
            self.writer = TlsResponseWriter(self.tls)
            self._recv_into: Callable[[memoryview], Awaitable[int]] = self._tls_recv_into
        else:
            self.writer = ResponseWriter(stream)
            self._recv_into = stream.socket.recv_into
        if security is not None:
            self.info.sasl_session = security.new_session(broker.scram_credentials)
        self._frames = FrameBuffer(broker.config["socket.request.max.bytes"])
        self._draining = False
        self._receive_scope: trio.CancelScope | None = None
        self._receiving = False  # True only while run() awaits bytes (never while a request is handled)
        self._idle_since = 0.0  # trio time since which the loop waits for a whole request
        self._closed_why = "idle"  # what the reaper saw, for the log line
        # queued.max.requests, shared by every connection; None (tests without a server) means no limit
        self._slots: trio.Semaphore | None = broker.request_slots
        # the gate of requests of pipelining streaks (PIPELINE_FAIR_SHARE); held while one is handled
        self._pipeline_gate: trio.Semaphore | None = broker.pipeline_gate
        self._gated: trio.Semaphore | None = None
        self._request_task: trio.lowlevel.Task | None = None  # the task running the request loop
        # queued.max.request.bytes (request_memory.py), None when unset; the bytes this connection holds
        self._memory: Any = broker.request_memory
        self._charged = 0

    def drain(self) -> None:
        """Finish the request in progress (if any), then close; an idle connection closes at once."""
        self._draining = True
        if self._receiving and self._receive_scope is not None:
            self._receive_scope.cancel()

    async def run(self) -> None:
        """Serve requests until the peer closes, the connection idles out, or an error closes it."""
        idle_ms = self.broker.config["connections.max.idle.ms"]
        try:
            # The idle limit is kept by a reaper task, not by a deadline moved on every request: moving a
            # trio deadline twice per request was a tenth of the broker's time on the produce path.
            async with trio.open_nursery() as nursery:
                with trio.CancelScope() as receive_scope:
                    self._receive_scope = receive_scope
                    if idle_ms > 0:
                        nursery.start_soon(self._reap_when_idle, idle_ms / 1000, receive_scope)
                    await self._serve_and_log()
                nursery.cancel_scope.cancel()
            if receive_scope.cancelled_caught and not self._draining:
                log.info("closing connection %s: %s for %d ms", self.info.peer, self._closed_why, idle_ms)
        finally:
            with trio.CancelScope(shield=True):
                if self.tls is not None and self._tls_ready:
                    # close_notify, as Kafka's SSL transport sends it (not waiting for the peer's)
                    with trio.move_on_after(_CLOSE_NOTIFY_SECONDS):
                        try:
                            await self.tls.aclose()
                        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                            pass
                await self.stream.aclose()
            if self._charged:
                self._memory.release(self._charged)
                self._charged = 0
            # The task's context holds WAITER (this connection's bound method), so a reference back to
            # the task made a reference cycle of ~17 objects (task, coroutine, context, streams, socket,
            # buffers) per connection: left to the cyclic collector, the fuzzer's ~200 closed
            # connections a second made each young collection walk and free thousands of them (3-10 ms
            # pauses of the loop). Without the back reference it is all freed when the task ends.
            self._request_task = None

    async def _serve_and_log(self) -> None:
        """The request loop, with every way it can end turned into a log line (none escapes as an error).

        It runs in the connection's nursery body, where an escaping exception would come out wrapped in an
        ExceptionGroup; cancellation (the idle reaper, server shutdown) passes through untouched.
        """
        peer = self.info.peer
        try:
            await self._serve_requests()
        except PeerGone:
            log.debug("connection %s went away during a parked request", peer)
        except DecodeError as exc:
            log.info("closing connection %s: undecodable request: %s", peer, exc)
        except CloseConnection as exc:
            log.info("closing connection %s: %s", peer, exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass
        except Exception:
            log.exception("closing connection %s after an unexpected error", peer)

    async def _serve_requests(self) -> None:
        """The request loop: receive, then handle every complete frame in order, until EOF or drain."""
        frames = self._frames
        sock = self.stream.socket
        fileno = sock.fileno()
        plain = self.tls is None  # TLS reads go through the SSLStream, not the raw socket
        checkpoint = trio.lowlevel.checkpoint
        wait_readable = trio.lowlevel.wait_readable
        current_time = trio.current_time
        timed = self.broker.request_metrics is not None  # metrics hook: arrival times for queue time
        if self.tls is not None and not await self._tls_handshake():
            return
        # this task's requests wait for locks without a slot (tasks they start inherit the variable and are
        # told apart by `_request_task`)
        self._request_task = trio.lowlevel.current_task()
        lock_wait.WAITER.set(self.wait_unslotted)
        handled = True
        pipelined = 0  # requests in a row that were here before the previous one was answered
        gate = self._pipeline_gate
        woken = False  # woken by readability: this task's turn has just begun
        drained = False  # the last read emptied the socket (a short read)
        trickles = 0
        memory = self._memory
        idle_ms = self.broker.config["connections.max.idle.ms"]
        trickle_cap = _TRICKLE_MAX_DELAY if idle_ms <= 0 else min(_TRICKLE_MAX_DELAY, idle_ms / 4000)
        while not self._draining:
            # the idle count restarts after a request was handled, not on every byte (slow-loris)
            if handled or not frames.buffered:
                self._idle_since = current_time()
            # a short read that completed no request (a slow sender): the socket is empty, so wait
            # for readability at once instead of a turn and a read that finds nothing
            wait_first = drained and not handled
            handled = False
            self._receiving = True
            if memory is not None and not self._charged and frames.announced >= 0:
                # queued.max.request.bytes: the rest of a request whose size is known is read only once
                # that size is charged; with the budget spent the connection reads nothing (muted)
                self._charged = frames.announced
                if memory.depleted:
                    frames.release_idle()  # waiting, it keeps only the bytes it has
                await memory.allocate(self._charged)
            if plain:
                # Between requests, or with only part of a small one here, hold no scratch buffer while
                # waiting (a slow-loris sender keeps only its few bytes); borrow one for a read that
                # does not yield, so thousands of connections readable at once (a flood of requests or
                # of closes) never all hold a buffer at the same moment. The checkpoint keeps the loop
                # fair to other connections when this one always has bytes ready; a task just woken
                # by readability is already on its own turn. A byte trickled by a slow-loris sender so
                # costs one wake and one read, not three turns and two reads.
                frames.release_idle()
                if wait_first and trickles >= _TRICKLE_READS:
                    # a slow sender (see _TRICKLE_READS): let its bytes gather in the kernel meanwhile
                    doublings = min(trickles - _TRICKLE_READS, 8)
                    await trio.sleep(min(_TRICKLE_FIRST_DELAY * 2**doublings, trickle_cap))
                elif wait_first:
                    await wait_readable(sock)
                elif not woken:
                    await checkpoint()
                woken = False
                if loop_lag.enabled():
                    # cleared only now, after this step began: a step that handled a whole request
                    # without yielding ends labelled with it (the loop-lag monitor reads the label then)
                    loop_lag.CURRENT_REQUEST.set(None)
                with frames.receive_buffer() as buffer:
                    try:
                        received = os.readv(fileno, [buffer])
                    except BlockingIOError:
                        received = -1
                    drained = received < buffer.nbytes
                if received < 0:
                    frames.release_idle()
                    await wait_readable(sock)
                    woken, drained = True, False
                    continue
                frames.commit(received)
            else:
                # TLS: wait holding no receive buffer either (an idle TLS connection keeps none)
                frames.release_idle()
                received = await self._tls_receive(frames)
                if loop_lag.enabled():
                    loop_lag.CURRENT_REQUEST.set(None)  # as above
            self._receiving = False
            if not received:
                frames.release_idle()
                return
            arrived = time.perf_counter() if timed else 0.0
            frame = frames.next_frame()
            # reads in a row that each brought a few bytes of a request and completed none
            trickles = trickles + 1 if frame is None and received < _TRICKLE_BYTES else 0
            while frame is not None:
                handled = True
                if not frames.buffered:
                    # everything received is handed out: the scratch buffer goes back to the free list
                    # before the handler or the response write can yield (1,000 connections accepted in
                    # one step otherwise each held one across their first response)
                    frames.release_idle()
                if memory is not None and not self._charged:
                    self._charged = frame.nbytes  # a request that arrived whole: charged before handling
                    await memory.allocate(frame.nbytes)
                if pipelined >= PIPELINE_FAIR_SHARE and gate is not None:
                    await self._handle_pipelined(frame, arrived, gate)
                else:
                    await _handle_frame(
                        self.broker, self.info, self.writer, frame, self.park, arrived, self._slots
                    )
                if memory is not None:
                    memory.release(self._charged)  # handled: its bytes leave the budget
                    self._charged = 0
                if self._draining:
                    return
                frame = frames.next_frame()
                if frame is None:
                    if not frames.buffered:
                        pipelined = 0  # nothing more sent: the client may be waiting for its answers
                    break
                pipelined += 1  # sent before the client could have read the answer to the last one
                # a response is written without yielding (ResponseWriter), so requests already here
                # take turns with other connections' requests
                await checkpoint()

    async def _handle_pipelined(self, frame: memoryview, arrived: float, gate: trio.Semaphore) -> None:
        """A request of a connection deep in a pipelining streak: handled through the broker-wide gate that
        lets PIPELINED_AT_ONCE such requests in at a time (see PIPELINE_FAIR_SHARE). Waiting at the gate,
        the connection is not runnable, so it costs the event loop's turns nothing."""
        await gate.acquire()
        self._gated = gate
        try:
            await _handle_frame(
                self.broker, self.info, _GateOpener(self), frame, self.park, arrived, self._slots
            )
        finally:
            if self._gated is not None:
                self._gated = None
                gate.release()

    def release_gate(self) -> None:
        """The gated request's work is done (its response is about to be written): let the next one in.
        A response write may block for as long as the client does not read; it must not hold the gate."""
        gated = self._gated
        if gated is not None:
            self._gated = None
            gated.release()

    async def _tls_receive(self, frames: FrameBuffer) -> int:
        """Wait for decrypted bytes, then hand them and every TLS record already received to `frames`
        (committed); returns the bytes received, 0 at the end of the stream.

        Unlike `_tls_recv_into`, no receive buffer is borrowed until bytes are there, so a TLS connection
        waiting for its next request holds none (as a PLAINTEXT one). The first bytes come as trio's
        `receive_some` returns them and are copied once; the records trio has already pulled off the
        socket are then decrypted straight into the frame buffer (see `_tls_recv_into`).
        """
        tls = self.tls
        assert tls is not None
        data = await tls.receive_some(_TLS_RECEIVE_BYTES)
        if not data:
            return 0
        frames.receive_data(data)
        received = len(data)
        ssl_object = self._ssl_object
        if ssl_object is None:
            return received
        read = ssl_object.read
        while True:
            buffer = frames.receive_buffer()
            try:
                got = read(buffer.nbytes, buffer)
            except ssl.SSLError:  # want-read (nothing more buffered), or an error the next call reports
                got = 0
            frames.commit(got)
            if not got:
                return received
            received += got

    async def _tls_recv_into(self, buffer: memoryview) -> int:
        """Wait for decrypted bytes, then drain every TLS record already received without waiting.

        `SSLStream.receive_some` yields at most one TLS record (16 KiB, often much less: clients write
        small records) per call and a trip through the scheduler; a large produce request would cost
        hundreds of trips. Once the first bytes are in, the records trio has already pulled off the
        socket are decrypted straight into `buffer` with `SSLObject.read(n, buffer)` (no trip, no copy).
        Anything the TLS layer wants to send meanwhile (a TLS 1.3 key update) goes out with the next
        write, which trio flushes first.
        """
        tls = self.tls
        assert tls is not None
        data = await tls.receive_some(buffer.nbytes)
        received = len(data)
        buffer[:received] = data
        if not received or self._ssl_object is None:
            return received
        read = self._ssl_object.read
        limit = buffer.nbytes
        while received < limit:
            try:
                got = read(limit - received, buffer[received:])
            except ssl.SSLError:  # want-read (nothing more buffered), or an error the next call reports
                break
            if not got:
                break
            received += got
        return received

    async def _tls_handshake(self) -> bool:
        """The TLS handshake, under the idle limit; sets the mTLS principal. False: the connection ends."""
        assert self.tls is not None
        self._idle_since = trio.current_time()
        self._receiving = True  # the idle reaper also bounds a handshake that never completes
        try:
            await self.tls.do_handshake()
        except trio.BrokenResourceError as exc:
            reason = exc.__cause__ if exc.__cause__ is not None else exc
            log.info("closing connection %s: TLS handshake failed: %s", self.info.peer, reason)
            return False
        finally:
            self._receiving = False
        self._tls_ready = True
        from kafkacompat.security.tls import principal_of

        self.info.principal = principal_of(self.tls.getpeercert())
        return True

    async def _reap_when_idle(self, idle_seconds: float, receive_scope: trio.CancelScope) -> None:
        """Cancel `receive_scope` once the loop has waited `idle_seconds` for a whole request, or a
        response write has made no progress for that long.

        A request being handled (a parked fetch, a join) is never cut off; bytes of an unfinished request
        do not restart the count (a slow-loris sender is closed); each write progress does.
        """
        writer = self.writer
        while True:
            if writer.sending:
                due = writer.progress_at + idle_seconds
                if trio.current_time() >= due:
                    if self._socket_ready(select.POLLOUT):
                        # room to write: the write is not stuck on the client, only on the event loop
                        # that has not run it on (an overloaded broker)
                        writer.progress_at = trio.current_time()
                        continue
                    self._closed_why = "response write stalled (client not reading)"
                    receive_scope.cancel()
                    return
                await trio.sleep_until(due)
                continue
            if not self._receiving:
                # a write may start meanwhile: look again well within the limit
                await trio.sleep(idle_seconds / 4)
                continue
            due = self._idle_since + idle_seconds
            if trio.current_time() >= due:
                if not self._frames.buffered and self._socket_ready(select.POLLIN):
                    # the next request is in the kernel, unread only because the event loop lags (an
                    # overloaded broker): the client is not idle
                    self._idle_since = trio.current_time()
                    continue
                self._closed_why = "idle" if not self._frames.buffered else "request incomplete"
                receive_scope.cancel()
                return
            await trio.sleep_until(due)

    def _socket_ready(self, events: int) -> bool:
        """Whether the socket is ready now for `events` (POLLIN: bytes or the peer's close not yet
        read; POLLOUT: room in the send buffer)."""
        poller = select.poll()
        try:
            poller.register(self.stream.socket.fileno(), events)
            return any(ready & events for _, ready in poller.poll(0))
        except (OSError, ValueError):
            return False

    async def park(self, event: trio.Event, deadline: float) -> None:
        """Wait for `event` or `deadline` while watching the socket; raise PeerGone if the peer leaves.

        A parked fetch can wait for max_wait_ms; a client that disconnects meanwhile should not keep it
        (and this connection) alive that long. Bytes of later requests that arrive meanwhile are only
        buffered (up to one maximum frame), never processed: requests still run one at a time.
        """
        if self._slots is None and self._gated is None:
            await self._park(event, deadline)
            return
        # a parked request is not being handled: its slot (and pipelining gate) serve others meanwhile
        async with self._unslotted():
            await self._park(event, deadline)

    async def wait_unslotted(self, acquire: Callable[[], Awaitable[object]]) -> None:
        """Run `acquire` (a lock's) without this request's slot or gate, watching the socket; raise
        PeerGone if the client leaves before it returns (lock_wait.py). Once `acquire` has returned the
        request goes on, whatever the socket says."""
        if trio.lowlevel.current_task() is not self._request_task:
            await acquire()  # a task a request started: it holds no slot of this connection's
            return
        async with self._unslotted():
            if not await self._wait_watching(acquire):
                raise PeerGone

    @contextlib.asynccontextmanager
    async def _unslotted(self) -> AsyncIterator[None]:
        """The body runs without this request's queued.max.requests slot and pipelining gate (whichever it
        holds); both are taken back on the way out, whatever ends the body (park, wait_unslotted)."""
        slots = self._slots
        gated = self._gated
        if slots is not None:
            slots.release()
        if gated is not None:
            gated.release()
        try:
            yield
        finally:
            with trio.CancelScope(shield=True):  # the handler's exit releases them: they must be held then
                if gated is not None:
                    await _acquire(gated)
                if slots is not None:
                    await _acquire(slots)

    async def _park(self, event: trio.Event, deadline: float) -> None:
        # Most parks end within a few ms (a consumer at the log end wakes with the next produce); those
        # wait without a socket watcher, whose nursery and task cost more than the wait itself. Only a
        # park still waiting after that watches the socket, so a departed client is noticed at most
        # `_UNWATCHED_PARK_SECONDS` later.
        with trio.move_on_at(min(deadline, trio.current_time() + _UNWATCHED_PARK_SECONDS)):
            await event.wait()
        if event.is_set() or trio.current_time() >= deadline:
            return

        async def wait_for_event() -> None:
            with trio.move_on_at(deadline):
                await event.wait()

        if not await self._wait_watching(wait_for_event):
            raise PeerGone

    async def _wait_watching(self, wait: Callable[[], Awaitable[object]]) -> bool:
        """Run `wait` while reading what the client sends into the frame buffer (a parked request or a
        lock wait); False if the client left first (`wait` is then cancelled), True once `wait` returned."""
        frames = self._frames
        recv_into = self._recv_into
        finished = False

        async def watch(scope: trio.CancelScope) -> None:
            while frames.buffered < frames.max_frame_size:
                try:
                    received = await recv_into(frames.receive_buffer())
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                    received = 0  # a TLS peer gone without close_notify raises BrokenResourceError
                if not received:
                    scope.cancel()
                    return
                frames.commit(received)
            await trio.sleep_forever()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, nursery.cancel_scope)
            await wait()
            finished = True  # no checkpoint between: a cancel cannot land after `wait` returned
            nursery.cancel_scope.cancel()
        return finished


async def _handle_frame(
    broker: BrokerState,
    info: ConnectionInfo,
    writer: ResponseWriter,
    frame: memoryview,
    park: Callable[[trio.Event, float], Awaitable[None]],
    arrived: float = 0.0,
    slots: trio.Semaphore | None = None,
) -> None:
    if frame.nbytes < _PREFIX.size:
        raise DecodeError("request shorter than its header")
    session = info.sasl_session
    if session is not None and (
        session.raw_tokens or not session.allows(frame_api_key(frame), broker.clock())
    ):
        # a SASL listener before (or past the lifetime of) authentication: see _before_authentication
        await _before_authentication(session, info, writer, frame, broker.clock())
        return
    api_key, api_version, correlation_id = _PREFIX.unpack_from(frame)
    handler = dispatch.lookup(api_key, api_version, broker.cluster is not None)
    if handler is None:
        if api_key == ApiKey.API_VERSIONS:
            from kafkacompat.broker.handlers import api_versions

            answer = api_versions.unsupported_version_response(broker.cluster is not None)
            body = messages.encode_response(api_key, 0, answer)
            header_bytes = wire_header.encode_response_header(api_key, 0, correlation_id)
            await writer.send(frame_response(header_bytes, body))
            return
        raise CloseConnection(f"api key {api_key} version {api_version} is not served")
    if loop_lag.enabled():  # profiling: the loop-lag monitor names the request a slow step belongs to
        loop_lag.CURRENT_REQUEST.set((api_key, api_version, frame.nbytes))
    metrics = broker.request_metrics  # metrics hook: None unless metrics.listener is set
    timer = metrics.start(arrived, park) if metrics is not None else None
    if slots is not None:
        await _acquire(slots)  # queued.max.requests: held while decoding and in the handler
    try:
        header, body_offset = wire_header.decode_request_header(frame)
        # a large request is decoded off the loop (broker/fairness.py)
        request = await decode_off_loop(api_key, api_version, frame[body_offset:])
        ctx = RequestContext(
            broker=broker,
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            client_id=getattr(header, "client_id", None),
            connection=info,
            header=header,
            park=park if timer is None else timer.park,
        )
        logged = request_log.isEnabledFor(logging.DEBUG)
        started = time.perf_counter() if logged else 0.0
        # quota hook: one attribute check while no quota is configured; follower fetches are exempt
        # (replication has quotas of its own in Kafka, never client quotas)
        quota = broker.quotas.store.enforced and not _is_follower_fetch(broker, api_key, api_version, request)
        if not quota:
            response = await handler.handle(ctx, request)
    finally:
        if slots is not None:
            slots.release()
    if quota:
        # outside the slot: a throttled request may wait out its delay here
        response = await _handle_within_quotas(ctx, handler, request, writer, frame.nbytes, timer)
    else:
        if timer is not None:
            timer.done_handling()
        if response is not None:
            # a response of very many items is encoded off the loop (broker/fairness.py)
            body = await encode_off_loop(api_key, api_version, response)
            header_bytes = wire_header.encode_response_header(api_key, api_version, correlation_id)
            await writer.send(frame_response(header_bytes, body))
    if timer is not None:
        metrics.finish(timer, ctx, request, response)
    if logged:
        _log_completed(ctx, frame.nbytes, response is not None, started)
    if session is not None and session.state == FAILED:
        await _close_after_failed_authentication(session, info)


def _is_follower_fetch(broker: BrokerState, api_key: int, api_version: int, request: Any) -> bool:
    """A Fetch of a follower broker (cluster mode only: on a single node a replica id means nothing)."""
    if api_key != ApiKey.FETCH or broker.cluster is None:
        return False
    if api_version >= 15:
        state = getattr(request, "replica_state", None)
        return state is not None and state.replica_id >= 0
    return bool(request.replica_id >= 0)


async def _handle_within_quotas(
    ctx: RequestContext, handler: Any, request: Any, writer: ResponseWriter, request_bytes: int, timer: Any
) -> Any:
    """Handle and answer one request under client quotas (kafkacompat.security.quotas), as Kafka does.

    Produce records the request's size against producer_byte_rate, Fetch the response's size against
    consumer_byte_rate (its max_bytes capped to what the quota lets through in one whole window, as
    Kafka caps it), every request but the authentication ones its handler time against
    request_percentage. The largest throttle time goes into the response's throttle_time_ms; then, as
    KIP-219 has it, the response goes out at once and the connection stays muted (reads no next
    request) for that long; a client older than KIP-219 (Produce < v6, Fetch < v8) gets its response
    only after the delay instead. Parked time (a fetch waiting for data) is not handler time.
    """
    quotas = ctx.broker.quotas
    user = user_of(ctx.connection.principal)
    client_id = ctx.client_id or ""
    api_key, api_version = ctx.api_key, ctx.api_version
    if api_key == ApiKey.FETCH:
        window_bytes = quotas.quota_window_bytes(CONSUMER_BYTE_RATE, user, client_id)
        if window_bytes is not None and request.max_bytes > window_bytes:
            request.max_bytes = max(window_bytes, 1)
    parked = 0.0
    park = ctx.park

    async def timed_park(event: trio.Event, deadline: float) -> None:
        nonlocal parked
        began = time.perf_counter()
        try:
            await park(event, deadline)
        finally:
            parked += time.perf_counter() - began

    ctx.park = timed_park
    began = time.perf_counter()
    response = await handler.handle(ctx, request)
    handler_seconds = max(time.perf_counter() - began - parked, 0.0)
    if timer is not None:
        timer.done_handling()
    now = trio.current_time()
    throttle_ms = 0
    if api_key not in _REQUEST_QUOTA_EXEMPT:
        throttle_ms = quotas.record(REQUEST_PERCENTAGE, user, client_id, handler_seconds * 100, now)
    if api_key == ApiKey.PRODUCE:
        throttle_ms = max(throttle_ms, quotas.record(PRODUCER_BYTE_RATE, user, client_id, request_bytes, now))
    body: list[Any] | None = None
    if response is not None:
        body = messages.encode_response(api_key, api_version, response)
        if api_key == ApiKey.FETCH:
            size = sum(_chunk_size(chunk) for chunk in body)
            throttle_ms = max(throttle_ms, quotas.record(CONSUMER_BYTE_RATE, user, client_id, size, now))
            if throttle_ms > 0:
                # as Kafka's KafkaApis: a throttled fetch is answered empty and its bytes are taken back
                # off the quota; the client fetches the same offsets again once its delay is over
                quotas.unrecord(CONSUMER_BYTE_RATE, user, client_id, size, now)
                throttled = _throttled_fetch_response(ctx.broker, response)
                if throttled is not response:
                    release_file_slices(body)  # the records are not sent: their segment fds go back now
                    response = throttled
        if throttle_ms > 0 and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = max(response.throttle_time_ms, throttle_ms)
            body = messages.encode_response(api_key, api_version, response)
    if throttle_ms > 0 and api_version < _KIP_219_VERSIONS.get(api_key, 0):
        try:
            await trio.sleep(throttle_ms / 1000)  # an old client: the response itself is delayed
        except BaseException:
            if body is not None:
                release_file_slices(body)  # closed while delayed: the response is never written
            raise
        throttle_ms = 0
    if body is not None:
        header_bytes = wire_header.encode_response_header(api_key, api_version, ctx.correlation_id)
        await writer.send(frame_response(header_bytes, body))
    if throttle_ms > 0:
        await trio.sleep(throttle_ms / 1000)  # the muted channel: the next request is not read meanwhile
    return response


def release_file_slices(chunks: Sequence[Any]) -> None:
    """Give back the file descriptors that a response's file slices hold (fetch's HeldSlice)."""
    for chunk in chunks:
        release = getattr(chunk, "release", None)
        if release is not None and not isinstance(chunk, _BYTES_LIKE):
            release()


def _throttled_fetch_response(broker: BrokerState, response: Any) -> Any:
    """The empty answer of a throttled fetch: no partitions, the same session. What the handler recorded
    as reported to the session is forgotten, so the next incremental answer lists every partition again
    (Kafka, which decides to throttle before it updates the session, returns a new session's id as 0)."""
    if response.error_code != ErrorCode.NONE:
        return response
    broker.fetch_sessions.forget_reported(response.session_id)
    return type(response)(error_code=ErrorCode.NONE, session_id=response.session_id, responses=[])


async def _acquire(slots: trio.Semaphore) -> None:
    """Take a queued.max.requests slot; the free case costs no trip through the scheduler."""
    try:
        slots.acquire_nowait()
    except trio.WouldBlock:
        await slots.acquire()


def frame_api_key(frame: memoryview) -> int:
    """The api key of a request frame (-1 if the frame is too short to have one)."""
    return _KEY.unpack_from(frame)[0] if frame.nbytes >= _KEY.size else -1


async def _before_authentication(
    session: Any, info: ConnectionInfo, writer: ResponseWriter, frame: memoryview, now: float
) -> None:
    """A frame on a SASL connection that is a bare token, or a request not allowed at this point.

    After SaslHandshake v0 the frame is a bare SASL token: its answer goes back as a bare size-prefixed
    frame, and a refused token closes the connection (v0 has no error answer). Any request other than
    ApiVersions, SaslHandshake and SaslAuthenticate before authentication, or after the session's
    lifetime (connections.max.reauth.ms) without re-authentication, closes the connection without an
    answer, as Kafka's authenticator does.
    """
    if not session.raw_tokens:
        if session.complete:
            raise CloseConnection("SASL session expired (connections.max.reauth.ms), not re-authenticated")
        raise CloseConnection(f"api key {frame_api_key(frame)} sent before SASL authentication completed")
    try:
        challenge = session.authenticate(bytes(frame), now)
    except AuthenticationFailed:
        await _close_after_failed_authentication(session, info)
        return
    if session.complete:
        info.principal = session.principal or info.principal
        info.sasl_mechanism = session.mechanism
    await writer.send([_SIZE.pack(len(challenge)) + challenge])


async def _close_after_failed_authentication(session: Any, info: ConnectionInfo) -> None:
    """As Kafka: the failure is answered, then the close waits connection.failed.authentication.delay.ms."""
    await trio.sleep(session.failure_delay_ms / 1000)
    raise CloseConnection(f"authentication failed on listener {info.listener_name} ({session.mechanism})")


def _log_completed(ctx: RequestContext, request_bytes: int, answered: bool, started: float) -> None:
    spec = messages.API_SPECS.get(ctx.api_key)
    request_log.debug(
        "Completed request: %s v%d correlation_id=%d client_id=%s from %s (listener %s, connection %d),"
        " %d bytes, %s in %.3f ms",
        spec.name if spec is not None else ctx.api_key,
        ctx.api_version,
        ctx.correlation_id,
        ctx.client_id,
        ctx.connection.peer,
        ctx.connection.listener_name,
        ctx.connection.connection_id,
        request_bytes,
        "answered" if answered else "no response due",
        (time.perf_counter() - started) * 1000,
    )
