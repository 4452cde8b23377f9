"""The inter-broker listener and its client security, resolved from broker configs as Kafka resolves them."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path

import pytest

from kafkacompat.config import BrokerConfig, ConfigError
from kafkacompat.security.inter_broker import inter_broker_client, inter_broker_listener_name

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="pw";'
TWO_LISTENERS = [
    "listeners=CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
    "listener.security.protocol.map=CLIENT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
]


def config(*overrides: str) -> BrokerConfig:
    return BrokerConfig.load(None, ["log.dirs=/tmp/unused", *overrides])


def test_default_is_the_plaintext_listener_without_security() -> None:
    assert inter_broker_client(config("listeners=PLAINTEXT://:9092")) == ("PLAINTEXT", None)
    # no listener named PLAINTEXT: the first one of that protocol
    assert inter_broker_listener_name(config(*TWO_LISTENERS)) == "CLIENT"


def test_security_inter_broker_protocol_names_the_listener() -> None:
    chosen = config(
        "listeners=PLAINTEXT://:9092,SASL_PLAINTEXT://:9093",
        "security.inter.broker.protocol=SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain."
        'PlainLoginModule required username="admin" password="admin-pw" user_admin="admin-pw";',
    )
    listener, security = inter_broker_client(chosen)
    assert listener == "SASL_PLAINTEXT"
    assert security is not None and security.sasl and not security.tls
    assert (security.mechanism, security.username, security.password) == ("PLAIN", "admin", "admin-pw")


def test_inter_broker_listener_name_with_scram() -> None:
    chosen = config(
        *TWO_LISTENERS,
        "inter.broker.listener.name=internal",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
        f"listener.name.internal.scram-sha-512.sasl.jaas.config={JAAS}",
    )
    listener, security = inter_broker_client(chosen)
    assert listener == "INTERNAL"
    assert security is not None
    assert (security.protocol, security.mechanism, security.username) == (
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        "broker",
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["inter.broker.listener.name=INTERNAL", "security.inter.broker.protocol=SSL"], "Only one of"),
        (["inter.broker.listener.name=INTERNAL", "sasl.enabled.mechanisms=SCRAM-SHA-512"], "GSSAPI"),
        (
            [
                "inter.broker.listener.name=INTERNAL",
                "sasl.enabled.mechanisms=PLAIN",
                "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            ],
            "must be included in sasl.enabled.mechanisms",
        ),
        (
            [
                "inter.broker.listener.name=INTERNAL",
                "sasl.enabled.mechanisms=SCRAM-SHA-512",
                "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            ],
            "sasl.jaas.config",
        ),
        (["security.inter.broker.protocol=SSL"], "no listener of that protocol"),
        (["inter.broker.listener.name=REPLICATION"], "must be a listener name defined in advertised"),
    ],
)
def test_what_kafka_refuses_is_a_config_error(extra: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        inter_broker_client(config(*TWO_LISTENERS, *extra))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command for certificates")
def test_tls_trusts_the_listener_truststore_and_checks_host_names(tmp_path: Path) -> None:
    from kafkacompat.commands.dev_certs import make_dev_certs

    certs = make_dev_certs(tmp_path)
    tls = [
        "listeners=PLAINTEXT://:9092,SSL://:9093",
        "security.inter.broker.protocol=SSL",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs['broker-keystore.pem']}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs['ca.pem']}",
    ]
    listener, security = inter_broker_client(config(*tls))
    assert listener == "SSL" and security is not None and security.tls and not security.sasl
    assert security.context is not None
    assert security.context.check_hostname and security.context.verify_mode == ssl.CERT_REQUIRED
    assert security.context.get_ca_certs()  # the listener's CA, not only the system's
    _, unchecked = inter_broker_client(
        config(*tls, "listener.name.ssl.ssl.endpoint.identification.algorithm=")
    )
    assert unchecked is not None and unchecked.context is not None and not unchecked.context.check_hostname
