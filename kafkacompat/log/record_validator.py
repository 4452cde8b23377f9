"""Record-level validation of one magic-2 batch: every record walked once, as Kafka's LogValidator does.

Theory of operation
-------------------
`validate_batch_records()` reads the records of one batch whose header `log/validator.py` has already
checked (size, CRC, client rules). It inflates a compressed batch first with
`wire.compression.decompress` under `max_inflated_bytes` (each decompressor refuses output past the
bound before allocating it), then walks the plain record stream in a single pass over the bytes:
length varint, attributes byte, timestamp-delta varlong, offset-delta varint, key, value, header count
and headers. Nothing is copied or decoded beyond the varints: keys, values and headers are skipped by
their lengths. The walk is one function with its state in local variables and the one- and two-byte
varints read inline, because it runs for every record of every produced batch (`tools/bench_validator.py`
measures it). The validator calls it through `record_walk.walk`: the same walk compiled
(`_record_walk.c`) when the extension was built, `_walk` itself otherwise; `_walk` is the reference the
compiled one is tested against.

Kafka's reader stops at the first structural fault, so the walk does too; key and timestamp faults are
collected for the whole batch and reported together, as LogValidator's `processRecordErrors` does.
Every refusal is an `InvalidRecords`; its `record_errors` are (index of the record within its batch,
message) pairs. Only the collected key and timestamp faults (`per_record`, Kafka's
RecordValidationException) reach the producer as Produce v8+ `record_errors` and `error_message`
(KIP-467; ReplicaManager.appendToLocalLog sets a custom message for that exception alone); a structural
fault answers the code alone, as in Kafka, and names its record for logs and tests. Codes, and where
Kafka's come from:

- codec id 5-7: UNKNOWN_SERVER_ERROR (CompressionType.forId's IllegalArgumentException in
  UnifiedLog.analyzeAndValidateRecords, answered by ReplicaManager.appendToLocalLog's catch-all).
- compressed data that does not inflate: CORRUPT_MESSAGE, from `compression.decompress` (Kafka wraps
  the stream's IOException in a KafkaException, i.e. UNKNOWN_SERVER_ERROR).
- records that do not fit in `max_inflated_bytes` once inflated: INVALID_RECORD (see `_inflate`; a
  zero-filled bomb fails its first record in Kafka's streaming reader, DefaultRecordBatch.RecordIterator).
- negative record count: INVALID_RECORD (DefaultRecordBatch.RecordIterator).
- record length negative or past the end of the records: INVALID_RECORD (DefaultRecord.readFrom).
- record length varint longer than 5 bytes: UNKNOWN_SERVER_ERROR in an uncompressed batch (ByteUtils'
  IllegalArgumentException escapes DefaultRecordBatch.uncompressedIterator, which catches only buffer
  underflow), INVALID_RECORD in a compressed one (StreamRecordIterator wraps it).
- any other varint longer than 5 bytes or varlong longer than 10, or one whose value overflows
  int32/int64: INVALID_RECORD (ByteUtils' IllegalArgumentException, wrapped by DefaultRecord.readFrom;
  Kafka keeps the overflowing value's low bits, we refuse it).
- key, value, header count or headers not ending exactly at the record's end, negative header count or
  header key length: INVALID_RECORD (DefaultRecord.readFrom and readHeaders).
- key, value or header value length below -1: INVALID_RECORD (Kafka reads any negative length as null;
  only -1 is null in the format, and consumers disagree on the rest).
- fewer records than the count ("premature EOF") or bytes left after the counted records: INVALID_RECORD
  (DefaultRecordBatch.RecordIterator and its uncompressed/stream iterators).
- from clients, an offset delta other than the record's index (0..count-1 in order): INVALID_RECORD
  (Kafka rebuilds such a compressed batch in LogValidator and stores an uncompressed one as sent; no v2
  client writes one, and stored deltas that disagree with the count break offset assignment). Batches
  from other origins (replication, recovery, compacted segments) need deltas strictly increasing within
  `[0, last_offset_delta]`, since compaction leaves gaps.
- a record without a key on a compacted topic: INVALID_RECORD, per record (LogValidator.validateKey).
- a CreateTime timestamp outside `[now - before.max.ms, now + after.max.ms]`, or a producer batch marked
  LogAppendTime: INVALID_TIMESTAMP, per record, which wins over key errors in the same batch
  (LogValidator.validateTimestamp and processRecordErrors). A record timestamp that overflows int64 is
  refused the same way (Kafka wraps it).

Record attributes are read and not checked: they are unused in format v2 and Kafka ignores them too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafkacompat.log import record_walk
from kafkacompat.wire import compression
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import CompressionCodec, RecordBatchView, TimestampType

__all__ = [
    "KEYLESS",
    "InvalidRecords",
    "TimestampCheck",
    "check_batch_records",
    "validate_batch_records",
]

_LONG_MAX = 2**63 - 1
_LONG_MIN = -(2**63)
_NO_TIMESTAMP = -1
_MAX_KNOWN_CODEC = CompressionCodec.ZSTD
#: A gzip or lz4 batch inflating past this is walked on its first this-many bytes before being inflated
#: whole.
_PROBE_BYTES = 1024 * 1024
_PROBED = (CompressionCodec.GZIP, CompressionCodec.LZ4)


class InvalidRecords(KafkaError):
    """A batch refused for its records. `record_errors` holds (index within the batch, message) pairs.

    `per_record` marks Kafka's RecordValidationException (key and timestamp rules, every record judged):
    only then does Kafka return `record_errors` and an error message to the producer (`located`). A
    structural fault (`per_record` False) names the record it stopped at for logs and tests only.
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        record_errors: list[tuple[int, str | None]] | None = None,
        *,
        per_record: bool = False,
    ) -> None:
        super().__init__(code, message)
        self.record_errors: list[tuple[int, str | None]] = record_errors or []
        self.per_record = per_record

    def located(self, topic_partition: str) -> tuple[str, list[tuple[int, str | None]]]:
        """The error message and record errors of a per-record refusal as Kafka words them for a
        Produce answer about `topic_partition` ("topic-partition")."""
        errors: list[tuple[int, str | None]] = [
            (index, f"{text} in topic partition {topic_partition}" if text == KEYLESS else text)
            for index, text in self.record_errors
        ]
        if self.code == ErrorCode.INVALID_TIMESTAMP:
            return "One or more records have been rejected due to invalid timestamp", errors
        shown = ", ".join(f"RecordError(batchIndex={index}, message='{text}')" for index, text in errors[:3])
        return (
            f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
            f"showing the first three errors at most: [{shown}]",
            errors,
        )


