"""Data-path scenarios run with each client (kafka-python, confluent-kafka, aiokafka, kcat) through the
adapter in `compat_tests.group_clients`, filling the cells the per-client suites leave open:

- a record near `max.message.bytes` with each codec, read back byte for byte, and MESSAGE_TOO_LARGE for
  one just above (kafka-python's uncompressed case is in test_kafka_python.py);
- the "latest" offset equals the number of records produced, however the producer batched them
  (kafka-python's default batching is in test_kafka_python.py);
- consuming from a timestamp (kafka-python and confluent-kafka have it in their suites);
- kcat: a record near the limit, and `-o s@<timestamp>`.

The records near the limit are random bytes, so no codec shrinks them: the compressed batch the broker
checks is as large as the record, and the size check happens on the broker, not in the client (each
client's own request-size limit is raised above the broker's).
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from collections.abc import Callable

import pytest

from compat_tests.group_clients import CLIENTS, consume, end_offset, produce

MAX_MESSAGE_BYTES = 1048588  # the broker default (Kafka's), which the topics here keep
BELOW = MAX_MESSAGE_BYTES - 8192  # value size whose batch (header, record framing, codec framing) fits
ABOVE = MAX_MESSAGE_BYTES + 1024  # value size whose batch cannot fit, compressed or not
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

# Cells already covered elsewhere, so not repeated here: kafka-python's uncompressed near-limit record and
# MESSAGE_TOO_LARGE (test_kafka_python.py::test_record_near_max_message_bytes).
NEAR_MAX_CASES = [
    pytest.param(client, codec, id=f"{client}-{codec}")
    for client in CLIENTS
    for codec in CODECS
    if (client, codec) != ("kafka-python", "none")
]


def _client_codec(client: str, codec: str) -> str | None:
    if client == "kafka-python":
        from kafka.codec import has_gzip, has_lz4, has_snappy, has_zstd

        available = {"gzip": has_gzip, "snappy": has_snappy, "lz4": has_lz4, "zstd": has_zstd}
        if codec != "none" and not available[codec]():
            pytest.skip(f"kafka-python has no {codec} library installed")
    return None if codec == "none" and client != "confluent" else codec


def _is_message_too_large(client: str, error: object) -> bool:
    if client == "kafka-python":
        from kafka.errors import MessageSizeTooLargeError

        return isinstance(error, MessageSizeTooLargeError)
    if client == "aiokafka":
        from aiokafka.errors import MessageSizeTooLargeError as AioTooLarge

        return isinstance(error, AioTooLarge)
    from confluent_kafka import KafkaError, KafkaException

    return isinstance(error, KafkaException) and error.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


@pytest.mark.parametrize(("client", "codec"), NEAR_MAX_CASES)
def test_record_near_max_message_bytes_each_codec(
    bootstrap: str, make_topic: Callable[..., str], client: str, codec: str
) -> None:
    topic = make_topic()
    rng = random.Random(f"{client}-{codec}")
    fits, too_big = rng.randbytes(BELOW), rng.randbytes(ABOVE)
    results = produce(
        client,
        bootstrap,
        topic,
        [fits],
        codec=_client_codec(client, codec),
        batch_bytes=2_000_000,
        max_request_bytes=4_000_000,
    )
    assert results == [0], results
    refused = produce(
        client,
        bootstrap,
        topic,
        [too_big],
        codec=_client_codec(client, codec),
        batch_bytes=2_000_000,
        max_request_bytes=4_000_000,
    )
    assert len(refused) == 1 and _is_message_too_large(client, refused[0]), refused
    records = consume(client, bootstrap, topic, 1)
    assert [(offset, value == fits) for offset, value, _ in records] == [(0, True)]
    assert end_offset(client, bootstrap, topic) == 1  # the refused record left nothing behind


# Batching variations: no linger, many small batches, one large compressed batch (checked once against
# this broker's log: ~1-4, ~120-155 and 1 batches for 300 records, depending on the client).
BATCHING = {
    "linger0": {"linger_ms": 0},
    "tiny-batches": {"linger_ms": 20, "batch_bytes": 600},
    "large-batches-lz4": {"linger_ms": 100, "batch_bytes": 1_000_000, "codec": "lz4"},
}
# kafka-python with linger 0 is its default, tested by test_kafka_python.py::test_latest_offset_is_count.
BATCHING_CASES = [
    pytest.param(client, batching, id=f"{client}-{batching}")
    for client in CLIENTS
    for batching in BATCHING
    if (client, batching) != ("kafka-python", "linger0")
]


@pytest.mark.parametrize(("client", "batching"), BATCHING_CASES)
def test_latest_offset_is_count_however_batched(
    bootstrap: str, make_topic: Callable[..., str], client: str, batching: str
) -> None:
    topic = make_topic()
    rng = random.Random(batching)
    values = [f"{i}:".encode() + b"v" * rng.randrange(0, 300) for i in range(300)]
    results = produce(client, bootstrap, topic, values, **BATCHING[batching])  # type: ignore[arg-type]
    assert results == list(range(len(values))), [r for r in results if not isinstance(r, int)][:3]
    assert end_offset(client, bootstrap, topic) == len(values)
    records = consume(client, bootstrap, topic, len(values))
    assert [(offset, value) for offset, value, _ in records] == list(enumerate(values))


def test_aiokafka_consume_from_timestamp(bootstrap: str, topic: str) -> None:
    """aiokafka: offsets_for_times, then seek there and read (its suite only looks the offset up)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    base = int(time.time() * 1000) - 60_000
    values = [str(i).encode() for i in range(10)]
    assert produce(
        "aiokafka", bootstrap, topic, values, timestamps=[base + i * 1000 for i in range(10)]
    ) == list(range(10))

    async def scenario() -> list[tuple[int, bytes, int]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            found = (await consumer.offsets_for_times({tp: base + 6500}))[tp]
            assert found is not None and (found.offset, found.timestamp) == (7, base + 7000)
            consumer.assign([tp])
            consumer.seek(tp, found.offset)
            got: list[tuple[int, bytes, int]] = []
            deadline = time.monotonic() + 20
            while len(got) < 3 and time.monotonic() < deadline:
                for rs in (await consumer.getmany(tp, timeout_ms=200)).values():
                    got.extend((r.offset, r.value, r.timestamp) for r in rs)
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(scenario())
    assert got == [(i, str(i).encode(), base + i * 1000) for i in (7, 8, 9)]


# --- kcat ---------------------------------------------------------------------------------------------


def test_kcat_record_near_max_message_bytes(
    bootstrap: str, topic: str, kcat: Callable[..., subprocess.CompletedProcess[bytes]]
) -> None:
    # kcat reads one record per line, so the value is printable: random hex digits.
    value = random.Random("kcat").randbytes(BELOW // 2).hex().encode()
    kcat(
        "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-X", "message.max.bytes=4000000", input=value + b"\n"
    )
    out = kcat("-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o:%s\n").stdout
    assert out == b"0:" + value + b"\n"
    # Just above the limit: the broker refuses it and kcat reports the failed delivery.
    path = shutil.which("kcat") or shutil.which("kafkacat")
    assert path is not None
    too_big = random.Random("kcat-above").randbytes(ABOVE // 2 + 1).hex().encode()
    refused = subprocess.run(
        [path, "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-X", "message.max.bytes=4000000"],
        input=too_big + b"\n",
        capture_output=True,
        timeout=30,
    )
    assert b"Message size too large" in refused.stderr or b"MSG_SIZE_TOO_LARGE" in refused.stderr, refused
    assert end_offset("confluent", bootstrap, topic) == 1


def test_kcat_consume_from_timestamp(
    bootstrap: str, topic: str, kcat: Callable[..., subprocess.CompletedProcess[bytes]]
) -> None:
    base = int(time.time() * 1000) - 60_000
    values = [f"v{i}".encode() for i in range(10)]
    assert produce(
        "confluent", bootstrap, topic, values, timestamps=[base + i * 1000 for i in range(10)]
    ) == list(range(10))
    out = kcat(
        "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", f"s@{base + 4500}", "-e", "-f", "%o %T %s\n"
    ).stdout.decode()
    assert out.splitlines() == [f"{i} {base + i * 1000} v{i}" for i in range(5, 10)]
