"""`kafkacompat groups` helpers: the consumer-protocol assignment reader against kafka-python's encoder,
and its behaviour on arbitrary bytes (never an exception, never more partitions than the bytes hold)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkacompat.commands.groups import parse_assignment

topics = st.dictionaries(
    st.text(st.characters(codec="utf-8", categories=("L", "N")), min_size=1, max_size=20),
    st.lists(st.integers(0, 2**31 - 1), max_size=20),
    max_size=5,
)


@settings(deadline=None)
@given(topics, st.binary(max_size=16), st.integers(0, 3))
def test_reads_what_kafka_python_writes(
    assigned: dict[str, list[int]], user_data: bytes, version: int
) -> None:
    consumer = pytest.importorskip("kafka.protocol.consumer")

    encoded = consumer.ConsumerProtocolAssignment(
        version=version, assigned_partitions=list(assigned.items()), user_data=user_data
    ).encode()
    assert parse_assignment(encoded) == [(t, p) for t, ps in assigned.items() for p in ps]


@given(st.binary(max_size=200))
def test_arbitrary_bytes(data: bytes) -> None:
    result = parse_assignment(data)
    assert len(result) <= len(data) // 4


def test_empty_and_short() -> None:
    assert parse_assignment(b"") == parse_assignment(None) == parse_assignment(b"\x00") == []
    assert parse_assignment(b"\x00\x00\x7f\xff\xff\xff") == []  # claims 2**31-1 topics, has none