#: The record error of a keyless record on a compacted topic (`located` adds the partition, as Kafka's does).
KEYLESS = "Compacted topic cannot accept message without key"


@dataclass(frozen=True, slots=True)
class TimestampCheck:
    """The timestamp rules of a topic at one instant.

    `log_append_time` is the topic's `message.timestamp.type`: with it the broker stamps batches itself
    and checks nothing but that the producer did not claim LogAppendTime; otherwise every record's
    timestamp must lie within `before_max_ms` before and `after_max_ms` after `now_ms`
    (`message.timestamp.before.max.ms` / `after.max.ms`, which LogConfig already derives from the
    deprecated `difference.max.ms` where those are unset).
    """

    now_ms: int
    before_max_ms: int = _LONG_MAX
    after_max_ms: int = _LONG_MAX
    log_append_time: bool = False

    def refuses(self, timestamp: int) -> bool:
        """Whether a CreateTime `timestamp` (not -1) is out of range, with Java's long arithmetic."""
        diff = _wrap64(self.now_ms - timestamp)
        return diff > self.before_max_ms or _wrap64(-diff) > self.after_max_ms

    def bounds(self) -> tuple[int, int]:
        """Timestamps inside these bounds pass without further work; others go through `refuses`."""
        low = max(self.now_ms - self.before_max_ms, _LONG_MIN)
        high = min(self.now_ms + self.after_max_ms, _LONG_MAX)
        return low, high


def _wrap64(value: int) -> int:
    return ((value + 2**63) & (2**64 - 1)) - 2**63


class _Malformed(Exception):
    """Internal: a structural fault of the record being read (the walk adds its index)."""


class _Overlong(_Malformed):
    """Internal: a varint of more than 5 bytes or a varlong of more than 10."""


def validate_batch_records(
    batch: RecordBatchView,
    *,
    compacted: bool,
    timestamp_check: TimestampCheck | None,
    max_inflated_bytes: int,
    from_client: bool = False,
) -> None:
    """Walk every record of `batch`; raise `InvalidRecords` on the first fault Kafka would refuse.

    `compacted` requires keys; `timestamp_check` applies a topic's timestamp rules (None skips them);
    `max_inflated_bytes` bounds a compressed batch's inflated size. `from_client` holds offset deltas
    to 0..count-1 in order; without it (replication, recovery) they need only increase within
    `[0, last_offset_delta]`, as compaction leaves gaps.
    """
    check_batch_records(
        batch,
        compacted=compacted,
        timestamp_check=timestamp_check,
        max_inflated_bytes=max_inflated_bytes,
        from_client=from_client,
    )


