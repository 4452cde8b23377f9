"""Client quotas on the request path: one request handled, answered and throttled as Kafka does.

Theory of operation
-------------------
While any client quota is configured (kafkacompat.security.quotas; `store.enforced`), the connection
hands each request to `handle_within_quotas` instead of calling its handler directly. Produce bytes,
fetch response bytes and handler time are recorded against the connection's (user, client-id) quotas;
the throttle time goes into the response's throttle_time_ms, and after writing the response the
connection sleeps that long before it reads on: Kafka's muted channel (KIP-219; older Produce/Fetch
versions get the delay before the response). A follower's fetch in cluster mode is exempt
(`is_follower_fetch`): replication has quotas of its own in Kafka, never client quotas.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.broker.context import RequestContext
from kafkacompat.broker.response_writer import (
    ResponseWriter,
    chunk_size,
    frame_response,
    release_file_slices,
)
from kafkacompat.security.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    user_of,
)
from kafkacompat.wire import header as wire_header
from kafkacompat.wire import messages
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState

__all__ = ["handle_within_quotas", "is_follower_fetch"]

# ApiVersions, SaslHandshake, SaslAuthenticate: never throttled by request_percentage (as in Kafka)
_REQUEST_QUOTA_EXEMPT = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# the first version whose client throttles itself on throttle_time_ms (KIP-219); older ones are delayed
_KIP_219_VERSIONS: dict[int, int] = {ApiKey.PRODUCE: 6, ApiKey.FETCH: 8}


def is_follower_fetch(broker: BrokerState, api_key: int, api_version: int, request: Any) -> bool:
    """A Fetch of a follower broker (cluster mode only: on a single node a replica id means nothing)."""
    if api_key != ApiKey.FETCH or not broker.replicas.serves_followers:
        return False
    if api_version >= 15:
        state = getattr(request, "replica_state", None)
        return state is not None and state.replica_id >= 0
    return bool(request.replica_id >= 0)


async def handle_within_quotas(
    ctx: RequestContext, handler: Any, request: Any, writer: ResponseWriter, request_bytes: int, timer: Any
) -> Any:
    """Handle and answer one request under client quotas (kafkacompat.security.quotas), as Kafka does.

    Produce records the request's size against producer_byte_rate, Fetch the response's size against
    consumer_byte_rate (its max_bytes capped to what the quota lets through in one whole window, as
    Kafka caps it), every request but the authentication ones its handler time against
    request_percentage. The largest throttle time goes into the response's throttle_time_ms; then, as
    KIP-219 has it, the response goes out at once and the connection stays muted (reads no next
    request) for that long; a client older than KIP-219 (Produce < v6, Fetch < v8) gets its response
    only after the delay instead. Parked time (a fetch waiting for data) is not handler time.
    """
    quotas = ctx.broker.quotas
    user = user_of(ctx.connection.principal)
    client_id = ctx.client_id or ""
    api_key, api_version = ctx.api_key, ctx.api_version
    if api_key == ApiKey.FETCH:
        window_bytes = quotas.quota_window_bytes(CONSUMER_BYTE_RATE, user, client_id)
        if window_bytes is not None and request.max_bytes > window_bytes:
            request.max_bytes = max(window_bytes, 1)
    parked = 0.0
    park = ctx.park

    async def timed_park(event: trio.Event, deadline: float) -> None:
        nonlocal parked
        began = time.perf_counter()
        try:
            await park(event, deadline)
        finally:
            parked += time.perf_counter() - began

    ctx.park = timed_park
    began = time.perf_counter()
    response = await handler.handle(ctx, request)
    handler_seconds = max(time.perf_counter() - began - parked, 0.0)
    if timer is not None:
        timer.done_handling()
    now = trio.current_time()
    throttle_ms = 0
    if api_key not in _REQUEST_QUOTA_EXEMPT:
        throttle_ms = quotas.record(REQUEST_PERCENTAGE, user, client_id, handler_seconds * 100, now)
    if api_key == ApiKey.PRODUCE:
        throttle_ms = max(throttle_ms, quotas.record(PRODUCER_BYTE_RATE, user, client_id, request_bytes, now))
    body: list[Any] | None = None
    if response is not None:
        body = messages.encode_response(api_key, api_version, response)
        if api_key == ApiKey.FETCH:
            size = sum(chunk_size(chunk) for chunk in body)
            throttle_ms = max(throttle_ms, quotas.record(CONSUMER_BYTE_RATE, user, client_id, size, now))
            if throttle_ms > 0:
                # as Kafka's KafkaApis: a throttled fetch is answered empty and its bytes are taken back
                # off the quota; the client fetches the same offsets again once its delay is over
                quotas.unrecord(CONSUMER_BYTE_RATE, user, client_id, size, now)
                throttled = _throttled_fetch_response(ctx.broker, response)
                if throttled is not response:
                    release_file_slices(body)  # the records are not sent: their segment fds go back now
                    response = throttled
        if throttle_ms > 0 and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = max(response.throttle_time_ms, throttle_ms)
            body = messages.encode_response(api_key, api_version, response)
    if throttle_ms > 0 and api_version < _KIP_219_VERSIONS.get(api_key, 0):
        try:
            await trio.sleep(throttle_ms / 1000)  # an old client: the response itself is delayed
        except BaseException:
            if body is not None:
                release_file_slices(body)  # closed while delayed: the response is never written
            raise
        throttle_ms = 0
    if body is not None:
        header_bytes = wire_header.encode_response_header(api_key, api_version, ctx.correlation_id)
        await writer.send(frame_response(header_bytes, body))
    if throttle_ms > 0:
        await trio.sleep(throttle_ms / 1000)  # the muted channel: the next request is not read meanwhile
    return response


def _throttled_fetch_response(broker: BrokerState, response: Any) -> Any:
    """The empty answer of a throttled fetch: no partitions, the same session. What the handler recorded
    as reported to the session is forgotten, so the next incremental answer lists every partition again
    (Kafka, which decides to throttle before it updates the session, returns a new session's id as 0)."""
    if response.error_code != ErrorCode.NONE:
        return response
    broker.fetch_sessions.forget_reported(response.session_id)
    return type(response)(error_code=ErrorCode.NONE, session_id=response.session_id, responses=[])
