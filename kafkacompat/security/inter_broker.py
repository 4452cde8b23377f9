"""How a broker connects to the other brokers: the inter-broker listener and its client security.

Theory of operation
-------------------
As a Kafka broker configures its own inter-broker client (replica fetchers, controlled shutdown, the
controller's requests), in cluster mode only:

- the listener: `inter.broker.listener.name`, else the listener named after
  `security.inter.broker.protocol` (default PLAINTEXT; Kafka's ListenerName.forSecurityProtocol), else,
  leniently, the first listener of that protocol; setting both is Kafka's start-up error. Its protocol is
  the listener's entry in `listener.security.protocol.map`;
- TLS (SSL, SASL_SSL): a client context from the listener's own settings (`listener.name.<l>.ssl.*` over
  `ssl.*`), PEM only, as the listeners take them: the truststore (`ssl.truststore.certificates` or
  `ssl.truststore.location`; without one, the system's CAs) verifies the other broker, the keystore
  (if any) is presented when the other broker asks for a client certificate, the host name is checked
  unless `ssl.endpoint.identification.algorithm` is empty, `ssl.enabled.protocols` bounds the versions;
- SASL (SASL_PLAINTEXT, SASL_SSL): `sasl.mechanism.inter.broker.protocol` (PLAIN, SCRAM-SHA-256 or
  SCRAM-SHA-512 here; it must be in the listener's `sasl.enabled.mechanisms`, as Kafka requires) with the
  `username`/`password` options of the listener's JAAS config for that mechanism
  (`listener.name.<l>.<mechanism>.sasl.jaas.config`, falling back as `BrokerConfig.for_listener` does).
  The SCRAM user must exist in ZooKeeper's /config/users before the brokers replicate, as in Kafka.

`inter_broker_client(config)` resolves all of it once and raises ConfigError for what Kafka would refuse
at start-up or this broker cannot do (GSSAPI, a JAAS config without credentials, a JKS store); nothing is
logged about credentials. Sans-io: the broker's async inter-broker client
(`kafkacompat.replication.inter_broker_client`) takes the returned `ClientSecurity`, wraps its stream in
TLS with `ClientSecurity.context` and runs the SASL exchange with `ClientSecurity.exchange`.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

from kafkacompat.config import BrokerConfig, ConfigError
from kafkacompat.security.client_auth import ClientSecurity
from kafkacompat.security.sasl import SCRAM_HASHES, parse_jaas

__all__ = ["inter_broker_client", "inter_broker_listener_name"]

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


def inter_broker_listener_name(config: BrokerConfig, listeners: Iterable[str] | None = None) -> str:
    """The name of the listener other brokers are reached at (see module docstring)."""
    names = [name.upper() for name in (listeners if listeners is not None else _listener_names(config))]
    configured = config["inter.broker.listener.name"]
    if configured:
        if "security.inter.broker.protocol" in config.given:
            raise ConfigError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."
            )
        name = str(configured).upper()
        if names and name not in names:
            raise ConfigError(
                f"inter.broker.listener.name must be a listener name defined in advertised.listeners. "
                f"The valid options based on currently configured listeners are {','.join(names)}"
            )
        return name
    protocol = str(config["security.inter.broker.protocol"]).upper()
    if protocol in names:
        return protocol
    protocols = config.security_protocol_map
    for name in names:
        if protocols.get(name, name) == protocol:
            return name
    if "security.inter.broker.protocol" in config.given or not names:
        raise ConfigError(f"security.inter.broker.protocol {protocol}: no listener of that protocol")
    return names[0]


def _listener_names(config: BrokerConfig) -> list[str]:
    return [listener.name for listener in config.listeners]


def inter_broker_client(
    config: BrokerConfig, listeners: Iterable[str] | None = None
) -> tuple[str, ClientSecurity | None]:
    """(listener name, client security or None for PLAINTEXT) of this broker's inter-broker client."""
    listener = inter_broker_listener_name(config, listeners)
    protocol = config.security_protocol_map.get(listener, "PLAINTEXT")
    if protocol == "PLAINTEXT":
        return listener, None
    context = _client_context(config, listener) if protocol in ("SSL", "SASL_SSL") else None
    mechanism = username = password = None
    if protocol.startswith("SASL_"):
        mechanism, username, password = _sasl_credentials(config, listener)
    return listener, ClientSecurity(
        protocol=protocol,
        check_hostname=context.check_hostname if context is not None else True,
        mechanism=mechanism,
        username=username,
        password=password,
        context=context,
    )


def _sasl_credentials(config: BrokerConfig, listener: str) -> tuple[str, str, str]:
    where = f"inter-broker listener {listener}"
    mechanism = str(config["sasl.mechanism.inter.broker.protocol"]).strip().upper()
    if mechanism not in ("PLAIN", *SCRAM_HASHES):
        raise ConfigError(
            f"{where}: sasl.mechanism.inter.broker.protocol {mechanism} is not supported here; set it to "
            "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
        )
    enabled = [m.strip().upper() for m in config.for_listener(listener, "sasl.enabled.mechanisms")]
    if mechanism not in enabled:
        raise ConfigError(
            "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL is "
            "used for inter-broker communication"
        )
    jaas = config.for_listener(listener, f"{mechanism.lower()}.sasl.jaas.config")
    if not jaas:
        raise ConfigError(
            f"{where}: {mechanism} needs listener.name.{listener.lower()}.{mechanism.lower()}"
            ".sasl.jaas.config with the broker's username and password"
        )
    try:
        _, options = parse_jaas(jaas)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise ConfigError(f"{where}: the {mechanism} JAAS config has no username and password options")
    return mechanism, username, password


def _client_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    from kafkacompat.security.tls import _load_cert_chain_text, _pem, _read_pem_file

    def setting(name: str) -> Any:
        return config.for_listener(listener, name)

    where = f"inter-broker listener {listener}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = str(setting("ssl.endpoint.identification.algorithm") or "").strip() != ""
    context.verify_mode = ssl.CERT_REQUIRED
    certificates = setting("ssl.truststore.certificates")
    location = setting("ssl.truststore.location")
    if certificates:
        if not _pem(certificates):
            raise ConfigError(f"{where}: ssl.truststore.certificates must be PEM")
        cadata = certificates
    elif location:
        cadata = _read_pem_file(location, "ssl.truststore.location", where)
    else:
        cadata = None
        context.load_default_certs()
    if cadata is not None:
        try:
            context.load_verify_locations(cadata=cadata)
        except ssl.SSLError as exc:
            raise ConfigError(f"{where}: cannot load the truststore: {exc.reason or exc}") from None
    chain, key = setting("ssl.keystore.certificate.chain"), setting("ssl.keystore.key")
    keystore = setting("ssl.keystore.location")
    key_password = setting("ssl.key.password") or setting("ssl.keystore.password")
    if chain and key:
        _load_cert_chain_text(context, chain, key, key_password, where)
    elif keystore:
        text = _read_pem_file(keystore, "ssl.keystore.location", where)
        if "PRIVATE KEY-----" in text:
            _load_cert_chain_text(context, text, text, key_password, where)
    versions = sorted(_VERSIONS[name] for name in setting("ssl.enabled.protocols") if name in _VERSIONS)
    if versions:
        context.minimum_version, context.maximum_version = versions[0], versions[-1]
    return context
