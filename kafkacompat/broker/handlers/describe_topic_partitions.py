"""DescribeTopicPartitions (key 75), version 0.

Behaviour: the paged topic description the Java AdminClient tries before Metadata. Topics are answered
in name order: the requested ones, or every topic when the list is empty; a cursor starts the walk at
its topic (skipping names before it) and partition index. At most `response_partition_limit`
partitions (capped at 2000, Kafka's `max.request.partition.size.limit` default; at least 1) go in one
answer; when the limit cuts the walk, `next_cursor` names the first partition not sent (the next topic
at partition 0 when the cut falls at a topic boundary), else it is null. A requested topic that does
not exist gets UNKNOWN_TOPIC_OR_PARTITION (and uses none of the limit). A cursor with a negative
partition index, or naming a topic outside a non-empty request list, makes the request invalid: every
requested topic gets INVALID_REQUEST, as Kafka's error response does. Partitions are led by this node
with replicas = ISR = [this node], empty ELR lists; topic authorized operations are all topic
operations (no authorizer).
With an authorizer, topics the principal may not DESCRIBE are left out of an all-topics answer and get
TOPIC_AUTHORIZATION_FAILED when named; authorized operations are the principal's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.admin_support import ALL_TOPIC_OPERATIONS
from kafkacompat.broker.authorization import Op, Resource, allowed, authorized_operations
from kafkacompat.broker.state import is_internal_topic
from kafkacompat.wire._generated.describe_topic_partitions_response import DescribeTopicPartitionsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.primitives import ZERO_UUID

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.describe_topic_partitions_request import DescribeTopicPartitionsRequest

API_KEY = ApiKey.DESCRIBE_TOPIC_PARTITIONS
MIN_VERSION = 0
MAX_VERSION = 0

MAX_PARTITIONS_PER_RESPONSE = 2000

Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
Partition = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition
Cursor = DescribeTopicPartitionsResponse.Cursor


def _error_topic(name: str | None, code: int) -> Any:
    return Topic(
        error_code=code,
        name=name,
        topic_id=ZERO_UUID,
        is_internal=False,
        partitions=[],
        topic_authorized_operations=ALL_TOPIC_OPERATIONS,
    )


async def handle(
    ctx: RequestContext, request: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse:
    broker = ctx.broker
    requested = sorted({t.name for t in request.topics if t.name is not None})
    cursor = request.cursor
    if cursor is not None and (
        cursor.partition_index < 0 or (requested and cursor.topic_name not in requested)
    ):
        return DescribeTopicPartitionsResponse(
            topics=[_error_topic(t.name, ErrorCode.INVALID_REQUEST) for t in request.topics], next_cursor=None
        )
    names = requested if requested else [topic.name for topic in broker.metadata.topics()]
    if broker.authorizer is not None and not requested:
        names = [name for name in names if allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name)]
    if cursor is not None:
        names = [name for name in names if name >= cursor.topic_name]
    remaining = max(1, min(request.response_partition_limit, MAX_PARTITIONS_PER_RESPONSE))
    topics: list[Any] = []
    next_cursor = None
    for position, name in enumerate(names):
        if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
            topics.append(_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        topic = broker.metadata.topic(name)
        if topic is None:
            topics.append(_error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        if remaining == 0:
            next_cursor = Cursor(topic_name=name, partition_index=0)
            break
        first = (
            cursor.partition_index
            if cursor is not None and position == 0 and name == cursor.topic_name
            else 0
        )
        last = min(topic.partitions, first + remaining)
        partitions = []
        for index in range(first, last):
            leader, epoch, replicas, isr, offline = broker.replicas.partition_metadata(name, index)
            partitions.append(
                Partition(
                    error_code=ErrorCode.NONE,
                    partition_index=index,
                    leader_id=leader,
                    leader_epoch=epoch,
                    replica_nodes=replicas,
                    isr_nodes=isr,
                    eligible_leader_replicas=[],
                    last_known_elr=[],
                    offline_replicas=offline,
                )
            )
        remaining -= len(partitions)
        topics.append(
            Topic(
                error_code=ErrorCode.NONE,
                name=name,
                topic_id=topic.topic_id,
                is_internal=is_internal_topic(name),
                partitions=partitions,
                topic_authorized_operations=authorized_operations(ctx, Resource.TOPIC, name),
            )
        )
        if last < topic.partitions:
            next_cursor = Cursor(topic_name=name, partition_index=last)
            break
    return DescribeTopicPartitionsResponse(topics=topics, next_cursor=next_cursor)
