"""Kafka record batches (message format v2, "magic 2"): a header view, a walker, a record decoder, a builder.

Theory of operation
-------------------
On the Produce and Fetch paths a record batch stays opaque bytes. The broker only needs the 61-byte
batch header: it checks sizes, magic and the CRC, reads producer and offset fields, and assigns offsets
by patching `baseOffset` and `partitionLeaderEpoch` in place. Both lie before the CRC'd range (the CRC
covers `attributes` to the end of the batch), so patching them costs no CRC work. Only the LogAppendTime
path (`set_max_timestamp`) rewrites CRC'd bytes and recomputes the CRC.

* `RecordBatchView` wraps a memoryview of exactly one batch and decodes its header once, with one
  struct call. The view owns the interpretation of that header: change header fields only through its
  setters, which write the buffer and keep the decoded fields in step. Patching needs a writable buffer
  (a bytearray, e.g. a request frame from `FrameBuffer`); a read-only one raises TypeError.
* `iter_batches` walks a record set (a Produce partition's `records`, a log segment slice) applying
  Kafka's structural checks in Kafka's order (size prefix, magic, completeness, header size). Legacy
  message sets (magic 0 and 1) are recognised and refused with INVALID_RECORD, the code Kafka 3.x
  gives a produce of version 3 or later whose batch is not magic 2; this broker never converts them.
* `iter_records` decodes the records of one batch (decompressing first when needed) for the few
  features that must look inside: log validation, compaction, the group and transaction coordinators,
  tools. Errors inside a CRC-valid batch raise INVALID_RECORD, as Kafka's record reader does;
  damaged framing, CRC and compressed data raise CORRUPT_MESSAGE.
* `build_batch` encodes batches the broker writes itself (internal topics, transaction markers,
  compaction output); `build_control_batch` writes a transaction marker.

Errors are `InvalidRecordBatch(code, message)`, a `KafkaError`, so a handler can put `.code` straight
into its per-partition response. Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from kafkacompat.wire.crc import crc32c
from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = [
    "ABORT_MARKER",
    "BATCH_HEADER",
    "COMMIT_MARKER",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "CompressionCodec",
    "InvalidRecordBatch",
    "Record",
    "RecordBatchView",
    "RecordInput",
    "TimestampType",
    "build_batch",
    "build_control_batch",
    "control_record_key",
    "end_txn_marker_value",
    "iter_batches",
    "iter_records",
    "next_batch_size",
    "parse_control_record_key",
    "parse_end_txn_marker_value",
    "validate_produce_records",
]


class InvalidRecordBatch(KafkaError):
    """A record set or batch that cannot be accepted; `.code` is the Kafka error code to answer with."""


class CompressionCodec:
    """Compression codec ids (the low three bits of a batch's attributes)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType:
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


MAGIC = 2
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

# Control record types (the `type` in a control record's key).
ABORT_MARKER = 0
COMMIT_MARKER = 1

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = BATCH_HEADER.size  # 61
#: baseOffset + batchLength: the bytes before what batchLength counts.
LOG_OVERHEAD = 12

_BASE_OFFSET_AT = 0
_LENGTH_AT = 8
_LEADER_EPOCH_AT = 12
_MAGIC_AT = 16
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_MAX_TIMESTAMP_AT = 35
_HEADER_UP_TO_MAGIC = _MAGIC_AT + 1
# The smallest legacy (magic 0) message is 14 bytes after the log overhead; Kafka refuses any smaller
# size prefix before it even looks at the magic byte.
_MIN_SIZE_PREFIX = 14

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20
_DELETE_HORIZON_MASK = 0x40

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_ATTRS_AND_MAX_TS = struct.Struct(">h")  # attributes are written as an int16
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")

_INT32_MAX = 2**31 - 1


def _corrupt(message: str) -> InvalidRecordBatch:
    return InvalidRecordBatch(ErrorCode.CORRUPT_MESSAGE, message)


def _invalid(message: str) -> InvalidRecordBatch:
    return InvalidRecordBatch(ErrorCode.INVALID_RECORD, message)


class RecordBatchView:
    """One magic-2 record batch: its header decoded, its bytes left where they are.

    `buffer` is a memoryview of exactly `size` bytes. The header fields are decoded at construction;
    header changes must go through `set_*` so that buffer and fields agree.
    """

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "buffer",
        "crc",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "records_count",
    )

    def __init__(self, buffer: memoryview | bytes | bytearray) -> None:
        """Wrap one batch. Checks only what is needed to read the header; see `iter_batches`."""
        if not isinstance(buffer, memoryview):
            buffer = memoryview(buffer)
        if buffer.ndim != 1 or buffer.itemsize != 1:
            buffer = buffer.cast("B")
        if len(buffer) < HEADER_SIZE:
            raise _corrupt(f"a batch of {len(buffer)} bytes is shorter than the {HEADER_SIZE}-byte header")
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = BATCH_HEADER.unpack_from(buffer, 0)
        if self.magic != MAGIC:
            raise InvalidRecordBatch(
                ErrorCode.INVALID_RECORD, f"record batch magic {self.magic}: only magic 2 is supported"
            )
        size = self.batch_length + LOG_OVERHEAD
        if self.batch_length < HEADER_SIZE - LOG_OVERHEAD or size > len(buffer):
            raise _corrupt(f"batch length {self.batch_length} does not fit a {len(buffer)}-byte buffer")
        self.buffer = buffer[:size] if size != len(buffer) else buffer

    # -- derived fields ------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes the batch occupies in a record set (batch_length + 12)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        """Codec id 0-4 (see `CompressionCodec`); 5-7 are not valid and fail in `iter_records`."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        if self.attributes & _TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When compaction set the delete-horizon bit, base_timestamp holds the horizon."""
        return self.base_timestamp if self.attributes & _DELETE_HORIZON_MASK else None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (sequences wrap from int32 max to 0), or -1 without sequences."""
        base = self.base_sequence
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        delta = self.last_offset_delta
        if base > _INT32_MAX - delta:
            return delta - (_INT32_MAX - base) - 1
        return base + delta

    @property
    def records_data(self) -> memoryview:
        """The bytes after the header: records, or the compressed records when compressed."""
        return self.buffer[HEADER_SIZE:]

    # -- CRC ---------------------------------------------------------------------------------------

    def compute_crc(self) -> int:
        return crc32c(self.buffer[_ATTRIBUTES_AT:])

    def verify_crc(self) -> bool:
        """True when the stored CRC32C matches the bytes from attributes to the end of the batch."""
        return crc32c(self.buffer[_ATTRIBUTES_AT:]) == self.crc

    def ensure_valid(self) -> None:
        """Raise InvalidRecordBatch(CORRUPT_MESSAGE) unless the CRC matches (Kafka's ensureValid)."""
        computed = crc32c(self.buffer[_ATTRIBUTES_AT:])
        if computed != self.crc:
            raise _corrupt(f"record batch is corrupt (stored crc = {self.crc}, computed crc = {computed})")

    # -- in-place patching -------------------------------------------------------------------------

    def set_base_offset(self, base_offset: int) -> None:
        """Assign offsets: baseOffset lies outside the CRC, so no CRC work."""
        _I64.pack_into(self.buffer, _BASE_OFFSET_AT, base_offset)
        self.base_offset = base_offset

    def set_last_offset(self, last_offset: int) -> None:
        self.set_base_offset(last_offset - self.last_offset_delta)

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """Stamp the leader epoch: outside the CRC as well."""
        _I32.pack_into(self.buffer, _LEADER_EPOCH_AT, epoch)
        self.partition_leader_epoch = epoch

    def set_max_timestamp(self, max_timestamp: int, timestamp_type: int | None = None) -> None:
        """Rewrite maxTimestamp (and the timestamp-type bit) and recompute the CRC.

        This is the LogAppendTime path: the broker sets timestamp_type=LOG_APPEND_TIME and its clock
        as max timestamp; readers then report that time for every record of the batch. Nothing is
        written when neither value changes.
        """
        if timestamp_type is None:
            timestamp_type = self.timestamp_type
        if timestamp_type not in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME):
            raise ValueError(f"timestamp type must be 0 or 1, got {timestamp_type}")
        if timestamp_type == self.timestamp_type and max_timestamp == self.max_timestamp:
            return
        attributes = self.attributes & ~_TIMESTAMP_TYPE_MASK
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= _TIMESTAMP_TYPE_MASK
        buf = self.buffer
        _ATTRS_AND_MAX_TS.pack_into(buf, _ATTRIBUTES_AT, attributes)
        _I64.pack_into(buf, _MAX_TIMESTAMP_AT, max_timestamp)
        crc = crc32c(buf[_ATTRIBUTES_AT:])
        _U32.pack_into(buf, _CRC_AT, crc)
        self.attributes = attributes
        self.max_timestamp = max_timestamp
        self.crc = crc

    def __repr__(self) -> str:
        return (
            f"RecordBatchView(offsets=[{self.base_offset}, {self.last_offset}], count={self.records_count}, "
            f"size={self.size}, compression={self.compression}, timestamp_type={self.timestamp_type}, "
            f"producer_id={self.producer_id}, producer_epoch={self.producer_epoch}, "
            f"base_sequence={self.base_sequence}, transactional={self.is_transactional}, "
            f"control={self.is_control}, crc={self.crc})"
        )


