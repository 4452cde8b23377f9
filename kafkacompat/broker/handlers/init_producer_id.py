"""InitProducerId (key 22), versions 0-5.

Behaviour: non-transactional producers (null transactional id) get a fresh producer id with epoch 0.
Ids come from blocks reserved in the persisted metadata before use, so an id is never handed out twice,
also across restarts and crashes. As in Kafka, a non-transactional request always gets a new id, even
when a v3+ request passes its current id and epoch. A transactional id goes to the transaction
coordinator (kafkacompat/txn): the first call gets a new producer id at epoch 0, later calls bump the
epoch (fencing the older producer; a fresh id once the epoch is exhausted), an ongoing transaction is
aborted first (CONCURRENT_TRANSACTIONS, the client retries), v3+ callers may pass their id and epoch to
recover (KIP-360; a mismatch is PRODUCER_FENCED, INVALID_PRODUCER_EPOCH before v4). A timeout outside
(0, transaction.max.timeout.ms] is INVALID_TRANSACTION_TIMEOUT; an empty id is INVALID_REQUEST.
With an authorizer: WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an
idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (else
CLUSTER_AUTHORIZATION_FAILED), as Kafka since KIP-679.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed, any_topic_allowed, cluster_allowed
from kafkacompat.broker.txn_runtime import runtime_of, version_error
from kafkacompat.wire._generated.init_producer_id_response import InitProducerIdResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.init_producer_id_request import InitProducerIdRequest

API_KEY = ApiKey.INIT_PRODUCER_ID
MIN_VERSION = 0
MAX_VERSION = 5

NO_PRODUCER_ID = -1
PRODUCER_FENCED_SINCE = 4


def _error(code: int) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_id=NO_PRODUCER_ID, producer_epoch=-1)


async def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    transactional_id = request.transactional_id
    if transactional_id is not None and not allowed(
        ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, transactional_id
    ):
        return InitProducerIdResponse(
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=NO_PRODUCER_ID,
            producer_epoch=-1,
        )
    if transactional_id is None and not (
        cluster_allowed(ctx, Op.IDEMPOTENT_WRITE) or any_topic_allowed(ctx, Op.WRITE)
    ):
        return InitProducerIdResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=NO_PRODUCER_ID, producer_epoch=-1
        )
    tid = request.transactional_id
    if tid is None:
        producer_id = await ctx.broker.next_producer_id()
        return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)
    runtime = runtime_of(ctx.broker)
    if runtime is None:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    expected_pid = request.producer_id if ctx.api_version >= 3 else NO_PRODUCER_ID
    expected_epoch = request.producer_epoch if ctx.api_version >= 3 else -1
    try:
        allocate = await runtime.producer_id_allocator()
        result = await runtime.call(
            lambda now: runtime.core.init_producer_id(
                tid, request.transaction_timeout_ms, expected_pid, expected_epoch, now, allocate
            ),
            key=tid,
        )
    except KafkaError as exc:
        return _error(exc.code)
    if result.error != ErrorCode.NONE:
        return _error(version_error(result.error, ctx.api_version, PRODUCER_FENCED_SINCE))
    return InitProducerIdResponse(
        error_code=ErrorCode.NONE, producer_id=result.producer_id, producer_epoch=result.producer_epoch
    )