def check_batch_records(
    batch: RecordBatchView,
    *,
    compacted: bool,
    timestamp_check: TimestampCheck | None,
    max_inflated_bytes: int,
    from_client: bool = False,
) -> int:
    """`validate_batch_records`, returning the largest record timestamp (-1 when there is none).

    That is the value Kafka stores as the batch's max timestamp on a CreateTime topic.
    """
    count = batch.records_count
    if count < 0:
        raise InvalidRecords(
            ErrorCode.INVALID_RECORD, f"Found invalid record count {count} in magic v2 batch"
        )
    codec = batch.compression
    if codec > _MAX_KNOWN_CODEC:
        raise InvalidRecords(ErrorCode.UNKNOWN_SERVER_ERROR, f"Unknown compression type id: {codec}")
    if count == 0:
        return _NO_TIMESTAMP  # Kafka's record iterator reads nothing from an empty batch
    lat = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    check = timestamp_check
    if check is not None and check.log_append_time and not lat:
        check = None  # the broker stamps the batch; record timestamps are not looked at
    window = check is not None and not lat
    # without a window every timestamp passes the fast-path test (and none is looked at again)
    low, high = check.bounds() if window and check is not None else (-math.inf, math.inf)
    walk = functools.partial(
        record_walk.walk,
        count=count,
        base_timestamp=batch.base_timestamp,
        last_offset_delta=batch.last_offset_delta,
        from_client=from_client,
        compacted=compacted,
        low=low,
        high=high,
        check=check if window else None,
    )
    if codec == CompressionCodec.NONE:
        data: bytes | bytearray | memoryview = batch.records_data
    else:
        data = _inflate(batch, codec, max_inflated_bytes, walk)
    max_timestamp, errors, walked = walk(data, plain=codec == CompressionCodec.NONE)
    if lat:
        max_timestamp = batch.max_timestamp
        if check is not None:
            lat_fault = _lat_fault(batch.max_timestamp, check)
            if lat_fault is not None:
                errors = _merge_batch_wide(errors, walked, lat_fault)
    if errors:
        _raise_collected(errors)
    return max_timestamp


def _inflate(
    batch: RecordBatchView, codec: int, bound: int, walk: Callable[..., tuple[int, list[Any], int]]
) -> bytes | bytearray:
    """A compressed batch's records, inflated whole under `bound`.

    Kafka reads a compressed batch as a stream and stops at the first bad record, so a bomb made of
    zeros is refused for its first record (INVALID_RECORD) after a few bytes. A gzip or lz4 batch that
    inflates past `_PROBE_BYTES` is handled the same way here: its first `_PROBE_BYTES` are inflated
    (`compression.decompress_prefix`, which holds about that much whatever the whole would be) and
    walked (records that end inside them are judged as usual), and only if they hold no fault is the
    whole batch inflated. A batch whose records are sound up to the bound but continue past it is
    refused with INVALID_RECORD as well (the code Kafka gives a batch it cannot read as records; not a
    retriable one, since a retry cannot shrink it). Snappy and zstd announce their inflated size in
    their framing (snappy blocks, zstd frames), so `decompress` refuses them before allocating past
    the bound.
    """
    data = batch.records_data
    probing = codec in _PROBED and bound > _PROBE_BYTES
    try:
        return compression.decompress(codec, data, _PROBE_BYTES if probing else bound)
    except compression.InflatedTooLarge as exc:
        if not probing:
            raise InvalidRecords(
                ErrorCode.INVALID_RECORD, f"records unreadable within the bound: {exc.message}"
            ) from None
    except KafkaError as exc:  # no record to name: the batch's compressed bytes are at fault
        raise InvalidRecords(exc.code, exc.message or exc.code.name) from None
    walk(compression.decompress_prefix(codec, data, _PROBE_BYTES), partial=True)
    try:
        return compression.decompress(codec, data, bound)
    except compression.InflatedTooLarge as exc:
        raise InvalidRecords(
            ErrorCode.INVALID_RECORD, f"records unreadable within the bound: {exc.message}"
        ) from None
    except KafkaError as exc:
        raise InvalidRecords(exc.code, exc.message or exc.code.name) from None


