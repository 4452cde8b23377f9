"""The SASL mechanisms and session, sans-io: RFC 7677's SCRAM exchange, PLAIN, OAUTHBEARER, bad tokens."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from kafkacompat.security.credentials import ScramCredential, ScramCredentialStore
from kafkacompat.security.sasl import (
    COMPLETE,
    FAILED,
    AuthenticationFailed,
    OAuthBearerUnsecuredServer,
    PlainServer,
    SaslSession,
    ScramServer,
    generic_failure,
    parse_jaas,
    plain_users,
)

RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def store_with(
    user: str, password: str, mechanism: str, salt: bytes, iterations: int = 4096
) -> ScramCredentialStore:
    digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    store = ScramCredentialStore()
    store.upsert(user, mechanism, ScramCredential.from_salted_password(mechanism, salt, salted, iterations))
    return store


def test_scram_sha_256_exchange_of_rfc_7677() -> None:
    store = store_with("user", "pencil", "SCRAM-SHA-256", RFC7677_SALT)
    server = ScramServer("SCRAM-SHA-256", store, server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.principal == "User:user"


def test_scram_wrong_proof_and_unknown_user_get_kafkas_generic_message() -> None:
    store = store_with("user", "pencil", "SCRAM-SHA-256", RFC7677_SALT)
    server = ScramServer("SCRAM-SHA-256", store, server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    wrong = base64.b64encode(bytes(32)).decode()
    with pytest.raises(AuthenticationFailed) as refused:
        server.evaluate(f"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p={wrong}".encode())
    assert refused.value.message == generic_failure("SCRAM-SHA-256")
    assert refused.value.message == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism "
        "SCRAM-SHA-256"
    )
    with pytest.raises(AuthenticationFailed):
        ScramServer("SCRAM-SHA-256", store).evaluate(b"n,,n=nobody,r=abc")
    with pytest.raises(AuthenticationFailed):  # a credential for the other mechanism does not count
        ScramServer("SCRAM-SHA-512", store).evaluate(b"n,,n=user,r=abc")


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"garbage",
        b"y,,n=user,r=abc",  # channel binding asked for
        b"p=tls-unique,,n=user,r=abc",
        b"n,,r=abc,n=user",  # wrong order
        b"n,,n=user",  # no nonce
        b"n,,n=us,er,r=abc",
        b"n,,n=user,r=abc,tokenauth=true",  # delegation-token extension
        b"n,a=other,n=user,r=abc",  # authzid differs
        b"n,,n=user,r=a,b",
        b"\xff\xfe",
    ],
)
def test_malformed_scram_client_first_is_refused(first: bytes) -> None:
    store = store_with("user", "pencil", "SCRAM-SHA-256", RFC7677_SALT)
    with pytest.raises(AuthenticationFailed) as refused:
        ScramServer("SCRAM-SHA-256", store).evaluate(first)
    assert refused.value.message == generic_failure("SCRAM-SHA-256")


@pytest.mark.parametrize(
    "final",
    [
        b"c=biws,r=WRONGNONCE,p=AAAA",
        b"r=rOprNGfwEbeRWgbNEkqO%x,c=biws,p=AAAA",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%x",
        b"c=!!!,r=rOprNGfwEbeRWgbNEkqO%x,p=AAAA",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%x,p=not-base64",
        b"c=eSws,r=rOprNGfwEbeRWgbNEkqO%x,p=AAAA",  # "y,," channel binding flag
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%x,p=AAAA",  # proof of the wrong length
    ],
)
def test_malformed_scram_client_final_is_refused(final: bytes) -> None:
    store = store_with("user", "pencil", "SCRAM-SHA-256", RFC7677_SALT)
    server = ScramServer("SCRAM-SHA-256", store, server_nonce=lambda: "%x")
    server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(AuthenticationFailed):
        server.evaluate(final)
    assert not server.complete


def test_plain_messages_are_kafkas() -> None:
    users = {"alice": "alice-secret"}
    assert PlainServer(users).evaluate(b"\x00alice\x00alice-secret") == b""
    assert PlainServer(users).evaluate(b"alice\x00alice\x00alice-secret") == b""
    cases = {
        b"\x00alice\x00wrong": "Authentication failed: Invalid username or password",
        b"\x00bob\x00alice-secret": "Authentication failed: Invalid username or password",
        b"\x00\x00x": "Authentication failed: username not specified",
        b"\x00alice\x00": "Authentication failed: password not specified",
        b"bob\x00alice\x00alice-secret": (
            "Authentication failed: Client requested an authorization id that is different from username"
        ),
        b"no separators": generic_failure("PLAIN"),
    }
    for token, message in cases.items():
        with pytest.raises(AuthenticationFailed) as refused:
            PlainServer(users).evaluate(token)
        assert refused.value.message == message


def test_jaas_parsing() -> None:
    module, options = parse_jaas(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="a;b \\"c\\"";'
    )
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert options["username"] == "admin"
    assert plain_users('x.PlainLoginModule required user_admin="admin-secret" user_alice="pw";') == {
        "admin": "admin-secret",
        "alice": "pw",
    }
    assert options["user_alice"] == 'a;b "c"'
    for bad in (
        "",
        "PlainLoginModule",
        'x.PlainLoginModule required user_a="1"',
        'x required a="1"; y required;',
    ):
        with pytest.raises(ValueError):
            parse_jaas(bad)


def _jwt(claims: dict[str, object], alg: str = "none") -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': alg})}.{part(claims)}."


def test_oauthbearer_unsecured_tokens() -> None:
    now = 1_700_000_000.0
    good = f"n,,\x01auth=Bearer {_jwt({'sub': 'svc', 'exp': now + 60, 'iat': now})}\x01\x01".encode()
    server = OAuthBearerUnsecuredServer({}, clock=lambda: now)
    assert server.evaluate(good) == b"" and server.principal == "User:svc"
    for claims, alg in (
        ({"sub": "svc", "exp": now - 1}, "none"),
        ({"exp": now + 60}, "none"),
        ({"sub": "svc", "exp": now + 60}, "HS256"),
    ):
        token = f"n,,\x01auth=Bearer {_jwt(claims, alg)}\x01\x01".encode()
        server = OAuthBearerUnsecuredServer({}, clock=lambda: now)
        assert json.loads(server.evaluate(token))["status"] == "invalid_token"
        with pytest.raises(AuthenticationFailed):
            server.evaluate(b"\x01")


def _session(reauth_ms: int = 0) -> SaslSession:
    return SaslSession(["PLAIN"], lambda name: PlainServer({"alice": "pw"}), 64, 100, reauth_ms)


def test_session_allows_only_the_sasl_apis_before_authentication_and_fails_oversized_tokens() -> None:
    session = _session()
    assert session.allows(18, 0) and session.allows(17, 0) and session.allows(36, 0)
    assert not session.allows(3, 0) and not session.allows(0, 0)
    assert not session.handshake("SCRAM-SHA-256", 1) and session.state == FAILED
    session = _session()
    assert session.handshake("PLAIN", 1)
    with pytest.raises(AuthenticationFailed):
        session.authenticate(b"\x00alice\x00" + b"p" * 100, 0)
    assert session.state == FAILED


def test_session_lifetime_and_reauthentication() -> None:
    session = _session(reauth_ms=1000)
    assert session.handshake("PLAIN", 1)
    session.authenticate(b"\x00alice\x00pw", 10.0)
    assert session.state == COMPLETE and session.principal == "User:alice" and session.expires_at == 11.0
    assert session.allows(3, 10.5) and not session.allows(3, 11.0) and session.allows(17, 11.0)
    assert session.begin_reauthentication("PLAIN", 10.9) and session.handshake("PLAIN", 1)
    session.authenticate(b"\x00alice\x00pw", 10.9)
    assert session.complete and session.expires_at == pytest.approx(11.9)
    assert not _session(reauth_ms=0).begin_reauthentication("PLAIN", 0)
