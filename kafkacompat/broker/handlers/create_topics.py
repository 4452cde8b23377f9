"""CreateTopics (key 19), versions 0-7.

Behaviour: each topic is checked as Kafka's controller checks it, in this order: a name given twice in
one request -> INVALID_REQUEST for every copy; `__cluster_metadata` (KRaft's metadata log) -> INVALID_REQUEST,
as Kafka 3.9's controller answers (`__consumer_offsets` and `__transaction_state` may be created, and are
internal by name however they were made); illegal name -> INVALID_TOPIC_EXCEPTION; existing ->
TOPIC_ALREADY_EXISTS; explicit assignments together with a partition count or replication factor ->
INVALID_REQUEST; partition count 0 or below -1 -> INVALID_PARTITIONS; replication factor 0 or below -1
-> INVALID_REPLICATION_FACTOR, above 1 -> INVALID_REPLICATION_FACTOR (one broker); an assignment naming
another broker or more than one replica -> INVALID_REPLICA_ASSIGNMENT; bad or unknown configs ->
INVALID_CONFIG. A request whose topics add up to more than 10,000 partitions -> POLICY_VIOLATION for
every topic ("Excessively large number of partitions per request.", Kafka 3.9's controller limit, so a
CreateTopics with 100,000 partitions never starts making directories). -1 means the broker default
(`num.partitions`, `default.replication.factor`).
`validate_only` (v1+) runs every check and creates nothing. v5+ answers carry the partition count,
replication factor and the topic's full config list with sources; v7 the topic id (zero when only
validated). In cluster mode the checked topics of a request are written together and the answer
waits, bounded by `timeout_ms`, until every live broker knows them (REQUEST_TIMED_OUT for those it does
not yet: `replication/cluster/topic_admin.py`).
With an authorizer, creating needs CREATE on the cluster or the topic (else TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kafkacompat.broker.admin_support import topic_config_entries
from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.state import CLUSTER_METADATA_TOPIC
from kafkacompat.wire._generated.create_topics_response import CreateTopicsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.primitives import ZERO_UUID

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.replication.cluster.topic_admin import TopicCreations
    from kafkacompat.wire._generated.create_topics_request import CreateTopicsRequest

API_KEY = ApiKey.CREATE_TOPICS
MIN_VERSION = 0
MAX_VERSION = 7

# Kafka's controller (KAFKA-17870) refuses a request that would create more partitions than this in all
MAX_PARTITIONS_PER_REQUEST = 10_000

Result = CreateTopicsResponse.CreatableTopicResult
ResultConfig = CreateTopicsResponse.CreatableTopicConfigs


def _requested_partitions(broker: BrokerState, topics: Any) -> int:
    """Partitions the whole request asks for (-1 counts as `num.partitions`), as Kafka's controller counts."""
    total = 0
    for wanted in topics:
        if wanted.assignments:
            total += len(wanted.assignments)
        elif wanted.num_partitions == -1:
            total += broker.config["num.partitions"]
        elif wanted.num_partitions > 0:
            total += wanted.num_partitions
    return total