def _as_bytes_view(buf: memoryview | bytes | bytearray) -> memoryview:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    return mv


def next_batch_size(buf: memoryview, position: int = 0) -> int | None:
    """Size of the batch starting at `position` if it is complete, None if the buffer ends first.

    Applies Kafka's checks on the size prefix and magic byte (CORRUPT_MESSAGE), in Kafka's order.
    """
    remaining = len(buf) - position
    if remaining < LOG_OVERHEAD:
        return None
    (length,) = _I32.unpack_from(buf, position + _LENGTH_AT)
    if length < _MIN_SIZE_PREFIX:
        raise _corrupt(f"record size {length} is less than the minimum record overhead ({_MIN_SIZE_PREFIX})")
    if remaining < _HEADER_UP_TO_MAGIC:
        return None
    magic = buf[position + _MAGIC_AT]
    if magic > MAGIC:  # a byte read unsigned: negative magics land here too
        raise _corrupt(f"invalid magic found in record: {magic if magic < 128 else magic - 256}")
    size = length + LOG_OVERHEAD
    if remaining < size:
        return None
    return size


def iter_batches(
    buf: memoryview | bytes | bytearray, *, allow_partial_tail: bool = False
) -> Iterator[RecordBatchView]:
    """Walk the batches of a record set, yielding a view of each.

    Raises InvalidRecordBatch: CORRUPT_MESSAGE for a bad size prefix, an unknown magic, a batch shorter
    than its header, or (unless `allow_partial_tail`) trailing bytes that are not a whole batch;
    INVALID_RECORD for a legacy (magic 0/1) message set. With `allow_partial_tail=True` the walk ends
    quietly at an incomplete last batch, as a Fetch response may end. CRCs are not checked here
    (call `ensure_valid()`), so that a caller that does not need them does not pay for them.
    """
    mv = _as_bytes_view(buf)
    end = len(mv)
    position = 0
    while position < end:
        size = next_batch_size(mv, position)
        if size is None:
            if allow_partial_tail:
                return
            raise _corrupt(f"record set ends with an incomplete batch of {end - position} bytes")
        magic = mv[position + _MAGIC_AT]
        if magic != MAGIC:
            raise _invalid(f"record batches with magic {magic} are not supported; only magic 2 is accepted")
        if size < HEADER_SIZE:
            raise _corrupt(
                f"record batch is corrupt (the size {size} is smaller than the minimum allowed overhead "
                f"{HEADER_SIZE})"
            )
        yield RecordBatchView(mv[position : position + size])
        position += size