def _lat_fault(timestamp: int, check: TimestampCheck) -> Callable[[int], str] | None:
    """The fault of a producer's LogAppendTime batch, whose records all carry its max timestamp, as a
    message for the record at each offset."""
    if not check.log_append_time and timestamp != _NO_TIMESTAMP:
        if check.refuses(timestamp):
            return lambda offset: _timestamp_message(timestamp, offset, check)
        return None
    return lambda offset: (
        "Invalid timestamp type in message: the producer should not set the timestamp type to LogAppendTime"
    )


def _merge_batch_wide(
    errors: list[tuple[int, str, bool]], count: int, message: Callable[[int], str]
) -> list[tuple[int, str, bool]]:
    # a timestamp error replaces a key error of the same record, as validateRecord reports one per record
    keyed = {index: (index, text, is_ts) for index, text, is_ts in errors}
    for index in range(count):
        keyed[index] = (index, message(index), True)
    return [keyed[index] for index in sorted(keyed)]


def _timestamp_message(timestamp: int, offset: int, check: TimestampCheck) -> str:
    earliest, latest = check.now_ms - check.before_max_ms, check.now_ms + check.after_max_ms
    return (
        f"Timestamp {timestamp} of message with offset {offset} is out of range. "
        f"The timestamp should be within [{earliest}, {latest}]"
    )


def _raise_collected(errors: list[tuple[int, str, bool]]) -> None:
    record_errors: list[tuple[int, str | None]] = [(index, text) for index, text, _ in errors]
    timestamps = any(is_ts for _, _, is_ts in errors)
    code = ErrorCode.INVALID_TIMESTAMP if timestamps else ErrorCode.INVALID_RECORD
    shown = "; ".join(f"record {index}: {text}" for index, text in record_errors[:3])
    raise InvalidRecords(
        code, f"{len(record_errors)} record(s) refused, first: {shown}", record_errors, per_record=True
    )


def _varint_slow(data: bytes | bytearray | memoryview, pos: int, limit: int, wide: bool) -> tuple[int, int]:
    """A zigzag varint (int32, at most 5 bytes) or varlong (`wide`: int64, at most 10) at `pos`."""
    raw = 0
    shift = 0
    last_shift = 63 if wide else 28
    while True:
        if pos >= limit:
            raise _Malformed("the record ends inside a varint")
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        if shift == last_shift:
            kind = "varlong is longer than 10 bytes" if wide else "varint is longer than 5 bytes"
            raise _Overlong(kind)
        shift += 7
    if raw >> (64 if wide else 32):
        raise _Malformed(f"{'varlong' if wide else 'varint'} overflows {'int64' if wide else 'int32'}")
    return (raw >> 1) ^ -(raw & 1), pos


