"""LeaderAndIsr (key 4), versions 0-7, cluster mode only.

Behaviour: the controller tells a replica its partitions' leader, leader epoch, ISR and replicas. As a
Kafka 3.9 broker in ZooKeeper mode: without CLUSTER_ACTION on the cluster (when an authorizer is set)
the answer is CLUSTER_AUTHORIZATION_FAILED; a broker epoch older than this broker's registration is
STALE_BROKER_EPOCH; a controller epoch older than the newest seen is STALE_CONTROLLER_EPOCH (every
partition carries the top-level error too). Per partition a newer leader epoch is applied (this broker
becomes leader, or follower fetching from the leader after truncating to the leader's epoch boundary);
an older one is STALE_CONTROLLER_EPOCH, the same one FENCED_LEADER_EPOCH, and a partition this broker is
not a replica of UNKNOWN_TOPIC_OR_PARTITION. Single node: not served (see dispatch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.replication.partition_state import LeaderAndIsr
from kafkacompat.wire._generated.leader_and_isr_response import LeaderAndIsrResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.leader_and_isr_request import LeaderAndIsrRequest

API_KEY = ApiKey.LEADER_AND_ISR
MIN_VERSION = 0
MAX_VERSION = 7
CLUSTER_ONLY = True

PartitionError = LeaderAndIsrResponse.LeaderAndIsrPartitionError


def _entries(request: LeaderAndIsrRequest, version: int) -> list[tuple[str, Any, Any]]:
    """(topic name, topic id or None, partition state) for every partition of the request."""
    if version < 2:
        return [(p.topic_name, None, p) for p in request.ungrouped_partition_states]
    return [
        (t.topic_name, t.topic_id if version >= 5 else None, p)
        for t in request.topic_states
        for p in t.partition_states
    ]


def _response(
    version: int, error: ErrorCode, results: list[tuple[str, Any, int, int]]
) -> LeaderAndIsrResponse:
    if version < 5:
        return LeaderAndIsrResponse(
            error_code=error,
            partition_errors=[
                PartitionError(topic_name=t, partition_index=p, error_code=e) for t, _, p, e in results
            ],
        )
    by_id: dict[Any, list[Any]] = {}
    for _, topic_id, partition, code in results:
        by_id.setdefault(topic_id, []).append(PartitionError(partition_index=partition, error_code=code))
    return LeaderAndIsrResponse(
        error_code=error,
        topics=[
            LeaderAndIsrResponse.LeaderAndIsrTopicError(topic_id=topic_id, partition_errors=errors)
            for topic_id, errors in by_id.items()
        ],
    )


async def handle(ctx: RequestContext, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    version = ctx.api_version
    entries = _entries(request, version)

    def refuse(error: ErrorCode) -> LeaderAndIsrResponse:
        return _response(version, error, [(t, i, s.partition_index, error) for t, i, s in entries])

    if not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        return refuse(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        cluster = ctx.broker.require_cluster()
    except KafkaError as exc:
        return refuse(exc.code)
    error = cluster.check_controller_request(request.controller_epoch, request.broker_epoch)
    if error != ErrorCode.NONE:
        return refuse(error)
    states = [
        (
            topic,
            topic_id,
            s.partition_index,
            LeaderAndIsr(s.leader, s.leader_epoch, tuple(s.isr), s.controller_epoch, s.partition_epoch),
            tuple(s.replicas),
        )
        for topic, topic_id, s in entries
    ]
    outcome = await cluster.apply_leader_and_isr(request.controller_id, request.controller_epoch, states)
    return _response(
        version,
        ErrorCode.NONE,
        [(t, i, p, outcome.get((t, p), ErrorCode.NONE)) for t, i, p, _, _ in states],
    )