def validate_produce_records(version: int, buf: memoryview | bytes | bytearray) -> RecordBatchView:
    """Kafka's per-partition checks of a Produce request's records, returning the one batch.

    Produce v3+ must carry exactly one magic-2 batch (INVALID_RECORD otherwise); zstd needs v7+
    (UNSUPPORTED_COMPRESSION_TYPE). Bytes after the first batch that do not form a whole second batch
    are ignored here, as Kafka trims them; `RecordBatchView.size` says where the batch ends. The CRC is
    left to the log (`ensure_valid`). Kafka applies these rules from Produce v3 on only, so the handler
    calls this for those versions; older requests' record sets meet the log's checks alone.
    """
    mv = _as_bytes_view(buf)
    size = next_batch_size(mv, 0)
    if size is None:
        raise _invalid(
            f"Produce requests with version {version} must have at least one record batch per partition"
        )
    if mv[_MAGIC_AT] != MAGIC:
        raise _invalid(
            f"Produce requests with version {version} are only allowed to contain record batches with magic "
            "version 2"
        )
    if size < HEADER_SIZE:
        raise _corrupt(
            f"record batch is corrupt (the size {size} is smaller than the minimum allowed overhead "
            f"{HEADER_SIZE})"
        )
    batch = RecordBatchView(mv[:size])
    if version < 7 and batch.compression == CompressionCodec.ZSTD:
        raise InvalidRecordBatch(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
        )
    if next_batch_size(mv, size) is not None:
        raise _invalid(
            f"Produce requests with version {version} are only allowed to contain exactly one record batch "
            "per partition"
        )
    return batch


