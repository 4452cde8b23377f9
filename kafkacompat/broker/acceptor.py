"""Acceptor threads: every listening socket's backlog drained off the event loop.

Theory of operation
-------------------
Kafka runs an Acceptor thread per listener that accepts and hands connections to its processors. Here
an `Acceptors` pool runs one thread per listening socket (a listener bound to several addresses has
several), and the trio loop admits what they accepted (server.Broker._admit_accepted): per-address
refusal, quota throttling, buffer sizes and counting all stay on the loop, the only mutator of broker
state. A thread only accepts and hands over.

Why a thread: an accept loop on the event loop runs once per turn, and behind 10,000 connections each
pipelining requests a turn took up to 0.2 s; a flood of new connections then overflowed the kernel's
listen backlog and the kernel dropped new clients' SYNs, which retransmit after 1, 3, 7, 15, 31 s (a
new client's first round trip: 30.3 s). A thread keeps the backlog drained whatever the loop is doing;
what the loop has not admitted yet waits in a queue here, in order, with no retransmit backoff.

Credit: the loop grants how many more connections may exist (`grant(allowed)`: the lower of
max.connections and the open-file cap minus the connections it counts, and what
max.connection.creation.rate allows now). Accepted sockets not yet admitted count against it, so a
thread stops accepting at the cap, as Kafka's acceptor does (KIP-402): further clients wait in the
kernel backlog, not accepted-and-closed, and a burst never admits one too many. A thread with no credit
waits on its wake-up pipe only; a grant that makes the credit positive, and `close()`, write to it.

The GIL: `socket.accept()` releases and re-acquires the GIL, and with the loop thread CPU-bound a
re-acquire could wait for the switch interval (5 ms): 200 accepts a second at worst. Measured on a
2-core machine with tools/accept_bench.py (a trio loop thread spinning in pure Python, never
yielding, while another process opens 3,000 connections at once; the figures include that process's
own connecting), over two sessions: 2,000-10,000 accepts a second with no other load, 2,800-10,800
with two CPU-spinning processes, 1,900-5,900 with four. A burst taken with libc's accept4 through
ctypes.PyDLL (the GIL held for the whole burst) measured 8,250-18,500, 3,660-8,400 and 2,160-6,400:
faster when the machine is idle, about the same under load, where the CPU rather than the GIL bounds
the rate. Either is one or two orders above what the event loop took (at most 65 connections a turn,
325 a second with 0.2 s turns) and above the 200 a second a 5 ms GIL wait per accept would allow,
and the long-form flood of 10,000 pipelining connections overflowed no backlog (ListenOverflows +0),
so plain `socket.accept()` it is, without ctypes or raw descriptors. Bursts are still taken whole (up
to BURST per wake-up) and the loop is notified once per burst.

Shutdown: a thread blocked in accept() is not woken by close() on Linux, so the threads block in
poll() on the listening socket (a duplicate of the descriptor, owned by the thread) and the wake-up
pipe; `close()` wakes and joins them, and closes every accepted socket the loop did not take.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import select
import socket
import threading
from collections.abc import Callable

__all__ = ["Acceptors"]

log = logging.getLogger("kafkacompat.broker.acceptor")

BURST = 1024  # accepts per poll wake-up at most (the credit and the backlog usually end it first)
JOIN_SECONDS = 5.0
# accept errors that concern one connection (reset or refused before it was accepted): take the next
_TRANSIENT = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR}
ERROR_BACKOFF_SECONDS = 0.1  # after EMFILE and the like, before the backlog is looked at again


class _Acceptor:
    """One thread accepting on one listening socket (its own duplicate of the descriptor)."""

    def __init__(self, pool: Acceptors, name: str, listening_fd: int) -> None:
        self.pool = pool
        self.name = name
        self.sock = socket.socket(fileno=os.dup(listening_fd))
        self.sock.setblocking(False)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        address = self.sock.getsockname()
        self.thread = threading.Thread(
            target=self._run, name=f"kafkacompat-acceptor-{name}-{address[1]}", daemon=True
        )

    def wake(self) -> None:
        try:
            os.write(self.wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass  # a full pipe wakes it all the same; a closed one belongs to a thread that is gone

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.wake_r, select.POLLIN)
        listening = False  # whether the listening socket is registered (only with credit)
        backoff = None
        try:
            while True:
                may_accept = self.pool._may_accept()
                if may_accept is None:
                    return  # closed
                if may_accept != listening:
                    if may_accept:
                        poller.register(self.sock.fileno(), select.POLLIN)
                    else:
                        poller.unregister(self.sock.fileno())
                    listening = may_accept
                events = poller.poll(None if backoff is None else backoff * 1000)
                backoff = None
                ready = False
                for fd, _ in events:
                    if fd == self.wake_r:
                        try:
                            while os.read(self.wake_r, 4096):
                                pass
                        except BlockingIOError:
                            pass
                    else:
                        ready = True
                if ready:
                    backoff = self.pool._accept_burst(self)
        except Exception:
            log.exception("acceptor %s failed; no more connections are accepted on it", self.name)
        finally:
            self.sock.close()


class Acceptors:
    """The acceptor threads of one broker, the credit they share and what they accepted."""

    def __init__(self, notify: Callable[[], None]) -> None:
        # called on an acceptor thread when sockets start waiting (once until the next take())
        self._notify = notify
        self._lock = threading.Lock()
        self._credit = 0  # connections the threads may still accept
        # accepts under way: credit taken, socket not yet queued (a grant must count them, or a grant
        # made meanwhile hands their credit out again and the cap is passed by one per thread)
        self._accepting = 0
        self._ready: collections.deque[tuple[str, socket.socket]] = collections.deque()
        self._notified = False
        self._closed = False
        self._acceptors: list[_Acceptor] = []

    def start(self, name: str, listening_fd: int) -> None:
        """A thread accepting on a duplicate of `listening_fd` for listener `name` (the descriptor stays
        the caller's)."""
        acceptor = _Acceptor(self, name, listening_fd)
        with self._lock:
            if self._closed:
                acceptor.sock.close()
                os.close(acceptor.wake_r)
                os.close(acceptor.wake_w)
                return
            self._acceptors.append(acceptor)
        acceptor.thread.start()

    # the loop's side

    def grant(self, allowed: int) -> None:
        """`allowed` more connections may exist besides those the loop has counted: the threads may
        accept that many less the ones waiting to be taken."""
        with self._lock:
            was = self._credit
            self._credit = max(0, allowed - len(self._ready) - self._accepting)
            wake = was <= 0 < self._credit and not self._closed
        if wake:
            for acceptor in self._acceptors:
                acceptor.wake()

    def take(self, limit: int) -> list[tuple[str, socket.socket]]:
        """Up to `limit` accepted sockets, oldest first, with their listener names."""
        with self._lock:
            count = min(limit, len(self._ready))
            taken = [self._ready.popleft() for _ in range(count)]
            self._notified = False
        return taken

    def waiting(self) -> int:
        with self._lock:
            return len(self._ready)

    def close(self) -> None:
        """Stop accepting: wake and join the threads (each closes its listening descriptor), then close
        what they accepted and nobody took. Idempotent."""
        with self._lock:
            self._closed = True
            acceptors, self._acceptors = self._acceptors, []
            left = list(self._ready)
            self._ready.clear()
        for acceptor in acceptors:
            acceptor.wake()
        for acceptor in acceptors:
            acceptor.thread.join(JOIN_SECONDS)
            if acceptor.thread.is_alive():  # never seen; its descriptors are left to it
                log.error("acceptor thread %s did not stop", acceptor.thread.name)
                continue
            os.close(acceptor.wake_r)
            os.close(acceptor.wake_w)
        with self._lock:  # anything a thread queued before it saw the close
            left.extend(self._ready)
            self._ready.clear()
        for _, sock in left:
            sock.close()

    # the threads' side

    def _may_accept(self) -> bool | None:
        with self._lock:
            if self._closed:
                return None
            return self._credit > 0

    def _accept_burst(self, acceptor: _Acceptor) -> float | None:
        """Accept what waits in the backlog, within the credit. Returns a back-off in seconds after an
        error such as EMFILE (the backlog would stay readable and the thread would spin), else None."""
        accepted = 0
        backoff = None
        while accepted < BURST:
            with self._lock:
                if self._closed or self._credit <= 0:
                    break
                self._credit -= 1
                self._accepting += 1
            try:
                sock, _ = acceptor.sock.accept()
            except (BlockingIOError, InterruptedError):
                sock = None
            except OSError as exc:
                sock = None
                if exc.errno in _TRANSIENT:
                    with self._lock:
                        self._credit += 1
                        self._accepting -= 1
                    continue
                log.warning("accept failed on %s: %s", acceptor.name, exc)
                backoff = ERROR_BACKOFF_SECONDS
            if sock is None:
                with self._lock:
                    self._credit += 1
                    self._accepting -= 1
                break
            accepted += 1
            with self._lock:
                self._accepting -= 1
                if self._closed:
                    closed = True
                else:
                    closed = False
                    self._ready.append((acceptor.name, sock))
            if closed:
                sock.close()
                break
        if accepted:
            with self._lock:
                # only a notification sent marks one pending: when the loop took this burst before
                # we got here, nothing is pending, and marking one would silence the next burst's
                notify = not self._notified and bool(self._ready)
                self._notified = self._notified or notify
            if notify:
                self._notify()
        return backoff
