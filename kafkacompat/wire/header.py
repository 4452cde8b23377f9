"""Request and response headers, with Kafka's rules for which header version goes with which API.

Theory of operation
-------------------
Request header versions: v2 (v1 plus tagged fields) when the request version is flexible, v1
otherwise; v0 (no client id) only for ControlledShutdown v0. Response header versions: v1 (with
tagged fields) when the response version is flexible, v0 otherwise, except ApiVersions responses,
which always use v0 so that a client that does not yet know our versions can read them.

`decode_request_header` must work for API keys and versions we do not serve, so that the broker can
still answer UNSUPPORTED_VERSION to the right correlation id: it reads the key, version and
correlation id, then the client id as v1 does (the client id is never a compact string, so this is
safe), and reads a tagged-field section only when the key/version is one we know to be flexible.
`RequestHeader`/`ResponseHeader` are the classes generated from Kafka's header specs.
"""

from __future__ import annotations

import struct

from kafkacompat.wire._generated.api_index import APIS
from kafkacompat.wire._generated.request_header import ENCODERS as _REQ_HDR_ENC
from kafkacompat.wire._generated.request_header import RequestHeader
from kafkacompat.wire._generated.response_header import DECODERS as _RESP_HDR_DEC
from kafkacompat.wire._generated.response_header import ResponseHeader
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import DecodeError
from kafkacompat.wire.primitives import read_nullable_string, read_tags

__all__ = [
    "RequestHeader",
    "ResponseHeader",
    "decode_request_header",
    "decode_response_header",
    "encode_request_header",
    "encode_response_header",
    "request_header_version",
    "response_header_version",
]

_FIXED = struct.Struct(">hhi")
_CORR = struct.Struct(">i")
# api_key -> (min version, max version, first flexible request version, first flexible response version)
_FLEX: dict[int, tuple[int, int, int | None, int | None]] = {
    key: (row[5], row[6], row[7], row[8]) for key, row in APIS.items()
}


def request_header_version(api_key: int, api_version: int) -> int:
    """Header version a request of this key/version carries (1 for keys/versions we do not know)."""
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    info = _FLEX.get(api_key)
    if info is None:
        return 1
    lo, hi, flex, _ = info
    if flex is not None and flex <= api_version <= hi and api_version >= lo:
        return 2
    if flex is not None and api_version > hi:
        # A newer version than we know: flexible-ness only ever moves forward, so it is flexible too.
        return 2
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0
    info = _FLEX.get(api_key)
    if info is None:
        return 0
    flex = info[3]
    return 1 if flex is not None and api_version >= flex else 0


def decode_request_header(buf: memoryview | bytes | bytearray) -> tuple[RequestHeader, int]:
    """Decode the header at the start of a request frame; returns (header, offset of the body)."""
    if not isinstance(buf, memoryview):
        buf = memoryview(buf)
    if len(buf) < 8:
        raise DecodeError("request frame shorter than its header", field="RequestHeader")
    api_key, api_version, correlation_id = _FIXED.unpack_from(buf, 0)
    hv = request_header_version(api_key, api_version)
    if hv == 0:
        return RequestHeader(api_key, api_version, correlation_id, ""), 8
    client_id, pos = read_nullable_string(buf, 8, "RequestHeader.client_id")
    unknown = None
    if hv == 2 and api_key in _FLEX:
        if pos < len(buf) and buf[pos] == 0:
            pos += 1
        else:
            try:
                tags, tag_end = read_tags(buf, pos, "RequestHeader")
            except DecodeError:
                if api_version <= _FLEX[api_key][1]:
                    raise
                # A version newer than we know: the broker only needs the correlation id to answer
                # UNSUPPORTED_VERSION, so do not fail on a header we can only guess at.
                tags, tag_end = [], pos
            pos = tag_end
            if tags:
                unknown = [(tag, bytes(buf[start:end])) for tag, start, end in tags]
    return RequestHeader(api_key, api_version, correlation_id, client_id, unknown), pos


def encode_request_header(header: RequestHeader) -> bytes:
    """Encode a request header in the version its API key/version calls for (client side, tests)."""
    hv = request_header_version(header.request_api_key, header.request_api_version)
    out = bytearray()
    _REQ_HDR_ENC[hv](header, out, [])
    return bytes(out)


_EMPTY_TAGS = b"\x00"


def encode_response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    """The response header bytes for a response to this key/version."""
    if response_header_version(api_key, api_version) == 1:
        return _CORR.pack(correlation_id) + _EMPTY_TAGS
    return _CORR.pack(correlation_id)


def decode_response_header(
    api_key: int, api_version: int, buf: memoryview | bytes | bytearray
) -> tuple[ResponseHeader, int]:
    """Decode a response header (client side, tests); returns (header, offset of the body)."""
    if not isinstance(buf, memoryview):
        buf = memoryview(buf)
    return _RESP_HDR_DEC[response_header_version(api_key, api_version)](buf, 0)
