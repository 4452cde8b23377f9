"""Listener key and trust stores changed on a running broker (dynamic broker configs, Kafka's KIP-226).

The module starts its own broker (marked `secured_broker`: skipped with --bootstrap) with a PLAINTEXT
listener for administration, an SSL listener and an mTLS listener, all with certificates of one
development CA ("A"); a second CA ("B") signs a broker certificate with the same subject and names, as a
renewed certificate has. confluent-kafka's admin client then alters `listener.name.<l>.ssl.*` on this
broker's id, as `kafka-configs --entity-type brokers --entity-name N --alter` does, and fresh
confluent-kafka clients that trust only one CA show which certificate new connections get, while a
producer connected before the change keeps using its connection. Every assertion holds against Kafka.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import ck_incremental_alter, create_topic
from kafkacompat.local_brokers import InProcessBroker

pytestmark = [
    pytest.mark.secured_broker,
    pytest.mark.skipif(
        shutil.which("openssl") is None, reason="needs the openssl command for test certificates"
    ),
]

DYNAMIC_BROKER_CONFIG, STATIC_BROKER_CONFIG = 2, 4
KEYSTORE = "listener.name.ssl.ssl.keystore.location"
TRUSTSTORE = "listener.name.mtls.ssl.truststore.location"


@dataclass(frozen=True)
class Reloadable:
    broker: InProcessBroker
    a: dict[str, Path]
    b: dict[str, Path]
    work: Path

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.broker.ports[listener]}"

    @property
    def admin_bootstrap(self) -> str:
        return self.bootstrap("PLAINTEXT")


@pytest.fixture(scope="module")
def reloadable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reloadable]:
    from kafkacompat.commands.dev_certs import make_dev_certs

    a = make_dev_certs(tmp_path_factory.mktemp("ca-a"), client_cn="client-a")
    b = make_dev_certs(tmp_path_factory.mktemp("ca-b"), client_cn="client-b")
    work = tmp_path_factory.mktemp("stores")
    overrides = [
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "ssl.keystore.type=PEM",
        "ssl.truststore.type=PEM",
        f"ssl.keystore.location={a['broker-keystore.pem']}",
        f"{KEYSTORE}={a['broker-keystore.pem']}",  # static, per listener: what the dynamic one replaces
        f"ssl.truststore.location={a['ca.pem']}",
        "listener.name.mtls.ssl.client.auth=required",
    ]
    broker = InProcessBroker(tmp_path_factory.mktemp("reload") / "data", overrides).start()
    try:
        yield Reloadable(broker, a, b, work)
    finally:
        broker.stop()


def _node(admin_bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    return str(admin.describe_cluster().result(10).nodes[0].id)


def _alter(bootstrap: str, node: str, configs: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs (SET, or DELETE for None) on this broker, as kafka-configs sends it."""
    ck_incremental_alter(bootstrap, "broker", node, configs)


def _describe(bootstrap: str, node: str) -> dict:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.BROKER, node)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_configs([resource])[resource].result(10)


