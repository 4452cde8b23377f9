"""CreatePartitions, DeleteRecords, OffsetForLeaderEpoch and DescribeProducers on a real BrokerState."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from kafkacompat.broker._tests.test_admin_harness import AdminHarness
from kafkacompat.broker.handlers import (
    create_partitions,
    create_topics,
    delete_records,
    describe_producers,
    offset_for_leader_epoch,
)
from kafkacompat.wire._generated.create_partitions_request import (
    CreatePartitionsAssignment,
    CreatePartitionsTopic,
)
from kafkacompat.wire._generated.create_topics_request import CreatableTopic
from kafkacompat.wire._generated.delete_records_request import DeleteRecordsPartition, DeleteRecordsTopic
from kafkacompat.wire._generated.describe_producers_request import TopicRequest
from kafkacompat.wire._generated.offset_for_leader_epoch_request import (
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kafkacompat.wire.errors import ErrorCode


@pytest.fixture
def harness(tmp_path: Path):
    h = AdminHarness(tmp_path / "data")
    yield h
    h.close()


async def create(h: AdminHarness, name: str, partitions: int = 1) -> None:
    topic = CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)
    response = await h.call(create_topics, 7, topics=[topic], timeout_ms=1000, validate_only=False)
    assert response.topics[0].error_code == ErrorCode.NONE


async def grow(h: AdminHarness, version: int, *topics, validate_only=False) -> list:
    response = await h.call(
        create_partitions, version, topics=list(topics), timeout_ms=1000, validate_only=validate_only
    )
    return [(r.name, r.error_code) for r in response.results]


@pytest.mark.parametrize("version", range(0, 4))
async def test_create_partitions_grows_and_persists(harness: AdminHarness, version: int) -> None:
    await create(harness, "t", 2)
    assert await grow(harness, version, CreatePartitionsTopic(name="t", count=5, assignments=None)) == [
        ("t", 0)
    ]
    assert harness.state.metadata.topic("t").partitions == 5
    for index in range(5):
        assert harness.state.partition_log("t", index) is not None
    assert os.path.isdir(harness.data_dir / "t-4")
    state = harness.reopen()
    assert state.metadata.topic("t").partitions == 5
    assert state.partition_log("t", 4) is not None


async def test_create_partitions_errors(harness: AdminHarness) -> None:
    await create(harness, "t", 3)
    node = harness.state.node_id

    def topic(count: int, *assignments: list[int], name: str = "t") -> CreatePartitionsTopic:
        given = [CreatePartitionsAssignment(broker_ids=a) for a in assignments] if assignments else None
        return CreatePartitionsTopic(name=name, count=count, assignments=given)

    assert await grow(harness, 3, topic(2)) == [("t", ErrorCode.INVALID_PARTITIONS)]
    assert await grow(harness, 3, topic(3)) == [("t", ErrorCode.INVALID_PARTITIONS)]
    assert await grow(harness, 3, topic(4, name="gone")) == [("gone", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert await grow(harness, 3, topic(4), topic(5)) == [("t", ErrorCode.INVALID_REQUEST)] * 2
    bad = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert await grow(harness, 3, topic(5, [node])) == [("t", bad)]  # two new partitions, one assignment
    assert await grow(harness, 3, topic(4, [node + 1])) == [("t", bad)]
    assert await grow(harness, 3, topic(4, [node, node])) == [("t", bad)]
    assert await grow(harness, 3, topic(4, [])) == [("t", bad)]
    assert await grow(harness, 3, topic(2**31 - 1)) == [("t", ErrorCode.POLICY_VIOLATION)]
    assert await grow(harness, 3, topic(6), validate_only=True) == [("t", ErrorCode.NONE)]
    assert harness.state.metadata.topic("t").partitions == 3
    assert harness.state.partition_log("t", 3) is None
    assert await grow(harness, 3, topic(5, [node], [node])) == [("t", ErrorCode.NONE)]
    assert harness.state.metadata.topic("t").partitions == 5


async def delete(h: AdminHarness, version: int, name: str, *offsets: tuple[int, int]) -> list:
    topic = DeleteRecordsTopic(
        name=name, partitions=[DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets]
    )
    response = await h.call(delete_records, version, topics=[topic], timeout_ms=1000)
    return [(r.partition_index, r.low_watermark, r.error_code) for r in response.topics[0].partitions]


@pytest.mark.parametrize("version", range(0, 3))
async def test_delete_records_moves_the_log_start(harness: AdminHarness, version: int) -> None:
    await create(harness, "t", 2)
    harness.append("t", 0, 10)
    harness.append("t", 1, 4)
    assert await delete(harness, version, "t", (0, 6), (1, -1)) == [(0, 6, 0), (1, 4, 0)]
    assert harness.state.partition_log("t", 0).log_start_offset == 6
    assert await delete(harness, version, "t", (0, 3)) == [(0, 6, 0)]  # never moves back
    assert await delete(harness, version, "t", (0, 11), (1, -2)) == [
        (0, -1, ErrorCode.OFFSET_OUT_OF_RANGE),
        (1, -1, ErrorCode.OFFSET_OUT_OF_RANGE),
    ]
    assert await delete(harness, version, "t", (2, 0)) == [(2, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert await delete(harness, version, "gone", (0, 0)) == [(0, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    state = harness.reopen()
    assert state.partition_log("t", 0).log_start_offset == 6
    assert state.partition_log("t", 1).log_start_offset == 4


async def test_delete_records_refuses_internal_topics(harness: AdminHarness) -> None:
    await harness.state.auto_create_topic("__consumer_offsets")
    result = await delete(harness, 2, "__consumer_offsets", (0, 0))
    assert result == [(0, -1, ErrorCode.INVALID_TOPIC_EXCEPTION)]


async def epochs(h: AdminHarness, version: int, name: str, *asks: tuple[int, int, int]) -> list:
    topic = OffsetForLeaderTopic(
        topic=name,
        partitions=[
            OffsetForLeaderPartition(partition=p, current_leader_epoch=current, leader_epoch=epoch)
            for p, current, epoch in asks
        ],
    )
    response = await h.call(offset_for_leader_epoch, version, replica_id=-1, topics=[topic])
    return [(r.partition, r.error_code, r.leader_epoch, r.end_offset) for r in response.topics[0].partitions]


@pytest.mark.parametrize("version", range(0, 5))
async def test_offset_for_leader_epoch_single_epoch(harness: AdminHarness, version: int) -> None:
    await create(harness, "t", 2)
    harness.append("t", 0, 5)
    # epoch 0 is the current one: the log end, also on the empty partition
    answers = await epochs(harness, version, "t", (0, -1, 0), (1, -1, 0), (0, -1, 3), (7, -1, 0))
    expected = [(0, 0, 0, 5), (1, 0, 0, 0), (0, 0, -1, -1), (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    if version == 0:  # no epoch in v0 answers
        expected = [(p, e, -1, o) for p, e, _, o in expected]
    assert answers == expected
    if version >= 2:
        assert await epochs(harness, version, "t", (0, 1, 0)) == [(0, ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1)]


async def test_offset_for_leader_epoch_history(
    harness: AdminHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await create(harness, "t")
    harness.append("t", 0, 3, partition_leader_epoch=0, leader_epoch=0)
    harness.append("t", 0, 4, leader_epoch=2)
    harness.append("t", 0, 2, leader_epoch=5)
    monkeypatch.setattr(harness.state, "leader_epoch", lambda topic, partition: 5)
    answers = await epochs(harness, 4, "t", (0, 5, 0), (0, 5, 1), (0, 5, 2), (0, -1, 5), (0, -1, 6))
    assert answers == [(0, 0, 0, 3), (0, 0, 0, 3), (0, 0, 2, 7), (0, 0, 5, 9), (0, 0, -1, -1)]
    assert await epochs(harness, 4, "t", (0, 4, 2)) == [(0, ErrorCode.FENCED_LEADER_EPOCH, -1, -1)]
    assert await epochs(harness, 4, "t", (0, 6, 2)) == [(0, ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1)]


async def test_describe_producers(harness: AdminHarness) -> None:
    await create(harness, "t", 2)
    harness.append(
        "t", 0, 3, producer_id=4000, producer_epoch=2, base_sequence=0, base_timestamp=1_700_000_000_000
    )
    harness.append(
        "t", 0, 2, producer_id=4000, producer_epoch=2, base_sequence=3, base_timestamp=1_700_000_000_500
    )
    harness.append("t", 0, 1)
    request = [
        TopicRequest(name="t", partition_indexes=[0, 1, 2]),
        TopicRequest(name="gone", partition_indexes=[0]),
    ]
    response = await harness.call(describe_producers, 0, topics=request)
    first, second = response.topics
    p0, p1, p2 = first.partitions
    assert p0.error_code == 0
    assert [
        (s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp, s.current_txn_start_offset)
        for s in p0.active_producers
    ] == [(4000, 2, 4, 1_700_000_000_500, -1)]
    assert (p1.error_code, p1.active_producers) == (0, [])
    assert p2.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert second.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_partition_files_are_made_off_the_event_loop(
    harness: AdminHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CreateTopics and CreatePartitions make each new log's files in a worker thread (about 2 ms of
    system calls per partition, which held every other client on the loop), in chunks."""
    import threading

    from kafkacompat.broker.state import LOG_CREATION_CHUNK

    logs = harness.state.logs
    real_build = logs.build_log
    threads: list[int] = []

    def build_log(plan, now_ms):
        threads.append(threading.get_ident())
        return real_build(plan, now_ms)

    monkeypatch.setattr(logs, "build_log", build_log)
    count = LOG_CREATION_CHUNK + 3
    await create(harness, "t", count)
    assert await grow(harness, 3, CreatePartitionsTopic(name="t", count=count + 2, assignments=None)) == [
        ("t", ErrorCode.NONE)
    ]
    assert len(threads) == count + 2
    assert threading.get_ident() not in threads
    assert all(harness.state.logs.get_log("t", index) is not None for index in range(count + 2))


