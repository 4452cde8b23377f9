"""OffsetCommit (key 8), versions 0-9.

Behaviour: partitions of topics the cluster does not know, or beyond a topic's partition count, get
UNKNOWN_TOPIC_OR_PARTITION and are not stored; the rest go to the group coordinator core, which checks
membership (generation, member id, v7+ group instance id; a group without members accepts commits
with generation -1 from anyone, as "simple" consumers use it), metadata size
(OFFSET_METADATA_TOO_LARGE) and persists each offset to __consumer_offsets before answering. v1 carries
a per-partition commit timestamp, v2-4 a retention time; v6+ the committed leader epoch. v0 is served
like v1 without member fields (Kafka kept v0 offsets in ZooKeeper; here there is one store). Results
come back in request order.
With an authorizer: READ on the group (else GROUP_AUTHORIZATION_FAILED everywhere) and on each topic
(else TOPIC_AUTHORIZATION_FAILED for its partitions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.groups import api
from kafkacompat.groups.manager import prepare_offset_commit
from kafkacompat.wire._generated.offset_commit_response import OffsetCommitResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.offset_commit_request import OffsetCommitRequest

API_KEY = ApiKey.OFFSET_COMMIT
MIN_VERSION = 0
MAX_VERSION = 9

Topic = OffsetCommitResponse.OffsetCommitResponseTopic
Partition = OffsetCommitResponse.OffsetCommitResponsePartition


def partition_exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    info = ctx.broker.metadata.topic(topic)
    return info is not None and 0 <= partition < info.partitions


async def handle(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    version = ctx.api_version
    results: dict[tuple[str, int], int] = {}
    known: list[api.OffsetCommitPartition] = []
    group_allowed = allowed(ctx, Op.READ, Resource.GROUP, request.group_id)
    runtime = runtime_of(ctx.broker)
    retention_time_ms = request.retention_time_ms if 2 <= version <= 4 else -1
    # Each partition's offset and record are made here, outside the coordinator's lock and with the loop
    # given back between partitions (fairness.Turn); the core stores them together (one record batch).
    # The commit time is the request's, as Kafka's request handler takes it.
    now_ms = ctx.broker.now_ms()
    turn = Turn()
    for topic in request.topics:
        refused = (
            ErrorCode.GROUP_AUTHORIZATION_FAILED
            if not group_allowed
            else None
            if allowed(ctx, Op.READ, Resource.TOPIC, topic.name)
            else ErrorCode.TOPIC_AUTHORIZATION_FAILED
        )
        for p in topic.partitions:
            await turn.spend()
            if refused is not None:
                results[(topic.name, p.partition_index)] = refused
                continue
            if not partition_exists(ctx, topic.name, p.partition_index):
                results[(topic.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            partition = api.OffsetCommitPartition(
                topic=topic.name,
                partition=p.partition_index,
                offset=p.committed_offset,
                metadata=p.committed_metadata,
                leader_epoch=p.committed_leader_epoch if version >= 6 else -1,
                commit_timestamp=p.commit_timestamp if version == 1 else -1,
            )
            if runtime is not None:
                partition.prepared = prepare_offset_commit(
                    runtime.core.config, request.group_id, partition, retention_time_ms, now_ms
                )
            known.append(partition)
    if known:
        req = api.OffsetCommitRequest(
            group_id=request.group_id,
            partitions=known,
            generation_id=request.generation_id_or_member_epoch if version >= 1 else -1,
            member_id=request.member_id if version >= 1 else "",
            group_instance_id=request.group_instance_id if version >= 7 else None,
            retention_time_ms=retention_time_ms,
        )
        if runtime is None:
            outcome: list[Any] = [
                ((p.topic, p.partition), ErrorCode.COORDINATOR_NOT_AVAILABLE) for p in known
            ]
        else:
            try:
                outcome = await runtime.call(
                    lambda now: runtime.core.offset_commit(req, now), key=req.group_id
                )
            except KafkaError as exc:
                outcome = [((p.topic, p.partition), exc.code) for p in known]
        for tp, error in outcome:
            results[tp] = error
    topics = []
    for topic in request.topics:
        await turn.spend()
        topics.append(
            Topic(
                name=topic.name,
                partitions=[
                    Partition(
                        partition_index=p.partition_index,
                        error_code=results.get((topic.name, p.partition_index), ErrorCode.NONE),
                    )
                    for p in topic.partitions
                ],
            )
        )
    return OffsetCommitResponse(topics=topics)
