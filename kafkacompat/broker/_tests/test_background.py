"""The server's background tasks: retention with delayed deletes, flush policy, checkpoint files."""

from __future__ import annotations

import time
from pathlib import Path

import trio

from kafkacompat.broker._tests.wire_client import RawClient, batch, create, produce, request, start_broker

LIST_OFFSETS = 2


async def earliest(client: RawClient, topic: str) -> int:
    partition = request(LIST_OFFSETS).ListOffsetsPartition(partition_index=0, timestamp=-2)
    body = request(
        LIST_OFFSETS,
        replica_id=-1,
        topics=[request(LIST_OFFSETS).ListOffsetsTopic(name=topic, partitions=[partition])],
    )
    return (await client.call(LIST_OFFSETS, 7, body)).topics[0].partitions[0].offset


async def test_retention_deletes_old_segments(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(
        nursery,
        tmp_path,
        "log.segment.bytes=300",
        "log.retention.ms=60000",
        "log.retention.check.interval.ms=50",
        "log.segment.delete.delay.ms=100",
    )
    client = await RawClient.connect(broker.port)
    await create(client, "old")
    long_ago = int(time.time() * 1000) - 3_600_000
    for i in range(6):
        answer = await produce(client, "old", batch(b"x" * 150, timestamp=long_ago + i))
        assert answer.error_code == 0
    fresh = await produce(client, "old", batch(b"fresh"))
    assert fresh.base_offset == 6
    with trio.fail_after(10):
        while await earliest(client, "old") < 5:  # the last old batch shares a segment with "fresh"
            await trio.sleep(0.05)
        while any(p.name.endswith(".deleted") for p in (tmp_path / "old-0").iterdir()):
            await trio.sleep(0.05)
    assert not (tmp_path / "old-0" / "00000000000000000000.log").exists()


async def test_flush_policy_and_checkpoints(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(
        nursery,
        tmp_path,
        "log.flush.interval.messages=1",
        "log.flush.offset.checkpoint.interval.ms=50",
        "log.flush.start.offset.checkpoint.interval.ms=50",
    )
    client = await RawClient.connect(broker.port)
    await create(client, "durable")
    await produce(client, "durable", batch(b"a", b"b", b"c"))
    log = broker.state.partition_log("durable", 0)
    assert log.recovery_point == 3  # fsynced before the produce was answered
    checkpoint = tmp_path / "recovery-point-offset-checkpoint"
    with trio.fail_after(10):
        while "durable 0 3" not in (checkpoint.read_text() if checkpoint.exists() else ""):
            await trio.sleep(0.05)
