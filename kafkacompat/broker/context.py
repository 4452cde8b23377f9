"""What a handler is given besides the request body: the `RequestContext` and its `ConnectionInfo`.

This module imports no handler, so handlers (and the runtimes they call) can name these types without
importing the registry in kafkacompat.broker.dispatch, which imports every handler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# a park with no client connection to watch (the replica manager's, for waits outside a request)
from kafkacompat.replication.replica_manager import Park, park_until

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState

__all__ = ["ConnectionInfo", "RequestContext", "park_until"]


@dataclass(slots=True)
class ConnectionInfo:
    """Who is on the other end of a connection and which listener accepted it.

    `principal` is Kafka's KafkaPrincipal string ("User:NAME"): ANONYMOUS on a PLAINTEXT listener and
    on SSL without a client certificate, the certificate's subject DN with mTLS, the SASL user once
    authenticated. The connection sets it; handlers only read it (authorization, quotas, metrics).
    """

    listener_name: str
    peer: str
    connection_id: int
    #: the authenticated principal, "User:..." (see above)
    principal: str = "User:ANONYMOUS"
    #: the listener's protocol from listener.security.protocol.map: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    security_protocol: str = "PLAINTEXT"
    #: the SASL mechanism that authenticated this connection, None before/without SASL
    sasl_mechanism: str | None = None
    #: the connection's kafkacompat.security.sasl.SaslSession on SASL listeners, else None
    sasl_session: Any = None


@dataclass(slots=True)
class RequestContext:
    """Everything a handler may look at besides the request body. Built per request by the connection."""

    broker: BrokerState
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    connection: ConnectionInfo
    header: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: how a handler waits for `event` until `deadline` (trio time); see the handler contract in
    #: kafkacompat.broker.dispatch
    park: Park = park_until
