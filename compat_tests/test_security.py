"""Every client over SSL, mTLS, SASL_PLAINTEXT and SASL_SSL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER).

The module starts its own broker (marked `secured_broker`: skipped with --bootstrap) with five listeners:
PLAINTEXT, SSL, MTLS (SSL with ssl.client.auth=required), SASL_PLAINTEXT and SASL_SSL, certificates made
at test time by `kafkacompat dev-certs` (the openssl command). PLAIN users come from the JAAS config; the
SCRAM user is created through the PLAINTEXT listener with confluent-kafka's AlterUserScramCredentials,
as one would against Kafka. Each client then, through each secured listener: makes a topic or lists
them (an admin call), produces, and reads back as a member of a consumer group that commits. Wrong
passwords must fail with Kafka's message.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import create_topic, run_async
from kafkacompat.local_brokers import InProcessBroker

pytestmark = [
    pytest.mark.secured_broker,
    pytest.mark.skipif(
        shutil.which("openssl") is None, reason="needs the openssl command for test certificates"
    ),
]

PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-secret"
SCRAM_USER, SCRAM_PASSWORD = "scram-user", "scram-secret"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'user_{PLAIN_USER}="{PLAIN_PASSWORD}" user_admin="admin-secret";'
)
COUNT = 20


@dataclass(frozen=True)
class Secured:
    broker: InProcessBroker
    certs: dict[str, Path]

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.broker.ports[listener]}"


@dataclass(frozen=True)
class Case:
    """One way of connecting: a listener, its protocol, a SASL mechanism (or None), credentials."""

    listener: str
    protocol: str
    mechanism: str | None = None
    client_cert: bool = False

    @property
    def user(self) -> str:
        return SCRAM_USER if self.mechanism and self.mechanism.startswith("SCRAM") else PLAIN_USER

    @property
    def password(self) -> str:
        return SCRAM_PASSWORD if self.mechanism and self.mechanism.startswith("SCRAM") else PLAIN_PASSWORD

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def __str__(self) -> str:
        return f"{self.listener.lower()}-{(self.mechanism or 'tls').lower()}"


CASES = [
    Case("SSL", "SSL"),
    Case("MTLS", "SSL", client_cert=True),
    *(Case("SASL_PLAINTEXT", "SASL_PLAINTEXT", m) for m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    *(Case("SASL_SSL", "SASL_SSL", m) for m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
]
OAUTH_CASES = [
    Case("SASL_SSL", "SASL_SSL", "OAUTHBEARER"),
    Case("SASL_PLAINTEXT", "SASL_PLAINTEXT", "OAUTHBEARER"),
]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    from kafkacompat.commands.dev_certs import make_dev_certs

    certs = make_dev_certs(tmp_path_factory.mktemp("certs"), client_cn="compat-client")
    overrides = [
        "group.initial.rebalance.delay.ms=0",
        "offsets.topic.num.partitions=3",
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,"
        "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,REAUTH://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "SASL_SSL:SASL_SSL,REAUTH:SASL_PLAINTEXT",
        # a SASL listener whose sessions last 1.5 s (KIP-368): clients must re-authenticate on it
        "listener.name.reauth.connections.max.reauth.ms=1500",
        f"listener.name.reauth.plain.sasl.jaas.config={JAAS}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs['broker-keystore.pem']}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs['ca.pem']}",
        "listener.name.mtls.ssl.client.auth=required",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
    ]
    broker = InProcessBroker(tmp_path_factory.mktemp("secured") / "data", overrides).start()
    try:
        _create_scram_user(f"127.0.0.1:{broker.ports['PLAINTEXT']}")
        yield Secured(broker, certs)
    finally:
        broker.stop()


def _create_scram_user(bootstrap: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    # one request per mechanism: Kafka 3.9 refuses two changes of one user in one request (DUPLICATE_RESOURCE)
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        upsertion = UserScramCredentialUpsertion(
            SCRAM_USER, ScramCredentialInfo(mechanism, 4096), SCRAM_PASSWORD.encode()
        )
        admin.alter_user_scram_credentials([upsertion])[SCRAM_USER].result(10)
    described = admin.describe_user_scram_credentials([SCRAM_USER])[SCRAM_USER].result(10)
    mechanisms = sorted(info.mechanism for info in described.scram_credential_infos)
    assert mechanisms == [ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512]
    assert {info.iterations for info in described.scram_credential_infos} == {4096}


def _unsecured_jwt(subject: str) -> str:
    import base64
    import json

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + 3600})}."


def _values(prefix: str) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(COUNT)]


# --- librdkafka (confluent-kafka, kcat) -----------------------------------------------------------------


def rdkafka_config(secured: Secured, case: Case, password: str | None = None) -> dict[str, str]:
    config = {"bootstrap.servers": secured.bootstrap(case.listener), "security.protocol": case.protocol}
    if case.tls:
        config["ssl.ca.location"] = str(secured.certs["ca.pem"])
    if case.client_cert:
        config["ssl.certificate.location"] = str(secured.certs["client.pem"])
        config["ssl.key.location"] = str(secured.certs["client.key"])
    if case.mechanism == "OAUTHBEARER":
        config["sasl.mechanism"] = "OAUTHBEARER"
        config["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
        config["sasl.oauthbearer.config"] = "principal=oauth-user"
    elif case.mechanism:
        config["sasl.mechanism"] = case.mechanism
        config["sasl.username"] = case.user
        config["sasl.password"] = password if password is not None else case.password
    return config


@pytest.mark.parametrize("case", CASES + OAUTH_CASES, ids=str)
def test_confluent_kafka(secured: Secured, case: Case, ck_closing: Callable[[Any], Any]) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    config = rdkafka_config(secured, case)
    topic = f"sec-ck-{case}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(15)
    assert topic in admin.list_topics(timeout=10).topics
    producer = ck_closing(Producer(config))
    for value in _values(topic):
        producer.produce(topic, value, key=value[-2:])
    assert producer.flush(15) == 0
    producer.close()
    group = f"{topic}-group"
    consumer = ck_closing(
        Consumer({**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < COUNT and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(seen) == sorted(_values(topic))
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert sum(tp.offset for tp in offsets.topic_partitions) == COUNT


@pytest.mark.parametrize("case", CASES + OAUTH_CASES, ids=str)
def test_kcat(secured: Secured, case: Case, kcat: Callable[..., subprocess.CompletedProcess[bytes]]) -> None:
    config = rdkafka_config(secured, case)
    options = [
        arg for key, value in config.items() if key != "bootstrap.servers" for arg in ("-X", f"{key}={value}")
    ]
    bootstrap = ["-b", config["bootstrap.servers"]]
    topic = f"sec-kcat-{case}-{uuid.uuid4().hex[:8]}"
    values = _values(topic)
    kcat(*bootstrap, *options, "-P", "-t", topic, "-p", "0", input=b"\n".join(values) + b"\n")
    listing = kcat(*bootstrap, *options, "-L", "-t", topic).stdout.decode()
    assert f'topic "{topic}" with 1 partitions' in listing
    group = f"{topic}-group"
    consumed = kcat(
        *bootstrap, *options, "-X", "auto.offset.reset=earliest", "-G", group, "-c", str(COUNT), "-e", topic
    ).stdout.split(b"\n")
    assert sorted(v for v in consumed if v) == sorted(values)


def test_wrong_password_is_refused_with_kafkas_message(
    secured: Secured, caplog: pytest.LogCaptureFixture, ck_closing: Callable[[Any], Any]
) -> None:
    from confluent_kafka import KafkaException, Producer

    for case, message in (
        (Case("SASL_SSL", "SASL_SSL", "PLAIN"), "Authentication failed: Invalid username or password"),
        (
            Case("SASL_PLAINTEXT", "SASL_PLAINTEXT", "SCRAM-SHA-512"),
            "Authentication failed during authentication due to invalid credentials with SASL mechanism "
            "SCRAM-SHA-512",
        ),
    ):
        errors: list[str] = []
        config = {
            **rdkafka_config(secured, case, password="wrong"),
            "error_cb": lambda e, errors=errors: errors.append(str(e)),
        }
        producer = ck_closing(Producer(config))
        with pytest.raises(KafkaException):
            producer.list_topics(timeout=3)
        producer.poll(1)  # delivers the error callbacks
        producer.close()  # else it retries the wrong password once a second for as long as it lives
        assert any(message in error for error in errors), errors
    # kafka-python hears the same (it logs the broker's message and gives up bootstrapping; it retries
    # until bootstrap_timeout_ms, 30 s by default)
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KafkaPythonError

    config = kafka_python_config(secured, Case("SASL_PLAINTEXT", "SASL_PLAINTEXT", "PLAIN"))
    with caplog.at_level(logging.DEBUG, logger="kafka"), pytest.raises(KafkaPythonError):
        KafkaProducer(
            **{**config, "sasl_plain_password": "wrong", "max_block_ms": 3000, "bootstrap_timeout_ms": 3000}
        )
    assert "Authentication failed: Invalid username or password" in caplog.text


# --- kafka-python -----------------------------------------------------------------------------------------


def kafka_python_config(secured: Secured, case: Case) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap_servers": secured.bootstrap(case.listener),
        "security_protocol": case.protocol,
    }
    if case.tls:
        config["ssl_cafile"] = str(secured.certs["ca.pem"])
    if case.client_cert:
        config["ssl_certfile"] = str(secured.certs["client.pem"])
        config["ssl_keyfile"] = str(secured.certs["client.key"])
    if case.mechanism == "OAUTHBEARER":
        from kafka.net.sasl.oauth import AbstractTokenProvider

        class UnsecuredToken(AbstractTokenProvider):  # type: ignore[misc]
            def token(self) -> str:
                return _unsecured_jwt("oauth-user")

        return {**config, **python_client_sasl(case, UnsecuredToken())}
    return {**config, **python_client_sasl(case)}


def python_client_sasl(case: Case, token_provider: Any = None) -> dict[str, Any]:
    """kafka-python's and aiokafka's SASL options (they share the names); `token_provider` (each
    library's own kind) for OAUTHBEARER."""
    if case.mechanism == "OAUTHBEARER":
        return {"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": token_provider}
    if case.mechanism:
        return {
            "sasl_mechanism": case.mechanism,
            "sasl_plain_username": case.user,
            "sasl_plain_password": case.password,
        }
    return {}


@pytest.mark.parametrize("case", CASES + OAUTH_CASES, ids=str)
def test_kafka_python(secured: Secured, case: Case, kp_closing: Callable[[Any], Any]) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    config = kafka_python_config(secured, case)
    topic = f"sec-kp-{case}-{uuid.uuid4().hex[:8]}"
    admin = kp_closing(KafkaAdminClient(**config))
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    assert topic in admin.list_topics()
    producer = kp_closing(KafkaProducer(**config))
    for future in [producer.send(topic, value) for value in _values(topic)]:
        future.get(timeout=15)
    group = f"{topic}-group"
    consumer = kp_closing(
        KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **config)
    )
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < COUNT and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            seen.extend(record.value for record in records)
    consumer.commit()
    assert sorted(seen) == sorted(_values(topic))
    offsets = admin.list_group_offsets(group)
    offsets = offsets.get(group, offsets)  # group -> {partition: offset and metadata}
    assert sum(meta.offset for meta in offsets.values()) == COUNT


