"""The async inter-broker client against a real broker in the test's trio run (negotiation, requests,
SASL, TLS) and against a scripted peer (version ranges, a silent peer, a closing peer, a wrong answer)."""

from __future__ import annotations

import hashlib
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from kafkacompat.broker._tests.wire_client import start_broker
from kafkacompat.broker.dispatch import supported_versions
from kafkacompat.broker.server import Broker
from kafkacompat.config import BrokerConfig
from kafkacompat.replication.inter_broker_client import (
    InterBrokerConnection,
    InterBrokerError,
    InterBrokerTimeout,
    connect,
)
from kafkacompat.security.client_auth import ClientSecurity
from kafkacompat.security.inter_broker import inter_broker_client
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.framing import FrameBuffer
from kafkacompat.wire.header import decode_request_header, encode_response_header
from kafkacompat.wire.messages import API_SPECS, encode_response, request_class, response_class

METADATA, API_VERSIONS, FETCH = ApiKey.METADATA, ApiKey.API_VERSIONS, ApiKey.FETCH
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)


async def open_to(port: int, *, timeout: float = 10.0, security: ClientSecurity | None = None) -> Any:
    return await connect("127.0.0.1", port, client_id="broker-0-test", timeout=timeout, security=security)


def metadata_request() -> Any:
    return request_class(METADATA)(topics=None, allow_auto_topic_creation=False)


# --- a real broker ---------------------------------------------------------------------------------------


async def test_negotiates_versions_and_round_trips_requests(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "node.id=7")
    connection = await open_to(broker.port)  # type: ignore[attr-defined]
    try:
        served = {key: (low, high) for key, low, high in supported_versions()}
        assert connection.versions == served
        metadata_high = min(served[METADATA][1], API_SPECS[METADATA].max_version)
        assert connection.version_for(METADATA) == metadata_high
        assert connection.version_for(METADATA, cap=4) == 4
        with pytest.raises(InterBrokerError, match="does not serve LeaderAndIsr"):
            connection.version_for(ApiKey.LEADER_AND_ISR)  # a single node serves no controller requests

        # several requests on the one connection, each answered to its own correlation id
        for _ in range(3):
            response = await connection.send(METADATA, metadata_high, metadata_request())
            assert [(b.node_id, b.port) for b in response.brokers] == [(7, broker.port)]  # type: ignore[attr-defined]
        hello = request_class(API_VERSIONS)(client_software_name="test", client_software_version="1")
        versions = await connection.send(API_VERSIONS, 3, hello)
        assert versions.error_code == ErrorCode.NONE
        assert {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys} == served
        assert not connection.closed
    finally:
        await connection.aclose()
    assert connection.closed
    with pytest.raises(InterBrokerError, match="closed"):
        await connection.send(METADATA, metadata_high, metadata_request())
    await connection.aclose()  # twice is fine


async def test_nothing_listening_raises(tmp_path: Path) -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: the connection is refused
        with pytest.raises(InterBrokerError, match=r"cannot connect to 127\.0\.0\.1"):
            await open_to(port)


# --- a scripted peer ----------------------------------------------------------------------------------


async def start_peer(nursery: trio.Nursery, served: dict[int, tuple[int, int]], after: str) -> int:
    """A peer that answers ApiVersions with `served` and SaslHandshake with PLAIN, then for any other
    request: `silent` (no answer),
    `close` (closes the connection), `wrong-id` (answers another correlation id)."""

    async def answer(stream: trio.SocketStream, api_key: int, version: int, cid: int, body: Any) -> None:
        payload = encode_response_header(api_key, version, cid) + b"".join(
            bytes(chunk) for chunk in encode_response(api_key, version, body)
        )
        await stream.send_all(len(payload).to_bytes(4, "big") + payload)

    async def serve(stream: trio.SocketStream) -> None:
        frames = FrameBuffer()
        while data := await stream.receive_some(65536):
            frames.receive_data(data)
            while (frame := frames.next_frame()) is not None:
                header, _ = decode_request_header(frame)
                key, version, cid = header.request_api_key, header.request_api_version, header.correlation_id
                if key == API_VERSIONS:
                    cls = response_class(API_VERSIONS)
                    keys = [
                        cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                        for k, (lo, hi) in served.items()
                    ]
                    await answer(stream, key, version, cid, cls(api_keys=keys))
                elif key == ApiKey.SASL_HANDSHAKE:
                    handshake = response_class(key)(error_code=0, mechanisms=["PLAIN"])
                    await answer(stream, key, version, cid, handshake)
                elif after == "close":
                    await stream.aclose()
                    return
                elif after == "wrong-id":
                    await answer(stream, key, version, cid + 7, response_class(key)())
        await trio.sleep_forever()  # "silent" peers keep the connection open

    listeners = await nursery.start(trio.serve_tcp, serve, 0)
    return int(listeners[0].socket.getsockname()[1])


