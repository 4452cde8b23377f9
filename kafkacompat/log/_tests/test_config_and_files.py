"""LogConfig table and validation; checkpoint and index file formats."""

from __future__ import annotations

import os
import struct

import pytest

from kafkacompat.log.checkpoints import (
    CheckpointError,
    read_epoch_checkpoint,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from kafkacompat.log.config import TOPIC_CONFIG_DEFS, LogConfig
from kafkacompat.log.index import IndexCorrupt, OffsetIndex, TimeIndex
from kafkacompat.wire.errors import ErrorCode, KafkaError

KAFKA_DEFAULTS = {  # Kafka 3.9's documented topic config defaults
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "segment.index.bytes": "10485760",
    "index.interval.bytes": "4096",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.after.max.ms": "9223372036854775807",
    "cleanup.policy": "delete",
    "min.insync.replicas": "1",
    "compression.type": "producer",
}


def test_defaults_are_kafkas():
    config = LogConfig()
    rendered = dict(config.items())
    for name, value in KAFKA_DEFAULTS.items():
        assert rendered[name] == value, name


def test_every_default_passes_its_own_validator_and_round_trips():
    for definition in TOPIC_CONFIG_DEFS:
        if definition.validator is not None:
            assert definition.validator(definition.default) is None, definition.name
        assert definition.parse(definition.render(definition.default)) == definition.default


@pytest.mark.parametrize(
    "name,value",
    [
        ("segment.bytes", "13"),
        ("segment.bytes", "abc"),
        ("retention.ms", "-2"),
        ("cleanup.policy", "keep"),
        ("message.timestamp.type", "Now"),
        ("min.insync.replicas", "0"),
        ("no.such.config", "1"),
        ("segment.bytes", "3000000000"),
        ("preallocate", "maybe"),
        ("min.cleanable.dirty.ratio", "1.5"),
    ],
)
def test_bad_values_are_invalid_config(name, value):
    with pytest.raises(KafkaError) as err:
        LogConfig.from_properties({name: value})
    assert err.value.code == ErrorCode.INVALID_CONFIG
    assert name in str(err.value)


def test_overrides_layer_on_a_base_and_are_tracked():
    base = LogConfig.from_properties({"retention.ms": "1000"})
    config = LogConfig.from_properties({"segment.bytes": "2048", "cleanup.policy": "compact,delete"}, base)
    assert (config.retention_ms, config.segment_bytes) == (1000, 2048)
    assert config.cleanup_policy == ["compact", "delete"] and config.deletes_by_retention
    assert config.is_explicit("segment.bytes") and not config.is_explicit("segment.ms")
    assert (
        LogConfig.from_properties({"message.timestamp.difference.max.ms": "50"}).timestamp_after_max_ms == 50
    )


def test_offset_checkpoint_text_and_errors(tmp_path):
    path = str(tmp_path / "cp")
    write_offset_checkpoint(path, {("b", 1): 7, ("a", 0): 3}, sync=False)
    with open(path) as f:
        assert f.read() == "0\n2\na 0 3\nb 1 7\n"
    assert read_offset_checkpoint(path) == {("a", 0): 3, ("b", 1): 7}
    assert not os.path.exists(path + ".tmp")
    for bad in ("1\n0\n", "0\n2\na 0 3\n", "0\n1\na x 3\n", "0\n"):
        with open(path, "w") as f:
            f.write(bad)
        with pytest.raises(CheckpointError):
            read_offset_checkpoint(path)
    with open(path, "w") as f:
        f.write("0\n2\n0 0\n4 120\n")
    assert read_epoch_checkpoint(path) == [(0, 0), (4, 120)]


def test_offset_index_lookup_truncate_and_corruption(tmp_path):
    index = OffsetIndex(str(tmp_path / "00000000000000000100.index"), 100, 80)
    index.reset()
    for offset, position in ((110, 500), (130, 1200), (150, 2000)):
        index.append(offset, position)
    index.append(140, 1500)  # not after the last entry: ignored
    assert os.path.getsize(index.path) == 0  # buffered until flush
    index.flush()
    with open(index.path, "rb") as f:
        assert list(struct.iter_unpack(">ii", f.read())) == [(10, 500), (30, 1200), (50, 2000)]
    assert index.lookup(105) == (100, 0)
    assert index.lookup(130) == (130, 1200)
    assert index.lookup(149) == (130, 1200)
    assert index.floor_position(1999) == 1200
    index.append(160, 2500)  # pending, then truncated away before reaching the file
    index.truncate_to(130)
    assert index.iter_entries() == [(110, 500)]
    index.flush()
    assert os.path.getsize(index.path) == 8
    assert index.max_entries == 10
    index.close()
    with open(index.path, "ab") as f:
        f.write(b"\x00\x00\x00")
    with pytest.raises(IndexCorrupt):
        OffsetIndex(index.path, 100, 80).check(10_000)


def test_time_index_is_strictly_increasing(tmp_path):
    index = TimeIndex(str(tmp_path / "00000000000000000000.timeindex"), 0, 120)
    index.reset()
    index.maybe_append(1000, 5)
    index.maybe_append(1000, 9)  # same timestamp: skipped
    index.maybe_append(900, 12)  # older timestamp: skipped
    index.maybe_append(1500, 20)
    index.flush()
    with open(index.path, "rb") as f:
        assert list(struct.iter_unpack(">qi", f.read())) == [(1000, 5), (1500, 20)]
    assert index.lookup(999) == (-1, 0)
    assert index.lookup(1200) == (1000, 5)
    index.truncate_to(20)
    assert index.iter_entries() == [(1000, 5)]
    index.close()