# --- aiokafka ---------------------------------------------------------------------------------------------


def aiokafka_config(secured: Secured, case: Case) -> dict[str, Any]:
    from aiokafka.helpers import create_ssl_context

    config: dict[str, Any] = {
        "bootstrap_servers": secured.bootstrap(case.listener),
        "security_protocol": case.protocol,
    }
    if case.tls:
        config["ssl_context"] = create_ssl_context(
            cafile=str(secured.certs["ca.pem"]),
            certfile=str(secured.certs["client.pem"]) if case.client_cert else None,
            keyfile=str(secured.certs["client.key"]) if case.client_cert else None,
        )
    if case.mechanism == "OAUTHBEARER":
        from aiokafka.abc import AbstractTokenProvider

        class UnsecuredToken(AbstractTokenProvider):  # type: ignore[misc]
            async def token(self) -> str:
                return _unsecured_jwt("oauth-user")

        return {**config, **python_client_sasl(case, UnsecuredToken())}
    return {**config, **python_client_sasl(case)}


@pytest.mark.parametrize("case", CASES + OAUTH_CASES, ids=str)
def test_aiokafka(secured: Secured, case: Case) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    config = aiokafka_config(secured, case)
    topic = f"sec-aio-{case}-{uuid.uuid4().hex[:8]}"
    group = f"{topic}-group"

    async def scenario() -> tuple[list[bytes], int]:
        admin = AIOKafkaAdminClient(**config)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
            assert topic in await admin.list_topics()
            producer = AIOKafkaProducer(**config)
            await producer.start()
            try:
                for value in _values(topic):
                    await producer.send_and_wait(topic, value)
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer(
                topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **config
            )
            await consumer.start()
            seen: list[bytes] = []
            try:
                deadline = time.monotonic() + 30
                while len(seen) < COUNT and time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=500)
                    for records in batches.values():
                        seen.extend(record.value for record in records)
                await consumer.commit()
            finally:
                await consumer.stop()
            offsets = await admin.list_consumer_group_offsets(group)
            return seen, sum(meta.offset for meta in offsets.values())
        finally:
            await admin.close()

    seen, committed = run_async(asyncio.wait_for(scenario(), 60))
    assert sorted(seen) == sorted(_values(topic))
    assert committed == COUNT


