"""The CLI's parsing and formatting rules, checked against Kafka's console tools' conventions and,
for the key partitioner, against kafka-python's copy of the Java client's murmur2 (no broker needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkacompat.client import ClientError, parse_bootstrap, uuid_to_kafka_string
from kafkacompat.commands.configs import parse_add_config, split_config_list
from kafkacompat.commands.consume import Formatter
from kafkacompat.commands.produce import LineReader, murmur2
from kafkacompat.wire.records import RecordBatchView, build_batch, iter_records


@given(st.binary(max_size=64))
def test_murmur2_matches_the_java_client(data: bytes) -> None:
    from kafka.partitioner.default import murmur2 as reference

    assert murmur2(data) & 0x7FFFFFFF == reference(bytearray(data)) & 0x7FFFFFFF


def test_add_config_splits_outside_brackets() -> None:
    assert split_config_list("a=1, b=[x,y],c=2") == ["a=1", "b=[x,y]", "c=2"]
    assert parse_add_config("cleanup.policy=[compact,delete],retention.ms=5") == [
        ("cleanup.policy", "compact,delete"),
        ("retention.ms", "5"),
    ]
    with pytest.raises(Exception, match="key=value"):
        parse_add_config("novalue")


def test_line_reader_keys_headers_and_null_marker() -> None:
    reader = LineReader(
        {"parse.key": "true", "key.separator": ":", "parse.headers": "true", "null.marker": "NULL"}
    )
    assert reader.parse("h1:a,h2:NULL\tk:v:w", 1) == (b"k", b"v:w", [("h1", b"a"), ("h2", None)])
    assert reader.parse("\tNULL:x", 2) == (None, b"x", [])
    with pytest.raises(Exception, match="No key separator found on line number 3"):
        reader.parse("h:1\tnokey", 3)
    plain = LineReader({})
    assert plain.parse("a\tb", 1) == (None, b"a\tb", [])
    lenient = LineReader({"parse.key": "true", "ignore.error": "true"})
    assert lenient.parse("whole line", 1) == (None, b"whole line", [])


def test_formatter_layout() -> None:
    batch = RecordBatchView(
        build_batch([(b"k", b"v", [("h", b"1")], 1234), (None, None, [], 1235)], base_offset=7)
    )
    first, second = iter_records(batch)
    everything = Formatter(
        {
            "print.timestamp": "true",
            "print.partition": "true",
            "print.offset": "true",
            "print.headers": "true",
            "print.key": "true",
        }
    )
    assert everything.format(2, first, False) == b"CreateTime:1234\tPartition:2\tOffset:7\th:1\tk\tv\n"
    assert (
        everything.format(2, second, True)
        == b"LogAppendTime:1235\tPartition:2\tOffset:8\tNO_HEADERS\tnull\tnull\n"
    )
    assert Formatter({}).format(0, first, False) == b"v\n"
    keys_only = Formatter({"print.key": "true", "print.value": "false", "key.separator": "|"})
    assert keys_only.format(0, first, False) == b"k\n"


def test_bootstrap_and_topic_id_strings() -> None:
    import uuid

    assert parse_bootstrap("a:1, [::1]:2") == [("a", 1), ("::1", 2)]
    with pytest.raises(ClientError):
        parse_bootstrap("nohostport")
    # Kafka prints topic ids as URL-safe base64 without padding (22 characters)
    assert uuid_to_kafka_string(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert uuid_to_kafka_string(uuid.UUID(bytes=b"\xff" * 16)) == "_____________________w"