# -- records -------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    """One decoded record. `offset` and `timestamp` are absolute (LogAppendTime batches report the
    batch's max timestamp for every record, as Kafka does); the deltas are as stored."""

    offset: int
    offset_delta: int
    timestamp: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    attributes: int = 0
    size: int = 0  # encoded size including the length varint


def _read_varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """Zigzag varint of at most 5 bytes (an int32), as Kafka reads it."""
    raw = 0
    shift = 0
    while True:
        if pos >= end:
            raise _invalid("Incorrect declared batch size, premature EOF reached")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            raise _invalid("varint is too long: the most significant bit of its 5th byte is set")
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def _read_varlong(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """Zigzag varlong of at most 10 bytes (an int64)."""
    raw = 0
    shift = 0
    while True:
        if pos >= end:
            raise _invalid("Incorrect declared batch size, premature EOF reached")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise _invalid("varlong is too long: the most significant bit of its 10th byte is set")
    raw &= 0xFFFFFFFFFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def _decode_records(
    data: memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> Iterator[Record]:
    end = len(data)
    pos = 0
    read_varint = _read_varint
    last_index = count - 1
    for index in range(count):
        if pos >= end:
            raise _invalid("Incorrect declared batch size, premature EOF reached")
        record_start = pos
        body_size, pos = read_varint(data, pos, end)
        start = pos
        if body_size < 0 or body_size > end - pos:
            raise _invalid(
                f"Invalid record size: expected {body_size} bytes in record payload, but the buffer has only "
                f"{end - pos} remaining bytes"
            )
        record_end = pos + body_size
        if pos >= record_end:
            raise _invalid("Found invalid record structure: empty record")
        attributes = data[pos]
        pos += 1
        timestamp_delta, pos = _read_varlong(data, pos, record_end)
        offset_delta, pos = read_varint(data, pos, record_end)
        key_size, pos = read_varint(data, pos, record_end)
        if key_size >= 0:
            if key_size > record_end - pos:
                raise _invalid("Found invalid record structure: key overruns the record")
            key: bytes | None = data[pos : pos + key_size].tobytes()
            pos += key_size
        else:
            key = None
        value_size, pos = read_varint(data, pos, record_end)
        if value_size >= 0:
            if value_size > record_end - pos:
                raise _invalid("Found invalid record structure: value overruns the record")
            value: bytes | None = data[pos : pos + value_size].tobytes()
            pos += value_size
        else:
            value = None
        header_count, pos = read_varint(data, pos, record_end)
        if header_count < 0:
            raise _invalid(f"Found invalid number of record headers {header_count}")
        if header_count > record_end - pos:
            raise _invalid(
                f"Found invalid number of record headers. {header_count} is larger than the remaining size "
                "of the record"
            )
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(header_count):
            hkey_size, pos = read_varint(data, pos, record_end)
            if hkey_size < 0:
                raise _invalid(f"Invalid negative header key size {hkey_size}")
            if hkey_size > record_end - pos:
                raise _invalid("Found invalid record structure: header key overruns the record")
            # Java decodes header keys leniently (malformed UTF-8 becomes U+FFFD); so do we.
            hkey = data[pos : pos + hkey_size].tobytes().decode("utf-8", "replace")
            pos += hkey_size
            hvalue_size, pos = read_varint(data, pos, record_end)
            if hvalue_size >= 0:
                if hvalue_size > record_end - pos:
                    raise _invalid("Found invalid record structure: header value overruns the record")
                hvalue: bytes | None = data[pos : pos + hvalue_size].tobytes()
                pos += hvalue_size
            else:
                hvalue = None
            headers.append((hkey, hvalue))
        if pos != record_end:
            raise _invalid(
                f"Invalid record size: expected to read {body_size} bytes in record payload, but instead "
                f"read {pos - start}"
            )
        if index == last_index and pos != end:
            raise _invalid("Incorrect declared batch size, records still remaining in file")
        yield Record(
            base_offset + offset_delta,
            offset_delta,
            log_append_time if log_append_time is not None else base_timestamp + timestamp_delta,
            timestamp_delta,
            key,
            value,
            headers,
            attributes,
            record_end - record_start,
        )


def iter_records(batch: RecordBatchView, *, max_decompressed_size: int | None = None) -> Iterator[Record]:
    """Decode the records of one batch, decompressing first when the batch is compressed.

    Raises InvalidRecordBatch: INVALID_RECORD for a negative count or any record that does not match
    its declared sizes (including bytes left after the last record); CORRUPT_MESSAGE for an unknown
    codec or undecodable compressed data (see `compression.decompress`). Errors surface while
    iterating; wrap in `list()` to validate a whole batch at once.
    """
    count = batch.records_count
    if count < 0:
        raise _invalid(f"Found invalid record count {count} in magic v2 batch")
    if count == 0:
        return iter(())
    codec = batch.compression
    data = batch.records_data
    if codec != CompressionCodec.NONE:
        from kafkacompat.wire import compression  # deferred: compression imports this module

        if max_decompressed_size is None:
            inflated = compression.decompress(codec, data)
        else:
            inflated = compression.decompress(codec, data, max_output_size=max_decompressed_size)
        data = memoryview(inflated)
    log_append_time = batch.max_timestamp if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else None
    return _decode_records(data, count, batch.base_offset, batch.base_timestamp, log_append_time)


# -- building ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class RecordInput:
    """A record to encode. `timestamp=None` takes the batch's base timestamp; `offset_delta=None` takes
    the record's position in the batch (compaction output keeps the original deltas instead)."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = field(default_factory=tuple)
    timestamp: int | None = None
    offset_delta: int | None = None


def _write_varint(out: bytearray, value: int) -> None:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
) -> None:
    body = bytearray(b"\x00")  # attributes: unused, always 0
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    if key is None:
        body.append(1)  # zigzag(-1)
    else:
        _write_varint(body, len(key))
        body += key
    if value is None:
        body.append(1)
    else:
        _write_varint(body, len(value))
        body += value
    headers = list(headers)
    _write_varint(body, len(headers))
    for hkey, hvalue in headers:
        encoded = hkey.encode("utf-8")
        _write_varint(body, len(encoded))
        body += encoded
        if hvalue is None:
            body.append(1)
        else:
            _write_varint(body, len(hvalue))
            body += hvalue
    _write_varint(out, len(body))
    out += body


def _as_record_input(item: RecordInput | tuple) -> RecordInput:
    if isinstance(item, RecordInput):
        return item
    key, value, *rest = item
    headers = rest[0] if len(rest) > 0 and rest[0] is not None else ()
    timestamp = rest[1] if len(rest) > 1 else None
    return RecordInput(key, value, headers, timestamp)


def build_batch(
    records: Sequence[RecordInput | tuple],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    compression: int = CompressionCodec.NONE,
    timestamp_type: int = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = -1,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode one magic-2 batch.

    `records` holds `RecordInput`s or tuples `(key, value[, headers[, timestamp]])`. Defaults follow
    Kafka's builder: base timestamp = first record's timestamp (-1 for an empty batch), max timestamp =
    the largest record timestamp (pass `max_timestamp` with LOG_APPEND_TIME), last offset delta = the
    largest offset delta. `delete_horizon_ms` sets the delete-horizon bit and stores the horizon as the
    base timestamp (record timestamps stay exact: their deltas are taken from it).
    """
    inputs = [_as_record_input(r) for r in records]
    if timestamp_type not in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME):
        raise ValueError(f"timestamp type must be 0 or 1, got {timestamp_type}")
    if not 0 <= compression <= 4:
        raise ValueError(f"compression codec must be 0-4, got {compression}")
    first_ts = next((r.timestamp for r in inputs if r.timestamp is not None), None)
    base_known = base_timestamp is not None or first_ts is not None
    if base_timestamp is None:
        base_timestamp = first_ts if first_ts is not None else NO_TIMESTAMP
    if delete_horizon_ms is not None:
        delta_base, stored_base = delete_horizon_ms, delete_horizon_ms
    else:
        delta_base, stored_base = base_timestamp, base_timestamp
    body = bytearray()
    largest_ts = NO_TIMESTAMP
    largest_delta = -1
    for index, rec in enumerate(inputs):
        ts = rec.timestamp if rec.timestamp is not None else base_timestamp
        if not base_known:
            raise ValueError("record without a timestamp and no base_timestamp to take it from")
        delta = rec.offset_delta if rec.offset_delta is not None else index
        if delta <= largest_delta:
            raise ValueError("record offset deltas must increase")
        largest_delta = delta
        largest_ts = max(largest_ts, ts)
        _encode_record(body, delta, ts - delta_base, rec.key, rec.value, rec.headers)
    if max_timestamp is None:
        max_timestamp = largest_ts
    if last_offset_delta is None:
        last_offset_delta = max(largest_delta, 0)
    payload: bytes | bytearray = body
    if compression != CompressionCodec.NONE and inputs:
        from kafkacompat.wire import compression as codecs  # deferred: compression imports this module

        payload = codecs.compress(compression, body)
    attributes = compression
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= _TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= _TRANSACTIONAL_MASK
    if is_control:
        attributes |= _CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= _DELETE_HORIZON_MASK
    out = bytearray(HEADER_SIZE)
    out += payload
    BATCH_HEADER.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        stored_base,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(inputs),
    )
    _U32.pack_into(out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


# -- control records (transaction markers) --------------------------------------------------------------


def control_record_key(marker_type: int, version: int = 0) -> bytes:
    """Key of a control record: int16 version (0), int16 type (ABORT_MARKER / COMMIT_MARKER / ...)."""
    return _CONTROL_KEY.pack(version, marker_type)


def parse_control_record_key(key: bytes | memoryview | None) -> tuple[int, int]:
    """(version, type) of a control record key; INVALID_RECORD when it is too short."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise _invalid("control record key is missing or shorter than 4 bytes")
    version, marker_type = _CONTROL_KEY.unpack_from(key, 0)
    return version, marker_type


def end_txn_marker_value(coordinator_epoch: int, version: int = 0) -> bytes:
    """Value of a transaction marker: int16 version (0), int32 coordinator epoch."""
    return _END_TXN_VALUE.pack(version, coordinator_epoch)


def parse_end_txn_marker_value(value: bytes | memoryview | None) -> tuple[int, int]:
    """(version, coordinator_epoch) of a transaction marker value."""
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise _invalid("transaction marker value is missing or shorter than 6 bytes")
    version, epoch = _END_TXN_VALUE.unpack_from(value, 0)
    return version, epoch


def build_control_batch(
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker batch: transactional, control, one record, no sequence."""
    record = RecordInput(
        control_record_key(COMMIT_MARKER if commit else ABORT_MARKER),
        end_txn_marker_value(coordinator_epoch),
        (),
        timestamp,
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
