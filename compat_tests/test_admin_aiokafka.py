"""aiokafka AIOKafkaAdminClient: describe/alter configs, create partitions, delete records (asyncio.run)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, RecordsToDelete  # noqa: E402
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # noqa: E402

from compat_tests.clients import kp_consume_all, run_async, wait_for_topic  # noqa: E402


async def _with_admin(bootstrap: str, work: Callable[[AIOKafkaAdminClient], Any]) -> Any:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        return await work(admin)
    finally:
        await admin.close()


def _configs(response: Any) -> dict[str, dict[str, Any]]:
    """{resource name: {config name: (value, read_only, source)}} from DescribeConfigs answers."""
    result: dict[str, dict[str, Any]] = {}
    for answer in response:
        for error_code, _message, _rtype, name, entries in answer.resources:
            assert error_code == 0, (name, error_code)
            result[name] = {entry[0]: entry[1:] for entry in entries}
    return result


def test_describe_and_alter_configs(bootstrap: str, make_topic: Callable[..., str]) -> None:
    name = make_topic(1, {"retention.ms": "300000"})

    async def work(admin: AIOKafkaAdminClient) -> tuple[Any, Any, Any]:
        before = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name)], include_synonyms=True
        )
        altered = await admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC, name, {"retention.ms": "600000", "segment.bytes": "2097152"}
                )
            ]
        )
        # on a cluster the broker that answers may learn of the change moments later (ZooKeeper-mode
        # Kafka propagates topic configs the same way): ask until it shows or the time is up
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            after = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
            if _configs(after)[name]["retention.ms"][0] == "600000":
                break
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.2)
        return before, altered, after

    before, altered, after = run_async(_with_admin(bootstrap, work))
    entry = _configs(before)[name]["retention.ms"]
    value, read_only, source = entry[0], entry[1], entry[2]
    assert (value, read_only, source) == ("300000", False, 1)  # DYNAMIC_TOPIC_CONFIG
    assert [r[0] for a in altered for r in a.resources] == [0]
    configs = _configs(after)[name]
    assert configs["retention.ms"][0] == "600000"
    assert configs["segment.bytes"][0] == "2097152"


def test_create_partitions(bootstrap: str, make_topic: Callable[..., str]) -> None:
    name = make_topic(1)

    async def work(admin: AIOKafkaAdminClient) -> Any:
        return await admin.create_partitions({name: NewPartitions(3)})

    response = run_async(_with_admin(bootstrap, work))
    assert [result[1] for result in response.topic_errors] == [0]
    wait_for_topic(bootstrap, name, 3)


def test_delete_records_then_consume(bootstrap: str, make_topic: Callable[..., str]) -> None:
    name = make_topic(1)

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")  # committed: HW at the end
        await producer.start()
        try:
            for i in range(6):
                await producer.send_and_wait(name, b"v%d" % i, partition=0)
        finally:
            await producer.stop()

    run_async(produce())

    async def work(admin: AIOKafkaAdminClient) -> Any:
        return await admin.delete_records({TopicPartition(name, 0): RecordsToDelete(before_offset=4)})

    assert run_async(_with_admin(bootstrap, work)) == {TopicPartition(name, 0): 4}
    assert [r.value for r in kp_consume_all(bootstrap, name, 0, 2)] == [b"v4", b"v5"]
