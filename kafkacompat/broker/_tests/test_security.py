"""SSL, mTLS and SASL listeners on the wire: principals, the SASL exchanges, and every kind of bad input.

A broker with PLAINTEXT, SSL, MTLS (SSL with ssl.client.auth=required), SASL_PLAINTEXT and SASL_SSL
listeners runs in the test's trio run; raw clients (optionally over TLS) speak the protocol, so the tests
see exactly what reaches the wire: answers, error messages, closed connections. Certificates come from
`kafkacompat dev-certs` (needs the openssl command).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
import shutil
import ssl
import struct
from pathlib import Path
from typing import Any

import pytest
import trio

from kafkacompat.broker._tests.wire_client import RawClient, batch, create, produce, request
from kafkacompat.broker.server import Broker
from kafkacompat.config import BrokerConfig, ConfigError
from kafkacompat.wire.errors import ErrorCode

METADATA, API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 3, 18, 17, 36
DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from kafkacompat.commands.dev_certs import make_dev_certs

    return make_dev_certs(tmp_path_factory.mktemp("certs"), client_cn="probe")


def secured_overrides(certs: dict[str, Path], *extra: str) -> list[str]:
    return [
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,"
        "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "SASL_SSL:SASL_SSL",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs['broker-keystore.pem']}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs['ca.pem']}",
        "listener.name.mtls.ssl.client.auth=required",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        f"sasl.jaas.config={PLAIN_JAAS}",
        "connection.failed.authentication.delay.ms=200",
        *extra,
    ]


async def start_secured(nursery: trio.Nursery, data_dir: Path, certs: dict[str, Path], *extra: str) -> Broker:
    config = BrokerConfig.load(None, [f"log.dirs={data_dir}", *secured_overrides(certs, *extra)])
    broker = Broker(config)
    bound = await nursery.start(broker.run)
    broker.ports = {listener.name: listener.port for listener in bound}  # type: ignore[attr-defined]
    return broker


async def connect(
    broker: Broker, listener: str, certs: dict[str, Path], *, client_cert: bool = False
) -> RawClient:
    port = broker.ports[listener]  # type: ignore[attr-defined]
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    if listener in ("SSL", "MTLS", "SASL_SSL"):
        context = ssl.create_default_context(cafile=str(certs["ca.pem"]))
        if client_cert:
            context.load_cert_chain(str(certs["client-keystore.pem"]))
        tls = trio.SSLStream(stream, context, server_hostname="127.0.0.1")
        await tls.do_handshake()
        return RawClient(tls)  # type: ignore[arg-type]
    return RawClient(stream)


async def handshake(client: RawClient, mechanism: str, version: int = 1) -> Any:
    return await client.call(SASL_HANDSHAKE, version, request(SASL_HANDSHAKE, mechanism=mechanism))


async def authenticate(client: RawClient, token: bytes, version: int = 2) -> Any:
    return await client.call(SASL_AUTHENTICATE, version, request(SASL_AUTHENTICATE, auth_bytes=token))


async def plain_login(client: RawClient, user: str, password: str) -> Any:
    assert (await handshake(client, "PLAIN")).error_code == ErrorCode.NONE
    return await authenticate(client, f"\x00{user}\x00{password}".encode())


def _digest(mechanism: str) -> Any:
    return hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512


async def scram_login(client: RawClient, mechanism: str, user: str, password: str) -> Any:
    """An RFC 5802 client; returns the final SaslAuthenticate answer (server signature checked)."""
    assert (await handshake(client, mechanism)).error_code == ErrorCode.NONE
    nonce = base64.b64encode(secrets.token_bytes(18)).decode()
    first_bare = f"n={user},r={nonce}"
    answer = await authenticate(client, f"n,,{first_bare}".encode())
    if answer.error_code != ErrorCode.NONE:
        return answer
    server_first = bytes(answer.auth_bytes).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    assert fields["r"].startswith(nonce)
    digest = _digest(mechanism)
    salted = hashlib.pbkdf2_hmac(
        digest().name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(digest(client_key).digest(), auth_message, digest).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    final = await authenticate(client, f"{without_proof},p={proof}".encode())
    if final.error_code == ErrorCode.NONE:
        server_key = hmac.new(salted, b"Server Key", digest).digest()
        expected = b"v=" + base64.b64encode(hmac.new(server_key, auth_message, digest).digest())
        assert bytes(final.auth_bytes) == expected
    return final


async def add_scram_user(
    client: RawClient, user: str, password: str, mechanism: int, iterations: int = 4096
) -> Any:
    name = "SCRAM-SHA-256" if mechanism == 1 else "SCRAM-SHA-512"
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac(_digest(name)().name, password.encode(), salt, iterations)
    upsertion = request(ALTER_SCRAM).ScramCredentialUpsertion(
        name=user, mechanism=mechanism, iterations=iterations, salt=salt, salted_password=salted
    )
    return await client.call(ALTER_SCRAM, 0, request(ALTER_SCRAM, deletions=[], upsertions=[upsertion]))


def record_principals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str | None]]:
    from kafkacompat.broker.handlers import metadata

    seen: list[tuple[str, str, str | None]] = []
    real_handle = metadata.handle

    async def recording_handle(ctx: Any, body: Any) -> Any:
        info = ctx.connection
        seen.append((info.security_protocol, info.principal, info.sasl_mechanism))
        return await real_handle(ctx, body)

    monkeypatch.setattr(metadata, "handle", recording_handle)
    return seen


async def metadata_ok(client: RawClient) -> bool:
    response = await client.call(METADATA, 12, request(METADATA, topics=None))
    return bool(response.brokers)


# --- principals and the good paths --------------------------------------------------------------------


async def test_each_listener_gives_its_principal(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = record_principals(monkeypatch)
    broker = await start_secured(nursery, tmp_path, certs)
    assert await metadata_ok(await connect(broker, "PLAINTEXT", certs))
    assert await metadata_ok(await connect(broker, "SSL", certs))
    assert await metadata_ok(await connect(broker, "SSL", certs, client_cert=True))  # not asked for: ignored
    assert await metadata_ok(await connect(broker, "MTLS", certs, client_cert=True))
    plain = await connect(broker, "SASL_PLAINTEXT", certs)
    assert (await plain_login(plain, "alice", "alice-secret")).error_code == ErrorCode.NONE
    assert await metadata_ok(plain)
    admin = await connect(broker, "PLAINTEXT", certs)
    assert (await add_scram_user(admin, "carol", "carol-pw", 2)).results[0].error_code == ErrorCode.NONE
    scram = await connect(broker, "SASL_SSL", certs)
    assert (await scram_login(scram, "SCRAM-SHA-512", "carol", "carol-pw")).error_code == ErrorCode.NONE
    assert await metadata_ok(scram)
    assert seen == [
        ("PLAINTEXT", "User:ANONYMOUS", None),
        ("SSL", "User:ANONYMOUS", None),
        ("SSL", "User:ANONYMOUS", None),
        ("SSL", "User:CN=probe,O=kafkacompat development", None),
        ("SASL_PLAINTEXT", "User:alice", "PLAIN"),
        ("SASL_SSL", "User:carol", "SCRAM-SHA-512"),
    ]


async def test_produce_and_large_fetch_over_tls(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    """Fetch over TLS goes through the staging writer (no sendfile): many batches, several MiB, intact."""
    from kafkacompat.broker._tests.wire_client import fetch_request

    broker = await start_secured(nursery, tmp_path, certs)
    client = await connect(broker, "SASL_SSL", certs)
    assert (await plain_login(client, "admin", "admin-secret")).error_code == ErrorCode.NONE
    assert (await create(client, "tls-fetch")).error_code == ErrorCode.NONE
    payloads = [os.urandom(200_000) for _ in range(15)]
    for payload in payloads:
        assert (await produce(client, "tls-fetch", batch(payload, payload[:1000]))).error_code == 0
    body = fetch_request("tls-fetch", 0, max_bytes=50 << 20, partition_max_bytes=50 << 20)
    response = await client.call(1, 12, body)
    records = bytes(response.responses[0].partitions[0].records)
    assert len(records) > 3_000_000
    for payload in payloads:
        assert payload in records


async def test_scram_credentials_are_described_altered_and_persisted(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    broker = await start_secured(nursery, tmp_path, certs)
    admin = await connect(broker, "PLAINTEXT", certs)
    assert (await add_scram_user(admin, "dave", "pw-256", 1)).results[0].error_code == ErrorCode.NONE
    assert (await add_scram_user(admin, "dave", "pw-512", 2, iterations=8192)).results[0].error_code == 0
    described = await admin.call(DESCRIBE_SCRAM, 0, request(DESCRIBE_SCRAM, users=None))
    [dave] = [r for r in described.results if r.user == "dave"]
    assert [(c.mechanism, c.iterations) for c in dave.credential_infos] == [(1, 4096), (2, 8192)]
    users = request(DESCRIBE_SCRAM).UserName
    described = await admin.call(DESCRIBE_SCRAM, 0, request(DESCRIBE_SCRAM, users=[users(name="nobody")]))
    assert described.results[0].error_code == ErrorCode.RESOURCE_NOT_FOUND
    described = await admin.call(
        DESCRIBE_SCRAM, 0, request(DESCRIBE_SCRAM, users=[users(name="dave"), users(name="dave")])
    )
    assert described.results[0].error_code == ErrorCode.DUPLICATE_RESOURCE
    stored = (tmp_path / "scram-credentials.json").read_text()
    assert "dave" in stored and "pw-256" not in stored and "stored_key=" in stored
    # bad alterations
    assert (await add_scram_user(admin, "erin", "pw", 1, iterations=1000)).results[0].error_code == (
        ErrorCode.UNACCEPTABLE_CREDENTIAL
    )
    assert (await add_scram_user(admin, "erin", "pw", 7)).results[
        0
    ].error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert (await add_scram_user(admin, "", "pw", 1)).results[
        0
    ].error_code == ErrorCode.UNACCEPTABLE_CREDENTIAL
    deletion = request(ALTER_SCRAM).ScramCredentialDeletion
    missing = await admin.call(
        ALTER_SCRAM, 0, request(ALTER_SCRAM, deletions=[deletion(name="erin", mechanism=1)], upsertions=[])
    )
    assert missing.results[0].error_code == ErrorCode.RESOURCE_NOT_FOUND
    # delete SCRAM-SHA-256: that mechanism is refused, the other still works
    deleted = await admin.call(
        ALTER_SCRAM, 0, request(ALTER_SCRAM, deletions=[deletion(name="dave", mechanism=1)], upsertions=[])
    )
    assert deleted.results[0].error_code == ErrorCode.NONE
    client = await connect(broker, "SASL_PLAINTEXT", certs)
    assert (await scram_login(client, "SCRAM-SHA-256", "dave", "pw-256")).error_code == (
        ErrorCode.SASL_AUTHENTICATION_FAILED
    )
    client = await connect(broker, "SASL_PLAINTEXT", certs)
    assert (await scram_login(client, "SCRAM-SHA-512", "dave", "pw-512")).error_code == ErrorCode.NONE
    # a restart reads them back
    broker.request_shutdown()
    await broker.stopped.wait()
    broker = await start_secured(nursery, tmp_path, certs)
    client = await connect(broker, "SASL_SSL", certs)
    assert (await scram_login(client, "SCRAM-SHA-512", "dave", "pw-512")).error_code == ErrorCode.NONE


async def test_saslhandshake_v0_then_bare_tokens(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    broker = await start_secured(nursery, tmp_path, certs)
    client = await connect(broker, "SASL_PLAINTEXT", certs)
    assert (await handshake(client, "PLAIN", version=0)).error_code == ErrorCode.NONE
    token = b"\x00alice\x00alice-secret"
    await client.send_raw(struct.pack(">i", len(token)) + token)
    answer = await client.read_frame()
    assert answer is not None and bytes(answer) == b""  # PLAIN's empty final challenge
    assert await metadata_ok(client)
    wrong = await connect(broker, "SASL_PLAINTEXT", certs)
    assert (await handshake(wrong, "PLAIN", version=0)).error_code == ErrorCode.NONE
    token = b"\x00alice\x00nope"
    await wrong.send_raw(struct.pack(">i", len(token)) + token)
    assert await wrong.is_closed()


async def test_reauthentication_kip_368(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    broker = await start_secured(nursery, tmp_path, certs, "connections.max.reauth.ms=400")
    client = await connect(broker, "SASL_PLAINTEXT", certs)
    done = await plain_login(client, "alice", "alice-secret")
    assert done.error_code == ErrorCode.NONE and 0 < done.session_lifetime_ms <= 400
    again = await authenticate(client, b"\x00alice\x00alice-secret")  # after success, not a re-authentication
    assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert again.error_message == "SaslAuthenticate request received after successful authentication"
    # re-authenticating as the same user before the lifetime ends keeps the connection
    redone = await plain_login(client, "alice", "alice-secret")
    assert redone.error_code == ErrorCode.NONE and redone.session_lifetime_ms > 0
    assert await metadata_ok(client)
    # as another user: refused
    other = await plain_login(client, "admin", "admin-secret")
    assert other.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Cannot change principals during re-authentication" in other.error_message
    assert await client.is_closed()
    # a session left to expire: the next request closes the connection unanswered
    lapsed = await connect(broker, "SASL_PLAINTEXT", certs)
    assert (await plain_login(lapsed, "alice", "alice-secret")).error_code == ErrorCode.NONE
    await trio.sleep(0.5)
    await lapsed.send(METADATA, 12, request(METADATA, topics=None))
    assert await lapsed.read_frame() is None


# --- bad input ------------------------------------------------------------------------------------------


async def test_wrong_password_gets_kafkas_message_then_a_delayed_close(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    broker = await start_secured(nursery, tmp_path, certs)
    admin = await connect(broker, "PLAINTEXT", certs)
    assert (await add_scram_user(admin, "frank", "frank-very-secret", 1)).results[0].error_code == 0
    client = await connect(broker, "SASL_SSL", certs)
    answer = await plain_login(client, "alice", "not-the-password-xyzzy")
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer.error_message == "Authentication failed: Invalid username or password"
    started = trio.current_time()
    assert await client.is_closed()
    assert trio.current_time() - started >= 0.15  # connection.failed.authentication.delay.ms=200
    client = await connect(broker, "SASL_PLAINTEXT", certs)
    answer = await scram_login(client, "SCRAM-SHA-256", "frank", "guess-plugh")
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism "
        "SCRAM-SHA-256"
    )
    assert await client.is_closed()
    good = await connect(broker, "SASL_PLAINTEXT", certs)
    assert (
        await scram_login(good, "SCRAM-SHA-256", "frank", "frank-very-secret")
    ).error_code == ErrorCode.NONE
    assert await metadata_ok(good)
    # no secret, right or wrong, in any log line
    for secret in (
        "not-the-password-xyzzy",
        "guess-plugh",
        "frank-very-secret",
        "alice-secret",
        "admin-secret",
    ):
        assert secret not in caplog.text
    assert "admin-secret" not in repr(broker.config)


async def test_skipping_authentication_gets_a_closed_connection_and_nothing_else(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    broker = await start_secured(nursery, tmp_path, certs)
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        client = await connect(broker, listener, certs)
        versions = await client.call(
            API_VERSIONS, 3, request(API_VERSIONS, client_software_name="t", client_software_version="1")
        )
        assert versions.error_code == ErrorCode.NONE  # ApiVersions is allowed before authentication
        await client.send(METADATA, 12, request(METADATA, topics=None))
        assert await client.read_frame() is None
        # the half-done exchange: handshake, then a Produce
        client = await connect(broker, listener, certs)
        assert (await handshake(client, "PLAIN")).error_code == ErrorCode.NONE
        await client.send(METADATA, 12, request(METADATA, topics=None))
        assert await client.read_frame() is None
    # an unsupported mechanism: the enabled list, then the close
    client = await connect(broker, "SASL_PLAINTEXT", certs)
    answer = await handshake(client, "GSSAPI")
    assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert await client.is_closed()
    # SaslAuthenticate without a handshake
    client = await connect(broker, "SASL_PLAINTEXT", certs)
    assert (
        await authenticate(client, b"\x00alice\x00alice-secret")
    ).error_code == ErrorCode.ILLEGAL_SASL_STATE
    # a handshake on a listener without SASL
    plain = await connect(broker, "PLAINTEXT", certs)
    assert (await handshake(plain, "PLAIN")).error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert await metadata_ok(plain)


@pytest.mark.parametrize(
    "token",
    [
        b"garbage",
        b"n,,n=alice",
        b"y,,n=alice,r=x",
        b"n,,n=alice,r=x,e=ext",
        b"\xff" * 40,
        b"n,," + b"A" * 70_000,
    ],
)
async def test_malformed_and_oversized_scram_tokens_are_refused(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path], token: bytes
) -> None:
    broker = await start_secured(nursery, tmp_path, certs, "sasl.server.max.receive.size=65536")
    bystander = await connect(broker, "SASL_SSL", certs)
    assert (await plain_login(bystander, "alice", "alice-secret")).error_code == ErrorCode.NONE
    client = await connect(broker, "SASL_SSL", certs)
    assert (await handshake(client, "SCRAM-SHA-256")).error_code == ErrorCode.NONE
    answer = await authenticate(client, token)
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer.error_message.endswith("with SASL mechanism SCRAM-SHA-256")
    assert await client.is_closed()
    assert await metadata_ok(bystander)


async def test_tls_and_plaintext_mixups_fail_only_their_own_connection(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    broker = await start_secured(nursery, tmp_path, certs)
    bystander = await connect(broker, "SSL", certs)
    # plaintext Kafka request to the TLS port
    raw = await trio.open_tcp_stream("127.0.0.1", broker.ports["SSL"])  # type: ignore[attr-defined]
    client = RawClient(raw)
    await client.send(METADATA, 12, request(METADATA, topics=None))
    assert await client.is_closed()
    # a TLS handshake to the plaintext port
    with pytest.raises(trio.BrokenResourceError):
        await connect_tls_to(broker.ports["PLAINTEXT"], certs)  # type: ignore[attr-defined]
    # mTLS listener without a client certificate, or with one of another CA: refused (in TLS 1.3 the
    # client hears of it at its first read)
    assert await refused(broker, "MTLS", certs, None)
    stranger = make_other_certs(tmp_path / "other-ca")
    assert await refused(broker, "MTLS", certs, stranger["client-keystore.pem"])
    assert await metadata_ok(bystander)
    assert await metadata_ok(await connect(broker, "MTLS", certs, client_cert=True))


def make_other_certs(directory: Path) -> dict[str, Path]:
    from kafkacompat.commands.dev_certs import make_dev_certs

    return make_dev_certs(directory, client_cn="stranger")


async def refused(
    broker: Broker, listener: str, certs: dict[str, Path], client_keystore: Path | None
) -> bool:
    stream = await trio.open_tcp_stream("127.0.0.1", broker.ports[listener])  # type: ignore[attr-defined]
    context = ssl.create_default_context(cafile=str(certs["ca.pem"]))
    if client_keystore is not None:
        context.load_cert_chain(str(client_keystore))
    tls = trio.SSLStream(stream, context, server_hostname="127.0.0.1")
    client = RawClient(tls)  # type: ignore[arg-type]
    try:
        await tls.do_handshake()
        await client.send(METADATA, 12, request(METADATA, topics=None))
        return await client.read_frame() is None
    except trio.BrokenResourceError:
        return True


async def connect_tls_to(port: int, certs: dict[str, Path]) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    context = ssl.create_default_context(cafile=str(certs["ca.pem"]))
    tls = trio.SSLStream(stream, context, server_hostname="127.0.0.1")
    with trio.fail_after(10):
        await tls.do_handshake()


# --- configuration --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["sasl.enabled.mechanisms=GSSAPI"], "GSSAPI"),
        (["sasl.jaas.config="], "PLAIN needs"),
        (["ssl.keystore.location=/nonexistent/keystore.pem"], "cannot read"),
        (["listener.name.mtls.ssl.truststore.location=", "ssl.truststore.location="], "needs a truststore"),
        (["ssl.cipher.suites=TLS_NO_SUCH_SUITE"], "ssl.cipher.suites"),
        (["ssl.keystore.key=x"], "ssl.keystore"),
    ],
)
async def test_misconfigured_security_is_refused_at_start_up(
    tmp_path: Path, certs: dict[str, Path], extra: list[str], message: str
) -> None:
    config = BrokerConfig.load(None, [f"log.dirs={tmp_path}", *secured_overrides(certs, *extra)])
    with pytest.raises(BaseExceptionGroup) as failure:
        async with trio.open_nursery() as nursery:
            await nursery.start(Broker(config).run)
    leaves = _leaves(failure.value)
    assert len(leaves) == 1 and isinstance(leaves[0], ConfigError), leaves
    assert message in str(leaves[0])


def _leaves(group: BaseException) -> list[BaseException]:
    if isinstance(group, BaseExceptionGroup):
        return [leaf for inner in group.exceptions for leaf in _leaves(inner)]
    return [group]


async def test_inline_pem_keystore_cipher_suites_and_protocols(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    chain = certs["broker.pem"].read_text()
    key = certs["broker.key"].read_text()
    broker = await start_secured(
        nursery,
        tmp_path,
        certs,
        "ssl.keystore.location=",
        f"listener.name.ssl.ssl.keystore.certificate.chain={chain}",
        f"listener.name.ssl.ssl.keystore.key={key}",
        f"ssl.keystore.certificate.chain={chain}",
        f"ssl.keystore.key={key}",
        "listener.name.ssl.ssl.enabled.protocols=TLSv1.2",
        "listener.name.ssl.ssl.cipher.suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    )
    client = await connect(broker, "SSL", certs)
    tls = client.stream
    assert tls.version() == "TLSv1.2"  # type: ignore[attr-defined]
    assert tls.cipher()[0] == "ECDHE-RSA-AES128-GCM-SHA256"  # type: ignore[attr-defined]
    assert await metadata_ok(client)
    other = await connect(broker, "SASL_SSL", certs)
    assert other.stream.version() == "TLSv1.3"  # type: ignore[attr-defined]


async def test_a_tls_client_that_leaves_while_its_fetch_is_parked_is_no_unexpected_error(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A TLS client that drops its connection without close_notify while its long-poll fetch is parked:
    the socket watcher's read raises BrokenResourceError (not an OSError); it is a client leaving, as it
    is when no request is parked, not an "unexpected error" logged with a traceback (seen in a
    secured-cluster broker's log)."""
    from kafkacompat.broker._tests.wire_client import fetch_request

    caplog.set_level(logging.INFO)
    broker = await start_secured(nursery, tmp_path, certs)
    client = await connect(broker, "SSL", certs)
    assert (await create(client, "tls-parked")).error_code == ErrorCode.NONE
    await client.send(1, 12, fetch_request("tls-parked", 0, max_wait_ms=10_000, min_bytes=1))
    await trio.sleep(0.3)  # parked: nothing to read yet
    tls = client.stream
    await tls.transport_stream.aclose()  # type: ignore[attr-defined]  # TCP gone, no TLS close_notify
    await trio.sleep(0.5)
    unexpected = [r for r in caplog.records if "unexpected error" in r.getMessage()]
    assert not unexpected, [r.getMessage() for r in unexpected]
    # and the broker serves the next client
    other = await connect(broker, "SSL", certs)
    assert await metadata_ok(other)
