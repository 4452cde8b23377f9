"""Internal topics are decided by name, as Kafka decides them, whoever created the topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkacompat.broker._tests.test_admin_harness import AdminHarness
from kafkacompat.broker.handlers import create_topics, describe_topic_partitions, metadata, produce
from kafkacompat.wire._generated.create_topics_request import CreatableTopic
from kafkacompat.wire._generated.describe_topic_partitions_request import TopicRequest
from kafkacompat.wire._generated.metadata_request import MetadataRequestTopic
from kafkacompat.wire._generated.produce_request import PartitionProduceData, TopicProduceData
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.records import build_batch


@pytest.fixture
def harness(tmp_path: Path):
    h = AdminHarness(tmp_path / "data")
    yield h
    h.close()


async def create(h: AdminHarness, name: str) -> tuple[int, str | None]:
    topic = CreatableTopic(name=name, num_partitions=2, replication_factor=1)
    response = await h.call(create_topics, 7, topics=[topic], timeout_ms=1000, validate_only=False)
    return response.topics[0].error_code, response.topics[0].error_message


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state"])
async def test_user_created_internal_topic_is_internal(harness: AdminHarness, name: str) -> None:
    assert (await create(harness, name))[0] == ErrorCode.NONE  # Kafka lets an admin pre-create them
    assert (await create(harness, "plain"))[0] == ErrorCode.NONE
    answer = await harness.call(
        metadata,
        12,
        topics=[MetadataRequestTopic(name=name), MetadataRequestTopic(name="plain")],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    assert {t.name: (t.error_code, t.is_internal) for t in answer.topics} == {
        name: (ErrorCode.NONE, True),
        "plain": (ErrorCode.NONE, False),
    }
    described = await harness.call(
        describe_topic_partitions,
        0,
        topics=[TopicRequest(name=name), TopicRequest(name="plain")],
        response_partition_limit=100,
        cursor=None,
    )
    assert {t.name: t.is_internal for t in described.topics} == {name: True, "plain": False}
    records = build_batch([(None, b"v")], base_timestamp=harness.state.now_ms())
    produced = await harness.call(
        produce,
        9,
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(name=t, partition_data=[PartitionProduceData(index=0, records=records)])
            for t in (name, "plain")
        ],
    )
    codes = {t.name: t.partition_responses[0].error_code for t in produced.responses}
    assert codes == {name: ErrorCode.INVALID_TOPIC_EXCEPTION, "plain": ErrorCode.NONE}


async def test_cluster_metadata_topic_cannot_be_created(harness: AdminHarness) -> None:
    assert await create(harness, "__cluster_metadata") == (
        ErrorCode.INVALID_REQUEST,
        "Creation of internal topic __cluster_metadata is prohibited.",
    )
    assert "__cluster_metadata" not in harness.state.metadata
