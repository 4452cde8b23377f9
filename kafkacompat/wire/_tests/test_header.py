"""Request/response headers: versions per API, unknown keys and versions, kafka-python agreement."""

from __future__ import annotations

import struct

import pytest

from kafkacompat.wire import messages
from kafkacompat.wire.errors import DecodeError
from kafkacompat.wire.header import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    request_header_version,
    response_header_version,
)


def _fixed(api_key: int, version: int, correlation_id: int) -> bytes:
    return struct.pack(">hhi", api_key, version, correlation_id)


def test_header_versions_follow_flexible_versions() -> None:
    produce = messages.API_SPECS[0]
    flex = produce.request_flexible_from
    assert flex is not None
    assert request_header_version(0, flex - 1) == 1
    assert request_header_version(0, flex) == 2
    assert response_header_version(0, flex - 1) == 0
    assert response_header_version(0, flex) == 1
    # ControlledShutdown v0 alone has the header without client id.
    assert request_header_version(7, 0) == 0
    assert request_header_version(7, 1) == 1
    # ApiVersions responses always use header v0, even for flexible versions.
    assert messages.API_SPECS[18].is_flexible_response(3)
    assert response_header_version(18, 3) == 0
    assert request_header_version(18, 3) == 2


def test_decode_v1_header_with_body_offset() -> None:
    frame = _fixed(0, 3, 77) + b"\x00\x03abc" + b"BODY"
    header, offset = decode_request_header(memoryview(frame))
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (0, 3, 77)
    assert header.client_id == "abc"
    assert frame[offset:] == b"BODY"


def test_decode_v2_header_reads_tagged_fields() -> None:
    version = messages.API_SPECS[3].request_flexible_from
    assert version is not None
    # null client id, one unknown tagged field (tag 9, 2 bytes)
    frame = _fixed(3, version, 5) + b"\xff\xff" + b"\x01\x09\x02hi" + b"BODY"
    header, offset = decode_request_header(frame)
    assert header.client_id is None
    assert header.unknown_tags == [(9, b"hi")]
    assert frame[offset:] == b"BODY"


def test_decode_v0_header_for_controlled_shutdown_v0() -> None:
    frame = _fixed(7, 0, 9) + b"\x00\x00\x00\x01"
    header, offset = decode_request_header(frame)
    assert offset == 8
    assert header.correlation_id == 9


def test_unknown_api_key_still_yields_correlation_id() -> None:
    frame = _fixed(32000, 4, 1234) + b"\x00\x02me" + b"\x00\x00whatever"
    header, offset = decode_request_header(frame)
    assert header.correlation_id == 1234
    assert header.client_id == "me"
    assert offset == 12  # no tagged-field section is assumed for an unknown key


def test_newer_version_of_flexible_api_is_read_as_v2_without_failing() -> None:
    spec = messages.API_SPECS[18]
    future = spec.max_version + 5
    frame = _fixed(18, future, 42) + b"\x00\x01c" + b"\x00" + b"future body"
    header, offset = decode_request_header(frame)
    assert header.correlation_id == 42
    assert offset == 12
    # A tagged section that does not parse does not hide the correlation id either.
    frame = _fixed(18, future, 43) + b"\x00\x01c" + b"\x05"
    header, _ = decode_request_header(frame)
    assert header.correlation_id == 43


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        _fixed(0, 3, 1)[:7],
        _fixed(0, 3, 1) + b"\x00",
        _fixed(0, 3, 1) + b"\x00\x05ab",
        _fixed(0, 3, 1) + b"\xff\xfe",
        _fixed(3, 12, 1) + b"\x00\x00",  # v2 header without its tagged-field section
        _fixed(3, 12, 1) + b"\x00\x00\x02\x01\x05x",  # tag longer than the frame
    ],
)
def test_malformed_headers_raise_decode_error(frame: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_request_header(frame)


def test_encode_response_header() -> None:
    assert encode_response_header(18, 3, 7) == b"\x00\x00\x00\x07"
    assert encode_response_header(3, 8, 7) == b"\x00\x00\x00\x07"
    assert encode_response_header(3, 9, 7) == b"\x00\x00\x00\x07\x00"
    assert encode_response_header(32000, 0, 7) == b"\x00\x00\x00\x07"
    header, offset = decode_response_header(3, 9, encode_response_header(3, 9, 7))
    assert header.correlation_id == 7 and offset == 5


def test_encode_request_header_round_trip() -> None:
    for key, version in ((0, 3), (0, 9), (7, 0), (18, 3), (3, 12)):
        header = RequestHeader(
            request_api_key=key, request_api_version=version, correlation_id=11, client_id="cli"
        )
        frame = encode_request_header(header)
        back, offset = decode_request_header(frame)
        assert offset == len(frame)
        assert back.correlation_id == 11
        assert back.client_id == ("" if (key, version) == (7, 0) else "cli")


kafka_api_message = pytest.importorskip("kafka.protocol.api_message", reason="kafka-python 3.x not installed")


@pytest.mark.parametrize("version", range(0, 13))
def test_kafka_python_request_frames_decode(version: int) -> None:
    from kafka.protocol.metadata.metadata import MetadataRequest

    if version > MetadataRequest.max_version or version < messages.API_SPECS[3].min_version:
        pytest.skip("version outside the range both sides know")
    topics = [MetadataRequest.MetadataRequestTopic(name="orders")] if version < 10 else [
        MetadataRequest.MetadataRequestTopic(name="orders", topic_id=None)
    ]
    req = MetadataRequest(version=version, topics=topics)
    req.with_header(correlation_id=99, client_id="kafka-python-test")
    frame = bytes(req.encode(header=True))
    header, offset = decode_request_header(frame)
    assert (header.request_api_key, header.request_api_version) == (3, version)
    assert header.correlation_id == 99
    assert header.client_id == "kafka-python-test"
    body = messages.decode_request(3, version, memoryview(frame)[offset:])
    assert [t.name for t in body.topics] == ["orders"]
    assert frame[offset:] == messages.encode_request(3, version, body)
