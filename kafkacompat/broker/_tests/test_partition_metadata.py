"""`partition.metadata` in every partition dir, in Kafka's format, with the topic id clients see."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kafkacompat.replication.metadata import METADATA_FILE, kafka_uuid, kafka_uuid_string
from kafkacompat.testing import InProcessBroker

pytest.importorskip("confluent_kafka", reason="topics are made with confluent-kafka's AdminClient")


def _file(data: Path, topic: str, partition: int) -> str:
    return (data / f"{topic}-{partition}" / "partition.metadata").read_text()


def _topic_ids(bootstrap: str, *topics: str) -> dict[str, str]:
    """Topic ids as a client reads them from Metadata, in Kafka's form (librdkafka prints standard
    base64, Kafka URL-safe base64: compared as UUIDs)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.describe_topics(TopicCollection(list(topics)))
    ids = {}
    for name, future in futures.items():
        topic_id = future.result(10).topic_id
        mask = (1 << 64) - 1  # the halves come as Java's signed longs
        high, low = topic_id.get_most_significant_bits() & mask, topic_id.get_least_significant_bits() & mask
        ids[name] = kafka_uuid_string(uuid.UUID(int=high << 64 | low))
    return ids


def test_every_partition_dir_records_its_topic_id(tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    data = tmp_path / "data"
    with InProcessBroker(data) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("created", 2)])["created"].result(10)
        admin.create_partitions([NewPartitions("created", 3)])["created"].result(10)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("auto-created", b"x")  # through Metadata auto-creation
        assert producer.flush(10) == 0
        ids = _topic_ids(broker.bootstrap, "created", "auto-created")
    for topic, partitions in (("created", 3), ("auto-created", 1)):
        for partition in range(partitions):
            assert _file(data, topic, partition) == f"version: 0\ntopic_id: {ids[topic]}"
    # a file lost (or a log dir from before it was written) is written again at start-up
    (data / "created-1" / "partition.metadata").unlink()
    with InProcessBroker(data):
        pass
    assert _file(data, "created", 1) == f"version: 0\ntopic_id: {ids['created']}"


def test_a_topic_adopted_from_its_partition_dirs_keeps_their_topic_id(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with InProcessBroker(data) as broker:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("kept", 2)])["kept"].result(10)
        (original,) = _topic_ids(broker.bootstrap, "kept").values()
    (data / METADATA_FILE).unlink()  # e.g. a log dir Kafka wrote: partition dirs, no topic table of ours
    with InProcessBroker(data) as broker:
        assert _topic_ids(broker.bootstrap, "kept") == {"kept": original}


def test_kafka_uuid_strings() -> None:
    value = uuid.UUID("ab4a4d1e-1374-493f-90e5-5f3222b5a123")
    text = kafka_uuid_string(value)
    assert len(text) == 22 and "=" not in text and kafka_uuid(text) == value
    assert kafka_uuid("not an id at all") is None and kafka_uuid(text[:-1]) is None
    assert kafka_uuid(text[:10] + "!" + text[11:]) is None
