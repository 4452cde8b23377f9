"""AlterPartition (key 56), versions 0-3, cluster mode only (answered by the controller).

Behaviour: a partition leader proposes an ISR change (shrink after replica.lag.time.max.ms, expansion
when a follower caught up); the controller validates it and writes the partition state znode with a
compare-and-set on its version, then answers with the new state (leader, leader epoch, ISR, partition
epoch = the znode's new version) and sends UpdateMetadata to every live broker, as Kafka's ZooKeeper
controller does. Errors as Kafka's: CLUSTER_AUTHORIZATION_FAILED without CLUSTER_ACTION (when an
authorizer is set), NOT_CONTROLLER on any other broker, STALE_BROKER_EPOCH for a requester that is not
registered with that broker epoch (top level); per partition UNKNOWN_TOPIC_OR_PARTITION (v0-1) /
UNKNOWN_TOPIC_ID (v2+), FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, INELIGIBLE_REPLICA (a proposed ISR
member that is not live, is shutting down, or is registered with another broker epoch: v3 carries
them), NOT_CONTROLLER for a state newer than the controller's. Single node: not served (see dispatch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.replication.broker_requests import IsrProposal
from kafkacompat.wire._generated.alter_partition_response import AlterPartitionResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.alter_partition_request import AlterPartitionRequest

API_KEY = ApiKey.ALTER_PARTITION
MIN_VERSION = 0
MAX_VERSION = 3
CLUSTER_ONLY = True

TopicData = AlterPartitionResponse.TopicData
PartitionData = AlterPartitionResponse.PartitionData


async def handle(ctx: RequestContext, request: AlterPartitionRequest) -> AlterPartitionResponse:
    version = ctx.api_version
    if not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        return AlterPartitionResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, topics=[])
    try:
        cluster = ctx.broker.require_cluster()
    except KafkaError:
        return AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER, topics=[])
    if not cluster.is_controller:
        return AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER, topics=[])
    names = cluster.topic_names_by_id() if version >= 2 else {}
    proposals: dict[tuple[str, int], IsrProposal] = {}
    unknown: dict[Any, list[int]] = {}
    for topic in request.topics:
        name = names.get(topic.topic_id) if version >= 2 else topic.topic_name
        for p in topic.partitions:
            if name is None:
                unknown.setdefault(topic.topic_id, []).append(p.partition_index)
                continue
            if version >= 3:
                isr = tuple(b.broker_id for b in p.new_isr_with_epochs)
                epochs = {b.broker_id: b.broker_epoch for b in p.new_isr_with_epochs}
            else:
                isr, epochs = tuple(p.new_isr), {}
            proposals[(name, p.partition_index)] = IsrProposal(
                request.broker_id, p.leader_epoch, isr, epochs, p.partition_epoch
            )
    error, results = await cluster.alter_partition_as_controller(
        request.broker_id, request.broker_epoch, proposals
    )
    if error != ErrorCode.NONE:
        return AlterPartitionResponse(error_code=error, topics=[])
    by_topic: dict[str, list[Any]] = {}
    for (name, partition), (code, state) in results.items():
        if state is None:
            entry = PartitionData(partition_index=partition, error_code=code, leader_id=-1, leader_epoch=-1)
        else:
            entry = PartitionData(
                partition_index=partition,
                error_code=code,
                leader_id=state.leader,
                leader_epoch=state.leader_epoch,
                isr=list(state.isr),
                partition_epoch=state.zk_version,
            )
        by_topic.setdefault(name, []).append(entry)
    topics = [
        TopicData(topic_name=name, topic_id=cluster.topic_id(name), partitions=partitions)
        for name, partitions in by_topic.items()
    ]
    missing = ErrorCode.UNKNOWN_TOPIC_ID
    topics += [
        TopicData(
            topic_id=topic_id,
            partitions=[
                PartitionData(partition_index=p, error_code=missing, leader_id=-1, leader_epoch=-1)
                for p in partitions
            ],
        )
        for topic_id, partitions in unknown.items()
    ]
    return AlterPartitionResponse(error_code=ErrorCode.NONE, topics=topics)