def _connects(bootstrap: str, ca: Path, keystore: Path | None = None) -> bool:
    """Whether a new confluent-kafka client that trusts only `ca` gets metadata over TLS."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    config = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca),
        "ssl.endpoint.identification.algorithm": "https",
    }
    if keystore is not None:
        config["ssl.certificate.location"] = str(keystore)
        config["ssl.key.location"] = str(keystore)
    admin = AdminClient(config)
    try:
        admin.list_topics(timeout=6)
    except KafkaException:
        return False
    return True


def _delivered(producer: Any, topic: str, count: int) -> int:  # a confluent_kafka.Producer
    errors: list[object] = []
    for index in range(count):
        producer.produce(topic, value=f"{index}".encode(), on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(30) == 0
    return sum(1 for err in errors if err is None)


def test_keystore_replaced_at_run_time(reloadable: Reloadable) -> None:
    from confluent_kafka import KafkaException, Producer

    admin, ssl_bootstrap = reloadable.admin_bootstrap, reloadable.bootstrap("SSL")
    node = _node(admin)
    a, b = reloadable.a, reloadable.b
    assert _connects(ssl_bootstrap, a["ca.pem"]) and not _connects(ssl_bootstrap, b["ca.pem"])

    topic = f"reload-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic)
    # connected (and past the bootstrap connection) before any change
    producer = Producer({"bootstrap.servers": ssl_bootstrap, "security.protocol": "SSL",
                         "ssl.ca.location": str(a["ca.pem"]), "linger.ms": 0})  # fmt: skip
    assert _delivered(producer, topic, 5) == 5

    # a certificate with a key that is not its own: refused with Kafka's error, nothing changes
    with pytest.raises(KafkaException) as refused:
        _alter(admin, node, {
            KEYSTORE: None,
            "listener.name.ssl.ssl.keystore.certificate.chain": b["broker.pem"].read_text(),
            "listener.name.ssl.ssl.keystore.key": a["broker.key"].read_text(),
        })  # fmt: skip
    error = refused.value.args[0]
    assert error.name() == "INVALID_REQUEST", error
    assert "Validation of dynamic config update of SSLFactory failed" in error.str()
    entry = _describe(admin, node)[KEYSTORE]
    assert (entry.value, entry.source) == (str(a["broker-keystore.pem"]), STATIC_BROKER_CONFIG)
    assert _connects(ssl_bootstrap, a["ca.pem"])

    # the renewed certificate (CA B): new connections get it, the producer's connection carries on
    _alter(admin, node, {KEYSTORE: str(b["broker-keystore.pem"])})
    entry = _describe(admin, node)[KEYSTORE]
    assert (entry.value, entry.source) == (str(b["broker-keystore.pem"]), DYNAMIC_BROKER_CONFIG)
    # the chain (librdkafka keys synonyms by name, so the static per-listener entry folds into one)
    assert set(entry.synonyms) == {KEYSTORE, "ssl.keystore.location"}
    assert entry.synonyms["ssl.keystore.location"].source == STATIC_BROKER_CONFIG
    assert _connects(ssl_bootstrap, b["ca.pem"])
    assert not _connects(ssl_bootstrap, a["ca.pem"])
    assert _delivered(producer, topic, 5) == 5

    # the same file rewritten in place (here: back to CA A's certificate), then altered to the same path:
    # reloaded, as a Kafka broker reloads a store file that changed when an AlterConfigs names it
    live = reloadable.work / "live-keystore.pem"
    live.write_bytes(b["broker-keystore.pem"].read_bytes())
    _alter(admin, node, {KEYSTORE: str(live)})
    assert _connects(ssl_bootstrap, b["ca.pem"])
    live.write_bytes(a["broker-keystore.pem"].read_bytes())
    _alter(admin, node, {KEYSTORE: str(live)})
    assert _connects(ssl_bootstrap, a["ca.pem"])
    assert not _connects(ssl_bootstrap, b["ca.pem"])
    assert _delivered(producer, topic, 5) == 5
    producer.flush(10)

    # back to the static keystore
    _alter(admin, node, {KEYSTORE: None})
    assert _describe(admin, node)[KEYSTORE].source == STATIC_BROKER_CONFIG
    assert _connects(ssl_bootstrap, a["ca.pem"])


def test_truststore_replaced_at_run_time(reloadable: Reloadable) -> None:
    admin, mtls_bootstrap = reloadable.admin_bootstrap, reloadable.bootstrap("MTLS")
    node = _node(admin)
    a, b = reloadable.a, reloadable.b
    # the broker's certificate is CA A's; the client certificates are A's and B's
    assert _connects(mtls_bootstrap, a["ca.pem"], a["client-keystore.pem"])
    assert not _connects(mtls_bootstrap, a["ca.pem"], b["client-keystore.pem"])
    try:
        _alter(admin, node, {TRUSTSTORE: str(b["ca.pem"])})
        assert _connects(mtls_bootstrap, a["ca.pem"], b["client-keystore.pem"])
        assert not _connects(mtls_bootstrap, a["ca.pem"], a["client-keystore.pem"])
    finally:
        _alter(admin, node, {TRUSTSTORE: None})
    assert _connects(mtls_bootstrap, a["ca.pem"], a["client-keystore.pem"])