def _walk(
    data: bytes | bytearray | memoryview,
    *,
    count: int,
    base_timestamp: int,
    last_offset_delta: int,
    from_client: bool,
    compacted: bool,
    low: float,
    high: float,
    check: TimestampCheck | None,
    plain: bool = False,
    partial: bool = False,
) -> tuple[int, list[tuple[int, str, bool]], int]:
    """Read `count` records from `data`; returns (max timestamp, collected record errors, records read).

    Raises InvalidRecords at the first structural fault. The hot path: every varint whose first one or
    two bytes end it is decoded inline (lengths under 8 KiB, deltas under 64), anything longer through
    `_varint_slow`, which also enforces the 5/10-byte limits. Reads past the end of `data` raise
    IndexError, which means the records end early. `plain` says the batch is uncompressed: Kafka then
    reads the length varint outside its record reader, and an over-long one reaches its catch-all
    (UNKNOWN_SERVER_ERROR). `partial` walks a prefix of the records: the walk stops quietly at the first
    record that does not end inside `data`.
    """
    end = len(data)
    pos = 0
    index = 0
    slow = _varint_slow
    errors: list[tuple[int, str, bool]] = []
    max_ts = _NO_TIMESTAMP
    previous_delta = -1
    try:
        while index < count:
            if pos >= end:
                if partial:
                    break
                raise _Malformed(
                    f"Incorrect declared batch size, premature EOF reached: the batch declares {count} "
                    f"records but holds {index}"
                )
            # record length (varint)
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                try:
                    b2 = data[pos + 1]
                    if b2 < 0x80:
                        raw = (b & 0x7F) | (b2 << 7)
                        length = (raw >> 1) ^ -(raw & 1)
                        pos += 2
                    else:
                        length, pos = slow(data, pos, end, False)
                except (IndexError, _Malformed) as exc:
                    if partial:
                        break
                    if plain and isinstance(exc, _Overlong):
                        raise InvalidRecords(
                            ErrorCode.UNKNOWN_SERVER_ERROR, f"record {index}: {exc}"
                        ) from None
                    raise
            if length < 0 or length > end - pos:
                if partial and length >= 0:
                    break
                raise _Malformed(
                    f"Invalid record size: expected {length} bytes in record payload, but the records have "
                    f"only {end - pos} remaining bytes"
                )
            record_end = pos + length
            pos += 1  # attributes (unused in v2)
            # timestamp delta (varlong)
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = slow(data, pos, record_end, True)
            # offset delta (varint)
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = slow(data, pos, record_end, False)
            # key (varint length; -1 is null)
            b = data[pos]
            if b < 0x80:
                pos += 1
                if b & 1:
                    if b != 1:
                        raise _Malformed(f"invalid key length {-((b + 1) >> 1)}")
                    key_null = True
                else:
                    pos += b >> 1
                    key_null = False
            else:
                size, pos = slow(data, pos, record_end, False)
                if size < 0:
                    raise _Malformed(f"invalid key length {size}")
                pos += size
                key_null = False
            # value
            b = data[pos]
            if b < 0x80:
                pos += 1
                if b & 1:
                    if b != 1:
                        raise _Malformed(f"invalid value length {-((b + 1) >> 1)}")
                else:
                    pos += b >> 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    if b & 1:
                        raise _Malformed("invalid value length")
                    pos += 2 + (((b & 0x7F) | (b2 << 7)) >> 1)
                else:
                    size, pos = slow(data, pos, record_end, False)
                    if size < -1:
                        raise _Malformed(f"invalid value length {size}")
                    if size > 0:
                        pos += size
            if pos >= record_end:
                raise _Malformed(
                    "Found invalid record structure: the key or value runs past the record's end"
                )
            # headers
            b = data[pos]
            if b == 0:
                pos += 1
            else:
                headers, pos = slow(data, pos, record_end, False)
                if headers < 0:
                    raise _Malformed(f"Found invalid number of record headers {headers}")
                if headers > record_end - pos:
                    raise _Malformed(
                        f"Found invalid number of record headers. {headers} is larger than the remaining "
                        "size of the record"
                    )
                for _ in range(headers):
                    size, pos = slow(data, pos, record_end, False)
                    if size < 0:
                        raise _Malformed(f"Invalid negative header key size {size}")
                    pos += size
                    size, pos = slow(data, pos, record_end, False)
                    if size < -1:
                        raise _Malformed(f"invalid header value length {size}")
                    if size > 0:
                        pos += size
            if pos != record_end:
                raise _Malformed(
                    f"Invalid record size: expected to read {length} bytes in record payload, but instead "
                    f"read {length + pos - record_end}"
                )
            if from_client:
                if offset_delta != index:
                    raise _Malformed(
                        f"offset delta {offset_delta} where {index} was expected (deltas run 0..count-1)"
                    )
            else:
                if offset_delta <= previous_delta or offset_delta > last_offset_delta:
                    raise _Malformed(
                        f"offset delta {offset_delta} does not increase within [0, {last_offset_delta}]"
                    )
                previous_delta = offset_delta
            if compacted and key_null:
                errors.append((index, KEYLESS, False))
            ts = base_timestamp + ts_delta
            if not low <= ts <= high:
                fault = _timestamp_fault(ts, offset_delta, check)
                if fault is not None:
                    if errors and errors[-1][0] == index:
                        errors.pop()  # one error per record: the timestamp's replaces the key's
                    errors.append((index, fault, True))
            if ts > max_ts:
                max_ts = ts
            index += 1
        if pos != end and index == count:
            raise _Malformed(
                f"Incorrect declared batch size, records still remaining in file: {end - pos} bytes after "
                f"the {count} declared records"
            )
    except _Malformed as exc:
        raise InvalidRecords(
            ErrorCode.INVALID_RECORD, f"record {index}: {exc}", [(index, str(exc))]
        ) from None
    except IndexError:
        message = "Found invalid record structure: the record runs past the end of the batch"
        raise InvalidRecords(
            ErrorCode.INVALID_RECORD, f"record {index}: {message}", [(index, message)]
        ) from None
    return max_ts, errors, index


def _timestamp_fault(timestamp: int, offset: int, check: TimestampCheck | None) -> str | None:
    """Why a timestamp outside the fast-path bounds is refused, or None when it passes after all."""
    if not _LONG_MIN <= timestamp <= _LONG_MAX:
        return f"timestamp overflows int64 (base timestamp plus delta is {timestamp})"
    if check is None or timestamp == _NO_TIMESTAMP:
        return None
    if check.refuses(timestamp):
        return _timestamp_message(timestamp, offset, check)
    return None
