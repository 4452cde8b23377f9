"""Public entry points of the generated Kafka codecs.

Theory of operation
-------------------
`_generated/api_index.py` (generated from Kafka's specs) lists every API the broker serves with its
version range, flexible versions and the modules holding its codecs. This module turns it into
`API_SPECS` at import time without importing any codec: a codec module is imported on the first
request that needs it (importing all ~200 modules would cost a quarter of a second at start-up).

Each codec module exposes `DECODERS[version](buf, pos) -> (obj, new_pos)` and
`ENCODERS[version](obj, out: bytearray, chunks: list) -> None`; the functions here look them up by
(api key, version), cache them, and add the framing-level rules: a body must be consumed exactly
(trailing bytes are a DecodeError, except after a request when the caller says `allow_trailing`, as a
broker does), unknown keys and versions are DecodeErrors, and malformed input
of any kind surfaces as DecodeError only. `encode_response` returns the chunk list (bytes-like pieces
plus any `.size` objects given as `records`, for sendfile); `encode_request` joins into one bytes
object, copying large record sets once.

Class naming: the top-level class is named after the spec (`ProduceRequest`), nested structs are
module-level classes named after their spec type (`TopicProduceData`) and are also reachable as
attributes of the top-level class (`ProduceRequest.TopicProduceData`). Attributes are the snake_case
field names (`ProducerId` -> `producer_id`), plus `unknown_tags`: a list of (tag, bytes) pairs for
tagged fields this version does not know, re-emitted on encode, or None.

Typing: each class annotates its attributes with what a decode gives (`acks: int`, `transactional_id:
str | None` where some version has it nullable, `topic_data: list[TopicProduceData]`, `records:
memoryview | None`, uuids `UUID`) and has a typed `__init__`. Import the class from its module
(`from kafkacompat.wire._generated.produce_request import ProduceRequest`) to get these types: what
`decode_request`, `request_class` and `data_class` here return is untyped (`Any`, `type`), since which
class depends on a run-time key.
"""

from __future__ import annotations

import gc
import importlib
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kafkacompat.wire._generated.api_index import APIS, DATA
from kafkacompat.wire.errors import DecodeError
from kafkacompat.wire.primitives import JoinChunks

__all__ = [
    "API_SPECS",
    "DATA_SPECS",
    "ApiSpec",
    "DataSpec",
    "decode_data",
    "decode_request",
    "decode_response",
    "encode_data",
    "encode_request",
    "encode_response",
    "request_class",
    "response_class",
]

_PKG = "kafkacompat.wire._generated."

Decoder = Callable[[memoryview, int], tuple[Any, int]]
Encoder = Callable[[Any, bytearray, list[Any]], None]


def _module(name: str) -> ModuleType:
    return importlib.import_module(_PKG + name)


@dataclass(frozen=True)
class ApiSpec:
    """What the specs say about one API. Classes are imported on first access."""

    api_key: int
    name: str
    request_module: str
    request_class_name: str
    response_module: str
    response_class_name: str
    min_version: int
    max_version: int
    request_flexible_from: int | None
    response_flexible_from: int | None
    listeners: tuple[str, ...]
    deprecated_versions: tuple[int, int] | None
    latest_version_unstable: bool

    @property
    def request_class(self) -> type:
        return getattr(_module(self.request_module), self.request_class_name)

    @property
    def response_class(self) -> type:
        return getattr(_module(self.response_module), self.response_class_name)

    @property
    def valid_versions(self) -> range:
        return range(self.min_version, self.max_version + 1)

    def is_flexible_request(self, version: int) -> bool:
        return self.request_flexible_from is not None and version >= self.request_flexible_from

    def is_flexible_response(self, version: int) -> bool:
        return self.response_flexible_from is not None and version >= self.response_flexible_from


@dataclass(frozen=True)
class DataSpec:
    """A "data" spec (internal records such as OffsetCommitKey) or a header spec."""

    name: str
    module: str
    class_name: str
    min_version: int
    max_version: int
    flexible_from: int | None

    # type[Any]: a class found by name, whose nested struct classes (`.PartitionsSchema`) mypy cannot see
    @property
    def cls(self) -> type[Any]:
        return getattr(_module(self.module), self.class_name)


API_SPECS: dict[int, ApiSpec] = {key: ApiSpec(key, *row) for key, row in APIS.items()}
DATA_SPECS: dict[str, DataSpec] = {name: DataSpec(name, *row) for name, row in DATA.items()}

# (api_key, version) -> codec function, filled on first use
_REQ_DEC: dict[tuple[int, int], Decoder] = {}
_REQ_ENC: dict[tuple[int, int], Encoder] = {}
_RESP_DEC: dict[tuple[int, int], Decoder] = {}
_RESP_ENC: dict[tuple[int, int], Encoder] = {}


def _lookup(api_key: int, version: int, response: bool, encode: bool) -> Any:
    spec = API_SPECS.get(api_key)
    if spec is None:
        raise DecodeError(f"unknown api key {api_key}", api_key=api_key)
    if not spec.min_version <= version <= spec.max_version:
        raise DecodeError(f"unsupported {spec.name} version {version}", api_key=api_key)
    mod = _module(spec.response_module if response else spec.request_module)
    table = mod.ENCODERS if encode else mod.DECODERS
    fn = table[version]
    cache = (_RESP_ENC if encode else _RESP_DEC) if response else (_REQ_ENC if encode else _REQ_DEC)
    cache[(api_key, version)] = fn
    return fn


