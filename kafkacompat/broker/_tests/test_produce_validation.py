"""Produce refuses batches whose records are malformed: Kafka's code, KIP-467 record errors, nothing appended.

Each hostile shape (built with the record validator tests' hand encoders) goes to a real broker over TCP;
the partition's log end offset must not move, and a valid batch afterwards still lands at offset 0. As
from Kafka, a structurally broken batch is answered with its code alone, while a batch refused by the
per-record rules (keys on compacted topics, timestamps) names each record in `record_errors` (v8+) with
Kafka's wording and carries Kafka's error message.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio

from kafkacompat.broker._tests.wire_client import RawClient, batch, create, produce, request, start_broker
from kafkacompat.log._tests.test_record_validator import (
    MiB,
    Rec,
    encode_record,
    gzip_bomb,
    hostile_batch,
    records,
    wrap_batch,
    zigzag,
    zstd_rle_bomb,
)
from kafkacompat.wire.errors import ErrorCode

CREATE_TOPICS = 19


def _negative_length() -> bytes:
    recs = records(3)
    recs[1].length_raw = zigzag(-5)
    return hostile_batch(recs, base_timestamp=_now())


def _long_length_varint() -> bytes:
    recs = records(2)
    recs[1].length_raw = zigzag(len(encode_record(recs[1])) - 1, pad_to=11)
    return hostile_batch(recs, base_timestamp=_now())


def _long_timestamp_varlong() -> bytes:
    recs = records(2)
    recs[1].timestamp_raw = zigzag(0, pad_to=11)
    return hostile_batch(recs, base_timestamp=_now())


def _now() -> int:
    return int(time.time() * 1000)


# (name, batch builder, code); Kafka names no record for any of them
SHAPES: list[tuple[str, Any, ErrorCode]] = [
    ("negative record length", _negative_length, ErrorCode.INVALID_RECORD),
    ("11-byte length varint", _long_length_varint, ErrorCode.UNKNOWN_SERVER_ERROR),
    ("11-byte timestamp varlong", _long_timestamp_varlong, ErrorCode.INVALID_RECORD),
    (
        "count smaller than the records",
        lambda: hostile_batch(records(2), count=1, base_timestamp=_now()),
        ErrorCode.INVALID_RECORD,
    ),
    (
        "count int32 max on two records",
        lambda: hostile_batch(records(2), count=2**31 - 1, base_timestamp=_now()),
        ErrorCode.INVALID_RECORD,
    ),
    (
        "offset deltas out of order",
        lambda: hostile_batch([Rec(offset_delta=1), Rec(offset_delta=0)], base_timestamp=_now()),
        ErrorCode.INVALID_RECORD,
    ),
    (
        "codec 7",
        lambda: wrap_batch(b"".join(encode_record(r) for r in records(2)), 2, codec=7, base_timestamp=_now()),
        ErrorCode.UNKNOWN_SERVER_ERROR,
    ),
    (
        "gzip bomb",
        lambda: wrap_batch(b"", 1, codec=1, payload=gzip_bomb(80 * MiB), base_timestamp=_now()),
        ErrorCode.INVALID_RECORD,
    ),
    (
        "zstd bomb, declared size",
        lambda: wrap_batch(
            b"", 1, codec=4, payload=zstd_rle_bomb(512 * MiB, declare_size=True), base_timestamp=_now()
        ),
        ErrorCode.INVALID_RECORD,
    ),
    (
        "zstd bomb, RLE blocks",
        lambda: wrap_batch(
            b"", 1, codec=4, payload=zstd_rle_bomb(512 * MiB, declare_size=False), base_timestamp=_now()
        ),
        ErrorCode.INVALID_RECORD,
    ),
]


def _config(name: str, value: str) -> Any:
    return request(CREATE_TOPICS).CreatableTopicConfig(name=name, value=value)


@pytest.mark.parametrize("version", [9, 7])
async def test_hostile_batches_are_refused(nursery: trio.Nursery, tmp_path: Path, version: int) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await create(client, "hostile")
    log = broker.state.partition_log("hostile", 0)
    for name, build, code in SHAPES:
        answer = await produce(client, "hostile", build(), version=version)
        assert answer.error_code == code, name
        assert answer.record_errors == [] and answer.error_message is None, name
        assert log.log_end_offset == 0, name
    good = await produce(client, "hostile", batch(b"a", b"b"), version=version)
    assert (good.error_code, good.base_offset) == (ErrorCode.NONE, 0)
    assert log.log_end_offset == 2


async def test_per_record_errors_for_keys_and_timestamps(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await create(client, "compacted", configs=[_config("cleanup.policy", "compact")])
    await create(client, "windowed", configs=[_config("message.timestamp.after.max.ms", "60000")])
    keyless = hostile_batch(
        [Rec(offset_delta=0), Rec(offset_delta=1, key=None), Rec(offset_delta=2, key=None)]
    )
    answer = await produce(client, "compacted", keyless)
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in answer.record_errors] == [1, 2]
    keyless_message = "Compacted topic cannot accept message without key in topic partition compacted-0"
    assert [e.batch_index_error_message for e in answer.record_errors] == [keyless_message] * 2
    assert answer.error_message.startswith("One or more records have been rejected due to 2 record errors")
    now = _now()
    future = hostile_batch(
        [Rec(offset_delta=0), Rec(offset_delta=1, timestamp_delta=3_600_000), Rec(offset_delta=2)],
        base_timestamp=now,
    )
    answer = await produce(client, "windowed", future)
    assert answer.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in answer.record_errors] == [1]
    assert answer.record_errors[0].batch_index_error_message.startswith(
        f"Timestamp {now + 3_600_000} of message with offset 1 is out of range."
    )
    assert answer.error_message == "One or more records have been rejected due to invalid timestamp"
    older = await produce(client, "windowed", future, version=7)
    assert (older.error_code, older.record_errors, older.error_message) == (
        ErrorCode.INVALID_TIMESTAMP,
        [],
        None,
    )
    for topic in ("compacted", "windowed"):
        assert broker.state.partition_log(topic, 0).log_end_offset == 0
    assert (await produce(client, "windowed", batch(b"fine"))).error_code == ErrorCode.NONE


async def test_one_magic_2_batch_per_partition_from_v3(nursery: trio.Nursery, tmp_path: Path) -> None:
    """Kafka's ProduceRequest.validateRecords, answered per partition with the code alone."""
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await create(client, "one")
    log = broker.state.partition_log("one", 0)
    two = batch(b"a") + batch(b"b")
    # a message-format v1 message set: offset, size, crc, magic 1, attributes, timestamp, key, value
    legacy = (0).to_bytes(8, "big") + (22).to_bytes(4, "big") + b"\x00" * 4 + b"\x01\x00" + b"\x00" * 8
    legacy += b"\xff\xff\xff\xff" * 2
    zstd = batch(b"z", compression=4)
    for version in (3, 7, 9, 11):
        for sent, code in ((two, ErrorCode.INVALID_RECORD), (legacy, ErrorCode.INVALID_RECORD)):
            answer = await produce(client, "one", sent, version=version)
            assert (answer.error_code, answer.error_message, answer.base_offset) == (code, None, -1), version
    for version in (3, 6):
        answer = await produce(client, "one", zstd, version=version)
        assert answer.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, version
    assert log.log_end_offset == 0
    assert (await produce(client, "one", zstd, version=7)).base_offset == 0
    # before v3 Kafka does not hold requests to one batch
    assert (await produce(client, "one", two, version=2)).base_offset == 1
    assert log.log_end_offset == 3
    # bytes after the batch that are no whole batch are dropped, as Kafka's append trims them
    answer = await produce(client, "one", batch(b"c") + batch(b"d")[:30], version=9)
    assert (answer.error_code, answer.base_offset, log.log_end_offset) == (ErrorCode.NONE, 3, 4)


async def test_error_message_only_for_per_record_refusals(nursery: trio.Nursery, tmp_path: Path) -> None:
    """Kafka's LogAppendResult.errorMessage is null unless hasCustomErrorMessage (per-record refusals)."""
    broker = await start_broker(nursery, tmp_path, "message.max.bytes=2000")
    client = await RawClient.connect(broker.port)
    await create(client, "quiet")
    corrupt = bytearray(batch(b"payload"))
    corrupt[-1] ^= 0xFF
    for topic, sent, code in (
        ("missing", batch(b"a"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("quiet", bytes(corrupt), ErrorCode.CORRUPT_MESSAGE),
        ("quiet", batch(b"x" * 3000), ErrorCode.MESSAGE_TOO_LARGE),
        ("quiet", b"", ErrorCode.INVALID_RECORD),
    ):
        answer = await produce(client, topic, sent)
        assert (answer.error_code, answer.error_message, answer.record_errors) == (code, None, []), topic