async def test_version_for_is_the_highest_both_serve(nursery: trio.Nursery) -> None:
    fetch = API_SPECS[FETCH]
    served = {
        API_VERSIONS: (0, 3),
        METADATA: (1, 5),
        FETCH: (0, fetch.max_version + 5),  # newer than our codecs
        ApiKey.PRODUCE: (
            API_SPECS[ApiKey.PRODUCE].max_version + 1,
            API_SPECS[ApiKey.PRODUCE].max_version + 3,
        ),
    }
    connection = await open_to(await start_peer(nursery, served, "silent"))
    try:
        assert connection.versions == served
        assert connection.version_for(METADATA) == 5
        assert connection.version_for(METADATA, cap=2) == 2
        assert connection.version_for(FETCH) == fetch.max_version
        with pytest.raises(InterBrokerError, match="no Produce version in common"):
            connection.version_for(ApiKey.PRODUCE)
        with pytest.raises(InterBrokerError, match="does not serve OffsetCommit"):
            connection.version_for(ApiKey.OFFSET_COMMIT)
    finally:
        connection.close()


async def test_a_request_without_an_answer_times_out_and_closes_the_connection(nursery: trio.Nursery) -> None:
    connection: InterBrokerConnection = await open_to(
        await start_peer(nursery, {API_VERSIONS: (0, 3), METADATA: (0, 12)}, "silent"), timeout=0.3
    )
    started = trio.current_time()
    with pytest.raises(InterBrokerTimeout, match=r"Metadata to 127\.0\.0\.1:\d+: no answer within 0\.3s"):
        await connection.send(METADATA, 12, metadata_request())
    assert 0.25 <= trio.current_time() - started < 5
    assert connection.closed  # a late answer must never be read as the next request's
    with pytest.raises(InterBrokerError, match="closed") as failure:
        await connection.send(METADATA, 12, metadata_request())
    assert not isinstance(failure.value, InterBrokerTimeout)


async def test_a_peer_that_never_answers_api_versions_times_out_connecting(nursery: trio.Nursery) -> None:
    async def mute(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    listeners = await nursery.start(trio.serve_tcp, mute, 0)
    with pytest.raises(InterBrokerTimeout, match="ApiVersions"):
        await open_to(listeners[0].socket.getsockname()[1], timeout=0.2)


async def test_a_peer_that_stops_answering_during_sasl_times_out_connecting(nursery: trio.Nursery) -> None:
    """The SASL exchange runs in a worker thread and sends on the loop: the timeout reaches it there."""
    port = await start_peer(nursery, {API_VERSIONS: (0, 3), ApiKey.SASL_HANDSHAKE: (0, 1)}, "silent")
    plain = ClientSecurity(protocol="SASL_PLAINTEXT", mechanism="PLAIN", username="u", password="p")
    with trio.fail_after(5):
        with pytest.raises(InterBrokerTimeout, match="SaslAuthenticate to 127"):
            await open_to(port, timeout=0.2, security=plain)


async def test_a_closed_peer_raises(nursery: trio.Nursery) -> None:
    connection = await open_to(await start_peer(nursery, {API_VERSIONS: (0, 3), METADATA: (0, 12)}, "close"))
    with pytest.raises(InterBrokerError, match="closed the connection") as failure:
        await connection.send(METADATA, 12, metadata_request())
    assert not isinstance(failure.value, InterBrokerTimeout)
    assert connection.closed


async def test_an_answer_to_another_correlation_id_raises(nursery: trio.Nursery) -> None:
    connection = await open_to(
        await start_peer(nursery, {API_VERSIONS: (0, 3), METADATA: (0, 12)}, "wrong-id")
    )
    with pytest.raises(InterBrokerError, match="for correlation id 9, expected 2"):
        await connection.send(METADATA, 12, metadata_request())
    assert connection.closed


async def test_closing_fails_a_waiting_request_at_once(nursery: trio.Nursery) -> None:
    connection = await open_to(await start_peer(nursery, {API_VERSIONS: (0, 3), METADATA: (0, 12)}, "silent"))
    failures: list[BaseException] = []

    async def waiting() -> None:
        try:
            await connection.send(METADATA, 12, metadata_request())
        except InterBrokerError as exc:
            failures.append(exc)

    with trio.fail_after(5):
        async with trio.open_nursery() as inner:
            inner.start_soon(waiting)
            await trio.sleep(0.05)
            connection.close()
    assert len(failures) == 1 and not isinstance(failures[0], InterBrokerTimeout)


# --- SASL and TLS, with the settings the broker's own inter-broker client resolves -------------------------


def listener_overrides(names: list[str], certs: dict[str, Path] | None) -> list[str]:
    overrides = [
        "listeners=" + ",".join(f"{name}://127.0.0.1:0" for name in names),
        "listener.security.protocol.map=" + ",".join(f"{name}:{name}" for name in names),
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        f"sasl.jaas.config={PLAIN_JAAS}",
    ]
    if certs is not None:
        overrides += [
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={certs['broker-keystore.pem']}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={certs['ca.pem']}",
        ]
    return overrides


async def start_secured(nursery: trio.Nursery, tmp_path: Path, overrides: list[str]) -> dict[str, int]:
    broker = Broker(BrokerConfig.load(None, [f"log.dirs={tmp_path / 'data'}", "node.id=7", *overrides]))
    bound = await nursery.start(broker.run)
    return {listener.name: listener.port for listener in bound}


def security_for(overrides: list[str], *extra: str) -> ClientSecurity:
    """The ClientSecurity of a broker with these listener settings (and `extra`) for inter-broker traffic."""
    config = BrokerConfig.load(None, ["log.dirs=/tmp/unused", *overrides, *extra])
    _, security = inter_broker_client(config)
    assert security is not None
    return security


async def add_scram_user(port: int, user: str, password: str) -> None:
    """AlterUserScramCredentials (SCRAM-SHA-512) over the PLAINTEXT listener."""
    cls = request_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
    salt = secrets.token_bytes(16)
    upsertion = cls.ScramCredentialUpsertion(
        name=user,
        mechanism=2,
        iterations=4096,
        salt=salt,
        salted_password=hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 4096),
    )
    admin = await open_to(port)
    try:
        answer = await admin.send(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, cls(deletions=[], upsertions=[upsertion])
        )
    finally:
        admin.close()
    assert [r.error_code for r in answer.results] == [ErrorCode.NONE]