# Decoding a large body allocates thousands of container objects that all survive (they are the
# result). Letting the cyclic garbage collector run in the middle of that only re-scans them, which
# costs about a third of the decode time of a 1,000-partition Metadata response; so it is paused
# while a large body is decoded. Small bodies are not worth the two calls. A decode that gives the
# loop back between shares (the broker's, `pause_gc=False`) must not pause it: the collector would stay
# off while other requests run, and their garbage would pile up for one long collection afterwards. Nor
# may a decode in a worker thread (a replica fetcher's response): the pause is the whole process's.
_GC_PAUSE_MIN_BYTES = 16 * 1024


def _run_decoder(
    fn: Decoder,
    buf: memoryview | bytes | bytearray,
    api_key: int | None,
    what: str,
    allow_trailing: bool = False,
    pause_gc: bool = True,
) -> Any:
    if not isinstance(buf, memoryview):
        buf = memoryview(buf)
    paused = (
        pause_gc
        and len(buf) >= _GC_PAUSE_MIN_BYTES
        and gc.isenabled()
        and threading.current_thread() is threading.main_thread()
    )
    if paused:
        gc.disable()
    try:
        obj, pos = fn(buf, 0)
    except DecodeError as e:
        if e.api_key is None and api_key is not None:
            e.api_key = api_key
        raise
    except (IndexError, struct.error, ValueError, OverflowError, MemoryError) as e:
        raise DecodeError(f"malformed {what}: {e}", api_key=api_key) from None
    finally:
        if paused:
            gc.enable()
    if pos != len(buf) and not allow_trailing:
        raise DecodeError(f"{len(buf) - pos} trailing bytes after {what}", api_key=api_key)
    return obj


def decode_request(
    api_key: int, version: int, buf: memoryview, *, allow_trailing: bool = False, pause_gc: bool = True
) -> Any:
    """Decode a request body (the frame after the request header). Raises DecodeError.

    Bytes after the end of the body are a DecodeError unless `allow_trailing`: a broker passes it,
    because Kafka's request parser reads what the schema describes and ignores the rest of the frame
    (librdkafka 2.x sends three stray bytes after an all-topics Metadata v12 request). `pause_gc=False`
    for a decode that may give the loop back midway (see _GC_PAUSE_MIN_BYTES).
    """
    fn = _REQ_DEC.get((api_key, version)) or _lookup(api_key, version, False, False)
    return _run_decoder(fn, buf, api_key, "request", allow_trailing, pause_gc)


def decode_response(api_key: int, version: int, buf: memoryview) -> Any:
    """Decode a response body (after the response header). Raises DecodeError."""
    fn = _RESP_DEC.get((api_key, version)) or _lookup(api_key, version, True, False)
    return _run_decoder(fn, buf, api_key, "response")


def _encode_chunks(
    fn: Encoder, obj: Any, out: bytearray | None = None, chunks: list[Any] | None = None
) -> list[Any]:
    out = bytearray() if out is None else out
    chunks = [] if chunks is None else chunks
    fn(obj, out, chunks)
    if out or not chunks:
        chunks.append(out)
    return chunks


def encode_request(api_key: int, version: int, obj: Any) -> bytes:
    """Encode a request body. `records` values must be bytes-like here."""
    fn = _REQ_ENC.get((api_key, version)) or _lookup(api_key, version, False, True)
    out = bytearray()
    chunks = JoinChunks()
    fn(obj, out, chunks)
    if not chunks:
        return bytes(out)
    for chunk in chunks:
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise TypeError(f"encode_request needs bytes-like records, not {type(chunk).__name__}")
    chunks.append(out)
    return b"".join(chunks)


def encode_response(
    api_key: int, version: int, obj: Any, *, out: bytearray | None = None, chunks: list[Any] | None = None
) -> list[Any]:
    """Encode a response body into chunks: bytes-like pieces, and any `.size` object given as records.

    The caller adds the frame length (sum of the chunk sizes) and the response header. `out` and
    `chunks` may be given (empty) by a caller that moves what `out` holds into `chunks` meanwhile
    (an encode in shares, broker/fairness.py); the chunks are returned either way.
    """
    fn = _RESP_ENC.get((api_key, version)) or _lookup(api_key, version, True, True)
    return _encode_chunks(fn, obj, out, chunks)


def request_class(api_key: int) -> type:
    return API_SPECS[api_key].request_class


def response_class(api_key: int) -> type:
    return API_SPECS[api_key].response_class


def _data_codec(name: str, version: int, encode: bool) -> Any:
    spec = DATA_SPECS.get(name)
    if spec is None:
        raise DecodeError(f"unknown data record type {name!r}")
    if not spec.min_version <= version <= spec.max_version:
        raise DecodeError(f"unsupported {name} version {version}")
    mod = _module(spec.module)
    return (mod.ENCODERS if encode else mod.DECODERS)[version]


def decode_data(name: str, version: int, buf: memoryview | bytes) -> Any:
    """Decode a "data" spec body (e.g. an OffsetCommitValue after its int16 version prefix)."""
    return _run_decoder(_data_codec(name, version, False), buf, None, name)


def encode_data(name: str, version: int, obj: Any) -> bytes:
    """Encode a "data" spec body (without the int16 version prefix that record keys/values carry)."""
    out = bytearray()
    chunks: list[Any] = []
    _data_codec(name, version, True)(obj, out, chunks)
    if chunks:
        raise TypeError("data records cannot carry pass-through chunks")
    return bytes(out)


def data_class(name: str) -> type[Any]:
    return DATA_SPECS[name].cls
