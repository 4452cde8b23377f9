"""Hostile input: random request bodies for every served API never crash a handler or the broker.

Each example sends one frame with a valid header for a served (api key, version) and a random body, or
mutates a valid encoding of a request; the broker must answer or close that connection, log no
unexpected error, and keep serving other connections.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.broker import dispatch
from kafkacompat.testing import InProcessBroker
from kafkacompat.wire.header import RequestHeader, encode_request_header
from kafkacompat.wire.messages import encode_request, request_class

SERVED = dispatch.supported_versions()
# Parked requests (a fetch with a long max_wait) may legitimately stay unanswered for a while.
ANSWER_TIMEOUT = 0.5


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    instance = InProcessBroker(
        tmp_path_factory.mktemp("fuzz") / "data", ["num.partitions=2", "socket.request.max.bytes=100000"]
    ).start()
    try:
        yield instance
    finally:
        instance.stop()


def _exchange(port: int, payload: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        sock.settimeout(ANSWER_TIMEOUT)
        try:
            sock.recv(1 << 16)
        except (TimeoutError, ConnectionResetError):
            pass


def _still_serving(port: int) -> bool:
    body = encode_request(18, 3, request_class(18)(client_software_name="fuzz", client_software_version="1"))
    payload = encode_request_header(RequestHeader(18, 3, 99, "fuzz")) + body
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        answer = sock.recv(size, socket.MSG_WAITALL)
    return struct.unpack(">i", answer[:4])[0] == 99


def _no_unexpected_errors(caplog: pytest.LogCaptureFixture) -> None:
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("kafkacompat")]
    assert not errors, [r.getMessage() for r in errors]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(served=st.sampled_from(SERVED), data=st.data(), body=st.binary(max_size=300))
def test_random_bodies(
    broker: InProcessBroker,
    caplog: pytest.LogCaptureFixture,
    served: tuple[int, int, int],
    data: st.DataObject,
    body: bytes,
) -> None:
    api_key, low, high = served
    version = data.draw(st.integers(low, high))
    header = encode_request_header(RequestHeader(api_key, version, 1, "fuzz"))
    with caplog.at_level(logging.INFO):
        _exchange(broker.port, header + body)
    _no_unexpected_errors(caplog)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(served=st.sampled_from(SERVED), data=st.data())
def test_mutated_default_requests(
    broker: InProcessBroker,
    caplog: pytest.LogCaptureFixture,
    served: tuple[int, int, int],
    data: st.DataObject,
) -> None:
    """A request with every field at its default, then some bytes overwritten: mostly decodable bodies."""
    api_key, low, high = served
    version = data.draw(st.integers(low, high))
    encoded = bytearray(encode_request(api_key, version, request_class(api_key)()))
    for _ in range(data.draw(st.integers(0, 4))):
        if not encoded:
            break
        position = data.draw(st.integers(0, len(encoded) - 1))
        encoded[position] = data.draw(st.integers(0, 255))
    header = encode_request_header(RequestHeader(api_key, version, 1, "fuzz"))
    with caplog.at_level(logging.INFO):
        _exchange(broker.port, header + bytes(encoded))
    _no_unexpected_errors(caplog)


def test_broker_survives_the_fuzzing(broker: InProcessBroker, tmp_path: Path) -> None:
    assert _still_serving(broker.port)
