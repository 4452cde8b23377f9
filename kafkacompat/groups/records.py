"""__consumer_offsets records in Kafka's binary formats, and the group -> partition mapping.

Theory of operation
-------------------
The group coordinator is event-sourced: every durable change is a key/value record appended to the
compacted ``__consumer_offsets`` topic, and replaying the records rebuilds the state. Kafka's formats:

* key   = int16 key version + key fields (never flexible)
    - version 0/1: OffsetCommitKey   (group: string, topic: string, partition: int32) — Kafka writes 1
    - version 2:   GroupMetadataKey  (group: string)
* value = int16 value version + value fields; version 4 of both values is "flexible" (compact
  strings/bytes/arrays as unsigned varint length+1, a tagged-field section after every struct).
    - OffsetCommitValue v0-4: offset int64, [v3+] leaderEpoch int32, metadata string,
      commitTimestamp int64, [v1 only] expireTimestamp int64
    - GroupMetadataValue v0-4: protocolType string, generation int32, protocol string?, leader string?,
      [v2+] currentStateTimestamp int64, members [memberId, [v3+] groupInstanceId string?, clientId,
      clientHost, [v1+] rebalanceTimeout int32, sessionTimeout int32, subscription bytes, assignment bytes]
* tombstone = the key with a null value (deletes an offset or a group).

The generated data-record codecs (``kafkacompat.wire.messages.encode_data``) had not landed when
this was written, so the codec here is small and hand-written, with plain dataclasses and no object
conversion; tests cross-check it byte for byte against both those generated codecs and kafka-python's
independent schema-driven codec fed with Kafka's JSON specs. Unknown tagged fields in v4 values are
skipped on read and never written; bytes after the known fields are ignored, as Kafka's generated
readers ignore them. Every decode is bounds-checked and raises ``DecodeError`` on malformed input.

``partition_for(group_id, n)`` is Kafka's ``Utils.abs(groupId.hashCode) % n`` with Java's
``String.hashCode`` evaluated over UTF-16 code units.
"""

from __future__ import annotations

import array
import functools
import operator
import struct
import sys
from dataclasses import dataclass, field

from kafkacompat.wire.errors import DecodeError

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataRecord",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
    "java_string_hash",
    "partition_for",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
# Versions Kafka 2.3+ writes: OffsetCommitValue v3 (v1 when an explicit expire timestamp is set),
# GroupMetadataValue v3. The flexible v4 values are readable but not written, so that older Kafka
# brokers can still read a log we wrote.
DEFAULT_OFFSET_COMMIT_VALUE_VERSION = 3
DEFAULT_GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_POWERS_OF_31: list[int] = [1]  # 31^k mod 2^32, grown on demand


@functools.lru_cache(maxsize=4096)
def _hash_of_short(s: str) -> int:
    return _java_hash(s)


