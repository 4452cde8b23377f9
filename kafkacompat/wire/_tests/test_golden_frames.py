"""Golden frames: real client request frames decode and re-encode byte for byte.

A throwaway TCP listener on 127.0.0.1 (plain sockets and a thread: this package stays free of trio)
answers ApiVersions and Metadata with our own codecs, leaves every other request unanswered, and
records every request frame a real client sends: kafka-python, confluent-kafka (librdkafka) and
aiokafka. Each recorded frame must decode (header and body) and re-encode to exactly the same bytes,
at whatever version that client chose.

Frames captured this way are also stored under data/ (run this module as a script with --write to
refresh them), so the byte-identity check keeps running where a client is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kafkacompat.wire import messages
from kafkacompat.wire.errors import DecodeError
from kafkacompat.wire.header import decode_request_header, encode_request_header, encode_response_header

DATA = Path(__file__).resolve().parent / "data"
API_VERSIONS, METADATA = 18, 3
UNSUPPORTED_VERSION = 35
UNKNOWN_TOPIC_OR_PARTITION = 3


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class CaptureBroker:
    """Owns a listening socket and a thread; records request frames (without their size prefix)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.frames: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> CaptureBroker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    def _serve(self) -> None:
        conns: list[threading.Thread] = []
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            t = threading.Thread(target=self._serve_conn, args=(conn,), daemon=True)
            t.start()
            conns.append(t)
        for t in conns:
            t.join(timeout=2)

    def _serve_conn(self, conn: socket.socket) -> None:
        # Wait for readability before reading, so a timeout never splits a size prefix.
        conn.settimeout(5)
        with conn:
            while not self._stop.is_set():
                readable, _, _ = select.select([conn], [], [], 0.2)
                if not readable:
                    continue
                try:
                    size_bytes = _recv_exact(conn, 4)
                    if size_bytes is None:
                        return
                    (size,) = struct.unpack(">i", size_bytes)
                    frame = _recv_exact(conn, size)
                except OSError:
                    return
                if frame is None:
                    return
                self.frames.append(frame)
                reply = self._reply(frame)
                if reply is not None:
                    conn.sendall(struct.pack(">i", len(reply)) + reply)

    def _reply(self, frame: bytes) -> bytes | None:
        """The response frame for ApiVersions and Metadata; None (no answer) for anything else.

        Closing the connection instead would fail whatever else the client has in flight on it:
        librdkafka sends GetTelemetrySubscriptions as soon as it sees it advertised, and an
        application Metadata request pipelined behind it then failed with a transport error.
        """
        header, offset = decode_request_header(frame)
        key, version = header.request_api_key, header.request_api_version
        if key == API_VERSIONS:
            spec = messages.API_SPECS[API_VERSIONS]
            cls = spec.response_class
            if version > spec.max_version:
                own = cls.ApiVersion(api_key=API_VERSIONS, min_version=0, max_version=spec.max_version)
                body = cls(error_code=UNSUPPORTED_VERSION, api_keys=[own])
                version = 0
            else:
                body = cls(
                    api_keys=[
                        cls.ApiVersion(api_key=k, min_version=s.min_version, max_version=s.max_version)
                        for k, s in sorted(messages.API_SPECS.items())
                        if not s.latest_version_unstable
                    ]
                )
        elif key == METADATA:
            request = messages.decode_request(key, version, memoryview(frame)[offset:])
            cls = messages.API_SPECS[METADATA].response_class
            topics = [
                cls.MetadataResponseTopic(error_code=UNKNOWN_TOPIC_OR_PARTITION, name=t.name)
                for t in (request.topics or [])
            ]
            body = cls(
                brokers=[cls.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)],
                cluster_id="golden-frames",
                controller_id=0,
                topics=topics,
            )
        else:
            return None
        chunks = messages.encode_response(key, version, body)
        payload = b"".join(bytes(c) for c in chunks)
        return encode_response_header(key, version, header.correlation_id) + payload


def _run_kafka_python(port: int) -> None:
    kafka = pytest.importorskip("kafka", reason="kafka-python not installed")
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=5000)
    try:
        consumer.topics()
    finally:
        consumer.close()


def _run_confluent_kafka(port: int) -> None:
    admin_mod = pytest.importorskip("confluent_kafka.admin", reason="confluent-kafka not installed")
    admin = admin_mod.AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
    admin.list_topics(topic="golden", timeout=10)


