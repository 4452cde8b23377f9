"""FindCoordinator (key 10), versions 0-6.

Behaviour: a single node coordinates every group, so a group key (key type 0) is answered with this
broker at the advertised endpoint of the listener the request came in on. The first group lookup
creates the compacted __consumer_offsets topic, as Kafka creates it on first use; if that fails the
answer is COORDINATOR_NOT_AVAILABLE. Transaction keys (key type 1) are answered the same way by the
transaction coordinator, whose first lookup creates `__transaction_state`. In cluster mode the answer
is the leader of the key's `__consumer_offsets` / `__transaction_state` partition (COORDINATOR_NOT_AVAILABLE
while it has none). Any other key type is INVALID_REQUEST. v0-3 carry one key; v4+ a batch of
keys answered one coordinator entry each.
With an authorizer: GROUP_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED without DESCRIBE on the key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.group_runtime import runtime_of
from kafkacompat.broker.txn_runtime import runtime_of as txn_runtime_of
from kafkacompat.wire._generated.find_coordinator_response import FindCoordinatorResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.find_coordinator_request import FindCoordinatorRequest

API_KEY = ApiKey.FIND_COORDINATOR
MIN_VERSION = 0
MAX_VERSION = 6

GROUP_KEY = 0
TRANSACTION_KEY = 1

Coordinator = FindCoordinatorResponse.Coordinator


async def _lookup(ctx: RequestContext, key: str, key_type: int) -> tuple[int, str | None, int, str, int]:
    """(error, message, node id, host, port) for one key."""
    # authorization first, as Kafka: DESCRIBE on the group or on the transactional id
    if key_type == GROUP_KEY and not allowed(ctx, Op.DESCRIBE, Resource.GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", -1, "", -1
    if key_type == TRANSACTION_KEY and not allowed(ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, key):
        message = "Transactional Id authorization failed."
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, message, -1, "", -1
    if key_type == TRANSACTION_KEY:
        transactions = txn_runtime_of(ctx.broker)
        if transactions is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "no transaction coordinator", -1, "", -1
        try:
            await transactions.ensure_topic()
        except KafkaError as exc:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, exc.message, -1, "", -1
        # the coordinator is the leader of the transactional id's __transaction_state partition
        return _leader_entry(ctx, transactions.coordinator_of(key), "the transaction state partition")
    if key_type != GROUP_KEY:
        return ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}", -1, "", -1
    runtime = runtime_of(ctx.broker)
    if runtime is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running", -1, "", -1
    try:
        await runtime.ensure_offsets_topic()
    except KafkaError as exc:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, exc.message, -1, "", -1
    # the coordinator is the leader of the group's __consumer_offsets partition
    leader = ctx.broker.replicas.leader_of("__consumer_offsets", runtime.core.partition_for(key))
    return _leader_entry(ctx, leader, "the offsets partition")


def _leader_entry(ctx: RequestContext, leader: int, what: str) -> tuple[int, str | None, int, str, int]:
    """The coordinator's endpoint on the request's listener (on a single node, this node)."""
    for node, host, port, _rack in ctx.broker.replicas.broker_endpoints(ctx.connection.listener_name):
        if node == leader:
            return ErrorCode.NONE, None, node, host, port
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{what} has no leader", -1, "", -1


async def handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    version = ctx.api_version
    key_type = request.key_type if version >= 1 else GROUP_KEY
    if version >= 4:
        coordinators = []
        turn = Turn()  # many keys: other clients run in between (fairness.py)
        for key in request.coordinator_keys:
            await turn.spend()
            error, message, node, host, port = await _lookup(ctx, key, key_type)
            coordinators.append(
                Coordinator(
                    key=key, node_id=node, host=host, port=port, error_code=error, error_message=message
                )
            )
        return FindCoordinatorResponse(coordinators=coordinators)
    error, message, node, host, port = await _lookup(ctx, request.key, key_type)
    return FindCoordinatorResponse(
        error_code=error,
        error_message=message if version >= 1 else "",
        node_id=node,
        host=host,
        port=port,
    )
