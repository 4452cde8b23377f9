"""ControlledShutdown (key 7), versions 0-3.

Behaviour: a broker about to stop asks the controller to move its partition leaderships away first.
Cluster mode (on the controller): each partition the broker leads gets a new leader from the rest of its
ISR (leader epoch + 1), the broker leaves the ISR of the partitions it follows, and the answer lists the
partitions it still leads because no other replica could take over (the broker asks again after
controlled.shutdown.retry.backoff.ms). Partitions with one replica stay, as in Kafka. Any other broker
answers NOT_CONTROLLER; an unknown broker id is BROKER_NOT_AVAILABLE. Single node: the broker is its own
controller and every partition has one replica, so there is nothing to move: NONE with no remaining
partitions for this broker's id, BROKER_NOT_AVAILABLE for any other. With an authorizer, needs
CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED), as Kafka's broker-to-broker APIs do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.wire._generated.controlled_shutdown_response import ControlledShutdownResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.controlled_shutdown_request import ControlledShutdownRequest

API_KEY = ApiKey.CONTROLLED_SHUTDOWN
MIN_VERSION = 0
MAX_VERSION = 3

Remaining = ControlledShutdownResponse.RemainingPartition


async def handle(ctx: RequestContext, request: ControlledShutdownRequest) -> ControlledShutdownResponse:
    broker = ctx.broker
    if not cluster_allowed(ctx, Op.CLUSTER_ACTION):  # a broker-to-broker API, as in Kafka
        return ControlledShutdownResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, remaining_partitions=[]
        )
    try:
        remaining = await broker.replicas.controlled_shutdown_as_controller(request.broker_id)
    except KafkaError as exc:
        return ControlledShutdownResponse(error_code=exc.code, remaining_partitions=[])
    return ControlledShutdownResponse(
        error_code=ErrorCode.NONE,
        remaining_partitions=[Remaining(topic_name=t, partition_index=p) for t, p in remaining],
    )
