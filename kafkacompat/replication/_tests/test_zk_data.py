"""Kafka's ZooKeeper JSON documents: what we write is what Kafka writes, and Kafka's documents decode."""

from __future__ import annotations

import json
import uuid

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.partition_state import LeaderAndIsr


def test_broker_registration_round_trip_and_kafka_fields() -> None:
    registration = zd.BrokerRegistration(
        3,
        {"PLAINTEXT": ("h1", 9092), "INTERNAL": ("h1", 9093)},
        {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "PLAINTEXT"},
        "r1",
    )
    document = json.loads(zd.encode_broker(registration))
    assert document["version"] == 5 and document["rack"] == "r1"
    assert document["endpoints"] == ["PLAINTEXT://h1:9092", "INTERNAL://h1:9093"]
    assert document["host"] == "h1" and document["port"] == 9092 and document["jmx_port"] == -1
    assert zd.decode_broker(3, zd.encode_broker(registration)) == registration


def test_a_kafka_broker_registration_decodes() -> None:
    written_by_kafka = (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://10.0.0.7:9092"],'
        b'"jmx_port":9999,"host":"10.0.0.7","timestamp":"1543300074836","port":9092,"version":4}'
    )
    broker = zd.decode_broker(1, written_by_kafka)
    assert broker.endpoint("plaintext") == ("10.0.0.7", 9092) and broker.rack is None
    legacy = zd.decode_broker(2, b'{"jmx_port":-1,"host":"old","port":9092,"version":1}')
    assert legacy.endpoints == {"PLAINTEXT": ("old", 9092)}


def test_partition_state_and_topic_documents() -> None:
    state = LeaderAndIsr(3, 55, (1, 2, 3), 1, 7)
    assert json.loads(zd.encode_partition_state(state)) == {
        "controller_epoch": 1, "leader": 3, "version": 1, "leader_epoch": 55, "isr": [1, 2, 3]
    }  # fmt: skip
    assert zd.decode_partition_state(zd.encode_partition_state(state), 7) == state
    topic_id = uuid.uuid4()
    assignment = zd.TopicAssignment("t", topic_id, {0: [1, 2], 1: [2, 1]})
    document = json.loads(zd.encode_topic(assignment))
    assert document["version"] == 3 and document["partitions"] == {"0": [1, 2], "1": [2, 1]}
    assert zd.topic_id_from_string(document["topic_id"]) == topic_id and "=" not in document["topic_id"]
    assert zd.decode_topic("t", zd.encode_topic(assignment)) == assignment
    old = zd.decode_topic("t", b'{"version":1,"partitions":{"0":[1]}}')
    assert old.topic_id is None and old.partitions == {0: [1]}


def test_small_documents() -> None:
    assert json.loads(zd.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}
    assert zd.decode_controller(zd.encode_controller(4)) == 4 and zd.decode_controller(b"4") == 4
    assert zd.encode_controller_epoch(12) == b"12" and zd.decode_controller_epoch(b"12") == 12
    assert zd.decode_topic_config(zd.encode_topic_config({"min.insync.replicas": "2"})) == {
        "min.insync.replicas": "2"
    }
    assert zd.decode_producer_id_block(zd.encode_producer_id_block(1, 0, 999)) == (1, 0, 999)
    assert zd.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
