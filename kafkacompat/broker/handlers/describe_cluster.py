"""DescribeCluster (key 60), versions 0-1.

Behaviour: the cluster id, this node as the controller and as the only broker (advertised host and port
of the listener the request came in on, rack from `broker.rack`). v1 echoes the endpoint type; a request
for controller endpoints (type 2) gets UNSUPPORTED_ENDPOINT_TYPE, as a Kafka broker listener answers it.
Cluster authorized operations, when asked for, are every cluster operation (no authorizer), as Kafka
reports them without one; otherwise the "not requested" marker.
Authorized operations, when asked for, are the principal's (all of them without an authorizer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.broker.admin_support import AUTHORIZED_OPERATIONS_OMITTED
from kafkacompat.broker.authorization import Resource, authorized_operations
from kafkacompat.wire._generated.describe_cluster_response import DescribeClusterResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.describe_cluster_request import DescribeClusterRequest

API_KEY = ApiKey.DESCRIBE_CLUSTER
MIN_VERSION = 0
MAX_VERSION = 1

ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2

Broker = DescribeClusterResponse.DescribeClusterBroker


async def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    broker = ctx.broker
    endpoint_type = (
        getattr(request, "endpoint_type", ENDPOINT_BROKERS) if ctx.api_version >= 1 else ENDPOINT_BROKERS
    )
    response = DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=[],
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
    if endpoint_type != ENDPOINT_BROKERS:
        response.error_code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        response.error_message = (
            f"The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
            f"{'CONTROLLER' if endpoint_type == ENDPOINT_CONTROLLERS else endpoint_type}"
        )
        response.controller_id = -1
        return response
    from kafkacompat.broker.handlers.metadata import brokers_for

    brokers, response.controller_id = brokers_for(broker, ctx.connection.listener_name)
    response.brokers = [Broker(broker_id=n, host=h, port=p, rack=r) for n, h, p, r in brokers]
    if request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = authorized_operations(
            ctx, Resource.CLUSTER, Resource.CLUSTER_NAME
        )
    return response
