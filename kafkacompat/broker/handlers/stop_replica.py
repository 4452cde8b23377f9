"""StopReplica (key 5), versions 0-4, cluster mode only.

Behaviour: the controller tells a replica to stop fetching a partition and, with the delete flag (topic
deletion, a replica reassigned away), to delete it: the log is renamed for deletion and removed after
file.delete.delay.ms, as Kafka does. CLUSTER_AUTHORIZATION_FAILED without CLUSTER_ACTION (when an
authorizer is set), STALE_BROKER_EPOCH / STALE_CONTROLLER_EPOCH as for LeaderAndIsr (every partition
carries the top-level error). Per partition (v3+ carries leader epochs): -2 (deletion) and -1 (none
given) are always accepted, a newer epoch is accepted, an older one is STALE_CONTROLLER_EPOCH and the
same one FENCED_LEADER_EPOCH. A partition this broker does not host is answered NONE. Single node: not
served (see dispatch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.replication.broker_requests import NO_EPOCH
from kafkacompat.wire._generated.stop_replica_response import StopReplicaResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.stop_replica_request import StopReplicaRequest

API_KEY = ApiKey.STOP_REPLICA
MIN_VERSION = 0
MAX_VERSION = 4
CLUSTER_ONLY = True

PartitionError = StopReplicaResponse.StopReplicaPartitionError


def _entries(request: StopReplicaRequest, version: int) -> list[tuple[str, int, int, bool]]:
    """(topic, partition, leader epoch, delete) for every partition of the request."""
    if version == 0:
        return [
            (p.topic_name, p.partition_index, NO_EPOCH, request.delete_partitions)
            for p in request.ungrouped_partitions
        ]
    if version <= 2:
        return [
            (t.name, index, NO_EPOCH, request.delete_partitions)
            for t in request.topics
            for index in t.partition_indexes
        ]
    return [
        (t.topic_name, p.partition_index, p.leader_epoch, p.delete_partition)
        for t in request.topic_states
        for p in t.partition_states
    ]


async def handle(ctx: RequestContext, request: StopReplicaRequest) -> StopReplicaResponse:
    entries = _entries(request, ctx.api_version)

    def refuse(error: ErrorCode) -> StopReplicaResponse:
        return StopReplicaResponse(
            error_code=error,
            partition_errors=[
                PartitionError(topic_name=t, partition_index=p, error_code=error) for t, p, _, _ in entries
            ],
        )

    if not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        return refuse(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        cluster = ctx.broker.require_cluster()
    except KafkaError as exc:
        return refuse(exc.code)
    error = cluster.check_controller_request(request.controller_epoch, request.broker_epoch)
    if error != ErrorCode.NONE:
        return refuse(error)
    outcome = cluster.apply_stop_replica(entries)
    return StopReplicaResponse(
        error_code=ErrorCode.NONE,
        partition_errors=[
            PartitionError(topic_name=t, partition_index=p, error_code=outcome.get((t, p), ErrorCode.NONE))
            for t, p, _, _ in entries
        ],
    )
