"""Batches librdkafka (confluent-kafka) really produces, with every codec, parse with our records code.

A minimal fake broker on a thread (plain sockets; this test is outside the sans-io core) answers
ApiVersions, Metadata and Produce with the generated codecs and keeps each Produce's record bytes.
"""

import socket
import struct
import threading

import pytest

from kafkacompat.wire.framing import FrameBuffer
from kafkacompat.wire.header import decode_request_header, encode_response_header
from kafkacompat.wire.messages import decode_request, encode_response, response_class
from kafkacompat.wire.records import iter_batches, iter_records, validate_produce_records

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka not installed")

API_VERSIONS, METADATA, PRODUCE, FETCH, FIND_COORDINATOR = 18, 3, 0, 1, 10
# Versions the fake broker offers. librdkafka infers broker features from ApiVersions: it writes magic 2
# only when Fetch v4+ is offered too (without it, it sends legacy magic 0 even in Produce v9), and it
# compresses with lz4 only when FindCoordinator is offered (otherwise it silently sends uncompressed).
# Fetch and FindCoordinator are offered and never served: a producer uses neither.
OFFERED = {PRODUCE: (3, 9), FETCH: (4, 11), FIND_COORDINATOR: (0, 3), METADATA: (0, 9), API_VERSIONS: (0, 3)}
TOPIC = "codec-test"


class FakeBroker:
    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.produced: list[tuple[int, bytes]] = []  # (produce version, records)
        self.lock = threading.Lock()
        self.stopping = False
        self.threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self.threads.append(accept)

    def close(self) -> None:
        self.stopping = True
        self.listener.close()

    def _accept(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        frames = FrameBuffer()
        with conn:
            conn.settimeout(30)
            while not self.stopping:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                frames.receive_data(data)
                while (frame := frames.next_frame()) is not None:
                    reply = self._handle(frame)
                    if reply is None:
                        return
                    if reply:
                        conn.sendall(struct.pack(">i", len(reply)) + reply)

    def _handle(self, frame: memoryview) -> bytes | None:
        header, body_at = decode_request_header(frame)
        key, version = header.request_api_key, header.request_api_version
        if key == API_VERSIONS:
            cls = response_class(API_VERSIONS)
            versions = [cls.ApiVersion(k, lo, hi) for k, (lo, hi) in sorted(OFFERED.items())]
            if version > OFFERED[API_VERSIONS][1]:
                body = cls(error_code=35, api_keys=versions)
                version = 0
            else:
                body = cls(api_keys=versions)
        elif key in (METADATA, PRODUCE):
            request = decode_request(key, version, frame[body_at:])
            if key == METADATA:
                body = self._metadata()
            else:
                body = self._produce(version, request)
                if request.acks == 0:
                    return b""
        else:
            return None
        chunks = encode_response(key, version, body)
        head = encode_response_header(key, version, header.correlation_id)
        return head + b"".join(bytes(c) for c in chunks)

    def _metadata(self):
        cls = response_class(METADATA)
        partition = cls.MetadataResponsePartition(partition_index=0, leader_id=0, leader_epoch=0,
                                                  replica_nodes=[0], isr_nodes=[0])
        return cls(
            brokers=[cls.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)],
            cluster_id="fake",
            controller_id=0,
            topics=[cls.MetadataResponseTopic(name=TOPIC, partitions=[partition])],
        )

    def _produce(self, version, request):
        cls = response_class(PRODUCE)
        topics = []
        for topic in request.topic_data:
            partitions = []
            for pd in topic.partition_data:
                with self.lock:
                    base = len(self.produced)
                    self.produced.append((version, bytes(pd.records)))
                partitions.append(cls.PartitionProduceResponse(index=pd.index, base_offset=base * 1000))
            topics.append(cls.TopicProduceResponse(name=topic.name, partition_responses=partitions))
        return cls(responses=topics)


@pytest.fixture
def broker():
    b = FakeBroker()
    yield b
    b.close()


MESSAGES = [
    (
        b"key-%d" % i if i % 5 else None,
        (b"value %d " % i) * (i % 17 + 1) if i % 7 else None,
        [("n", b"%d" % i), ("empty", b"")] if i % 3 == 0 else [],
    )
    for i in range(300)
]


@pytest.mark.parametrize(("codec_name", "codec_id"), [("none", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3),
                                                      ("zstd", 4)])
def test_librdkafka_batches_parse(broker, codec_name, codec_id):
    producer = confluent_kafka.Producer({
        "bootstrap.servers": f"127.0.0.1:{broker.port}",
        "broker.address.family": "v4",
        "compression.codec": codec_name,
        "linger.ms": 200,
        "acks": 1,
        "enable.idempotence": False,
        "message.timeout.ms": 20000,
        "socket.timeout.ms": 10000,
    })
    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    for i, (key, value, headers) in enumerate(MESSAGES):
        producer.produce(TOPIC, value=value, key=key, headers=headers or None, partition=0,
                         timestamp=1_700_000_000_000 + i, on_delivery=delivered)
    remaining = producer.flush(30)
    assert remaining == 0, "librdkafka could not deliver to the fake broker"
    assert not failures, failures
    got = []
    compressions = set()
    with broker.lock:
        produced = list(broker.produced)
    assert produced
    for version, records in produced:
        validate_produce_records(version, records)
        for batch in iter_batches(records):
            batch.ensure_valid()
            compressions.add(batch.compression)
            assert batch.records_count == batch.last_offset_delta + 1
            for record in iter_records(batch):
                got.append((record.key, record.value, record.headers, record.timestamp))
    assert compressions == {codec_id}
    expected = [(k, v, h, 1_700_000_000_000 + i) for i, (k, v, h) in enumerate(MESSAGES)]
    assert got == expected
