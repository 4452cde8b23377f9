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
- from clients only, every record (`record_validator.check_batch_records`, one pass per batch, a
  compressed batch inflated under `MAX_INFLATED_BATCH_BYTES`): lengths, varints, offset deltas, the
  count against the records present, keys on compacted topics (`cleanup.policy` with `compact`) and
  each CreateTime timestamp within `message.timestamp.before.max.ms` / `after.max.ms` of the broker
  clock. Its `InvalidRecords` carries the per-record errors Produce returns. On a CreateTime topic the
  batch's max timestamp is then set to its largest record timestamp (CRC recomputed only when that
  changes it), as Kafka's validator does, so a producer's header cannot claim a time no record has.
- from every other origin (`from_client=False`: a follower's fetched batches, transaction markers, the
  coordinators' own writes), every record too, in the same single pass per batch, but with the
  structural rules alone: offset deltas need only increase within `[0, last_offset_delta]` (compacted
  segments have gaps), and keys, timestamp windows and the client's header rules are not applied,
  since a batch a leader once accepted must stay replicable after a topic's config changes. Kafka's
  follower trusts its leader and checks only the CRC; here no path appends a batch whose records a
  reader cannot walk, whatever wrote it.

`compression.type` other than `producer` makes `recompress_if_needed()` rebuild batches whose codec
differs, keeping offsets deltas, timestamps, headers and producer fields (Kafka recompresses the same
way).

The inflation bound: Kafka inflates a compressed batch as a stream and never holds it whole, so it needs
none; this broker inflates a batch into one buffer, so it caps that buffer at the same 64 MiB every other
reader of records here uses (`compression.DEFAULT_MAX_OUTPUT_SIZE`: compaction, recompression,
coordinators). A batch accepted here can therefore always be read back by them. Producers' size limits
apply to the compressed size, so a batch at the default `max.message.bytes` (1 MiB) reaches the cap
only at a compression ratio above 64:1; a bomb is refused before more than the cap is allocated.

`assign_offsets()` then patches base offset and partition leader epoch in place (outside the CRC) and,
for LogAppendTime topics, the timestamp type and max timestamp (the CRC is recomputed).
"""

from __future__ import annotations

from kafkacompat.log.config import LogConfig
from kafkacompat.log.record_validator import TimestampCheck, check_batch_records
from kafkacompat.wire.compression import DEFAULT_MAX_OUTPUT_SIZE
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import (
    RecordBatchView,
    RecordInput,
    TimestampType,
    build_batch,
    iter_batches,
    iter_records,
)

__all__ = ["MAX_INFLATED_BATCH_BYTES", "assign_offsets", "recompress_if_needed", "validate_records"]

#: The most a client's compressed batch may inflate to (see the module docstring).
MAX_INFLATED_BATCH_BYTES = DEFAULT_MAX_OUTPUT_SIZE


def validate_records(
    records: memoryview,
    config: LogConfig,
    now_ms: int,
    *,
    from_client: bool = True,
    ignore_record_size: bool = False,
) -> list[RecordBatchView]:
    """All batches of `records`, validated; raises KafkaError (an InvalidRecordBatch for structure, an
    InvalidRecords for the records of a batch). `ignore_record_size`: a follower's append, which takes
    what its leader accepted even when max.message.bytes was lowered since (as Kafka's follower does)."""
    if len(records) > config.segment_bytes:
        raise KafkaError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"{len(records)} bytes of records exceed segment.bytes {config.segment_bytes}",
        )
    batches = list(iter_batches(records))
    check = TimestampCheck(
        now_ms, config.timestamp_before_max_ms, config.timestamp_after_max_ms, config.log_append_time
    )
    for batch in batches:
        if batch.size > config.max_message_bytes and not ignore_record_size:
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
            max_timestamp = check_batch_records(
                batch,
                compacted=config.compacted,
                timestamp_check=check,
                max_inflated_bytes=MAX_INFLATED_BATCH_BYTES,
                from_client=True,
            )
            if not config.log_append_time and (
                max_timestamp != batch.max_timestamp or batch.timestamp_type != TimestampType.CREATE_TIME
            ):
                batch.set_max_timestamp(max_timestamp, TimestampType.CREATE_TIME)
        else:
            check_batch_records(
                batch, compacted=False, timestamp_check=None, max_inflated_bytes=MAX_INFLATED_BATCH_BYTES
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