async def assert_serves_metadata(connection: InterBrokerConnection) -> None:
    try:
        response = await connection.send(METADATA, connection.version_for(METADATA), metadata_request())
        assert [b.node_id for b in response.brokers] == [7]
    finally:
        await connection.aclose()


async def test_sasl_plain_and_scram(nursery: trio.Nursery, tmp_path: Path) -> None:
    overrides = listener_overrides(["PLAINTEXT", "SASL_PLAINTEXT"], None)
    ports = await start_secured(
        nursery, tmp_path, [*overrides, "connection.failed.authentication.delay.ms=0"]
    )
    sasl = ["inter.broker.listener.name=SASL_PLAINTEXT"]
    plain = security_for(overrides, *sasl, "sasl.mechanism.inter.broker.protocol=PLAIN")
    assert (plain.mechanism, plain.username) == ("PLAIN", "admin")
    await assert_serves_metadata(await open_to(ports["SASL_PLAINTEXT"], security=plain))

    wrong = security_for(
        overrides,
        *sasl,
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain."
        'PlainLoginModule required username="admin" password="guess";',
    )
    with pytest.raises(InterBrokerError, match=r"SASL authentication to 127\.0\.0\.1:\d+ failed"):
        await open_to(ports["SASL_PLAINTEXT"], security=wrong)

    await add_scram_user(ports["PLAINTEXT"], "carol", "carol-pw")
    scram = security_for(
        overrides,
        *sasl,
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram."
        'ScramLoginModule required username="carol" password="carol-pw";',
    )
    await assert_serves_metadata(await open_to(ports["SASL_PLAINTEXT"], security=scram))

    # a mechanism the listener does not enable is refused at the handshake
    gssapi = ClientSecurity(protocol="SASL_PLAINTEXT", mechanism="GSSAPI", username="x", password="y")
    with pytest.raises(InterBrokerError, match=r"SASL mechanism GSSAPI refused by .*\(enabled: PLAIN, SCRAM"):
        await open_to(ports["SASL_PLAINTEXT"], security=gssapi)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    from kafkacompat.commands.dev_certs import make_dev_certs

    return make_dev_certs(tmp_path_factory.mktemp("certs"))


async def test_tls_and_sasl_ssl(nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]) -> None:
    overrides = listener_overrides(["PLAINTEXT", "SSL", "SASL_SSL"], certs)
    ports = await start_secured(nursery, tmp_path, overrides)
    tls = security_for(overrides, "inter.broker.listener.name=SSL")
    assert tls.tls and not tls.sasl and tls.context is not None
    await assert_serves_metadata(await open_to(ports["SSL"], security=tls))

    sasl_ssl = security_for(
        overrides, "inter.broker.listener.name=SASL_SSL", "sasl.mechanism.inter.broker.protocol=PLAIN"
    )
    assert sasl_ssl.tls and sasl_ssl.sasl
    await assert_serves_metadata(await open_to(ports["SASL_SSL"], security=sasl_ssl))

    # without the development CA in the truststore, the broker's certificate does not verify
    untrusted = security_for(
        listener_overrides(["PLAINTEXT", "SSL", "SASL_SSL"], None), "inter.broker.listener.name=SSL"
    )
    with pytest.raises(
        InterBrokerError, match=r"TLS handshake with 127\.0\.0\.1:\d+ failed.*CERTIFICATE_VERIFY_FAILED"
    ):
        await open_to(ports["SSL"], security=untrusted)
    # TLS spoken to a plaintext listener: no handshake
    with pytest.raises(InterBrokerError, match="TLS handshake"):
        await open_to(ports["PLAINTEXT"], security=tls, timeout=2)
