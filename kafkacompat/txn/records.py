"""`__transaction_state` records in Kafka's formats, and the transactional id -> partition mapping.

Theory of operation: a record key is an int16 key version (0) followed by a TransactionLogKey (the
transactional id); a value is an int16 value version followed by a TransactionLogValue (producer id and
epoch, timeout, status byte, partitions, last update and start timestamps), both through the codecs
generated from Kafka's internal-record specs. We write value version 0, as Kafka 3.9 does, and read 0
and 1. A null value is a tombstone (the transactional id expired). `partition_for` is Kafka's
`Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafkacompat.groups.records import partition_for
from kafkacompat.wire.errors import DecodeError
from kafkacompat.wire.messages import data_class, decode_data, encode_data

__all__ = ["TxnLogValue", "decode_key", "decode_value", "encode_key", "encode_value", "partition_for"]

KEY_VERSION = 0
VALUE_VERSION = 0
_I16 = struct.Struct(">h")


@dataclass(slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: dict[str, list[int]]
    last_update_ms: int
    start_ms: int


def encode_key(transactional_id: str) -> bytes:
    key = data_class("TransactionLogKey")(transactional_id=transactional_id)
    return _I16.pack(KEY_VERSION) + encode_data("TransactionLogKey", KEY_VERSION, key)


def decode_key(buf: bytes | memoryview) -> str:
    if len(buf) < 2:
        raise DecodeError("transaction log key shorter than its version")
    (version,) = _I16.unpack_from(buf, 0)
    if version != KEY_VERSION:
        raise DecodeError(f"unknown transaction log key version {version}")
    return decode_data("TransactionLogKey", version, memoryview(buf)[2:]).transactional_id


def encode_value(value: TxnLogValue) -> bytes:
    cls = data_class("TransactionLogValue")
    schema = cls.PartitionsSchema
    obj = cls(
        producer_id=value.producer_id,
        producer_epoch=value.producer_epoch,
        transaction_timeout_ms=value.timeout_ms,
        transaction_status=value.status,
        transaction_partitions=[
            schema(topic=topic, partition_ids=sorted(ids)) for topic, ids in sorted(value.partitions.items())
        ],
        transaction_last_update_timestamp_ms=value.last_update_ms,
        transaction_start_timestamp_ms=value.start_ms,
    )
    return _I16.pack(VALUE_VERSION) + encode_data("TransactionLogValue", VALUE_VERSION, obj)


def decode_value(buf: bytes | memoryview) -> TxnLogValue:
    if len(buf) < 2:
        raise DecodeError("transaction log value shorter than its version")
    (version,) = _I16.unpack_from(buf, 0)
    if version not in (0, 1):
        raise DecodeError(f"unknown transaction log value version {version}")
    obj = decode_data("TransactionLogValue", version, memoryview(buf)[2:])
    partitions: dict[str, list[int]] = {}
    for entry in obj.transaction_partitions or ():
        partitions.setdefault(entry.topic, []).extend(entry.partition_ids)
    return TxnLogValue(
        obj.producer_id,
        obj.producer_epoch,
        obj.transaction_timeout_ms,
        obj.transaction_status,
        partitions,
        obj.transaction_last_update_timestamp_ms,
        obj.transaction_start_timestamp_ms,
    )
