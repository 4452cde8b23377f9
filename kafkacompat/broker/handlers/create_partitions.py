"""CreatePartitions (key 37), versions 0-3.

Behaviour: grows a topic to `count` partitions. A count that is not an increase gets
INVALID_PARTITIONS; a missing topic UNKNOWN_TOPIC_OR_PARTITION; a topic named twice INVALID_REQUEST for
every copy. Explicit assignments must give one replica list per new partition, each naming distinct
live brokers (the partition seam's `check_replica_assignment`: on a single node exactly [this node], in
cluster mode the cluster's registered brokers, read afresh as Kafka's controller reads them), as many
as the topic's replication factor (that of its partition 0): anything else — wrong number of lists, an
empty list, an unknown broker, a broker twice, another replication factor — gets
INVALID_REPLICA_ASSIGNMENT. New partition logs are created and the topic table persisted before
the answer. `validate_only` runs every check and changes nothing. More than 10000 new partitions in one
request -> POLICY_VIOLATION (Kafka's controller refuses such "excessively large" operations too).
Error messages go in every version.
With an authorizer, adding partitions needs ALTER on the topic (else TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kafkacompat.broker.admin_support import add_partitions, require_topic
from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.wire._generated.create_partitions_response import CreatePartitionsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.wire._generated.create_partitions_request import CreatePartitionsRequest

API_KEY = ApiKey.CREATE_PARTITIONS
MIN_VERSION = 0
MAX_VERSION = 3

# Kafka's controller refuses a single operation that would write more than this many records; the cap
# also bounds the files one request can make this broker create.
MAX_NEW_PARTITIONS_PER_REQUEST = 10_000

Result = CreatePartitionsResponse.CreatePartitionsTopicResult


def check_assignments(
    broker: BrokerState, topic: str, current: int, count: int, assignments: list[Any] | None
) -> dict[int, list[int]] | None:
    """The new partitions' explicit replica lists (partition -> brokers), None when none were given.
    Raises KafkaError(INVALID_REPLICA_ASSIGNMENT) unless they fit the live brokers and the topic's
    replication factor."""
    if assignments is None or count <= current:
        return None
    additional = count - current
    if len(assignments) != additional:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Adding {additional} partition(s) needs {additional} assignment(s), but {len(assignments)} "
            "were given.",
        )
    if any(not assignment.broker_ids for assignment in assignments):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "An assignment has an empty replica list.")
    # distinct live brokers, all lists of one length (on a single node: this node alone)
    checked = broker.replicas.check_replica_assignment(
        [(current + index, list(assignment.broker_ids)) for index, assignment in enumerate(assignments)]
    )
    factor = len(broker.replicas.partition_metadata(topic, 0).replicas) if current > 0 else 0
    given = len(checked[current])
    if factor and given != factor:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Inconsistent replication factor between partitions, partition 0 has {factor} while "
            f"partitions {sorted(checked)} have replication factor {given}.",
        )
    return checked


async def handle(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    broker = ctx.broker
    counts = Counter(topic.name for topic in request.topics)
    budget = MAX_NEW_PARTITIONS_PER_REQUEST
    results = []
    turn = Turn()  # many topics: other clients run in between (fairness.py)
    if any(wanted.assignments for wanted in request.topics):
        # explicit replica lists name live brokers: read them now, as Kafka's controller does
        await broker.replicas.refresh_live_brokers()
    for wanted in request.topics:
        await turn.spend()
        result = Result(name=wanted.name, error_code=ErrorCode.NONE, error_message=None)
        results.append(result)
        try:
            if counts[wanted.name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic in the request.")
            if not allowed(ctx, Op.ALTER, Resource.TOPIC, wanted.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            topic = require_topic(broker, wanted.name)
            additional = wanted.count - topic.partitions
            if additional > budget:
                raise KafkaError(
                    ErrorCode.POLICY_VIOLATION,
                    f"Unable to add {additional} partitions: at most {MAX_NEW_PARTITIONS_PER_REQUEST} new "
                    "partitions per request.",
                )
            assignment = check_assignments(
                broker, wanted.name, topic.partitions, wanted.count, wanted.assignments
            )
            await add_partitions(
                broker,
                wanted.name,
                wanted.count,
                validate_only=bool(request.validate_only),
                assignment=assignment,
            )
            if not request.validate_only:
                budget -= additional
        except KafkaError as exc:
            result.error_code = exc.code
            result.error_message = exc.message
    return CreatePartitionsResponse(results=results)
