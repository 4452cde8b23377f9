"""SaslAuthenticate (key 36), versions 0-2.

Behaviour: carries one SASL token of the mechanism chosen by SaslHandshake v1 to the connection's
`SaslSession` and its answer back. Refused credentials give SASL_AUTHENTICATION_FAILED with Kafka's
message (PLAIN: "Authentication failed: Invalid username or password"; SCRAM and malformed tokens:
"Authentication failed during authentication due to invalid credentials with SASL mechanism M") and
the connection closes after connection.failed.authentication.delay.ms. On success the connection's
principal becomes User:<name>; from v1 the answer carries session_lifetime_ms (connections.max.reauth.ms,
KIP-368; 0 when re-authentication is off). A SaslAuthenticate outside an exchange (no handshake, after
success, on a listener without SASL) gets ILLEGAL_SASL_STATE, as Kafka answers it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat.security.sasl import AUTHENTICATE, AuthenticationFailed
from kafkacompat.wire._generated.sasl_authenticate_response import SaslAuthenticateResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.sasl_authenticate_request import SaslAuthenticateRequest

API_KEY = ApiKey.SASL_AUTHENTICATE
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    session = ctx.connection.sasl_session
    if session is None or session.state != AUTHENTICATE or session.raw_tokens:
        message = (
            "SaslAuthenticate request received after successful authentication"
            if session is not None and session.complete
            else "Unexpected SaslAuthenticate request"
        )
        return SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=message, auth_bytes=b""
        )
    try:
        challenge = session.authenticate(bytes(request.auth_bytes), ctx.broker.clock())
    except AuthenticationFailed as exc:
        return SaslAuthenticateResponse(
            error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=exc.message, auth_bytes=b""
        )
    lifetime_ms = 0
    if session.complete:
        info = ctx.connection
        info.principal = session.principal or info.principal
        info.sasl_mechanism = session.mechanism
        if session.expires_at is not None:
            lifetime_ms = max(int((session.expires_at - ctx.broker.clock()) * 1000), 0)
    return SaslAuthenticateResponse(
        error_code=ErrorCode.NONE, error_message=None, auth_bytes=challenge, session_lifetime_ms=lifetime_ms
    )
