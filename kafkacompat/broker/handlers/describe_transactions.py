"""DescribeTransactions (key 65), version 0.

Behaviour: for each transactional id: its state name, timeout, start time of the ongoing transaction
(-1 when none), producer id and epoch, and the partitions of the transaction. Unknown ids get
TRANSACTIONAL_ID_NOT_FOUND; ids in a partition still loading COORDINATOR_LOAD_IN_PROGRESS.
With an authorizer, ids the principal may not DESCRIBE get TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.txn_runtime import runtime_of
from kafkacompat.wire._generated.describe_transactions_response import DescribeTransactionsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.describe_transactions_request import DescribeTransactionsRequest

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
MIN_VERSION = 0
MAX_VERSION = 0

State = DescribeTransactionsResponse.TransactionState
TopicData = DescribeTransactionsResponse.TopicData


#: ids described per turn of the transaction coordinator (a chunk is about 0.2 ms of its work)
_IDS_PER_TURN = 128


async def handle(ctx: RequestContext, request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    requested = list(request.transactional_ids)
    refused = {tid for tid in requested if not allowed(ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, tid)}
    ids = [tid for tid in requested if tid not in refused]
    states = [
        State(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=tid, topics=[])
        for tid in requested
        if tid in refused
    ]
    runtime = runtime_of(ctx.broker)
    # in chunks, the loop given back between them once the share is used (fairness.py): 1,000 ids
    # described and answered in one step held every other client for 5-7 ms beside the fuzzer
    turn = Turn()
    for start in range(0, len(ids), _IDS_PER_TURN):
        await turn.spend()
        chunk = ids[start : start + _IDS_PER_TURN]
        try:
            if runtime is None:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            # ignore[misc]: mypy cannot type a lambda with a default beyond its context
            described = await runtime.call(
                lambda now, chunk=chunk: runtime.core.describe_transactions(chunk), may_write=False  # type: ignore[misc]
            )
        except KafkaError as exc:
            states += [State(error_code=exc.code, transactional_id=tid, topics=[]) for tid in chunk]
            continue
        for d in described:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in d.partitions:
                by_topic.setdefault(topic, []).append(partition)
            states.append(
                State(
                    error_code=d.error,
                    transactional_id=d.transactional_id,
                    transaction_state=d.state,
                    transaction_timeout_ms=d.timeout_ms,
                    transaction_start_time_ms=d.start_ms,
                    producer_id=d.producer_id,
                    producer_epoch=d.producer_epoch,
                    topics=[TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()],
                )
            )
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)
