"""SaslHandshake (key 17), versions 0-1.

Behaviour: on a SASL listener, before authentication, the client names its mechanism; the answer lists
the listener's `sasl.enabled.mechanisms` with NONE if the mechanism is one of them, else
UNSUPPORTED_SASL_MECHANISM (and the connection closes, after connection.failed.authentication.delay.ms,
as Kafka's authenticator fails it). After v0 the client sends its tokens as bare size-prefixed frames,
after v1 inside SaslAuthenticate requests. Once authenticated, a handshake starts a re-authentication
(KIP-368) when connections.max.reauth.ms is set and names the same mechanism; otherwise, and on
listeners without SASL, the answer is ILLEGAL_SASL_STATE with no mechanisms, as Kafka's KafkaApis
answers a handshake that reaches it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.wire._generated.sasl_handshake_response import SaslHandshakeResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.sasl_handshake_request import SaslHandshakeRequest

API_KEY = ApiKey.SASL_HANDSHAKE
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    session = ctx.connection.sasl_session
    if session is None:
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    if session.complete and not session.begin_reauthentication(request.mechanism, ctx.broker.clock()):
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    accepted = session.handshake(request.mechanism, ctx.api_version)
    return SaslHandshakeResponse(
        error_code=ErrorCode.NONE if accepted else ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        mechanisms=list(session.enabled),
    )
