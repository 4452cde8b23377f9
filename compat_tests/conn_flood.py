"""A connection flood in a process of its own (its own open-file limit), for the connection tests.

`python -m compat_tests.conn_flood PORT COUNT MODE` opens COUNT plain TCP connections to 127.0.0.1:PORT
and then, by MODE:

- `hello`: sends one ApiVersions v0 request on each and reads the answer;
- `loris`: announces a 1 MiB request on each, sends its first bytes and then one more byte every second
  (a slow-loris sender, the worst kind for memory: a request that never completes in time);
- `pipeline`: sends PIPELINE (`--pipeline`, default 2,000) ApiVersions requests back to back on each
  without reading any answer.

It prints one JSON line with what happened (`connected`, `answered`, `closed_by_broker`, `pending`) once
every connection has an outcome or `settle` seconds have passed, then keeps the connections open until its
stdin closes (or, with `--watch`, reports connections the broker closes meanwhile, once per second).
Plain sockets and `selectors`: no client library could hold 10,000 connections in one process cheaply.
"""

from __future__ import annotations

import argparse
import errno
import json
import resource
import selectors
import socket
import struct
import sys
import threading
import time

PIPELINE = 2000
HANDSHAKE_WINDOW = 1000
_TCP_CLOSE, _TCP_CLOSE_WAIT = 7, 8  # tcpi_state values (linux/tcp_states.h)


def api_versions_v0(correlation_id: int) -> bytes:
    client_id = b"flood"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def raise_file_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(wanted, hard), max(wanted, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Flood:
    """Every connection of the flood and what the broker did with it (owned by the main thread)."""

    def __init__(self, port: int, count: int, mode: str, pipeline: int = PIPELINE) -> None:
        self.port = port
        self.pipeline = pipeline
        self.count = count
        self.mode = mode
        self.selector = selectors.DefaultSelector()
        self.sockets: list[socket.socket] = []
        self.received: dict[int, bytearray] = {}
        self.answered = 0
        self.answered_fds: set[int] = set()
        self.closed = 0  # connections the broker closed (answered first or not)
        self.closed_unanswered = 0
        self.connect_failed = 0
        self.handshaking = 0  # connections whose TCP handshake has not completed yet

    def connect_all(self) -> None:
        for index in range(self.count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            code = sock.connect_ex(("127.0.0.1", self.port))
            if code not in (0, errno.EINPROGRESS):
                sock.close()
                self.connect_failed += 1
                continue
            self.sockets.append(sock)
            self.received[sock.fileno()] = bytearray()
            self.selector.register(sock, selectors.EVENT_WRITE, index)
            self.handshaking += 1
            if index % 200 == 199:
                # Pace the flood: at most HANDSHAKE_WINDOW handshakes pending (up to 2 s per step). Faster,
                # the kernel's SYN and accept queues overflow and it resets connections itself, which
                # would measure the kernel, not the broker.
                deadline = time.monotonic() + 2.0
                self._pump(0.0)
                while self.handshaking > HANDSHAKE_WINDOW and time.monotonic() < deadline:
                    self._pump(0.05)

    def _on_writable(self, sock: socket.socket, index: int) -> None:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self._drop(sock, failed=True)  # counts the handshake as over
            return
        self.handshaking -= 1
        request = api_versions_v0(index)
        try:
            if self.mode == "hello":
                sock.send(request)
            elif self.mode == "loris":
                sock.send(struct.pack(">i", 1 << 20) + request[4:])
            else:
                requests = self.pipeline
                sock.send(b"".join(api_versions_v0(index * requests + i) for i in range(requests)))
        except BlockingIOError:
            pass  # pipeline: the rest stays unsent; the broker's buffers are full, as intended
        except OSError:
            self._drop(sock)
            return
        if self.mode == "pipeline":
            self.selector.unregister(sock)  # it never reads; closes are seen through TCP_INFO instead
        else:
            self.selector.modify(sock, selectors.EVENT_READ, index)

    def _on_readable(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sock)
            return
        if sock.fileno() in self.answered_fds:
            return
        buffer = self.received[sock.fileno()]
        buffer += data
        if len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack_from(">i", buffer)[0]:
            self.answered += 1
            self.answered_fds.add(sock.fileno())
            buffer.clear()

    def _drop(self, sock: socket.socket, *, failed: bool = False) -> None:
        try:
            key = self.selector.unregister(sock)
            if key.events & selectors.EVENT_WRITE:
                self.handshaking -= 1
        except (KeyError, ValueError):
            pass
        if failed:
            self.connect_failed += 1
        else:
            self.closed += 1
            if sock.fileno() not in self.answered_fds:
                self.closed_unanswered += 1
        self.answered_fds.discard(sock.fileno())
        sock.close()

    def _pump(self, timeout: float) -> int:
        events = self.selector.select(timeout)
        for key, mask in events:
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if mask & selectors.EVENT_WRITE:
                self._on_writable(sock, key.data)
            elif mask & selectors.EVENT_READ:
                self._on_readable(sock)
        return len(events)

    def settle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            settled = self.answered + self.closed_unanswered + self.connect_failed
            if self.mode == "hello" and settled >= self.count:
                return
            self._pump(0.2)

    def trickle(self) -> None:
        """loris: one more byte of the unfinished request on every open connection."""
        for sock in list(self.sockets):
            if sock.fileno() < 0:
                continue
            try:
                sock.send(b"\x00")
            except BlockingIOError:
                pass
            except OSError:
                self._drop(sock)

    def count_peer_closed(self) -> None:
        """pipeline: connections whose TCP state says the broker closed them (nothing is read)."""
        still_open = []
        for sock in self.sockets:
            if sock.fileno() < 0:
                continue
            state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
            if state in (_TCP_CLOSE, _TCP_CLOSE_WAIT):
                self.closed += 1
                self.closed_unanswered += 1
                sock.close()
            else:
                still_open.append(sock)
        self.sockets = still_open

    def report(self) -> dict[str, int]:
        if self.mode == "pipeline":
            self.count_peer_closed()
        return {
            "connected": self.count - self.connect_failed,
            "answered": self.answered,
            "closed_by_broker": self.closed,
            "closed_unanswered": self.closed_unanswered,
            "pending": self.count - self.connect_failed - self.answered - self.closed_unanswered,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("mode", choices=("hello", "loris", "pipeline"))
    parser.add_argument("--settle", type=float, default=60.0)
    parser.add_argument("--watch", action="store_true")
    parser.add_argument("--pipeline", type=int, default=PIPELINE, help="requests per connection (pipeline)")
    args = parser.parse_args()
    raise_file_limit(args.count + 100)
    flood = Flood(args.port, args.count, args.mode, args.pipeline)
    flood.connect_all()
    flood.settle(args.settle)
    print(json.dumps(flood.report()), flush=True)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    last = time.monotonic()
    while not done.is_set():
        flood._pump(0.1)
        if time.monotonic() - last >= 1.0:
            last = time.monotonic()
            if args.mode == "loris":
                flood.trickle()
            if args.watch:
                print(json.dumps(flood.report()), flush=True)


if __name__ == "__main__":
    main()
