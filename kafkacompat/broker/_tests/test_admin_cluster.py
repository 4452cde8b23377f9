"""DescribeCluster, DescribeLogDirs, DescribeTopicPartitions and the advertised admin version ranges."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkacompat.broker import dispatch
from kafkacompat.broker._tests.test_admin_harness import CLUSTER_ID, AdminHarness
from kafkacompat.broker.handlers import (
    create_topics,
    describe_cluster,
    describe_log_dirs,
    describe_topic_partitions,
)
from kafkacompat.wire._generated.create_topics_request import CreatableTopic
from kafkacompat.wire._generated.describe_log_dirs_request import DescribableLogDirTopic
from kafkacompat.wire._generated.describe_topic_partitions_request import Cursor, TopicRequest
from kafkacompat.wire.errors import ErrorCode

# (api key, min, max) that Kafka 3.9 brokers advertise for the admin APIs
KAFKA_39_RANGES = {
    37: (0, 3),  # CreatePartitions
    21: (0, 2),  # DeleteRecords
    32: (0, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    44: (0, 1),  # IncrementalAlterConfigs
    60: (0, 1),  # DescribeCluster
    35: (0, 4),  # DescribeLogDirs
    75: (0, 0),  # DescribeTopicPartitions
    61: (0, 0),  # DescribeProducers
    23: (0, 4),  # OffsetForLeaderEpoch
}


@pytest.fixture
def harness(tmp_path: Path):
    h = AdminHarness(tmp_path / "data", ("broker.rack=r1",))
    yield h
    h.close()


async def create(h: AdminHarness, name: str, partitions: int = 1) -> None:
    topic = CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)
    response = await h.call(create_topics, 7, topics=[topic], timeout_ms=1000, validate_only=False)
    assert response.topics[0].error_code == ErrorCode.NONE


def test_admin_apis_are_advertised_with_kafka_ranges() -> None:
    served = {key: (low, high) for key, low, high in dispatch.supported_versions()}
    for key, expected in KAFKA_39_RANGES.items():
        assert served.get(key) == expected, key
        assert dispatch.lookup(key, expected[1]) is not None


@pytest.mark.parametrize("version", [0, 1])
async def test_describe_cluster(harness: AdminHarness, version: int) -> None:
    response = await harness.call(describe_cluster, version, include_cluster_authorized_operations=False)
    assert (response.error_code, response.cluster_id, response.controller_id) == (0, CLUSTER_ID, 1)
    assert [(b.broker_id, b.host, b.port, b.rack) for b in response.brokers] == [
        (1, "127.0.0.1", 19092, "r1")
    ]
    assert response.cluster_authorized_operations == -2147483648
    asked = await harness.call(describe_cluster, version, include_cluster_authorized_operations=True)
    ops = asked.cluster_authorized_operations
    for code in (
        5,
        7,
        8,
        9,
        10,
        11,
        12,
    ):  # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE/ALTER_CONFIGS IDEMPOTENT_WRITE
        assert ops & (1 << code)
    assert not ops & (1 << 3)  # READ is not a cluster operation


async def test_describe_cluster_controller_endpoints_refused(harness: AdminHarness) -> None:
    response = await harness.call(
        describe_cluster, 1, include_cluster_authorized_operations=False, endpoint_type=2
    )
    assert response.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
    assert response.brokers == []


@pytest.mark.parametrize("version", range(0, 5))
async def test_describe_log_dirs(harness: AdminHarness, version: int) -> None:
    await create(harness, "a", 2)
    await create(harness, "b", 1)
    harness.append("a", 1, 10)
    everything = await harness.call(describe_log_dirs, version, topics=None)
    [result] = everything.results
    assert result.error_code == 0
    assert result.log_dir == str(harness.data_dir)
    sizes = {
        (t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
        for t in result.topics
        for p in t.partitions
    }
    assert sizes == {
        ("a", 0): (0, 0, False),
        ("a", 1): (harness.state.partition_log("a", 1).size_in_bytes, 0, False),
        ("b", 0): (0, 0, False),
    }
    assert sizes[("a", 1)][0] > 0
    if version >= 4:
        assert result.total_bytes >= result.usable_bytes > 0
    else:
        assert result.total_bytes == -1
    some = await harness.call(
        describe_log_dirs,
        version,
        topics=[
            DescribableLogDirTopic(topic="a", partitions=[1, 7]),
            DescribableLogDirTopic(topic="zz", partitions=[0]),
        ],
    )
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in some.results[0].topics] == [
        ("a", [1])
    ]


async def walk(h: AdminHarness, names: list[str], limit: int) -> list:
    """All pages of DescribeTopicPartitions: [(topics with partition lists, next cursor)]."""
    pages = []
    cursor = None
    while True:
        response = await h.call(
            describe_topic_partitions,
            0,
            topics=[TopicRequest(name=n) for n in names],
            response_partition_limit=limit,
            cursor=cursor,
        )
        page = [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in response.topics]
        nxt = response.next_cursor
        pages.append((page, None if nxt is None else (nxt.topic_name, nxt.partition_index)))
        if nxt is None:
            return pages
        cursor = Cursor(topic_name=nxt.topic_name, partition_index=nxt.partition_index)
        assert len(pages) < 20


async def test_describe_topic_partitions_pages(harness: AdminHarness) -> None:
    await create(harness, "b", 2)
    await create(harness, "a", 3)
    await create(harness, "c", 1)
    pages = await walk(harness, [], 2)
    assert pages == [
        ([("a", 0, [0, 1])], ("a", 2)),
        ([("a", 0, [2]), ("b", 0, [0])], ("b", 1)),
        ([("b", 0, [1]), ("c", 0, [0])], None),
    ]
    assert await walk(harness, [], 3) == [
        ([("a", 0, [0, 1, 2])], ("b", 0)),
        ([("b", 0, [0, 1]), ("c", 0, [0])], None),
    ]
    assert await walk(harness, ["c", "zz", "a"], 100) == [
        ([("a", 0, [0, 1, 2]), ("c", 0, [0]), ("zz", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])], None)
    ]


async def test_describe_topic_partitions_details_and_bad_cursor(harness: AdminHarness) -> None:
    await create(harness, "a", 1)
    response = await harness.call(
        describe_topic_partitions,
        0,
        topics=[TopicRequest(name="a")],
        response_partition_limit=2000,
        cursor=None,
    )
    [topic] = response.topics
    assert topic.topic_id == harness.state.metadata.topic("a").topic_id
    assert topic.is_internal is False
    [partition] = topic.partitions
    assert (partition.leader_id, partition.replica_nodes, partition.isr_nodes) == (1, [1], [1])
    for cursor in (Cursor(topic_name="a", partition_index=-1), Cursor(topic_name="b", partition_index=0)):
        bad = await harness.call(
            describe_topic_partitions,
            0,
            topics=[TopicRequest(name="a")],
            response_partition_limit=10,
            cursor=cursor,
        )
        assert [(t.name, t.error_code) for t in bad.topics] == [("a", ErrorCode.INVALID_REQUEST)]


async def test_describe_log_dirs_with_two_dirs(tmp_path: Path) -> None:
    first, second = tmp_path / "d1", tmp_path / "d2"
    h = AdminHarness(first, (f"log.dirs={first},{second}",))
    try:
        await create(h, "spread", 4)
        response = await h.call(describe_log_dirs, 4, topics=None)
        placed = {
            result.log_dir: sorted(p.partition_index for t in result.topics for p in t.partitions)
            for result in response.results
        }
        assert set(placed) == {str(first), str(second)}
        assert sorted(placed[str(first)] + placed[str(second)]) == [0, 1, 2, 3]
        assert len(placed[str(first)]) == len(placed[str(second)]) == 2  # new logs go to the emptier dir
        for index in range(4):
            directory = h.state.partition_log("spread", index).directory
            assert index in placed[str(Path(directory).parent)]
    finally:
        h.close()
