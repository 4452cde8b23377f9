"""__consumer_offsets record formats and the group -> partition mapping."""

from __future__ import annotations

import json
import re
import struct
import warnings
import weakref
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkacompat.groups import records as rec
from kafkacompat.wire.errors import DecodeError

SPECS = Path(__file__).resolve().parents[3].parent / "shared" / "kafka-protocol" / "internal-records"


def java_hash_by_definition(s: str) -> int:
    """s[0]*31^(n-1) + s[1]*31^(n-2) + ... + s[n-1] over UTF-16 code units, wrapped to int32."""
    units = [
        int.from_bytes(s.encode("utf-16-be")[i : i + 2], "big")
        for i in range(0, len(s.encode("utf-16-be")), 2)
    ]
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


def test_java_string_hash_known_values() -> None:
    assert rec.java_string_hash("") == 0
    assert rec.java_string_hash("a") == 97
    assert rec.java_string_hash("ab") == 97 * 31 + 98
    # "Aa" and "BB" collide in Java: 65*31+97 == 66*31+66 == 2112.
    assert rec.java_string_hash("Aa") == rec.java_string_hash("BB") == 2112
    # A character outside the BMP hashes as its two UTF-16 surrogates: 0xD83D*31 + 0xDE00.
    assert rec.java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00
    # The classic string whose hashCode is Integer.MIN_VALUE.
    assert rec.java_string_hash("polygenelubricants") == -(2**31)


@given(st.text(max_size=40))
def test_java_string_hash_matches_definition(s: str) -> None:
    assert rec.java_string_hash(s) == java_hash_by_definition(s)


def test_partition_for() -> None:
    # Utils.abs(Integer.MIN_VALUE) is 0 (x & 0x7fffffff), not an overflowed negative number.
    assert rec.partition_for("polygenelubricants", 50) == 0
    assert rec.partition_for("Aa", 50) == 2112 % 50
    # Expected values come from the definition above, not from the code under test; some of these
    # ids hash negative, which exercises the masking.
    for gid in ["console-consumer-12345", "my-group", "spark-kafka-source-abc", "ü-group", ""]:
        assert rec.partition_for(gid, 50) == (java_hash_by_definition(gid) & 0x7FFFFFFF) % 50
    assert any(
        java_hash_by_definition(g) < 0
        for g in ["console-consumer-12345", "my-group", "spark-kafka-source-abc"]
    )


