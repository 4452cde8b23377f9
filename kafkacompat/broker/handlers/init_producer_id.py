"""InitProducerId (key 22), versions 0-5.

Behaviour: non-transactional producers (null transactional id) get a fresh producer id with epoch 0.
Ids come from blocks reserved in the persisted metadata before use, so an id is never handed out twice,
also across restarts and crashes. As in Kafka, a non-transactional request always gets a new id, even
when a v3+ request passes its current id and epoch. Transactional ids are not supported yet (no
transaction coordinator): they are answered with COORDINATOR_NOT_AVAILABLE, which clients retry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.wire._generated.init_producer_id_response import InitProducerIdResponse
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.dispatch import RequestContext

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5

NO_PRODUCER_ID = -1


async def handle(ctx: RequestContext, request: Any) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        return InitProducerIdResponse(
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=NO_PRODUCER_ID, producer_epoch=-1
        )
    producer_id = await ctx.broker.next_producer_id()
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)
