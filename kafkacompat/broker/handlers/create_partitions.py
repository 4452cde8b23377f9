"""CreatePartitions (key 37), versions 0-3.

Behaviour: grows a topic to `count` partitions. A count that is not an increase gets
INVALID_PARTITIONS; a missing topic UNKNOWN_TOPIC_OR_PARTITION; a topic named twice INVALID_REQUEST for
every copy. Explicit assignments must give one replica list per new partition, and on this single
node each list must be exactly [this node] (the replication factor of every existing partition is 1):
anything else — wrong number of lists, an empty list, another broker, a broker twice, more replicas —
gets INVALID_REPLICA_ASSIGNMENT. New partition logs are created and the topic table persisted before
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


def check_assignments(broker: BrokerState, current: int, count: int, assignments: list[Any] | None) -> None:
    """Raise KafkaError(INVALID_REPLICA_ASSIGNMENT) unless `assignments` fit this single node."""
    if assignments is None or count <= current:
        return
    additional = count - current
    if len(assignments) != additional:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Adding {additional} partition(s) needs {additional} assignment(s), but {len(assignments)} "
            "were given.",
        )
    node = broker.node_id
    for assignment in assignments:
        replicas = list(assignment.broker_ids)
        if not replicas:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "An assignment has an empty replica list.")
        for replica in replicas:
            if replica != node:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The assignment names broker {replica}, but the only registered broker is {node}.",
                )
        if len(replicas) != 1:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The assignment {replicas} names broker {node} more than once; partitions of this "
                "single-node cluster have one replica.",
            )


async def handle(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    broker = ctx.broker
    counts = Counter(topic.name for topic in request.topics)
    budget = MAX_NEW_PARTITIONS_PER_REQUEST
    results = []
    turn = Turn()  # many topics: other clients run in between (fairness.py)
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
            check_assignments(broker, topic.partitions, wanted.count, wanted.assignments)
            await add_partitions(broker, wanted.name, wanted.count, validate_only=bool(request.validate_only))
            if not request.validate_only:
                budget -= additional
        except KafkaError as exc:
            result.error_code = exc.code
            result.error_message = exc.message
    return CreatePartitionsResponse(results=results)
