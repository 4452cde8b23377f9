"""Round trips of every generated (message, version), with values drawn from Kafka's own specs.

The hypothesis strategies here are built from the parsed JSON specs (through tools/gen_messages.py's
parser), independently of the generated code: for each field present in a version they draw a value
of the field's type (nulls where the version allows them, tagged fields at and away from their
defaults, unknown tags), so encode -> decode -> encode must give back the same object and the same
bytes. Other test modules (fuzz, cross-checks) import `SPEC_MESSAGES` and `message_strategy`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import uuid
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.wire import messages
from kafkacompat.wire.errors import DecodeError

REPO = Path(__file__).resolve().parents[3]
SPEC_DIRS = [
    REPO.parent / "shared" / "kafka-protocol" / "messages",
    REPO.parent / "shared" / "kafka-protocol" / "internal-records",
]
HAVE_SPECS = all(d.is_dir() for d in SPEC_DIRS)
needs_specs = pytest.mark.skipif(not HAVE_SPECS, reason="Kafka specs (../shared/kafka-protocol) not present")


def _load_gen() -> ModuleType:
    name = "kafkacompat_tools_gen_messages"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / "gen_messages.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


gen = _load_gen()


@cache
def spec_messages() -> dict[str, Any]:
    """Generated-module name -> parsed spec Message, for everything the generator emits."""
    pairs, headers, data = gen.select(gen.load_specs(SPEC_DIRS))
    out = {}
    for req, resp in pairs:
        out[req.module] = req
        out[resp.module] = resp
    for m in headers + data:
        out[m.module] = m
    return out


SPEC_MESSAGES: dict[str, Any] = spec_messages() if HAVE_SPECS else {}


def generated_module(name: str) -> ModuleType:
    return importlib.import_module(f"kafkacompat.wire._generated.{name}")


INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def _is_flexible(msg: Any, v: int) -> bool:
    return v in msg.flexible


def _field_strategy(msg: Any, mod: ModuleType, f: Any, v: int, depth: int) -> st.SearchStrategy[Any]:
    nullable = v in f.nullable
    if f.is_array:
        elem = _scalar_strategy(msg, mod, f.elem, v, depth + 1, nullable=False)
        s: st.SearchStrategy[Any] = st.lists(elem, max_size=3 if depth < 2 else 1)
    else:
        s = _scalar_strategy(msg, mod, f.type, v, depth + 1, nullable=False)
    if nullable:
        s = st.none() | s
    return s


def _scalar_strategy(
    msg: Any, mod: ModuleType, t: str, v: int, depth: int, nullable: bool
) -> st.SearchStrategy[Any]:
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.integers(lo, hi)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return st.text(max_size=12)
    if t in ("bytes", "records"):
        return st.binary(max_size=24)
    if t == "uuid":
        return st.binary(min_size=16, max_size=16).map(lambda b: uuid.UUID(bytes=b))
    return struct_strategy(msg, mod, t, v, depth)


def struct_strategy(msg: Any, mod: ModuleType, sname: str, v: int, depth: int = 0) -> st.SearchStrategy[Any]:
    s = msg.structs[sname]
    cls = getattr(mod, sname)
    flex = _is_flexible(msg, v)
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    known_tags = {f.tag for f in s.fields if f.tag is not None}
    for f in s.fields:
        if v not in f.versions:
            continue
        if v in f.tagged and not flex:
            continue
        kwargs[f.attr] = _field_strategy(msg, mod, f, v, depth)
    if flex:
        tag_values = st.integers(0, 300).filter(lambda t: t not in known_tags)
        unknown = st.lists(st.tuples(tag_values, st.binary(max_size=6)), min_size=1, max_size=2,
                           unique_by=lambda x: x[0]).map(lambda xs: sorted(xs))
        kwargs["unknown_tags"] = st.none() | unknown
    return st.builds(cls, **kwargs)


def message_strategy(module_name: str, v: int) -> st.SearchStrategy[Any]:
    msg = SPEC_MESSAGES[module_name]
    return struct_strategy(msg, generated_module(module_name), msg.name, v)


def all_cases() -> list[tuple[str, int]]:
    return [(name, v) for name, m in sorted(SPEC_MESSAGES.items()) for v in range(m.valid.lo, m.valid.hi + 1)]


def encode(module_name: str, v: int, obj: Any) -> bytes:
    mod = generated_module(module_name)
    out = bytearray()
    chunks: list[Any] = []
    mod.ENCODERS[v](obj, out, chunks)
    assert chunks == []
    return bytes(out)


def decode(module_name: str, v: int, data: bytes) -> Any:
    mod = generated_module(module_name)
    obj, pos = mod.DECODERS[v](memoryview(data), 0)
    assert pos == len(data)
    return obj


@needs_specs
@pytest.mark.parametrize(("module_name", "version"), all_cases())
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(data=st.data())
def test_round_trip_every_message_and_version(module_name: str, version: int, data: st.DataObject) -> None:
    obj = data.draw(message_strategy(module_name, version))
    wire = encode(module_name, version, obj)
    back = decode(module_name, version, wire)
    assert back == obj
    assert encode(module_name, version, back) == wire


@needs_specs
def test_every_broker_api_is_generated() -> None:
    for name, m in SPEC_MESSAGES.items():
        if m.type == "request":
            spec = messages.API_SPECS[m.api_key]
            assert spec.request_module == name
            assert (spec.min_version, spec.max_version) == (m.valid.lo, m.valid.hi)
            assert {"broker", "zkBroker"} & set(spec.listeners)
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20} <= set(messages.API_SPECS)


# ---------------------------------------------------------------------------------------------
# hand-built frames: behaviour the generated code must have whatever the specs say


def _produce_v9_frame() -> bytes:
    from kafkacompat.wire._generated.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            TopicProduceData(name="t", partition_data=[PartitionProduceData(index=3, records=b"RECS")])
        ],
    )
    return messages.encode_request(0, 9, req)


def test_produce_v9_layout_and_zero_copy_records() -> None:
    frame = _produce_v9_frame()
    # compact nullable string null, acks, timeout, 1 topic, "t", 1 partition, index 3, 4 bytes, tags...
    assert frame == (
        b"\x00" + b"\xff\xff" + b"\x00\x00\x75\x30" + b"\x02" + b"\x02t" + b"\x02"
        + b"\x00\x00\x00\x03" + b"\x05RECS" + b"\x00" + b"\x00" + b"\x00"
    )
    buf = memoryview(bytearray(frame))
    req = messages.decode_request(0, 9, buf)
    records = req.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is buf.obj  # a slice of the input, not a copy
    assert bytes(records) == b"RECS"


def test_unknown_api_key_and_version_are_decode_errors() -> None:
    with pytest.raises(DecodeError):
        messages.decode_request(9999, 0, memoryview(b""))
    with pytest.raises(DecodeError):
        messages.decode_request(0, 999, memoryview(b""))
    with pytest.raises(DecodeError):
        messages.decode_response(3, -1, memoryview(b""))


def test_trailing_bytes_are_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="trailing"):
        messages.decode_request(0, 9, memoryview(_produce_v9_frame() + b"\x00"))


# The frame librdkafka 2.x sends for an all-topics Metadata v12 request: header (key 3, version 12,
# correlation id 3, client id "rdkafka", no header tags), then a body with three bytes past its end.
LIBRDKAFKA_METADATA_V12 = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")


def test_trailing_bytes_after_a_request_allowed_when_asked() -> None:
    from kafkacompat.wire.header import decode_request_header

    frame = memoryview(LIBRDKAFKA_METADATA_V12)
    header, body_at = decode_request_header(frame)
    assert (header.request_api_key, header.request_api_version, header.client_id) == (3, 12, "rdkafka")
    with pytest.raises(DecodeError, match="3 trailing bytes"):
        messages.decode_request(3, 12, frame[body_at:])
    request = messages.decode_request(3, 12, frame[body_at:], allow_trailing=True)
    assert request.topics is None  # all topics
    # leniency is about what follows a complete body: a short body is still an error
    with pytest.raises(DecodeError):
        messages.decode_request(3, 12, frame[body_at : body_at + 1], allow_trailing=True)


def test_huge_array_count_fails_fast() -> None:
    # Metadata v1 request: topics array with a count of 2**31-1 and ten bytes left.
    frame = b"\x7f\xff\xff\xff" + b"\x00" * 10
    with pytest.raises(DecodeError) as exc:
        messages.decode_request(3, 1, memoryview(frame))
    assert exc.value.field is not None and "topics" in exc.value.field


def test_negative_lengths_are_decode_errors() -> None:
    # Produce v3: transactional id null is fine, topic name of length -2 is not.
    frame = b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x00\x10" + b"\x00\x00\x00\x01" + b"\xff\xfe" + b"\x00" * 8
    with pytest.raises(DecodeError) as exc:
        messages.decode_request(0, 3, memoryview(frame))
    assert "name" in (exc.value.field or "")
    # A non-nullable string (topic name) of -1 is not allowed either.
    frame = b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x00\x10" + b"\x00\x00\x00\x01" + b"\xff\xff" + b"\x00" * 8
    with pytest.raises(DecodeError):
        messages.decode_request(0, 3, memoryview(frame))


def test_overlong_varint_is_a_decode_error() -> None:
    # ApiVersions v3 request: client software name length as a 6-byte varint.
    frame = b"\x80\x80\x80\x80\x80\x01"
    with pytest.raises(DecodeError, match="varint"):
        messages.decode_request(18, 3, memoryview(frame))


def test_tagged_fields_written_only_when_not_default() -> None:
    from kafkacompat.wire._generated.api_versions_response import ApiVersion, ApiVersionsResponse

    resp = ApiVersionsResponse(error_code=0, api_keys=[ApiVersion(api_key=18, min_version=0, max_version=4)])
    body = b"".join(bytes(c) for c in messages.encode_response(18, 3, resp))
    # error, 1 key (compact 2), key/min/max, throttle, empty tag section: nothing tagged is written.
    key = b"\x00\x12\x00\x00\x00\x04"
    assert body == b"\x00\x00" + b"\x02" + key + b"\x00" + b"\x00\x00\x00\x00" + b"\x00"
    resp.finalized_features_epoch = 7
    body = b"".join(bytes(c) for c in messages.encode_response(18, 3, resp))
    # tag section: 1 field, tag 1, size 8, int64 7
    assert body.endswith(b"\x01" + b"\x01" + b"\x08" + (7).to_bytes(8, "big"))
    back = messages.decode_response(18, 3, memoryview(body))
    assert back.finalized_features_epoch == 7
    assert back.supported_features == []


def test_unknown_tags_are_preserved_and_merged_in_order() -> None:
    from kafkacompat.wire._generated.api_versions_response import ApiVersionsResponse

    resp = ApiVersionsResponse(finalized_features_epoch=1, unknown_tags=[(0x40, b"zz"), (5, b"")])
    body = b"".join(bytes(c) for c in messages.encode_response(18, 4, resp))
    back = messages.decode_response(18, 4, memoryview(body))
    assert back.finalized_features_epoch == 1
    assert back.unknown_tags == [(5, b""), (0x40, b"zz")]


class _FakeSlice:
    """Stands for a log FileSlice: only `.size` matters to the encoder."""

    def __init__(self, size: int) -> None:
        self.size = size


def test_records_objects_with_size_are_passed_through_as_chunks() -> None:
    from kafkacompat.wire._generated.fetch_response import (
        FetchableTopicResponse,
        FetchResponse,
        PartitionData,
    )

    s1, s2 = _FakeSlice(100), _FakeSlice(7)
    resp = FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic="t",
                partitions=[
                    PartitionData(partition_index=0, records=s1),
                    PartitionData(partition_index=1, records=b"abc"),
                    PartitionData(partition_index=2, records=s2),
                    PartitionData(partition_index=3, records=None),
                ],
            )
        ]
    )
    for version in (4, 12):
        chunks = messages.encode_response(1, version, resp)
        assert [c for c in chunks if not isinstance(c, (bytes, bytearray, memoryview))] == [s1, s2]
        assert chunks[1] is s1 and chunks[3] is s2
        # Replace each slice by that many bytes: the result must decode to the same structure.
        flat = b"".join(b"R" * c.size if isinstance(c, _FakeSlice) else bytes(c) for c in chunks)
        back = messages.decode_response(1, version, memoryview(flat))
        parts = back.responses[0].partitions
        assert [None if p.records is None else bytes(p.records) for p in parts] == [
            b"R" * 100, b"abc", b"R" * 7, None
        ]


def test_nullable_struct_and_defaults() -> None:
    from kafkacompat.wire._generated.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse

    resp = ConsumerGroupHeartbeatResponse()
    assert resp.assignment is None
    assert resp.member_epoch == 0
    body = b"".join(bytes(c) for c in messages.encode_response(68, 0, resp))
    back = messages.decode_response(68, 0, memoryview(body))
    assert back == resp


def test_data_records_round_trip() -> None:
    from kafkacompat.wire._generated.offset_commit_value import OffsetCommitValue

    value = OffsetCommitValue(offset=42, leader_epoch=3, metadata="m", commit_timestamp=1700000000000)
    for version in range(messages.DATA_SPECS["OffsetCommitValue"].max_version + 1):
        body = messages.encode_data("OffsetCommitValue", version, value)
        back = messages.decode_data("OffsetCommitValue", version, body)
        assert back.offset == 42 and back.metadata == "m"
    with pytest.raises(DecodeError):
        messages.decode_data("NoSuchRecord", 0, b"")


def test_api_specs_describe_classes_lazily() -> None:
    spec = messages.API_SPECS[3]
    assert spec.name == "Metadata"
    assert spec.request_class.__name__ == "MetadataRequest"
    assert spec.response_class.__name__ == "MetadataResponse"
    assert spec.is_flexible_request(spec.request_flexible_from or 0)
    assert spec.request_class.MetadataRequestTopic.__name__ == "MetadataRequestTopic"


def test_tagged_nullable_struct_uses_a_varint_presence_marker() -> None:
    from kafkacompat.wire._generated.consumer_group_member_metadata_value import (
        ClassicMemberMetadata,
        ConsumerGroupMemberMetadataValue,
    )

    value = ConsumerGroupMemberMetadataValue(client_id="c")
    assert value.classic_member_metadata is None  # the spec's default is null
    plain = messages.encode_data("ConsumerGroupMemberMetadataValue", 0, value)
    assert plain.endswith(b"\x00")  # nothing tagged
    value.classic_member_metadata = ClassicMemberMetadata(session_timeout_ms=5, supported_protocols=[])
    body = messages.encode_data("ConsumerGroupMemberMetadataValue", 0, value)
    # one tagged field: tag 0, size 7 = presence varint 1 + int32 + empty compact array + empty tags
    assert body == plain[:-1] + b"\x01" + b"\x00\x07" + b"\x01" + b"\x00\x00\x00\x05" + b"\x01" + b"\x00"
    back = messages.decode_data("ConsumerGroupMemberMetadataValue", 0, body)
    assert back == value


def test_large_decodes_leave_the_garbage_collector_as_they_found_it() -> None:
    import gc

    from kafkacompat.wire._generated.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    partition = PartitionProduceData(records=b"x" * 65536)
    req = ProduceRequest(acks=1, topic_data=[TopicProduceData(name="t", partition_data=[partition])])
    frame = messages.encode_request(0, 9, req)
    assert gc.isenabled()
    messages.decode_request(0, 9, memoryview(frame))
    assert gc.isenabled()
    with pytest.raises(DecodeError):
        messages.decode_request(0, 9, memoryview(frame[:-1]))
    assert gc.isenabled()
    gc.disable()
    try:
        messages.decode_request(0, 9, memoryview(frame))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_only_a_decode_in_one_step_on_the_main_thread_pauses_the_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pause is the whole process's: a decode in a worker thread, or one that gives the loop back
    between shares (pause_gc=False), would leave it off while other code runs."""
    import gc
    import threading

    from kafkacompat.wire._generated.produce_request import ProduceRequest, TopicProduceData

    frame = memoryview(messages.encode_request(0, 9, ProduceRequest(acks=1, topic_data=[
        TopicProduceData(name=f"t{i}", partition_data=[]) for i in range(3000)
    ])))  # fmt: skip
    pauses: list[str] = []
    monkeypatch.setattr(gc, "disable", lambda: pauses.append(threading.current_thread().name))
    messages.decode_request(0, 9, frame)
    assert pauses == [threading.main_thread().name]
    messages.decode_request(0, 9, frame, pause_gc=False)
    worker = threading.Thread(target=messages.decode_request, args=(0, 9, frame), name="worker")
    worker.start()
    worker.join()
    assert pauses == [threading.main_thread().name]
