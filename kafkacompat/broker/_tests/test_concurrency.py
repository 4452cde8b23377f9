"""Many connections at once: concurrent producers and parked fetchers on shared partitions."""

from __future__ import annotations

from pathlib import Path

import trio

from kafkacompat.broker._tests.wire_client import (
    RawClient,
    batch,
    create,
    fetch_request,
    produce,
    start_broker,
)
from kafkacompat.wire.records import iter_batches, iter_records

PRODUCERS, BATCHES, PARTITIONS = 12, 25, 3


async def test_concurrent_producers_and_fetchers(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    admin = await RawClient.connect(broker.port)
    await create(admin, "busy", partitions=PARTITIONS)
    offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    fetched: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    total_per_partition = PRODUCERS * BATCHES // PARTITIONS

    async def producer(number: int) -> None:
        client = await RawClient.connect(broker.port)
        for i in range(BATCHES):
            partition = (number + i) % PARTITIONS
            answer = await produce(client, "busy", batch(f"{number}-{i}".encode()), partition=partition)
            assert answer.error_code == 0
            offsets[partition].append(answer.base_offset)

    async def fetcher(partition: int) -> None:
        client = await RawClient.connect(broker.port)
        position = 0
        while position < total_per_partition:
            request = fetch_request("busy", position, partitions=(partition,), max_wait_ms=5000, min_bytes=1)
            answer = await client.call(1, 12, request)
            data = answer.responses[0].partitions[0]
            assert data.error_code == 0
            for record_batch in iter_batches(memoryview(bytes(data.records))):
                for record in iter_records(record_batch):
                    if record.offset >= position:
                        fetched[partition].append(bytes(record.value))
                        position = record.offset + 1

    with trio.fail_after(60):
        async with trio.open_nursery() as workers:
            for partition in range(PARTITIONS):
                workers.start_soon(fetcher, partition)
            for number in range(PRODUCERS):
                workers.start_soon(producer, number)
    for partition in range(PARTITIONS):
        assert sorted(offsets[partition]) == list(range(total_per_partition))
        assert len(fetched[partition]) == total_per_partition
    everything = sorted(value for values in fetched.values() for value in values)
    assert everything == sorted(f"{n}-{i}".encode() for n in range(PRODUCERS) for i in range(BATCHES))