def test_keys_by_hand() -> None:
    assert (
        rec.encode_offset_commit_key("g", "t", 3)
        == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    )
    assert rec.encode_group_metadata_key("grp") == b"\x00\x02\x00\x03grp"
    assert rec.decode_key(rec.encode_offset_commit_key("g", "t", 3)) == rec.OffsetCommitKey("g", "t", 3)
    # Version 0 keys (old brokers) decode the same way.
    assert rec.decode_key(b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x03") == rec.OffsetCommitKey("g", "t", 3)
    assert rec.decode_key(b"\x00\x02\x00\x03grp") == rec.GroupMetadataKey("grp")
    # Records of the newer coordinators (KIP-848, share groups) are not ours.
    assert rec.decode_key(b"\x00\x03\x00\x01g") is None


def test_offset_commit_value_by_hand() -> None:
    v = rec.OffsetCommitValue(offset=42, metadata="md", commit_timestamp=1000, leader_epoch=7)
    v3 = struct.pack(">hqih2sq", 3, 42, 7, 2, b"md", 1000)
    assert rec.encode_offset_commit_value(v) == v3
    v1 = rec.OffsetCommitValue(offset=42, metadata="md", commit_timestamp=1000, expire_timestamp=5000)
    assert rec.encode_offset_commit_value(v1) == struct.pack(">hqh2sqq", 1, 42, 2, b"md", 1000, 5000)
    assert rec.encode_offset_commit_value(v, 0) == struct.pack(">hqh2sq", 0, 42, 2, b"md", 1000)
    # v4: compact string (length + 1 as a varint) and an empty tagged-field section.
    assert (
        rec.encode_offset_commit_value(v, 4)
        == struct.pack(">hqi", 4, 42, 7) + b"\x03md" + struct.pack(">q", 1000) + b"\x00"
    )
    assert rec.decode_offset_commit_value(v3) == v


def test_group_metadata_value_by_hand() -> None:
    member = rec.MemberMetadataRecord(
        member_id="m",
        group_instance_id=None,
        client_id="c",
        client_host="/h",
        rebalance_timeout=300,
        session_timeout=100,
        subscription=b"S",
        assignment=b"",
    )
    value = rec.GroupMetadataValue("consumer", 5, "range", "m", 77, [member])

    def s(x: str) -> bytes:
        return struct.pack(">h", len(x)) + x.encode()

    expected_v3 = (
        struct.pack(">h", 3) + s("consumer") + struct.pack(">i", 5) + s("range") + s("m")
        + struct.pack(">q", 77)
        + struct.pack(">i", 1)
        + s("m") + b"\xff\xff" + s("c") + s("/h") + struct.pack(">ii", 300, 100)
        + struct.pack(">i", 1) + b"S" + struct.pack(">i", 0)
    )  # fmt: skip
    assert rec.encode_group_metadata_value(value) == expected_v3
    assert rec.decode_group_metadata_value(expected_v3) == value
    empty = rec.GroupMetadataValue("consumer", 6, None, None, 88, [])
    assert rec.encode_group_metadata_value(empty, 2) == (
        struct.pack(">h", 2)
        + s("consumer")
        + struct.pack(">i", 6)
        + b"\xff\xff\xff\xff"
        + struct.pack(">qi", 88, 0)
    )


def kafka_python_codec(name: str):  # type: ignore[no-untyped-def]
    """kafka-python's schema-driven codec built from Kafka's own JSON spec: an independent encoder."""
    if not (SPECS / f"{name}.json").exists():
        pytest.skip("Kafka internal-record specs not present")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.protocol.api_data import ApiData, JsonSchemaData
        from kafka.protocol.schemas import StructField
        from kafka.protocol.schemas.load_json import _resolve_common_structs

    data = json.loads(re.sub(r"(?m)^\s*//.*\n?", "", (SPECS / f"{name}.json").read_text()))
    common = {c["name"]: c["fields"] for c in data.get("commonStructs", [])}
    if common:
        _resolve_common_structs(data["fields"], common)

    class Meta(JsonSchemaData):
        def __new__(mcs, cls_name, bases, attrs, **kw):  # type: ignore[no-untyped-def]
            attrs["_json"] = data
            attrs["_struct"] = StructField(data)
            return super(JsonSchemaData, mcs).__new__(mcs, cls_name, bases, attrs)

        def __init__(cls, cls_name, bases, attrs, **kw):  # type: ignore[no-untyped-def]
            super(JsonSchemaData, cls).__init__(cls_name, bases, attrs)
            cls._struct.set_data_class(weakref.proxy(cls))

    return Meta(name, (ApiData,), {})


names = st.text(max_size=12)
opt_names = st.none() | names
blobs = st.binary(max_size=20)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)

offset_values = st.builds(rec.OffsetCommitValue, i64, names, i64, i32, i64)
members = st.builds(rec.MemberMetadataRecord, names, names, names, i32, blobs, blobs, opt_names, i32)
group_values = st.builds(
    rec.GroupMetadataValue, names, i32, opt_names, opt_names, i64, st.lists(members, max_size=3)
)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@given(offset_values, st.integers(0, 4))
def test_offset_commit_value_matches_kafka_python(value: rec.OffsetCommitValue, version: int) -> None:
    codec = kafka_python_codec("OffsetCommitValue")
    theirs = codec(
        version=version,
        offset=value.offset,
        leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp=value.commit_timestamp,
        expire_timestamp=value.expire_timestamp,
    ).encode(version=version)
    ours = rec.encode_offset_commit_value(value, version)
    assert ours == theirs
    back = rec.decode_offset_commit_value(ours)
    assert back.offset == value.offset and back.metadata == value.metadata
    assert back.leader_epoch == (value.leader_epoch if version >= 3 else -1)
    assert back.expire_timestamp == (value.expire_timestamp if version == 1 else -1)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@given(group_values, st.integers(0, 4))
