"""ListTransactions (key 66), versions 0-1.

Behaviour: every transactional id this coordinator owns (all of them on one node) with its producer id
and state name (Kafka's: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort,
Dead, PrepareEpochFence), filtered by states, producer ids and (v1, KIP-994) a minimum running time
of the transaction; state filters that name no state come back in `unknown_state_filters`. While the
coordinator loads `__transaction_state`, the error is COORDINATOR_LOAD_IN_PROGRESS.
With an authorizer, only the transactional ids the principal may DESCRIBE are listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.txn_runtime import runtime_of
from kafkacompat.wire._generated.list_transactions_response import ListTransactionsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.list_transactions_request import ListTransactionsRequest

API_KEY = ApiKey.LIST_TRANSACTIONS
MIN_VERSION = 0
MAX_VERSION = 1

State = ListTransactionsResponse.TransactionState


async def handle(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    runtime = runtime_of(ctx.broker)
    if runtime is None:
        return ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not runtime.loaded.is_set():
        return ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    duration = request.duration_filter if ctx.api_version >= 1 else -1
    try:
        unknown, listed = await runtime.call(
            lambda now: runtime.core.list_transactions(
                list(request.state_filters or ()), list(request.producer_id_filters or ()), duration, now
            ),
            may_write=False,
        )
    except KafkaError as exc:
        return ListTransactionsResponse(error_code=exc.code)
    return ListTransactionsResponse(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        unknown_state_filters=unknown,
        transaction_states=[
            State(transactional_id=tid, producer_id=pid, transaction_state=state)
            for tid, pid, state in listed
            if allowed(ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, tid)
        ],
    )