async def handle(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    broker = ctx.broker
    version = ctx.api_version
    validate_only = bool(getattr(request, "validate_only", False)) and version >= 1
    counts = Counter(topic.name for topic in request.topics)
    # the live brokers bound the replication factor: read them now, as Kafka's controller does
    await broker.replicas.refresh_live_brokers()
    too_many = _requested_partitions(broker, request.topics) > MAX_PARTITIONS_PER_REQUEST
    results = []
    # cluster mode: the topics are written together once all are checked, and answered once every
    # live broker knows them
    batch = broker.cluster.topics.creations() if broker.cluster is not None and not validate_only else None
    turn = Turn()  # many topics: other clients run in between (fairness.py)
    for wanted in request.topics:
        await turn.spend()
        result = Result(name=wanted.name, error_code=ErrorCode.NONE)
        if too_many:
            result.error_code = ErrorCode.POLICY_VIOLATION
            result.error_message = "Excessively large number of partitions per request."
            result.num_partitions = result.replication_factor = -1
            result.configs = None if version >= 5 else []
            results.append(result)
            continue
        if counts[wanted.name] > 1:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = "Create topics request from client contains duplicate topic"
            results.append(result)
            continue
        try:
            # CREATE on the cluster or on the topic, as Kafka's checks (before anything else)
            if not (
                allowed(ctx, Op.CREATE, Resource.CLUSTER, Resource.CLUSTER_NAME)
                or allowed(ctx, Op.CREATE, Resource.TOPIC, wanted.name)
            ):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            await _create_one(broker, version, wanted, result, validate_only, batch)
        except KafkaError as exc:
            result.error_code = exc.code
            result.error_message = exc.message
            result.num_partitions = -1
            result.replication_factor = -1
            result.configs = None if version >= 5 else []
        results.append(result)
    if batch is not None:
        failed = await batch.commit(request.timeout_ms)
        for result in results:
            error = failed.get(result.name) if result.error_code == ErrorCode.NONE else None
            if error is not None:
                result.error_code = error.code
                result.error_message = error.message
                if error.code != ErrorCode.REQUEST_TIMED_OUT:  # a topic timed out is still created
                    result.topic_id = ZERO_UUID
                    result.num_partitions = result.replication_factor = -1
                    result.configs = None if version >= 5 else []
    return CreateTopicsResponse(topics=results)


async def _create_one(
    broker: BrokerState,
    version: int,
    wanted: Any,
    result: Any,
    validate_only: bool,
    batch: TopicCreations | None = None,
) -> None:
    from kafkacompat.replication.metadata import validate_topic_name

    name = wanted.name
    if name == CLUSTER_METADATA_TOPIC:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited."
        )
    validate_topic_name(name)
    if name in broker.metadata:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    partitions = wanted.num_partitions
    replication = wanted.replication_factor
    explicit: dict[int, list[int]] = {}
    if wanted.assignments:
        if partitions != -1 or replication != -1:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        indexes = sorted(a.partition_index for a in wanted.assignments)
        if indexes != list(range(len(indexes))):
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "Partitions should be a consecutive 0-based integer sequence",
            )
        # distinct live brokers, all lists of one length (on a single node: this node alone)
        explicit = broker.replicas.check_replica_assignment(
            [(a.partition_index, list(a.broker_ids)) for a in wanted.assignments]
        )
        partitions, replication = len(indexes), len(explicit[0])
    if partitions == -1:
        partitions = broker.config["num.partitions"]
    if replication == -1:
        replication = broker.config["default.replication.factor"]
    if partitions <= 0:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."
        )
    if replication <= 0:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    live = broker.live_broker_count()
    if replication > live:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication} time(s): The target replication factor of "
            f"{replication} cannot be reached because only {live} broker(s) are registered.",
        )
    overrides: dict[str, str] = {}
    for entry in wanted.configs:
        if entry.value is None:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {entry.name}"
            )
        overrides[entry.name] = entry.value
    topic = await broker.create_topic(
        name,
        partitions,
        overrides,
        validate_only=validate_only or batch is not None,  # a batch writes at its commit
        replication_factor=replication,
        assignment=explicit if wanted.assignments else None,
    )
    if batch is not None:
        topic = batch.add(name, partitions, overrides, replication, explicit if wanted.assignments else None)
    result.topic_id = topic.topic_id
    result.num_partitions = partitions
    result.replication_factor = replication
    if version >= 5:
        # values and sources exactly as DescribeConfigs reports them
        result.configs = [
            ResultConfig(
                name=entry.name,
                value=entry.value,
                read_only=entry.read_only,
                config_source=entry.source,
                is_sensitive=entry.sensitive,
            )
            for entry in topic_config_entries(broker, topic)
        ]
