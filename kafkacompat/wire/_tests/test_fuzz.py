"""Fuzzing the generated decoders: random and mutated frames may only ever raise DecodeError.

The raw generated decoders are called directly (not through messages.py, which would also convert
stray exceptions), so an IndexError or struct.error escaping the generated code fails here.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.wire import messages
from kafkacompat.wire._tests.test_messages import (
    HAVE_SPECS,
    SPEC_MESSAGES,
    encode,
    generated_module,
    message_strategy,
)
from kafkacompat.wire.errors import DecodeError

needs_specs = pytest.mark.skipif(not HAVE_SPECS, reason="Kafka specs (../shared/kafka-protocol) not present")
MODULES = sorted(SPEC_MESSAGES)
FUZZ = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def _decode_only_decode_errors(module_name: str, version: int, data: bytes) -> Any:
    decoder = generated_module(module_name).DECODERS[version]
    try:
        obj, pos = decoder(memoryview(data), 0)
    except DecodeError:
        return None
    assert 0 <= pos <= len(data)
    return obj


def _versions(module_name: str) -> st.SearchStrategy[int]:
    m = SPEC_MESSAGES[module_name]
    return st.integers(m.valid.lo, m.valid.hi)


@needs_specs
@pytest.mark.parametrize("module_name", MODULES)
@FUZZ
@given(data=st.data())
def test_random_bytes(module_name: str, data: st.DataObject) -> None:
    version = data.draw(_versions(module_name))
    raw = data.draw(st.binary(max_size=64))
    _decode_only_decode_errors(module_name, version, raw)


@st.composite
def _mutated(draw: st.DrawFn, frame: bytes) -> bytes:
    b = bytearray(frame)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        if not b and kind != "insert":
            kind = "insert"
        if kind == "flip":
            i = draw(st.integers(0, len(b) - 1))
            b[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            i = draw(st.integers(0, len(b) - 1))
            b[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]))
        elif kind == "truncate":
            del b[draw(st.integers(0, len(b) - 1)):]
        elif kind == "insert":
            i = draw(st.integers(0, len(b)))
            b[i:i] = draw(st.binary(min_size=1, max_size=5))
        else:
            i = draw(st.integers(0, len(b) - 1))
            del b[i : i + draw(st.integers(1, 4))]
    return bytes(b)


@needs_specs
@pytest.mark.parametrize("module_name", MODULES)
@FUZZ
@given(data=st.data())
def test_mutated_valid_frames(module_name: str, data: st.DataObject) -> None:
    version = data.draw(_versions(module_name))
    obj = data.draw(message_strategy(module_name, version))
    frame = data.draw(_mutated(encode(module_name, version, obj)))
    back = _decode_only_decode_errors(module_name, version, frame)
    if back is not None:
        # Whatever decoded must encode again (values came from the wire, so they are in range).
        encode(module_name, version, back)


@needs_specs
@pytest.mark.parametrize(
    "module_name", ["fetch_response", "metadata_response", "produce_request", "api_versions_response"]
)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_truncation_is_a_decode_error(module_name: str, data: st.DataObject) -> None:
    version = data.draw(_versions(module_name))
    frame = encode(module_name, version, data.draw(message_strategy(module_name, version)))
    decoder = generated_module(module_name).DECODERS[version]
    for cut in range(len(frame)):
        with pytest.raises(DecodeError):
            decoder(memoryview(frame[:cut]), 0)


@pytest.mark.parametrize(
    ("api_key", "version", "frame"),
    [
        (3, 1, b"\x7f\xff\xff\xff" + b"\x00" * 10),  # Metadata v1: 2**31-1 topics
        (3, 12, b"\xff\xff\xff\xff\x07" + b"\x00" * 10),  # Metadata v12: compact count 2**31-2
        (0, 3, b"\xff\xff\x00\x01\x00\x00\x00\x10\x7f\xff\xff\xff" + b"\x00" * 10),  # Produce topics
        (1, 4, b"\x00" * 21 + b"\x7f\xff\xff\xff" + b"\x00" * 10),  # Fetch v4 topics
    ],
)
def test_huge_counts_fail_fast_without_allocating(api_key: int, version: int, frame: bytes) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            messages.decode_request(api_key, version, memoryview(frame))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_records_length_beyond_the_frame() -> None:
    # Produce v3, one topic "t", one partition 0, records length 1000 with 4 bytes present
    frame = (
        b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x00\x10" + b"\x00\x00\x00\x01" + b"\x00\x01t"
        + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\x00\x00\x03\xe8" + b"abcd"
    )
    with pytest.raises(DecodeError) as exc:
        messages.decode_request(0, 3, memoryview(frame))
    assert exc.value.field is not None and exc.value.field.endswith("records")
