"""Reading record batch headers straight from segment files (recovery, offset lookup, dump-log).

Theory of operation: the log never decodes records; to find batch boundaries it reads the fixed 61-byte
v2 batch header with one `os.pread` and unpacks it with one precompiled struct. `verify_batch()` checks a
batch held in memory the way recovery must (size, magic, offset delta, CRC-32C over attributes..end).
Validation of batches arriving from clients lives in validator.py and uses kafkacompat.wire.records;
this module only serves the file-level scans, where batches were already validated once on append.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from kafkacompat.wire.crc import crc32c
from kafkacompat.wire.records import BATCH_HEADER

__all__ = ["HEADER", "HEADER_SIZE", "LOG_OVERHEAD", "BatchHeader", "read_header", "verify_batch"]

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount: one layout, shared
# with the wire's batch view
HEADER = BATCH_HEADER
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: batchLength counts the bytes after these 12
CRC_START = 21  # the CRC covers attributes (byte 21) to the end of the batch
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & 0x07

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & 0x08)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % 2147483648


def read_header(fd: int, position: int) -> BatchHeader | None:
    """The header of the batch at `position`, or None when fewer than 61 bytes remain."""
    data = os.pread(fd, HEADER_SIZE, position)
    if len(data) < HEADER_SIZE:
        return None
    return BatchHeader._make(HEADER.unpack(data))


def verify_batch(
    buf: memoryview | bytes, start: int, available: int
) -> tuple[BatchHeader | None, str | None]:
    """Check the batch at `buf[start:]` (`available` bytes there). Returns (header, None) when the batch is
    complete and intact, (header or None, reason) otherwise."""
    if available < HEADER_SIZE:
        return None, f"{available} trailing bytes, less than a batch header"
    header = BatchHeader._make(HEADER.unpack_from(buf, start))
    if header.magic != 2:
        return header, f"magic {header.magic}"
    if header.batch_length < MIN_BATCH_LENGTH:
        return header, f"batch length {header.batch_length} below the minimum"
    if header.size > available:
        return header, f"batch of {header.size} bytes but only {available} bytes left"
    if header.last_offset_delta < 0 or header.records_count < 0:
        return header, "negative last offset delta or record count"
    if crc32c(buf[start + CRC_START : start + header.size]) != header.crc:
        return header, "CRC mismatch"
    return header, None
