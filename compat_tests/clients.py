"""Helpers shared by the compat tests: topic creation and assign-based consumers for each client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Polls `predicate` until it returns something true (which is returned); fails naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


def ck_incremental_alter(
    bootstrap: str, kind: str, name: str, configs: dict[str, str | None], timeout: float = 15
) -> None:
    """IncrementalAlterConfigs with confluent-kafka on a "broker" or "topic" resource, as kafka-configs
    sends it: SET each value, DELETE each None."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entries = [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        if value is not None
        else ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
        for key, value in configs.items()
    ]
    resource_type = ResourceType.BROKER if kind == "broker" else ResourceType.TOPIC
    resource = ConfigResource(resource_type, name, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(timeout)


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    # replication factor -1: the broker's default.replication.factor (KIP-464), so the same tests get
    # one replica on a single broker and three on the suite's 3-broker cluster (`--cluster`)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=-1, config=configs or {})],
        operation_timeout=30,
    )
    futures[name].result(30)  # on a loaded machine a cluster's controller can take more than 10 s
    wait_for_topic(bootstrap, name, partitions)


def wait_for_topic(bootstrap: str, name: str, partitions: int, timeout: float = 30) -> None:
    """Until every broker of the bootstrap list reports the topic with a leader for each partition and
    its whole replica set in sync (on a cluster, a broker's view of a new topic can be moments behind,
    as a Kafka broker's metadata cache can; a test should not start on a half-known topic)."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    for server in bootstrap.split(","):
        admin = AdminClient({"bootstrap.servers": server})
        while True:
            metadata = admin.list_topics(name, timeout=5)
            topic = metadata.topics.get(name)
            if (
                topic is not None
                and topic.error is None
                and len(topic.partitions) == partitions
                and all(
                    p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas)
                    for p in topic.partitions.values()
                )
            ):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {name} did not appear on {server}")
            time.sleep(0.05)


def kp_consume_all(
    bootstrap: str,
    topic: str,
    partition: int,
    count: int,
    *,
    start: int | None = None,
    timeout: float = 15,
    **config: Any,
) -> list[Any]:
    """Read `count` records from one partition with an assign-based kafka-python consumer."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **config)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        if start is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, start)
        records: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


def ck_consume_all(
    bootstrap: str,
    topic: str,
    partition: int,
    count: int,
    *,
    start: int = -2,
    timeout: float = 15,
    **config: Any,
) -> list[Any]:
    """Read `count` messages from one partition with an assign-based confluent-kafka consumer."""
    return ck_consume_partitions(
        bootstrap, topic, {partition: count}, start=start, timeout=timeout, **config
    )[partition]


def ck_consume_partitions(
    bootstrap: str,
    topic: str,
    counts: dict[int, int],
    *,
    start: int = -2,
    timeout: float = 15,
    **config: Any,
) -> dict[int, list[Any]]:
    """Read `counts[p]` messages from each partition p with one assign-based confluent-kafka consumer."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compat-assign-only",
            "enable.auto.commit": False,
            **config,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, start) for partition in counts])
        messages: dict[int, list[Any]] = {partition: [] for partition in counts}
        deadline = time.monotonic() + timeout
        while any(len(messages[p]) < n for p, n in counts.items()) and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                raise AssertionError(f"consumer error: {message.error()}")
            messages[message.partition()].append(message)
        return messages
    finally:
        consumer.close()


def run_async(coro: Any) -> Any:
    """Run an asyncio coroutine from a sync test (pytest-trio's trio_mode owns async tests)."""
    return asyncio.run(coro)


def wait_for_topic_config(bootstrap: str, topic: str, key: str, value: str, timeout: float = 30) -> None:
    """Until every broker of the cluster answers DescribeConfigs with `key`=`value` for the topic. One
    broker applies a change at once; on a cluster the others learn it from ZooKeeper moments later (as
    ZooKeeper-mode Kafka's brokers did), and a test that acts through another broker right after
    altering a config must wait for that, not race it. Asked through kafkacompat's own wire client because
    it can address each broker by id; the clients under test do the altering and the producing."""
    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class

    describe = request_class(32)  # DescribeConfigs
    resource = describe.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=[key]
    )
    request = describe(resources=[resource])
    deadline = time.monotonic() + timeout
    with KafkaClient(bootstrap) as client:
        for broker in client.metadata([]).brokers:
            while True:
                answer = client.send(32, request, node_id=broker.node_id, version=1)
                entries = {c.name: c.value for c in answer.results[0].configs}
                if entries.get(key) == value:
                    break
                assert time.monotonic() < deadline, f"broker {broker.node_id}: {key}={entries.get(key)}"
                time.sleep(0.1)
