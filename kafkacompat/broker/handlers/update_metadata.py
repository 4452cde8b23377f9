"""UpdateMetadata (key 6), versions 0-8, cluster mode only.

Behaviour: the controller sends every broker the live brokers (id, endpoints, rack) and the partition
states (leader, leader epoch, ISR, replicas, offline replicas) that Metadata, DescribeCluster and the
produce/fetch "current leader" hints answer from. CLUSTER_AUTHORIZATION_FAILED without CLUSTER_ACTION
(when an authorizer is set), STALE_BROKER_EPOCH / STALE_CONTROLLER_EPOCH as for LeaderAndIsr; a
partition state older than the one this broker holds (leader epoch, then zk version) is ignored, so a
late request never undoes a newer one. Single node: not served (see dispatch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.partition_state import LeaderAndIsr
from kafkacompat.wire._generated.update_metadata_response import UpdateMetadataResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.update_metadata_request import UpdateMetadataRequest

API_KEY = ApiKey.UPDATE_METADATA
MIN_VERSION = 0
MAX_VERSION = 8
CLUSTER_ONLY = True

#: Kafka's SecurityProtocol ids
PROTOCOL_NAMES = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


def _brokers(request: UpdateMetadataRequest, version: int) -> dict[int, zd.BrokerRegistration]:
    brokers: dict[int, zd.BrokerRegistration] = {}
    for broker in request.live_brokers:
        endpoints: dict[str, tuple[str, int]] = {}
        protocols: dict[str, str] = {}
        if version == 0:
            endpoints["PLAINTEXT"] = (broker.v0_host, broker.v0_port)
            protocols["PLAINTEXT"] = "PLAINTEXT"
        for endpoint in broker.endpoints:
            protocol = PROTOCOL_NAMES.get(endpoint.security_protocol, "PLAINTEXT")
            name = (endpoint.listener if version >= 3 else "") or protocol
            endpoints[name.upper()] = (endpoint.host, endpoint.port)
            protocols[name.upper()] = protocol
        brokers[broker.id] = zd.BrokerRegistration(broker.id, endpoints, protocols, broker.rack or None)
    return brokers


def _partitions(request: UpdateMetadataRequest, version: int) -> list[tuple[str, Any, Any]]:
    if version < 5:
        return [(p.topic_name, None, p) for p in request.ungrouped_partition_states]
    return [
        (t.topic_name, t.topic_id if version >= 7 else None, p)
        for t in request.topic_states
        for p in t.partition_states
    ]


async def handle(ctx: RequestContext, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
    if not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        return UpdateMetadataResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        cluster = ctx.broker.require_cluster()
    except KafkaError as exc:
        return UpdateMetadataResponse(error_code=exc.code)
    error = cluster.check_controller_request(request.controller_epoch, request.broker_epoch)
    if error != ErrorCode.NONE:
        return UpdateMetadataResponse(error_code=error)
    states = [
        (
            topic,
            p.partition_index,
            LeaderAndIsr(p.leader, p.leader_epoch, tuple(p.isr), p.controller_epoch, p.zk_version),
            tuple(p.replicas),
        )
        for topic, _, p in _partitions(request, ctx.api_version)
    ]
    cluster.apply_update_metadata(request.controller_id, _brokers(request, ctx.api_version), states)
    return UpdateMetadataResponse(error_code=ErrorCode.NONE)
