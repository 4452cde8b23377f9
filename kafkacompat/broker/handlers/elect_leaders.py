"""ElectLeaders (key 43), versions 0-2.

Behaviour: election type 0 (preferred, the only one before v1) moves a partition's leadership to its
preferred replica (the first in its assignment) when that replica is alive and in the ISR; type 1
(unclean) elects any live replica for a partition without a live leader. Per partition:
ELECTION_NOT_NEEDED when the leader already is the preferred replica (preferred) or is alive (unclean),
PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE when nobody can take over,
UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist. `topic_partitions` null means every
partition, and then, as Kafka answers, only partitions where something happened (elected or failed)
are listed. Single node: this broker leads every partition and is its only replica, so every election
is not needed. Cluster mode: the controller decides and writes the new states to ZooKeeper with its
epoch check; any other broker answers NOT_CONTROLLER (top-level from v1, per partition in v0), so the
client looks for the controller again. Any other election type is INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kafkacompat.wire._generated.elect_leaders_response import ElectLeadersResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.elect_leaders_request import ElectLeadersRequest

API_KEY = ApiKey.ELECT_LEADERS
MIN_VERSION = 0
MAX_VERSION = 2

PREFERRED = 0
UNCLEAN = 1

Result = ElectLeadersResponse.ReplicaElectionResult
PartitionResult = ElectLeadersResponse.PartitionResult


def _answer(
    results: Mapping[tuple[str, int], tuple[int, str | None]], error: int = ErrorCode.NONE
) -> ElectLeadersResponse:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (code, message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            PartitionResult(partition_id=partition, error_code=code, error_message=message)
        )
    return ElectLeadersResponse(
        error_code=error,
        replica_election_results=[Result(topic=t, partition_result=p) for t, p in by_topic.items()],
    )


async def handle(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    broker = ctx.broker
    election_type = request.election_type if ctx.api_version >= 1 else PREFERRED
    wanted = (
        None
        if request.topic_partitions is None
        else [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    )
    results: dict[tuple[str, int], tuple[ErrorCode, str | None]]
    if election_type not in (PREFERRED, UNCLEAN):
        results = {
            key: (ErrorCode.INVALID_REQUEST, f"unknown election type {election_type}") for key in wanted or []
        }
        return _answer(results, ErrorCode.INVALID_REQUEST if ctx.api_version >= 1 else ErrorCode.NONE)
    try:
        results = await broker.replicas.elect_leaders(wanted, election_type)
    except KafkaError as exc:
        if ctx.api_version >= 1:
            return _answer({}, exc.code)
        return _answer({key: (exc.code, exc.message) for key in wanted or []})
    if wanted is None:
        results = {k: v for k, v in results.items() if v[0] != ErrorCode.ELECTION_NOT_NEEDED}
    return _answer(results)