async def test_failed_growth_keeps_created_files_for_the_delete_delay(
    harness: AdminHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition created and rolled back by a failed CreatePartitions keeps its files open for
    file.delete.delay.ms, as any deleted log does (a fetch may hold a slice of it)."""
    from kafkacompat.broker import admin_support
    from kafkacompat.wire.errors import KafkaError

    await create(harness, "t", 1)
    logs = harness.state.logs
    real_build = logs.build_log

    def build_log(plan, now_ms):
        if plan.tp == ("t", 2):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_build(plan, now_ms)

    monkeypatch.setattr(logs, "build_log", build_log)
    delay = logs.get_log("t", 0).config.file_delete_delay_ms
    now = harness.state.now_ms()
    with pytest.raises(KafkaError) as raised:
        await admin_support.add_partitions(harness.state, "t", 3)
    assert raised.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert ("t", 1) not in logs.logs and ("t", 2) not in logs.logs
    [doomed] = [p for p in os.listdir(harness.data_dir) if p.startswith("t-1.") and p.endswith("-delete")]
    assert delay > 0
    assert logs.run_pending_deletes(now + delay - 1000) == 0
    assert os.path.isdir(harness.data_dir / doomed)
    assert logs.run_pending_deletes(now + delay + 60_000) >= 1
    assert not os.path.exists(harness.data_dir / doomed)


async def test_create_partitions_keeps_the_per_topic_limit(harness: AdminHarness) -> None:
    """A topic cannot grow past MAX_PARTITIONS_PER_TOPIC, which CreateTopics enforces too: requests each
    within the per-request budget must not add up to a bigger topic."""
    from kafkacompat.broker.state import MAX_PARTITIONS_PER_TOPIC

    await create(harness, "t", 2)
    limit = MAX_PARTITIONS_PER_TOPIC
    over = CreatePartitionsTopic(name="t", count=limit + 1, assignments=None)
    assert await grow(harness, 3, over) == [("t", ErrorCode.INVALID_PARTITIONS)]
    assert await grow(harness, 3, over, validate_only=True) == [("t", ErrorCode.INVALID_PARTITIONS)]
    at_limit = CreatePartitionsTopic(name="t", count=limit, assignments=None)
    assert await grow(harness, 3, at_limit, validate_only=True) == [("t", ErrorCode.NONE)]
    assert harness.state.metadata.topic("t").partitions == 2