def test_group_metadata_value_matches_kafka_python(value: rec.GroupMetadataValue, version: int) -> None:
    codec = kafka_python_codec("GroupMetadataValue")
    member_cls = codec.MemberMetadata
    theirs = codec(
        version=version,
        protocol_type=value.protocol_type,
        generation=value.generation,
        protocol=value.protocol,
        leader=value.leader,
        current_state_timestamp=value.current_state_timestamp,
        members=[
            member_cls(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout,
                session_timeout=m.session_timeout,
                subscription=m.subscription,
                assignment=m.assignment,
            )
            for m in value.members
        ],
    ).encode(version=version)
    ours = rec.encode_group_metadata_value(value, version)
    assert ours == theirs
    back = rec.decode_group_metadata_value(ours)
    assert back.generation == value.generation and back.protocol == value.protocol
    assert [(m.member_id, m.subscription, m.assignment) for m in back.members] == [
        (m.member_id, m.subscription, m.assignment) for m in value.members
    ]
    if version >= 3:
        assert back == value


@given(st.binary(max_size=64))
def test_decoders_reject_garbage_with_decode_error_only(data: bytes) -> None:
    for decode in (rec.decode_key, rec.decode_offset_commit_value, rec.decode_group_metadata_value):
        try:
            decode(data)
        except DecodeError:
            pass


def test_huge_array_count_is_rejected_without_allocating() -> None:
    data = struct.pack(">hhih", 3, 0, 1, -1) + struct.pack(">hq", -1, 0) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(DecodeError):
        rec.decode_group_metadata_value(data)


def generated_codecs():  # type: ignore[no-untyped-def]
    try:
        from kafkacompat.wire import messages
    except ImportError:
        pytest.skip("generated wire codecs not present")
    if not hasattr(messages, "encode_data"):
        pytest.skip("generated data-record codecs not present")
    return messages


@given(group_values, st.integers(0, 4))
def test_group_metadata_value_matches_generated_codec(value: rec.GroupMetadataValue, version: int) -> None:
    messages = generated_codecs()
    cls = messages.data_class("GroupMetadataValue")
    member_cls = __import__(cls.__module__, fromlist=["MemberMetadata"]).MemberMetadata
    theirs = messages.encode_data(
        "GroupMetadataValue",
        version,
        cls(
            protocol_type=value.protocol_type,
            generation=value.generation,
            protocol=value.protocol,
            leader=value.leader,
            current_state_timestamp=value.current_state_timestamp,
            members=[
                member_cls(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout,
                    session_timeout=m.session_timeout,
                    subscription=m.subscription,
                    assignment=m.assignment,
                )
                for m in value.members
            ],
        ),
    )
    ours = rec.encode_group_metadata_value(value, version)
    assert ours[:2] == struct.pack(">h", version) and ours[2:] == theirs


@given(offset_values, st.integers(0, 4))
def test_offset_commit_value_matches_generated_codec(value: rec.OffsetCommitValue, version: int) -> None:
    messages = generated_codecs()
    cls = messages.data_class("OffsetCommitValue")
    theirs = messages.encode_data(
        "OffsetCommitValue",
        version,
        cls(
            offset=value.offset,
            leader_epoch=value.leader_epoch,
            metadata=value.metadata,
            commit_timestamp=value.commit_timestamp,
            expire_timestamp=value.expire_timestamp,
        ),
    )
    assert rec.encode_offset_commit_value(value, version)[2:] == theirs


def test_keys_match_generated_codec() -> None:
    messages = generated_codecs()
    key = messages.data_class("OffsetCommitKey")(group="g", topic="t", partition=3)
    assert rec.encode_offset_commit_key("g", "t", 3)[2:] == messages.encode_data("OffsetCommitKey", 1, key)
    gkey = messages.data_class("GroupMetadataKey")(group="grp")
    assert rec.encode_group_metadata_key("grp")[2:] == messages.encode_data("GroupMetadataKey", 2, gkey)
