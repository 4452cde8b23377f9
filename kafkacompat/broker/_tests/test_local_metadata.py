"""LocalMetadata: topic table and producer-id blocks, persisted atomically, reloaded after restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkacompat.replication.metadata import METADATA_FILE, LocalMetadata, validate_topic_name
from kafkacompat.wire.errors import ErrorCode, KafkaError


def test_changes_persist_only_on_commit(tmp_path: Path) -> None:
    metadata = LocalMetadata(tmp_path)
    topic = metadata.create_topic("orders", 3, {"retention.ms": "100"})
    assert metadata.dirty and not (tmp_path / METADATA_FILE).exists()
    metadata.commit()
    assert not metadata.dirty
    reloaded = LocalMetadata(tmp_path)
    again = reloaded.topic("orders")
    assert again is not None
    assert (again.topic_id, again.partitions, again.configs) == (topic.topic_id, 3, {"retention.ms": "100"})
    assert reloaded.topic_by_id(topic.topic_id) is again


def test_delete_add_partitions_configs(tmp_path: Path) -> None:
    metadata = LocalMetadata(tmp_path)
    metadata.create_topic("a", 1)
    metadata.create_topic("b", 1)
    metadata.add_partitions("a", 4)
    metadata.set_topic_configs("a", {"cleanup.policy": "compact"})
    metadata.delete_topic("b")
    metadata.commit()
    reloaded = LocalMetadata(tmp_path)
    assert [t.name for t in reloaded.topics()] == ["a"]
    assert reloaded.topic("a").partitions == 4  # type: ignore[union-attr]
    assert reloaded.topic("a").configs == {"cleanup.policy": "compact"}  # type: ignore[union-attr]
    with pytest.raises(KafkaError) as info:
        reloaded.add_partitions("a", 2)
    assert info.value.code == ErrorCode.INVALID_PARTITIONS


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda m: m.create_topic("dup", 1), ErrorCode.TOPIC_ALREADY_EXISTS),
        (lambda m: m.create_topic("zero", 0), ErrorCode.INVALID_PARTITIONS),
        (lambda m: m.create_topic("bad name", 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (lambda m: m.delete_topic("missing"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ],
)
def test_errors(tmp_path: Path, call, code: ErrorCode) -> None:  # type: ignore[no-untyped-def]
    metadata = LocalMetadata(tmp_path)
    metadata.create_topic("dup", 1)
    with pytest.raises(KafkaError) as info:
        call(metadata)
    assert info.value.code == code


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/", "ümlaut"])
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(KafkaError) as info:
        validate_topic_name(name)
    assert info.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("name", ["a", "A.b_c-1", "a" * 249, "__consumer_offsets"])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


def test_producer_id_blocks_never_repeat(tmp_path: Path) -> None:
    metadata = LocalMetadata(tmp_path)
    first = metadata.allocate_producer_id_block(10)
    metadata.commit()
    second = LocalMetadata(tmp_path).allocate_producer_id_block(10)
    assert (first, second) == (0, 10)


def test_write_is_atomic_replace(tmp_path: Path) -> None:
    metadata = LocalMetadata(tmp_path)
    metadata.create_topic("t", 1)
    metadata.commit()
    (tmp_path / (METADATA_FILE + ".tmp")).write_text("{torn")  # a crash mid-write leaves only the tmp file
    assert [t.name for t in LocalMetadata(tmp_path).topics()] == ["t"]
    document = json.loads((tmp_path / METADATA_FILE).read_text())
    assert document["version"] == 1 and document["topics"][0]["name"] == "t"
