"""Sweep every served API for requests that hold the event loop: the worst task step each one took.

For each API key the broker serves, the fuzzer's seed request of its highest version is sent with one
of its arrays multiplied to N elements (each array in turn, one at a time), and the broker's loop-lag
monitor (kafkacompat/diagnostics/loop_lag.py, the thread's CPU time of every step over the threshold) says
which steps took longest. A handler that loops over a client's items without giving the loop back
(kafkacompat/broker/fairness.py) shows up as one long step of that request.

    PYTHONPATH=. .venv/bin/python tools/step_sweep.py [--elements 1000] [--threshold-ms 1.5] [--apis 24,42]

The broker runs in this process (a thread, a temp data dir), so the figures are CPU time on this
machine; steps are attributed to the array being multiplied at the time. Not a test: a profile.
"""

from __future__ import annotations

import argparse
import logging
import re
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HELD = re.compile(r"event loop held ([0-9.]+) ms by (.+?)(?:, \d+ bytes)? \(")


class _Worst(logging.Handler):
    """The worst step per (request being swept, kind of step), from the monitor's log lines."""

    def __init__(self) -> None:
        super().__init__()
        self.sweeping = "start-up"
        self.worst: dict[tuple[str, str], float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        match = HELD.match(record.getMessage())
        if match:
            key = (self.sweeping, match.group(2))
            self.worst[key] = max(self.worst.get(key, 0.0), float(match.group(1)))


class _Wire:
    """One plain connection: a request frame out, its whole answer read back."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.address = (host, int(port))
        self.correlation = 0
        self.sock = self._connect()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address)
        sock.settimeout(60)
        return sock

    def call(self, api_key: int, version: int, body: bytes) -> None:
        from kafkacompat.wire.header import RequestHeader, encode_request_header

        self.correlation += 1
        header = RequestHeader(
            request_api_key=api_key, request_api_version=version, correlation_id=self.correlation,
            client_id="step-sweep",
        )  # fmt: skip
        payload = bytes(encode_request_header(header)) + body
        try:
            self.sock.sendall(struct.pack(">i", len(payload)) + payload)
            (size,) = struct.unpack(">i", self._read(4))
            self._read(size)
        except (OSError, EOFError):  # the broker closed it (a request it refuses that way): a new one
            self.sock.close()
            self.sock = self._connect()

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1000, help="elements of the multiplied array")
    parser.add_argument("--threshold-ms", type=float, default=1.5, help="shorter steps are not seen")
    parser.add_argument("--apis", help="comma-separated api keys (default: every served one)")
    parser.add_argument("--top", type=int, default=40, help="rows printed")
    args = parser.parse_args(argv)

    from kafkacompat.diagnostics.loop_lag import log as monitor_log
    from kafkacompat.fuzzing.mutations import field_refs
    from kafkacompat.fuzzing.seeds import build_seeds, prepare_target
    from kafkacompat.local_brokers import InProcessBroker
    from kafkacompat.wire import messages

    worst = _Worst()
    monitor_log.addHandler(worst)
    monitor_log.setLevel(logging.WARNING)
    only = {int(key) for key in args.apis.split(",")} if args.apis else None
    with tempfile.TemporaryDirectory(prefix="kafkacompat-sweep-") as tmp:
        overrides = ["group.initial.rebalance.delay.ms=0", f"loop.lag.threshold.ms={args.threshold_ms}"]
        broker = InProcessBroker(Path(tmp) / "data", overrides).start()
        try:
            served, target = prepare_target(broker.bootstrap)
            highest: dict[int, Any] = {}
            for seed in build_seeds(served, target):
                if seed.version >= getattr(highest.get(seed.api_key), "version", -1):
                    highest[seed.api_key] = seed
            wire = _Wire(broker.bootstrap)
            for api_key, seed in sorted(highest.items()):
                if only is not None and api_key not in only:
                    continue
                request = messages.decode_request(api_key, seed.version, memoryview(seed.body))
                refs: list[tuple[Any, str, Any]] = []
                field_refs(request, refs)
                for owner, name, value in refs:
                    if not isinstance(value, list) or not value:
                        continue
                    setattr(owner, name, [value[0]] * args.elements)
                    try:
                        body = bytes(messages.encode_request(api_key, seed.version, request))
                    except Exception:  # an array this version cannot carry so long
                        body = b""
                    if body:
                        worst.sweeping = f"key {api_key} v{seed.version} {name}"
                        wire.call(api_key, seed.version, body)
                        time.sleep(0.05)  # background steps the request caused land under its name
                    setattr(owner, name, value)
        finally:
            broker.stop()
    rows = sorted(worst.worst.items(), key=lambda row: -row[1])[: args.top]
    for (sweeping, kind), ms in rows:
        print(f"{ms:8.1f} ms  {kind:45s} {sweeping}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
