"""Responses of thousands of items reach real clients whole.

The broker encodes a response estimated at more than `fairness.OFF_LOOP_ITEMS` items in shares, in a
greenlet that gives the event loop back between list elements (broker/fairness.py). Unit tests prove
the bytes equal the plain encoder's; here confluent-kafka, kafka-python and kcat read the Metadata of a
topic big enough to take that path. On the suite's own in-process broker the test also checks that
the path was taken; against `--bootstrap` or `--cluster` it checks only what the clients see.

The topic is deleted afterwards, so that the shared broker's later Metadata answers stay small.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from compat_tests.clients import create_topic, wait_until
from kafkacompat.broker import fairness

pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")

#: a Metadata partition counts as 3 items (itself, one replica, one in-sync replica), so this many
#: partitions make a single-topic Metadata answer cross OFF_LOOP_ITEMS on one broker
PARTITIONS = fairness.OFF_LOOP_ITEMS // 3 + 100


@pytest.fixture
def share_encodes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[int] | None:
    """Counts the broker's share-encoded answers when it runs in this process, else None."""
    if request.config.getoption("--bootstrap") or request.config.getoption("--cluster"):
        return None
    counted: list[int] = []
    original = fairness.in_shares

    async def counting(compute: Callable[[], Any], output: Any = None) -> Any:
        counted.append(1)
        return await original(compute, output)

    monkeypatch.setattr(fairness, "in_shares", counting)
    return counted


@pytest.fixture
def big_topic(bootstrap: str, topic_name: str) -> Iterator[str]:
    from confluent_kafka.admin import AdminClient

    create_topic(bootstrap, topic_name, PARTITIONS)
    try:
        yield topic_name
    finally:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([topic_name], operation_timeout=30)[topic_name].result(30)


def test_clients_read_the_metadata_of_a_topic_of_thousands_of_partitions(
    bootstrap: str, big_topic: str, share_encodes: list[int] | None, kp_closing: Any
) -> None:
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer

    before = len(share_encodes) if share_encodes is not None else 0

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(big_topic, timeout=30)
    topic = metadata.topics[big_topic]
    assert topic.error is None
    assert sorted(topic.partitions) == list(range(PARTITIONS))
    brokers = set(metadata.brokers)
    assert all(p.error is None and p.leader in brokers for p in topic.partitions.values())

    consumer = kp_closing(KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=30000))
    consumer.topics()  # a Metadata request of every topic, this one included
    partitions = wait_until(lambda: consumer.partitions_for_topic(big_topic), 30, "kafka-python's metadata")
    assert partitions == set(range(PARTITIONS))

    if share_encodes is not None:
        assert len(share_encodes) - before >= 2, "both clients' answers were encoded in shares"


def test_kcat_lists_a_topic_of_thousands_of_partitions(
    bootstrap: str, big_topic: str, kcat: Callable[..., subprocess.CompletedProcess[bytes]]
) -> None:
    listing = kcat("-b", bootstrap, "-L", "-t", big_topic, "-m", "30", timeout=60).stdout.decode()
    assert f'topic "{big_topic}" with {PARTITIONS} partitions' in listing
    assert listing.count("partition ") == PARTITIONS
