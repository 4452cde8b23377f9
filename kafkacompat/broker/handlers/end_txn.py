"""EndTxn (key 26), versions 0-4.

Behaviour: commits or aborts the caller's ongoing transaction. The transaction coordinator records
PrepareCommit/PrepareAbort in `__transaction_state` (replicated to the ISR in cluster mode) and
answers, as Kafka does; its marker task then writes a COMMIT/ABORT marker into every partition of the
transaction (the offsets staged by TxnOffsetCommit become visible with a commit) and records
CompleteCommit/CompleteAbort. Until then the producer's next InitProducerId/AddPartitionsToTxn gets
CONCURRENT_TRANSACTIONS (clients retry). Repeating the same end after it completed is NONE (a
retry); the other end, or ending with no transaction, is INVALID_TXN_STATE; the same end while its
markers are pending is CONCURRENT_TRANSACTIONS; a stale epoch is PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
before v2); unknown ids INVALID_PRODUCER_ID_MAPPING. v5 (KIP-890 part 2, epoch bump per transaction)
is not served, as in Kafka 3.9.
With an authorizer, needs WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.txn_runtime import runtime_of, version_error
from kafkacompat.wire._generated.end_txn_response import EndTxnResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.end_txn_request import EndTxnRequest

API_KEY = ApiKey.END_TXN
MIN_VERSION = 0
MAX_VERSION = 4

PRODUCER_FENCED_SINCE = 2


async def handle(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    if not allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id):
        return EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    runtime = runtime_of(ctx.broker)
    if runtime is None:
        return EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    try:
        code = await runtime.call(
            lambda now: runtime.core.end_txn(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                bool(request.committed),
                now,
            ),
            key=request.transactional_id,
        )
    except KafkaError as exc:
        code = exc.code
    return EndTxnResponse(
        throttle_time_ms=0, error_code=version_error(code, ctx.api_version, PRODUCER_FENCED_SINCE)
    )
