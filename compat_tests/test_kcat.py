"""kcat (librdkafka CLI): produce and consume with every codec, keys, headers, metadata listing."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def test_metadata_lists_broker_and_topic(bootstrap: str, topic: str, kcat: Callable[..., object]) -> None:
    from confluent_kafka.admin import AdminClient

    # what the cluster is (one broker, or the suite's three with `--cluster`), as librdkafka's admin
    # client sees it; kcat must list the same brokers and the partition's leader, replicas and ISR
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    partition = metadata.topics[topic].partitions[0]
    out = kcat("-b", bootstrap, "-L", "-t", topic).stdout.decode()  # type: ignore[attr-defined]
    assert f"{len(metadata.brokers)} brokers:" in out
    for broker in metadata.brokers.values():
        assert f"broker {broker.id} at {broker.host}:{broker.port}" in out
    assert f'topic "{topic}" with 1 partitions' in out
    replicas = ",".join(map(str, partition.replicas))
    isrs = ",".join(map(str, partition.isrs))
    assert f"partition 0, leader {partition.leader}, replicas: {replicas}, isrs: {isrs}" in out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_codec(
    bootstrap: str, make_topic: Callable[..., str], kcat: Callable[..., object], codec: str
) -> None:
    topic = make_topic()
    lines = [f"key{i}:value {i} {'x' * (i % 9)}" for i in range(200)]
    kcat(
        "-b",
        bootstrap,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-K",
        ":",
        "-z",
        codec,
        input=("\n".join(lines) + "\n").encode(),
    )
    out = kcat(
        "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%k:%s|%o\n"
    ).stdout.decode()  # type: ignore[attr-defined]
    assert out.splitlines() == [f"{line}|{i}" for i, line in enumerate(lines)]


def test_headers_and_offsets(bootstrap: str, topic: str, kcat: Callable[..., object]) -> None:
    kcat("-b", bootstrap, "-P", "-t", topic, "-p", "0", "-H", "h1=one", "-H", "h2=two", input=b"a\nb\nc\n")
    out = kcat(
        "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "1", "-e", "-f", "%s %h %o\n"
    ).stdout.decode()  # type: ignore[attr-defined]
    assert out.splitlines() == ["b h1=one,h2=two 1", "c h1=one,h2=two 2"]
    tail = kcat("-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "-1", "-e", "-f", "%s\n").stdout.decode()  # type: ignore[attr-defined]
    assert tail.splitlines() == ["c"]
