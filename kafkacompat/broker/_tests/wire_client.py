"""Test helpers: a broker in the test's own trio run, and a raw protocol client over real TCP.

`start_broker(nursery, data_dir, *overrides)` runs `server.Broker` in the given nursery on 127.0.0.1 port 0.
`RawClient` sends any request in any version (or raw bytes) and reads answers frame by frame, so tests
can check what reaches the wire: correlation ids, order, missing answers, closed connections.
`create`, `produce` and `fetch_request` build the requests most tests need.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import trio

from kafkacompat.broker.server import Broker
from kafkacompat.config import BrokerConfig
from kafkacompat.wire.framing import FrameBuffer
from kafkacompat.wire.header import RequestHeader, decode_response_header, encode_request_header
from kafkacompat.wire.messages import decode_response, encode_request, request_class, response_class
from kafkacompat.wire.records import build_batch

_SIZE = struct.Struct(">i")


async def start_broker(nursery: trio.Nursery, data_dir: Path, *overrides: str) -> Broker:
    config = BrokerConfig.load(
        None, ["listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={data_dir}", *overrides]
    )
    broker = Broker(config)
    bound = await nursery.start(broker.run)
    broker.port = bound[0].port  # type: ignore[attr-defined]
    return broker


def request(api_key: int, **fields: Any) -> Any:
    return request_class(api_key)(**fields)


def batch(*values: bytes | None, timestamp: int | None = None, **kwargs: Any) -> bytes:
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    return build_batch([(b"k", value, (), ts) for value in values], **kwargs)


def api_versions_round_trip(port: int, timeout: float = 120) -> float:
    """Seconds from a new connection's ApiVersions v0 to its whole answer, on a plain blocking socket (no
    client library, no trio: the time is the broker's alone, and a thread of any process may run it)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        body = struct.pack(">hhih", 18, 0, 1, 3) + b"new"
        sock.sendall(_SIZE.pack(len(body)) + body)
        answer = b""
        while len(answer) < 4 or len(answer) < 4 + _SIZE.unpack_from(answer)[0]:
            data = sock.recv(65536)
            assert data, "the broker closed a new client's connection"
            answer += data
    return time.monotonic() - started


class RawClient:
    """One connection to a broker; not a general client (no retries, no negotiation)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.frames = FrameBuffer(1 << 30)
        self.correlation_id = 0

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send(self, api_key: int, version: int, body: Any, client_id: str = "raw") -> int:
        self.correlation_id += 1
        header = encode_request_header(RequestHeader(api_key, version, self.correlation_id, client_id))
        payload = header + encode_request(api_key, version, body)
        await self.stream.send_all(_SIZE.pack(len(payload)) + payload)
        return self.correlation_id

    async def send_raw(self, payload: bytes) -> None:
        await self.stream.send_all(payload)

    async def read_frame(self, timeout: float = 10) -> memoryview | None:
        """The next frame, or None if the broker closed the connection."""
        with trio.fail_after(timeout):
            while (frame := self.frames.next_frame()) is None:
                data = await self.stream.receive_some(1 << 16)
                if not data:
                    return None
                self.frames.receive_data(data)
        return frame

    async def receive(self, api_key: int, version: int, timeout: float = 10) -> tuple[int, Any]:
        frame = await self.read_frame(timeout)
        assert frame is not None, "connection closed by the broker"
        header, offset = decode_response_header(api_key, version, frame)
        return header.correlation_id, decode_response(api_key, version, frame[offset:])

    async def call(self, api_key: int, version: int, body: Any, timeout: float = 10) -> Any:
        sent = await self.send(api_key, version, body)
        correlation_id, response = await self.receive(api_key, version, timeout)
        assert correlation_id == sent
        return response

    async def is_closed(self, timeout: float = 5) -> bool:
        """True once the broker has closed the connection (waits up to `timeout`)."""
        with trio.move_on_after(timeout):
            while True:
                try:
                    data = await self.stream.receive_some(1 << 16)
                except trio.BrokenResourceError:
                    return True
                if not data:
                    return True
        return False

    async def aclose(self) -> None:
        await self.stream.aclose()


def response_type(api_key: int) -> type:
    return response_class(api_key)


# --- requests the broker tests send again and again ------------------------------------------------

PRODUCE, FETCH, CREATE_TOPICS = 0, 1, 19


async def create(client: RawClient, name: str, partitions: int = 1, **fields: Any) -> Any:
    topic = request(CREATE_TOPICS).CreatableTopic(
        name=name,
        num_partitions=fields.pop("num_partitions", partitions),
        replication_factor=fields.pop("replication_factor", 1),
        **fields,
    )
    response = await client.call(CREATE_TOPICS, 7, request(CREATE_TOPICS, topics=[topic], timeout_ms=5000))
    return response.topics[0]


def produce_request(topic: str, records: bytes | None, *, partition: int = 0, acks: int = -1) -> Any:
    """A Produce request body carrying `records` to one partition."""
    data = request(PRODUCE).PartitionProduceData(index=partition, records=records)
    return request(
        PRODUCE,
        acks=acks,
        timeout_ms=1000,
        topic_data=[request(PRODUCE).TopicProduceData(name=topic, partition_data=[data])],
    )


async def produce(
    client: RawClient,
    topic: str,
    records: bytes | None,
    *,
    partition: int = 0,
    acks: int = -1,
    version: int = 11,
) -> Any:
    body = produce_request(topic, records, partition=partition, acks=acks)
    response = await client.call(PRODUCE, version, body)
    return response.responses[0].partition_responses[0]


def fetch_request(
    topic: Any,
    offset: int,
    *,
    partitions: tuple[int, ...] = (0,),
    by_id: bool = False,
    partition_max_bytes: int = 1 << 20,
    **fields: Any,
) -> Any:
    """A fetch of `partitions` of one topic (by name, or by id with `by_id`) from `offset`; no wait."""
    parts = [
        request(FETCH).FetchPartition(
            partition=p, fetch_offset=offset, partition_max_bytes=partition_max_bytes
        )
        for p in partitions
    ]
    fetch_topic = (
        request(FETCH).FetchTopic(topic_id=topic, partitions=parts)
        if by_id
        else request(FETCH).FetchTopic(topic=topic, partitions=parts)
    )
    fields.setdefault("max_wait_ms", 0)
    fields.setdefault("min_bytes", 0)
    return request(FETCH, topics=[fetch_topic], **fields)
