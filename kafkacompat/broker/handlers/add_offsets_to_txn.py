"""AddOffsetsToTxn (key 25), versions 0-4.

Behaviour: adds the `__consumer_offsets` partition of the group to the caller's transaction, so that
the transaction's markers settle the offsets a later TxnOffsetCommit stages there. Errors as for
AddPartitionsToTxn (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED / INVALID_PRODUCER_EPOCH before v2,
CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS); an empty group id is INVALID_GROUP_ID.
With an authorizer: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the
group (GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.group_runtime import OFFSETS_TOPIC
from kafkacompat.broker.group_runtime import runtime_of as groups_of
from kafkacompat.broker.txn_runtime import runtime_of, version_error
from kafkacompat.wire._generated.add_offsets_to_txn_response import AddOffsetsToTxnResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.add_offsets_to_txn_request import AddOffsetsToTxnRequest

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
MIN_VERSION = 0
MAX_VERSION = 4

PRODUCER_FENCED_SINCE = 2


async def handle(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id):
        return AddOffsetsToTxnResponse(
            throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    runtime = runtime_of(ctx.broker)
    groups = groups_of(ctx.broker)
    if runtime is None or groups is None:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not request.group_id:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_GROUP_ID)
    try:
        await groups.ensure_offsets_topic()
        partition = groups.core.partition_for(request.group_id)
        code = await runtime.call(
            lambda now: runtime.core.add_partitions(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                [(OFFSETS_TOPIC, partition)],
                now,
            ),
            key=request.transactional_id,
        )
    except KafkaError as exc:
        code = exc.code
    return AddOffsetsToTxnResponse(
        throttle_time_ms=0, error_code=version_error(code, ctx.api_version, PRODUCER_FENCED_SINCE)
    )
