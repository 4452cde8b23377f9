"""Accept rate of kafkacompat.broker.acceptor.Acceptors while the trio loop thread is CPU-bound.

`python tools/accept_bench.py [--connections N] [--hogs H] [--pydll]`: a trio loop thread spins in pure
Python (never blocking, never yielding) while another process opens N connections at once; prints how
fast the acceptor thread took them. `--hogs` adds CPU-spinning processes (a loaded machine); `--pydll`
takes each burst with libc's accept4 through ctypes.PyDLL, the GIL held for the whole burst (the
alternative acceptor.py's docstring weighs). Linux only.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import socket
import subprocess
import sys
import time
from typing import Any

import trio

from kafkacompat.broker import acceptor
from kafkacompat.broker.acceptor import Acceptors

CLIENT = """
import socket, sys, time
sockets = []
for _ in range(int(sys.argv[2])):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
    except BlockingIOError:
        pass
    sockets.append(s)
time.sleep(120)
"""


def _pydll_burst(self: Any, one: Any) -> float | None:
    """Acceptors._accept_burst with accept4 called through ctypes.PyDLL: no GIL release per accept."""
    libc = ctypes.PyDLL(None, use_errno=True)
    accept4 = libc.accept4
    accept4.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    accept4.restype = ctypes.c_int
    accepted = 0
    while accepted < acceptor.BURST:
        with self._lock:
            if self._closed or self._credit <= 0:
                break
            self._credit -= 1
        fd = accept4(one.sock.fileno(), None, None, socket.SOCK_CLOEXEC)
        if fd < 0:
            with self._lock:
                self._credit += 1
            break
        accepted += 1
        with self._lock:
            self._ready.append((one.name, socket.socket(fileno=fd)))
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--hogs", type=int, default=0)
    parser.add_argument("--pydll", action="store_true")
    args = parser.parse_args()
    if args.pydll:
        Acceptors._accept_burst = _pydll_burst  # type: ignore[method-assign]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4096)
    port = server.getsockname()[1]
    result: dict[str, float] = {}

    async def run() -> None:
        pool = Acceptors(lambda: None)
        pool.grant(10**9)
        pool.start("PLAINTEXT", server.fileno())
        client = subprocess.Popen([sys.executable, "-c", CLIENT, str(port), str(args.connections)])
        started = time.monotonic()
        spin = 0
        while pool.waiting() < args.connections and time.monotonic() - started < 60:
            for i in range(200):  # the loop thread CPU-bound: no syscall, no yield
                spin += i * i
        result["seconds"] = time.monotonic() - started
        result["accepted"] = pool.waiting()
        client.kill()
        pool.close()

    try:
        trio.run(run)
    finally:
        for hog in hogs:
            hog.kill()
        server.close()
    rate = result["accepted"] / result["seconds"]
    print(
        f"{'pydll' if args.pydll else 'socket.accept'}: {result['accepted']:.0f} accepted in "
        f"{result['seconds']:.3f} s ({rate:.0f}/s), {args.hogs} hogs, load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