# --- the Java client --------------------------------------------------------------------------------------


def java_properties(secured: Secured, case: Case, directory: Path) -> Path:
    lines = [f"security.protocol={case.protocol}"]
    if case.tls:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={secured.certs['ca.pem']}"]
    if case.client_cert:
        lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={secured.certs['client-keystore.pem']}"]
    if case.mechanism == "OAUTHBEARER":
        # Kafka's unsecured development tokens (an unsigned JWS made by the client's default login handler)
        lines += [
            "sasl.mechanism=OAUTHBEARER",
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'unsecuredLoginStringClaim_sub="{case.user}";',
        ]
    elif case.mechanism:
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if case.mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        lines += [
            f"sasl.mechanism={case.mechanism}",
            f'sasl.jaas.config={module} required username="{case.user}" password="{case.password}";',
        ]
    path = directory / f"{case}.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


# OAUTHBEARER's unsecured login needs jackson-databind beside the client: tools/fetch_java_client.py puts
# pyspark's jackson jars on the class path
@pytest.mark.parametrize("case", CASES + OAUTH_CASES, ids=str)
def test_java_client(secured: Secured, case: Case, tmp_path: Path) -> None:
    from compat_tests.java_probe import probe_command, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if case.mechanism == "OAUTHBEARER" and not _java_has_jackson():
        pytest.skip("no jackson-databind on the Java client's class path (pyspark absent?)")
    env = {**os.environ, "KAFKACOMPAT_CLIENT_CONFIG": str(java_properties(secured, case, tmp_path))}
    bootstrap = secured.bootstrap(case.listener)

    def probe(*args: str) -> list[list[str]]:
        result = subprocess.run(
            [*probe_command(), args[0], bootstrap, *args[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert result.returncode == 0, (
            f"java probe {args} failed:\n{result.stdout[-2000:]}{result.stderr[-4000:]}"
        )
        return [line.split(" ") for line in result.stdout.splitlines() if line]

    topic = f"sec-java-{case}-{uuid.uuid4().hex[:8]}"
    create_topic(secured.bootstrap("PLAINTEXT"), topic, partitions=3)  # the probe writes to partitions 0-2
    admin = probe("admin", f"{topic}-admin")
    assert ["deleted", f"{topic}-admin"] in admin
    acked = [fields for fields in probe("produce", topic, "lz4", str(COUNT)) if fields[0] == "acked"]
    assert len(acked) == COUNT
    consumed = probe("consume-group", topic, f"{topic}-group", str(COUNT))
    assert len([fields for fields in consumed if fields[0] == "record"]) == COUNT
    committed = [fields for fields in consumed if fields[0] == "committed"]
    assert sum(int(fields[2]) for fields in committed) == COUNT


def _java_has_jackson() -> bool:
    from compat_tests.java_probe import _classpath

    classpath, _ = _classpath()
    return classpath is not None and "jackson-databind" in classpath


# --- kafkacompat's own tools against the secured listeners (--command-config) ---------------------------


def _cli(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run(
        [sys.executable, "-m", "kafkacompat", *args], capture_output=True, text=True, input=input, timeout=60
    )


def test_kafkacompat_tools_with_command_config(secured: Secured, tmp_path: Path) -> None:
    plaintext = secured.bootstrap("PLAINTEXT")
    added = _cli("users", "add", "--bootstrap-server", plaintext, "--user", "cli-user", input="cli-secret\n")
    assert added.returncode == 0, added.stderr
    assert "Completed updating SCRAM-SHA-256 credential of user-principal 'cli-user'." in added.stdout
    topic = f"sec-cli-{uuid.uuid4().hex[:8]}"
    create_topic(plaintext, topic)
    configs = {
        "sasl_ssl-scram": (
            "SASL_SSL",
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            f"ssl.truststore.type=PEM\nssl.truststore.location={secured.certs['ca.pem']}\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="cli-user" password="cli-secret";\n',
        ),
        "sasl_plaintext-plain": (
            "SASL_PLAINTEXT",
            f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username={PLAIN_USER}\n"
            f"sasl.password={PLAIN_PASSWORD}\n",
        ),
        "mtls": (
            "MTLS",
            f"security.protocol=SSL\nssl.ca.location={secured.certs['ca.pem']}\n"
            f"ssl.certificate.location={secured.certs['client.pem']}\nssl.key.location={secured.certs['client.key']}\n",
        ),
    }
    for name, (listener, text) in configs.items():
        properties = tmp_path / f"{name}.properties"
        properties.write_text(text)
        common = ["--bootstrap-server", secured.bootstrap(listener), "--command-config", str(properties)]
        listed = _cli("topics", "list", *common)
        assert listed.returncode == 0 and topic in listed.stdout.split(), (name, listed.stderr)
        produced = _cli("produce", "--topic", topic, *common, input=f"via {name}\n")
        assert produced.returncode == 0, (name, produced.stderr)
        described = _cli("users", "describe", "--user", "cli-user", *common)
        assert described.returncode == 0, (name, described.stderr)
        assert "SCRAM-SHA-256=[iterations=4096],SCRAM-SHA-512=[iterations=4096]" in described.stdout
    consumed = _cli(
        "consume",
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "3",
        "--bootstrap-server",
        plaintext,
    )
    assert sorted(consumed.stdout.split("\n")[:3]) == sorted(f"via {name}" for name in configs), (
        consumed.stderr
    )
    # a wrong password: the broker's message, status 1
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(configs["sasl_plaintext-plain"][1].replace(PLAIN_PASSWORD, "nope"))
    refused = _cli(
        "topics",
        "list",
        "--bootstrap-server",
        secured.bootstrap("SASL_PLAINTEXT"),
        "--command-config",
        str(wrong),
    )
    assert refused.returncode == 1
    assert "Authentication failed: Invalid username or password" in refused.stderr
    deleted = _cli("users", "delete", "--user", "cli-user", "--bootstrap-server", plaintext)
    assert deleted.returncode == 0, deleted.stderr
    gone = _cli("users", "describe", "--user", "cli-user", "--bootstrap-server", plaintext)
    assert "RESOURCE_NOT_FOUND" in gone.stderr


def test_librdkafka_reauthenticates_kip_368(
    secured: Secured, monkeypatch: pytest.MonkeyPatch, ck_closing: Callable[[Any], Any]
) -> None:
    """On a listener with connections.max.reauth.ms, librdkafka re-authenticates on the same connections
    before their sessions end, and producing and consuming carry on throughout."""
    from confluent_kafka import Consumer, Producer

    from kafkacompat.broker.handlers import sasl_handshake

    handshakes: list[tuple[int, bool]] = []  # (connection id, already authenticated)
    real_handle = sasl_handshake.handle

    async def recording_handle(ctx: Any, request: Any) -> Any:
        session = ctx.connection.sasl_session
        handshakes.append((ctx.connection.connection_id, session is not None and session.complete))
        return await real_handle(ctx, request)

    monkeypatch.setattr(sasl_handshake, "handle", recording_handle)
    case = Case("REAUTH", "SASL_PLAINTEXT", "SCRAM-SHA-256")
    config = rdkafka_config(secured, case)
    topic = f"sec-reauth-{uuid.uuid4().hex[:8]}"
    create_topic(secured.bootstrap("PLAINTEXT"), topic)
    producer = ck_closing(Producer(config))
    consumer = ck_closing(Consumer({**config, "group.id": f"{topic}-g", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    sent, seen, errors = 0, 0, []
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        producer.produce(topic, f"r{sent}".encode(), on_delivery=lambda err, msg: err and errors.append(err))
        sent += 1
        producer.poll(0)
        message = consumer.poll(0.2)
        if message is not None:
            if message.error() is None:
                seen += 1
            else:
                errors.append(message.error())
    producer.flush(10)
    producer.close()
    while seen < sent:
        message = consumer.poll(2)
        if message is None:
            break
        seen += message.error() is None
    consumer.close()
    assert not errors and seen == sent, (errors, seen, sent)
    reauthenticated = {conn for conn, authenticated in handshakes if authenticated}
    assert reauthenticated, f"no re-authentication seen: {handshakes}"
