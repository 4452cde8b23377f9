"""Cluster metadata for a single node: topics, topic ids, partition counts, per-topic config overrides.

Theory of operation: `LocalMetadata` keeps the topic table in memory and persists it as one small
JSON document, `kafkacompat-metadata.json`, in the first log dir. Every change is a mutation in memory
followed by a write of the whole document (tmp file, fsync, rename, fsync of the directory), so the
file on disk is always either the old or the new table, never a torn one; after a crash the broker
comes back with exactly what was last acknowledged. The document also holds the next free block of
producer ids, so non-transactional producer ids stay unique across restarts.

The class is synchronous and does blocking I/O in `commit()` only. Mutators (`create_topic`,
`delete_topic`, `set_topic_configs`, `add_partitions`, `allocate_producer_id_block`) change memory
and mark the table dirty; the caller then runs `commit()` (the broker does so in a worker thread,
under its metadata lock) before it answers the client. `snapshot()`/`write_snapshot()` split a commit
into the part that must run on the owner's thread and the blocking part.

Owner: the broker (`kafkacompat.broker.state`); handlers read it through the request context and
change it only through the broker's helpers, which serialise commits.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = [
    "METADATA_FILE",
    "PRODUCER_ID_BLOCK_SIZE",
    "LocalMetadata",
    "TopicInfo",
    "kafka_uuid",
    "kafka_uuid_string",
    "validate_topic_name",
]

METADATA_FILE = "kafkacompat-metadata.json"
FORMAT_VERSION = 1
PRODUCER_ID_BLOCK_SIZE = 1000
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str | None) -> None:
    """Raise KafkaError(INVALID_TOPIC_EXCEPTION) unless `name` is a legal Kafka topic name."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters",
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, "
            "'.', '_' and '-'",
        )


def kafka_uuid_string(value: uuid.UUID) -> str:
    """A UUID as Kafka writes it (`Uuid.toString()`): URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def kafka_uuid(text: str) -> uuid.UUID | None:
    """The UUID of a `kafka_uuid_string()` text; None if it is not one."""
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 16 or kafka_uuid_string(uuid.UUID(bytes=raw)) != text:
        return None  # b64decode skips stray characters: only a text that round-trips is an id
    return uuid.UUID(bytes=raw)


@dataclass(slots=True)
class TopicInfo:
    """One topic: its name, id, partition count and config overrides (topic-level names -> strings)."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    @property
    def kafka_id(self) -> str:
        """The topic id as Kafka writes it, e.g. in a partition dir's `partition.metadata`."""
        return kafka_uuid_string(self.topic_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "id": str(self.topic_id),
            "partitions": self.partitions,
            "configs": dict(self.configs),
            "internal": self.internal,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicInfo:
        return cls(
            name=str(data["name"]),
            topic_id=uuid.UUID(data["id"]),
            partitions=int(data["partitions"]),
            configs={str(k): str(v) for k, v in data.get("configs", {}).items()},
            internal=bool(data.get("internal", False)),
        )


class LocalMetadata:
    """The single node's topic table and producer-id allocator, persisted in `<log dir>/METADATA_FILE`."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / METADATA_FILE
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._next_producer_id_block = 0
        self._dirty = False
        self._load()

    # reading

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        data = json.loads(text)
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"{self.path}: unsupported metadata format version {data.get('version')!r}")
        for item in data.get("topics", []):
            topic = TopicInfo.from_json(item)
            self._topics[topic.name] = topic
            self._by_id[topic.topic_id] = topic
        self._next_producer_id_block = int(data.get("next_producer_id_block", 0))

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[TopicInfo]:
        """All topics, sorted by name."""
        return [self._topics[name] for name in sorted(self._topics)]

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def __len__(self) -> int:
        return len(self._topics)

    @property
    def dirty(self) -> bool:
        return self._dirty

    # changing (memory only; commit() persists)

    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str] | None = None,
        *,
        topic_id: uuid.UUID | None = None,
        internal: bool = False,
    ) -> TopicInfo:
        self.check_new_topic(name, partitions)
        topic_id = topic_id or uuid.uuid4()
        while topic_id in self._by_id or topic_id.int == 0:
            topic_id = uuid.uuid4()
        topic = TopicInfo(name, topic_id, partitions, dict(configs or {}), internal)
        self._topics[name] = topic
        self._by_id[topic_id] = topic
        self._dirty = True
        return topic

    def check_new_topic(self, name: str, partitions: int) -> None:
        """Raise the KafkaError `create_topic` would raise for this name and partition count, if any."""
        validate_topic_name(name)
        if name in self._topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if partitions < 1:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")

    def delete_topic(self, name: str) -> TopicInfo:
        topic = self._topics.pop(name, None)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        del self._by_id[topic.topic_id]
        self._dirty = True
        return topic

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        """Replace the topic's config overrides."""
        topic = self._require(name)
        topic.configs = dict(configs)
        self._dirty = True
        return topic

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        topic = self._require(name)
        if total <= topic.partitions:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {topic.partitions} partitions, which is higher than or equal to "
                f"the requested {total}.",
            )
        topic.partitions = total
        self._dirty = True
        return topic

    def allocate_producer_id_block(self, size: int = PRODUCER_ID_BLOCK_SIZE) -> int:
        """Reserve `size` producer ids and return the first; commit() before handing any of them out."""
        start = self._next_producer_id_block
        self._next_producer_id_block = start + size
        self._dirty = True
        return start

    def _require(self, name: str) -> TopicInfo:
        topic = self._topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        return topic

    # persisting

    def snapshot(self) -> bytes:
        """The whole table as the bytes `write_snapshot` stores; clears the dirty flag."""
        document = {
            "version": FORMAT_VERSION,
            "next_producer_id_block": self._next_producer_id_block,
            "topics": [topic.to_json() for topic in self.topics()],
        }
        self._dirty = False
        return json.dumps(document, indent=1, sort_keys=True).encode("utf-8")

    def write_snapshot(self, data: bytes) -> None:
        """Atomically replace the metadata file with `data` (blocking: fsyncs file and directory)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def commit(self) -> None:
        """Persist if anything changed (blocking)."""
        if self._dirty:
            self.write_snapshot(self.snapshot())
