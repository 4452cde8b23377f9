"""Test helpers: batches built and files parsed by kafka-python, an implementation independent of ours."""

from __future__ import annotations

import os

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def make_batch(
    values: list[bytes],
    *,
    timestamp: int = 1_700_000_000_000,
    keys: list[bytes | None] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: str = "none",
    headers: list[tuple[str, bytes]] | None = None,
) -> bytearray:
    """One v2 batch (base offset 0) built by kafka-python; record i has timestamp `timestamp + i`."""
    builder = DefaultRecordBatchBuilder(
        2, CODECS[compression], False, producer_id, producer_epoch, base_sequence, batch_size=1 << 30
    )
    for i, value in enumerate(values):
        key = keys[i] if keys else None
        builder.append(i, timestamp + i, key, value, headers or [])
    return bytearray(builder.build())


def parse_log_file(path: str) -> list[DefaultRecordBatch]:
    """Every batch of a .log file as kafka-python reads it (CRC validated)."""
    with open(path, "rb") as f:
        data = f.read()
    records = MemoryRecords(data)
    batches = []
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None
        assert batch.validate_crc(), f"CRC of batch at offset {batch.base_offset} in {path}"
        batches.append(batch)
    assert records.valid_bytes() == len(data), f"{path} ends with a partial batch"
    return batches


def batch_positions(path: str) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, last offset) of every batch, via kafka-python."""
    with open(path, "rb") as f:
        data = f.read()
    result = []
    position = 0
    for batch in parse_log_file(path):
        size = batch.size_in_bytes
        assert (
            DefaultRecordBatch(bytearray(data[position : position + size])).base_offset == batch.base_offset
        )
        result.append((position, size, batch.base_offset, batch.last_offset))
        position += size
    assert position == len(data)
    return result


def segment_logs(directory: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".log"))


def all_records(directory: str) -> list[tuple[int, int, bytes | None]]:
    """(offset, timestamp, value) of every record of every segment, via kafka-python."""
    out = []
    for path in segment_logs(directory):
        for batch in parse_log_file(path):
            for record in batch:
                out.append((record.offset, record.timestamp, record.value))
    return out
