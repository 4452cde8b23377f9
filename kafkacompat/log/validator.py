"""Validation of record batches before they are appended, and offset assignment in place.

Theory of operation: `validate_records()` walks a request's record set with
`kafkacompat.wire.records.iter_batches` and checks every batch before anything is written, so one bad
batch rejects the whole append (Kafka's behaviour). Checks and codes, in Kafka's order:
- structure (size prefix, magic 2, completeness): CORRUPT_MESSAGE / INVALID_RECORD from iter_batches;
- batch size above `max.message.bytes`: MESSAGE_TOO_LARGE; the whole set above `segment.bytes`:
  RECORD_LIST_TOO_LARGE;
- CRC-32C: CORRUPT_MESSAGE;
- from clients only: base offset 0, record count equal to last offset delta + 1, no control batches,
  a producer id implies a sequence: INVALID_RECORD;
- CreateTime timestamps (the batch's base and max timestamps) within `message.timestamp.before.max.ms`
  / `after.max.ms` of the broker clock: INVALID_TIMESTAMP.
Records are never decoded here: Kafka checks every record's timestamp, we check the batch's first and
largest, which bound the records of every batch a well-behaved producer builds.

Two topic configs make the broker look inside batches, and only they do (per-record work is paid only
where it is configured, as in Kafka): `cleanup.policy` with `compact` requires every record to have a
key (INVALID_RECORD otherwise), and `compression.type` other than `producer` makes
`recompress_if_needed()` rebuild batches whose codec differs, keeping offsets deltas, timestamps,
headers and producer fields (Kafka recompresses the same way).

`assign_offsets()` then patches base offset and partition leader epoch in place (outside the CRC) and,
for LogAppendTime topics, the timestamp type and max timestamp (the CRC is recomputed).
"""

from __future__ import annotations

from kafkacompat.log.config import LogConfig
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import (
    RecordBatchView,
    RecordInput,
    TimestampType,
    build_batch,
    iter_batches,
    iter_records,
)

__all__ = ["assign_offsets", "recompress_if_needed", "validate_records"]


def validate_records(
    records: memoryview, config: LogConfig, now_ms: int, *, from_client: bool = True
) -> list[RecordBatchView]:
    """All batches of `records`, validated; raises KafkaError (an InvalidRecordBatch for structure)."""
    if len(records) > config.segment_bytes:
        raise KafkaError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"{len(records)} bytes of records exceed segment.bytes {config.segment_bytes}",
        )
    batches = list(iter_batches(records))
    for batch in batches:
        if batch.size > config.max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"batch of {batch.size} bytes exceeds max.message.bytes {config.max_message_bytes}",
            )
        batch.ensure_valid()
        if batch.last_offset_delta < 0:
            raise KafkaError(
                ErrorCode.INVALID_RECORD, f"negative last offset delta {batch.last_offset_delta}"
            )
        if from_client:
            _check_client_batch(batch)
            if not config.log_append_time:
                _check_timestamps(batch, config, now_ms)
            if config.compacted:
                for record in iter_records(batch):
                    if record.key is None:
                        raise KafkaError(
                            ErrorCode.INVALID_RECORD, "compacted topic cannot accept a record without a key"
                        )
    return batches


def recompress_if_needed(
    batches: list[RecordBatchView], config: LogConfig
) -> tuple[memoryview, list[RecordBatchView]] | None:
    """Batches rebuilt with the topic's `compression.type`, or None when they can be stored as sent."""
    target = config.target_codec
    if target is None or all(b.compression == target for b in batches):
        return None
    out = bytearray()
    for batch in batches:
        if batch.compression == target:
            out += batch.buffer
            continue
        records = [
            RecordInput(r.key, r.value, r.headers, r.timestamp, r.offset_delta) for r in iter_records(batch)
        ]
        out += build_batch(
            records,
            base_timestamp=batch.base_timestamp,
            max_timestamp=batch.max_timestamp,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            compression=target,
            timestamp_type=batch.timestamp_type,
            last_offset_delta=batch.last_offset_delta,
        )
    view = memoryview(out)
    rebuilt = list(iter_batches(view))
    for batch in rebuilt:
        if batch.size > config.max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"recompressed batch of {batch.size} bytes exceeds max.message.bytes",
            )
    return view, rebuilt


def _check_client_batch(batch: RecordBatchView) -> None:
    if batch.base_offset != 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"batch base offset must be 0, got {batch.base_offset}")
    if batch.records_count <= 0 or batch.records_count != batch.last_offset_delta + 1:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"record count {batch.records_count} does not match last offset delta {batch.last_offset_delta}",
        )
    if batch.is_control:
        raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, "a batch with a producer id needs a base sequence")


def _check_timestamps(batch: RecordBatchView, config: LogConfig, now_ms: int) -> None:
    earliest = now_ms - config.timestamp_before_max_ms
    latest = now_ms + config.timestamp_after_max_ms
    for timestamp in (batch.base_timestamp, batch.max_timestamp):
        if timestamp < 0:
            continue  # no timestamp (-1): Kafka only checks real ones
        if timestamp < earliest or timestamp > latest:
            raise KafkaError(
                ErrorCode.INVALID_TIMESTAMP,
                f"timestamp {timestamp} is outside [{earliest}, {latest}] allowed at {now_ms}",
            )


def assign_offsets(
    batches: list[RecordBatchView], first_offset: int, leader_epoch: int, log_append_time_ms: int | None
) -> list[tuple[int, int, int]]:
    """Patch offsets (and LogAppendTime) in place; returns (last_offset, max_timestamp, size) per batch."""
    infos = []
    offset = first_offset
    for batch in batches:
        batch.set_base_offset(offset)
        batch.set_partition_leader_epoch(leader_epoch)
        if log_append_time_ms is not None:
            batch.set_max_timestamp(log_append_time_ms, TimestampType.LOG_APPEND_TIME)
        last = offset + batch.last_offset_delta
        infos.append((last, batch.max_timestamp, batch.size))
        offset = last + 1
    return infos