@functools.lru_cache(maxsize=32)  # few: each key may be 32 KB
def _hash_of_long(s: str) -> int:
    return _java_hash(s)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as a signed int32.

    Computed as one sum of products in C (a loop per code unit made a DescribeGroups of 1,000 long group
    ids took most of a second), and cached: a request may name the same group many times."""
    return _hash_of_short(s) if len(s) <= 255 else _hash_of_long(s)


def _java_hash(s: str) -> int:
    # surrogatepass: a group id with bytes that are not UTF-8 arrives with them escaped as lone surrogates
    # (the wire codec decodes with surrogateescape); they hash as the UTF-16 units they are, never raise
    units = array.array("H", s.encode(_UTF16_NATIVE, "surrogatepass"))
    n = len(units)
    while len(_POWERS_OF_31) < n:
        _POWERS_OF_31.append((_POWERS_OF_31[-1] * 31) & 0xFFFFFFFF)
    h = sum(map(operator.mul, units, reversed(_POWERS_OF_31[:n]))) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The __consumer_offsets partition owning a group (Kafka: Utils.abs(hashCode) % partitions)."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % num_partitions


# ---------------------------------------------------------------------------------------------------
# Record values as plain dataclasses.


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(slots=True)
class MemberMetadataRecord:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None
    rebalance_timeout: int = -1


@dataclass(slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadataRecord] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------
# Writer.


class _Writer:
    __slots__ = ("buf", "compact")

    def __init__(self, compact: bool) -> None:
        self.buf = bytearray()
        self.compact = compact

    def i16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def i32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def i64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)

    def _length(self, n: int | None) -> None:
        if self.compact:
            self.uvarint(0 if n is None else n + 1)
        else:
            self.i16(-1 if n is None else n)

    def string(self, s: str | None) -> None:
        if s is None:
            self._length(None)
            return
        # surrogateescape, like the wire codec: an id whose bytes are not UTF-8 is stored as those bytes
        data = s.encode("utf-8", "surrogateescape")
        if not self.compact and len(data) > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        self._length(len(data))
        self.buf += data

    def bytes_(self, b: bytes) -> None:
        if self.compact:
            self.uvarint(len(b) + 1)
        else:
            self.i32(len(b))
        self.buf += b

    def array_len(self, n: int) -> None:
        if self.compact:
            self.uvarint(n + 1)
        else:
            self.i32(n)

    def no_tags(self) -> None:
        if self.compact:
            self.buf.append(0)


# ---------------------------------------------------------------------------------------------------
# Reader: every read is bounds-checked; lengths never allocate beyond the input.


class _Reader:
    __slots__ = ("buf", "compact", "pos", "what")

    def __init__(self, buf: bytes | memoryview, what: str) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.compact = False
        self.what = what

    def _fail(self, message: str) -> DecodeError:
        return DecodeError(f"{self.what}: {message}", field=self.what)

    def _take(self, n: int) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise self._fail("truncated")
        view = self.buf[self.pos : end]
        self.pos = end
        return view

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def uvarint(self) -> int:
        result = 0
        shift = 0
        while True:
            if shift > 28:
                raise self._fail("varint too long")
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def _length(self) -> int | None:
        if self.compact:
            n = self.uvarint()
            return None if n == 0 else n - 1
        n = self.i16()
        if n < -1:
            raise self._fail("negative string length")
        return None if n == -1 else n

    def nullable_string(self) -> str | None:
        n = self._length()
        if n is None:
            return None
        try:
            return str(self._take(n), "utf-8", "surrogateescape")
        except UnicodeDecodeError as exc:
            raise self._fail("invalid UTF-8") from exc

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise self._fail("null in a non-nullable string")
        return s

    def bytes_(self) -> bytes:
        if self.compact:
            n = self.uvarint() - 1
        else:
            n = self.i32()
        if n < 0:
            raise self._fail("null or negative bytes length")
        return bytes(self._take(n))

    def array_len(self, min_item_size: int) -> int:
        if self.compact:
            n = self.uvarint() - 1
        else:
            n = self.i32()
        if n < 0:
            raise self._fail("null or negative array length")
        if n * min_item_size > len(self.buf) - self.pos:
            raise self._fail("array longer than the input")
        return n

    def skip_tags(self) -> None:
        if not self.compact:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


# ---------------------------------------------------------------------------------------------------
# Keys.


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer(compact=False)
    w.i16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.i32(partition)
    return bytes(w.buf)


def encode_group_metadata_key(group: str) -> bytes:
    w = _Writer(compact=False)
    w.i16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return bytes(w.buf)


def decode_key(buf: bytes | memoryview) -> OffsetCommitKey | GroupMetadataKey | None:
    """Decode a key; None for the record types the classic coordinator does not own (transaction,
    KIP-848 and share-group records that may share the topic) — the caller skips those."""
    r = _Reader(buf, "__consumer_offsets key")
    version = r.i16()
    if version in (0, 1):
        key: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(r.string(), r.string(), r.i32())
    elif version == 2:
        key = GroupMetadataKey(r.string())
    else:
        return None
    return key


# ---------------------------------------------------------------------------------------------------
# OffsetCommitValue.


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    """Encode; by default the version Kafka picks (1 with an expire timestamp, else 3)."""
    if version is None:
        version = 1 if value.expire_timestamp != -1 else DEFAULT_OFFSET_COMMIT_VALUE_VERSION
    if not 0 <= version <= 4:
        raise ValueError(f"OffsetCommitValue version {version} unknown")
    w = _Writer(compact=version >= 4)
    w.i16(version)
    w.i64(value.offset)
    if version >= 3:
        w.i32(value.leader_epoch)
    w.string(value.metadata)
    w.i64(value.commit_timestamp)
    if version == 1:
        w.i64(value.expire_timestamp)
    w.no_tags()
    return bytes(w.buf)


def decode_offset_commit_value(buf: bytes | memoryview) -> OffsetCommitValue:
    r = _Reader(buf, "OffsetCommitValue")
    version = r.i16()
    if not 0 <= version <= 4:
        raise r._fail(f"unknown version {version}")
    r.compact = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.i64()
    expire_timestamp = r.i64() if version == 1 else -1
    r.skip_tags()
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)


# ---------------------------------------------------------------------------------------------------
# GroupMetadataValue.


def encode_group_metadata_value(
    value: GroupMetadataValue, version: int = DEFAULT_GROUP_METADATA_VALUE_VERSION
) -> bytes:
    if not 0 <= version <= 4:
        raise ValueError(f"GroupMetadataValue version {version} unknown")
    w = _Writer(compact=version >= 4)
    w.i16(version)
    w.string(value.protocol_type)
    w.i32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if version >= 2:
        w.i64(value.current_state_timestamp)
    w.array_len(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.no_tags()
    w.no_tags()
    return bytes(w.buf)


def decode_group_metadata_value(buf: bytes | memoryview) -> GroupMetadataValue:
    r = _Reader(buf, "GroupMetadataValue")
    version = r.i16()
    if not 0 <= version <= 4:
        raise r._fail(f"unknown version {version}")
    r.compact = version >= 4
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    current_state_timestamp = r.i64() if version >= 2 else -1
    members = []
    # Smallest possible member: five empty strings/bytes and two int32s.
    for _ in range(r.array_len(min_item_size=5)):
        member_id = r.string()
        group_instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tags()
        members.append(
            MemberMetadataRecord(
                member_id=member_id,
                client_id=client_id,
                client_host=client_host,
                session_timeout=session_timeout,
                subscription=subscription,
                assignment=assignment,
                group_instance_id=group_instance_id,
                rebalance_timeout=rebalance_timeout,
            )
        )
    r.skip_tags()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, members)
