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

Writing: one `ResponseWriter` per connection (response_writer.py) writes each response straight to
the socket's fd, file slices with `os.sendfile`, and yields only when the socket is full or a step
has written enough; `TlsResponseWriter` stages responses into large TLS writes instead.

TLS and SASL (listeners of protocol SSL, SASL_PLAINTEXT, SASL_SSL; kafkacompat.security): a TLS
listener wraps the socket in a `trio.SSLStream` and completes the handshake (under the idle limit) before
the first request; the client certificate's subject becomes the principal when `ssl.client.auth` asks for
one. Receiving then copies decrypted bytes into the frame buffer, and `TlsResponseWriter` writes the
responses (sendfile cannot encrypt). PLAINTEXT listeners keep the raw-socket paths above untouched. A SASL
listener gives the connection a `SaslSession` (`info.sasl_session`): until it completes only ApiVersions,
SaslHandshake and SaslAuthenticate pass, any other request closes the connection unanswered; bare tokens
after a v0 handshake are answered here; a failed authentication is answered and the connection closes
`connection.failed.authentication.delay.ms` later. The only cost on a non-SASL connection is one
`is not None` per request.

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
on (diagnostics/loop_lag.py), the request being handled is recorded for it.

Request log: at DEBUG, the `kafkacompat.request` logger gets one line per completed request (API,
version, correlation id, client id, peer, size, time from decoded request to response written), the
counterpart of Kafka's `kafka.request.logger`. When it is off the cost is one level check per request.

Quotas: while any client quota is configured (`store.enforced`), each request goes through
`request_quotas.handle_within_quotas`, which records it against the connection's quotas, throttles
its response and mutes the connection for the throttle time (KIP-219). With no quota configured the
cost is one attribute check per request.

Metrics: with `metrics.listener` set, `BrokerState.request_metrics` times each request (arrival of its
frame, handler start and end, parked time, response written) and counts it (broker/metrics.py); unset,
the cost is a None check per request.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import ssl
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.broker import dispatch, lock_wait
from kafkacompat.broker.context import ConnectionInfo, RequestContext
from kafkacompat.broker.errors import CloseConnection
from kafkacompat.broker.fairness import decode_off_loop, encode_off_loop
from kafkacompat.broker.request_quotas import handle_within_quotas, is_follower_fetch
from kafkacompat.broker.response_writer import (
    FRAME_SIZE,
    MERGED_FIRST_CHUNK_BYTES,
    ResponseWriter,
    TlsResponseWriter,
    frame_response,
    release_file_slices,
)
from kafkacompat.diagnostics import loop_lag
from kafkacompat.security.sasl import FAILED, AuthenticationFailed
from kafkacompat.wire import header as wire_header
from kafkacompat.wire import messages
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import DecodeError
from kafkacompat.wire.framing import FrameBuffer

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.security.listeners import ListenerSecurity

__all__ = [
    "MERGED_FIRST_CHUNK_BYTES",
    "Connection",
    "ResponseWriter",
    "TlsResponseWriter",
    "frame_response",
    "release_file_slices",
]

log = logging.getLogger("kafkacompat.broker.connection")
# One line per completed request at DEBUG, like Kafka's `kafka.request.logger`; off by default, and
# switched on at run time as a BROKER_LOGGER config (kafka-configs --entity-type broker-loggers).
request_log = logging.getLogger("kafkacompat.request")

# how long a parked request waits before it also watches its socket for a departed client (see park)
_UNWATCHED_PARK_SECONDS = 0.005
# how long a closing TLS connection may take to send its close_notify
_CLOSE_NOTIFY_SECONDS = 1.0

_PREFIX = struct.Struct(">hhi")
_KEY = struct.Struct(">h")
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
_TLS_RECEIVE_BYTES = 1 << 16  # decrypted bytes asked of trio's SSLStream per wait
# the name broker/_tests/test_quotas.py imports from here (the quota path is in request_quotas.py)
_is_follower_fetch = is_follower_fetch


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
    handler = dispatch.lookup(api_key, api_version, broker.cluster_mode)
    if handler is None:
        if api_key == ApiKey.API_VERSIONS:
            from kafkacompat.broker.handlers import api_versions

            answer = api_versions.unsupported_version_response(broker.cluster_mode)
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
        quota = broker.quotas.store.enforced and not is_follower_fetch(broker, api_key, api_version, request)
        if not quota:
            response = await handler.handle(ctx, request)
    finally:
        if slots is not None:
            slots.release()
    if quota:
        # outside the slot: a throttled request may wait out its delay here
        response = await handle_within_quotas(ctx, handler, request, writer, frame.nbytes, timer)
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
    await writer.send([FRAME_SIZE.pack(len(challenge)) + challenge])


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
