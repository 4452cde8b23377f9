"""Metadata (key 3), versions 0-12.

Behaviour: one broker (this node, at the advertised endpoint of the listener the request came in on),
which is also the controller; the cluster id from meta.properties. Every partition is led by this node
with replicas = ISR = [this node]. Topic ids from v10. Topic selection: v0 empty list or v1+ null =
all topics; v12 may name topics by id (unknown id -> UNKNOWN_TOPIC_ID); naming a topic by id before v12
or with a null name before v12 gets INVALID_REQUEST, as Kafka rejects it. An unknown topic is created
when `allow_auto_topic_creation` (always true before v4) and `auto.create.topics.enable` both hold, and
is reported once with LEADER_NOT_AVAILABLE, as Kafka does while creation is in flight; otherwise
UNKNOWN_TOPIC_OR_PARTITION. Illegal names get INVALID_TOPIC_EXCEPTION. With an authorizer, topics the
principal may not DESCRIBE are left out of an all-topics answer and get TOPIC_AUTHORIZATION_FAILED when
named, and auto-creation needs CREATE on the cluster or the topic (else TOPIC_AUTHORIZATION_FAILED), as
Kafka's; authorized operations (v8+) are filled in when asked for (all of them without an authorizer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, Resource, allowed, authorized_operations, cluster_allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.state import is_internal_topic
from kafkacompat.replication.metadata import validate_topic_name
from kafkacompat.wire._generated.metadata_response import MetadataResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.primitives import ZERO_UUID

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.replication.metadata import TopicInfo
    from kafkacompat.replication.replica_manager import BrokerEndpoint
    from kafkacompat.wire._generated.metadata_request import MetadataRequest

API_KEY = ApiKey.METADATA
MIN_VERSION = 0
MAX_VERSION = 12

Topic = MetadataResponse.MetadataResponseTopic
Partition = MetadataResponse.MetadataResponsePartition
Broker = MetadataResponse.MetadataResponseBroker


def describe_topic(broker: BrokerState, topic: TopicInfo) -> Any:
    """Leader, epoch, replicas, ISR and offline replicas as the replica manager knows them (this node
    alone on a single node); a partition without a live leader gets LEADER_NOT_AVAILABLE, as Kafka
    answers it."""
    partitions = []
    for index in range(topic.partitions):
        leader, epoch, replicas, isr, offline = broker.replicas.partition_metadata(topic.name, index)
        partitions.append(
            Partition(
                error_code=ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=index,
                leader_id=leader,
                leader_epoch=epoch,
                replica_nodes=replicas,
                isr_nodes=isr,
                offline_replicas=offline,
            )
        )
    return Topic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=is_internal_topic(topic.name),
        partitions=partitions,
    )


def brokers_for(broker: BrokerState, listener_name: str) -> tuple[list[BrokerEndpoint], int]:
    """([(node id, host, port, rack)], controller id) as clients of `listener_name` must see them: this
    node alone on a single node; every live broker with an endpoint on that listener in cluster mode."""
    return broker.replicas.broker_endpoints(listener_name), broker.replicas.controller_id()


async def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    version = ctx.api_version
    brokers, controller_id = brokers_for(broker, ctx.connection.listener_name)
    response = MetadataResponse(
        brokers=[Broker(node_id=n, host=h, port=p, rack=r) for n, h, p, r in brokers],
        cluster_id=broker.cluster_id,
        controller_id=controller_id,
        topics=[],
    )
    requested = request.topics
    if version >= 8 and getattr(request, "include_cluster_authorized_operations", False):
        response.cluster_authorized_operations = authorized_operations(
            ctx, Resource.CLUSTER, Resource.CLUSTER_NAME
        )
    if requested is None or (version == 0 and not requested):
        # topics the principal may not describe are left out, as Kafka does; thousands of topics or
        # partitions: other clients run in between (fairness.py)
        turn = Turn()
        for topic in list(broker.metadata.topics()):
            await turn.spend()
            if allowed(ctx, Op.DESCRIBE, Resource.TOPIC, topic.name):
                response.topics.append(describe_topic(broker, topic))
    else:
        auto_create = (version < 4 or request.allow_auto_topic_creation) and broker.config[
            "auto.create.topics.enable"
        ]
        seen: set[Any] = set()
        turn = Turn()
        for wanted in requested:
            await turn.spend()
            key = wanted.name if wanted.name is not None else wanted.topic_id
            if key in seen:
                continue
            seen.add(key)
            response.topics.append(await _one_topic(ctx, version, wanted, auto_create))
    if version >= 8 and request.include_topic_authorized_operations:
        for entry in response.topics:
            if entry.error_code == ErrorCode.NONE and entry.name is not None:
                entry.topic_authorized_operations = authorized_operations(ctx, Resource.TOPIC, entry.name)
    return response


async def _one_topic(ctx: RequestContext, version: int, wanted: Any, auto_create: bool) -> Any:
    broker = ctx.broker
    name = wanted.name
    topic_id = getattr(wanted, "topic_id", ZERO_UUID)
    if version < 12 and (name is None or topic_id != ZERO_UUID):
        return Topic(error_code=ErrorCode.INVALID_REQUEST, name=name or "", topic_id=topic_id)
    if name is None:
        topic = broker.metadata.topic_by_id(topic_id)
        if topic is None:
            return Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id)
        if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, topic.name):
            return Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None, topic_id=topic_id)
        return describe_topic(broker, topic)
    if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
        return Topic(
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, is_internal=is_internal_topic(name)
        )
    topic = broker.metadata.topic(name)
    if topic is not None:
        return describe_topic(broker, topic)
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return Topic(error_code=exc.code, name=name, is_internal=False)
    if not auto_create:
        return Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name)
    if not (cluster_allowed(ctx, Op.CREATE) or allowed(ctx, Op.CREATE, Resource.TOPIC, name)):
        return Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name)
    try:
        await broker.auto_create_topic(name)
    except KafkaError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            return Topic(error_code=exc.code, name=name)
    return Topic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name, is_internal=is_internal_topic(name))