def _run_aiokafka(port: int) -> None:
    client_mod = pytest.importorskip("aiokafka.client", reason="aiokafka not installed")

    async def go() -> None:
        client = client_mod.AIOKafkaClient(bootstrap_servers=f"127.0.0.1:{port}")
        try:
            await client.bootstrap()
            await client.fetch_all_metadata()
        finally:
            await client.close()

    asyncio.run(go())


CLIENTS: dict[str, Callable[[int], None]] = {
    "kafka-python": _run_kafka_python,
    "confluent-kafka": _run_confluent_kafka,
    "aiokafka": _run_aiokafka,
}


def capture(client: str) -> list[bytes]:
    with CaptureBroker() as broker:
        CLIENTS[client](broker.port)
    return list(broker.frames)


def assert_round_trip(frame: bytes) -> tuple[int, int]:
    """Decode a request frame and re-encode it; the bytes must be identical. Returns (key, version)."""
    header, offset = decode_request_header(frame)
    key, version = header.request_api_key, header.request_api_version
    assert encode_request_header(header) == frame[:offset]
    body = messages.decode_request(key, version, memoryview(frame)[offset:])
    assert messages.encode_request(key, version, body) == frame[offset:]
    return key, version


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    import logging

    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    yield


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_live_client_frames_round_trip(client: str) -> None:
    with _quiet_logs():
        frames = capture(client)
    seen = {assert_round_trip(f) for f in frames}
    keys = {k for k, _ in seen}
    assert API_VERSIONS in keys, f"{client} sent no ApiVersions request: {seen}"
    assert METADATA in keys, f"{client} sent no Metadata request: {seen}"


def test_capture_broker_answers_metadata_pipelined_behind_an_unanswered_request() -> None:
    # librdkafka pipelines GetTelemetrySubscriptions and Metadata; closing on the first lost the second.
    telemetry = (DATA / "confluent-kafka-71-v0-0.bin").read_bytes()
    metadata = (DATA / "confluent-kafka-3-v12-0.bin").read_bytes()
    with CaptureBroker() as broker, socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        for frame in (telemetry, metadata):
            sock.sendall(struct.pack(">i", len(frame)) + frame)
        size_bytes = _recv_exact(sock, 4)
        assert size_bytes is not None, "capture broker closed the connection"
        response = _recv_exact(sock, struct.unpack(">i", size_bytes)[0])
    assert response is not None
    (correlation_id,) = struct.unpack_from(">i", response)
    assert correlation_id == decode_request_header(metadata)[0].correlation_id
    assert broker.frames == [telemetry, metadata]


def _stored() -> list[Path]:
    return sorted(DATA.glob("*.bin")) if DATA.is_dir() else []


@pytest.mark.skipif(not _stored(), reason="no captured frames stored under data/")
@pytest.mark.parametrize("path", _stored(), ids=lambda p: p.name)
def test_stored_client_frames_round_trip(path: Path) -> None:
    frame = path.read_bytes()
    key, version = assert_round_trip(frame)
    # file names are <client>-<api key>-v<version>-<n>.bin
    _, k, v, _ = path.stem.rsplit("-", 3)
    assert (key, version) == (int(k), int(v[1:]))


@pytest.mark.skipif(not _stored(), reason="no captured frames stored under data/")
def test_stored_frames_truncated_anywhere_raise_decode_error() -> None:
    for path in _stored():
        frame = path.read_bytes()
        header, offset = decode_request_header(frame)
        body = memoryview(frame)[offset:]
        for cut in range(len(body)):
            with pytest.raises(DecodeError):
                messages.decode_request(header.request_api_key, header.request_api_version, body[:cut])


def main(argv: list[str]) -> int:
    """Capture frames from every installed client into data/ (--write), or just list them."""
    write = "--write" in argv
    DATA.mkdir(exist_ok=True)
    for client in sorted(CLIENTS):
        try:
            frames = capture(client)
        except BaseException as e:  # pytest.skip raises a BaseException subclass
            print(f"{client}: not captured ({e})")
            continue
        seen: set[tuple[int, int]] = set()
        for frame in frames:
            key, version = assert_round_trip(frame)
            if (key, version) in seen:
                continue  # one frame per client, key and version is enough
            seen.add((key, version))
            name = f"{client}-{key}-v{version}-0.bin"
            print(f"{client}: api {key} v{version} ({len(frame)} bytes) -> {name}")
            if write:
                (DATA / name).write_bytes(frame)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
