"""What each listener demands of its connections: TLS, SASL, both or neither.

Theory of operation
-------------------
`listener_security(config)` is resolved once at start-up, one `ListenerSecurity` per bound listener,
from `listener.security.protocol.map` and the listener's ssl.*/sasl.* settings (with Kafka's
`listener.name.<name>.` overrides): the TLS server context for SSL and SASL_SSL, and for SASL_PLAINTEXT
and SASL_SSL the enabled mechanisms with what each needs (PLAIN: the users of the listener's PLAIN JAAS
config; SCRAM: the broker's credential store; OAUTHBEARER: the unsecured validator's JAAS options).
Anything missing or unsupported (GSSAPI, a JKS keystore, PLAIN without a JAAS config) is a ConfigError
at start-up, never a surprise at the first connection. `new_session()` gives a connection its own
`SaslSession`. Sans-io: the connection (trio) does the wrapping and the waiting.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any

from kafkacompat.config import BrokerConfig, ConfigError
from kafkacompat.security.sasl import (
    SUPPORTED_MECHANISMS,
    OAuthBearerUnsecuredServer,
    PlainServer,
    SaslSession,
    ScramCredentialLookup,
    ScramServer,
    parse_jaas,
    plain_users,
)
from kafkacompat.security.tls import check_keystore_update, keystore_certificate, server_context

__all__ = ["ListenerSecurity", "listener_security", "reconfigured_security"]


@dataclass(slots=True)
class ListenerSecurity:
    """One listener's security: protocol, TLS context (or None), SASL mechanisms (empty without SASL)."""

    name: str
    protocol: str
    tls: ssl.SSLContext | None = None
    mechanisms: list[str] = field(default_factory=list)
    plain_users: dict[str, str] = field(default_factory=dict)
    oauth_options: dict[str, str] = field(default_factory=dict)
    certificate: dict[str, Any] = field(default_factory=dict)  # the keystore's own certificate, decoded
    has_truststore: bool = False
    max_token_bytes: int = 524288
    failure_delay_ms: int = 100
    reauth_ms: int = 0

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def new_session(self, credentials: ScramCredentialLookup) -> SaslSession | None:
        """A fresh SASL session for a new connection of this listener (None when it has no SASL)."""
        if not self.sasl:
            return None

        def mechanism(name: str) -> PlainServer | OAuthBearerUnsecuredServer | ScramServer:
            if name == "PLAIN":
                return PlainServer(self.plain_users)
            if name == "OAUTHBEARER":
                return OAuthBearerUnsecuredServer(self.oauth_options)
            return ScramServer(name, credentials)

        return SaslSession(
            self.mechanisms, mechanism, self.max_token_bytes, self.failure_delay_ms, self.reauth_ms
        )


def listener_security(config: BrokerConfig, only: str | None = None) -> dict[str, ListenerSecurity]:
    """Each bound listener's security (or just listener `only`'s); ConfigError says what is wrong."""
    protocols = config.security_protocol_map
    result: dict[str, ListenerSecurity] = {}
    for listener in config.listeners:
        name = listener.name
        if only is not None and name != only:
            continue
        protocol = protocols[name]
        security = ListenerSecurity(name, protocol)
        if protocol in ("SSL", "SASL_SSL"):
            security.tls = server_context(config, name)
            security.certificate = keystore_certificate(config, name)
            security.has_truststore = _truststore_set(config, name)
        if protocol.startswith("SASL_"):
            _configure_sasl(config, security)
        result[name] = security
    return result


def reconfigured_security(
    current: dict[str, ListenerSecurity], config: BrokerConfig
) -> dict[str, ListenerSecurity]:
    """Every listener's security rebuilt from a new effective config (dynamic broker configs), for the
    connections accepted from then on; key and trust store files are read again, so a store replaced in
    place is picked up too. Refused (ConfigError, with Kafka's words) as Kafka's SslFactory refuses a
    reconfiguration: a store that does not load, a certificate whose subject DN or SANs changed (KIP-978
    settings aside), a truststore added to a listener that had none."""
    rebuilt = {}
    for name, old in current.items():
        try:
            new = listener_security(config, only=name)[name]
            if old.tls is not None and new.tls is not None:
                if not old.has_truststore and new.has_truststore:
                    raise ConfigError(
                        "Cannot add SSL truststore to an existing listener for which no truststore was "
                        "configured."
                    )
                check_keystore_update(
                    old.certificate,
                    new.certificate,
                    allow_dn_changes=config.for_listener(name, "ssl.allow.dn.changes"),
                    allow_san_changes=config.for_listener(name, "ssl.allow.san.changes"),
                )
        except ConfigError as exc:
            if old.tls is not None:
                failed = "Validation of dynamic config update of SSLFactory failed"
                raise ConfigError(f"{failed}: {exc}") from None
            raise
        rebuilt[name] = new
    return rebuilt


def _truststore_set(config: BrokerConfig, listener: str) -> bool:
    return bool(
        config.for_listener(listener, "ssl.truststore.certificates")
        or config.for_listener(listener, "ssl.truststore.location")
    )


def _jaas_for(config: BrokerConfig, listener: str, mechanism: str) -> str | None:
    # listener.name.<l>.<mechanism>.sasl.jaas.config, then listener.name.<l>.sasl.jaas.config, then
    # the unprefixed one
    jaas_key = "sasl.jaas.config"
    return config.for_listener(listener, f"{mechanism.lower()}.{jaas_key}")


def _configure_sasl(config: BrokerConfig, security: ListenerSecurity) -> None:
    name = security.name
    mechanisms = [m.strip().upper() for m in config.for_listener(name, "sasl.enabled.mechanisms")]
    if not mechanisms:
        raise ConfigError(f"listener {name}: sasl.enabled.mechanisms is empty")
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported:
        raise ConfigError(
            f"listener {name}: SASL mechanism(s) {', '.join(unsupported)} not supported (GSSAPI/Kerberos is "
            f"not); set sasl.enabled.mechanisms to some of {', '.join(SUPPORTED_MECHANISMS)}"
        )
    security.mechanisms = mechanisms
    security.max_token_bytes = config.for_listener(name, "sasl.server.max.receive.size")
    security.failure_delay_ms = config.for_listener(name, "connection.failed.authentication.delay.ms")
    security.reauth_ms = config.for_listener(name, "connections.max.reauth.ms")
    if "PLAIN" in mechanisms:
        jaas = _jaas_for(config, name, "PLAIN")
        if not jaas:
            raise ConfigError(
                f"listener {name}: PLAIN needs listener.name.{name.lower()}.plain.sasl.jaas.config "
                '(PlainLoginModule with user_NAME="password" options)'
            )
        try:
            security.plain_users = plain_users(jaas)
        except ValueError as exc:
            raise ConfigError(f"listener {name}: {exc}") from None
    if "OAUTHBEARER" in mechanisms:
        jaas = _jaas_for(config, name, "OAUTHBEARER")
        if jaas:
            try:
                security.oauth_options = parse_jaas(jaas)[1]
            except ValueError as exc:
                raise ConfigError(f"listener {name}: {exc}") from None
