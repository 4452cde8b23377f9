"""SASL on the broker side, sans-io: the per-connection authentication state and its mechanisms.

Theory of operation
-------------------
A SASL_PLAINTEXT or SASL_SSL connection owns one `SaslSession`. It starts in HANDSHAKE: only
ApiVersions, SaslHandshake and SaslAuthenticate may be sent (the connection closes on anything else,
as Kafka's SaslServerAuthenticator does). `handshake(mechanism)` picks one of the listener's
`sasl.enabled.mechanisms`; then each `authenticate(token)` feeds the mechanism's server, which answers
a challenge, until it completes (state COMPLETE, `principal` set, "User:<name>") or fails
(`AuthenticationFailed` carrying the message Kafka sends; state FAILED: the connection answers, waits
`connection.failed.authentication.delay.ms` and closes). After SaslHandshake v0 (the pre-KIP-152 flow)
tokens arrive as bare size-prefixed frames without a Kafka header; `raw_tokens` says so.

Mechanisms (each a small state machine; none logs or keeps a secret beyond the exchange):
- PLAIN (RFC 4616): "authzid NUL user NUL password" checked against the listener's JAAS users
  (`user_NAME="password"` options of PlainLoginModule). An authzid must equal the user.
- SCRAM-SHA-256/512 (RFC 5802, RFC 7677): client-first (gs2 header "n,,"; no channel binding; the
  `tokenauth` extension is refused), server-first with a 32-byte random nonce, the stored salt and
  iterations, then client-final: the proof is checked against the stored key, the answer carries the
  server signature. Credentials come from `ScramCredentialStore` (kafkacompat.security.credentials).
- OAUTHBEARER (RFC 7628) with Kafka's unsecured JWS validator: "n,,\\x01auth=Bearer <jwt>\\x01\\x01"; the
  token's header must say alg "none", its payload needs a `sub` (the principal) and `exp` in the future,
  and `iat` not in the future; the signature part must be empty. For development only, as in Kafka.

Tokens larger than `sasl.server.max.receive.size` never reach a mechanism: the session fails.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from kafkacompat.wire.api_keys import ApiKey

if TYPE_CHECKING:
    from _hashlib import HASH

    from kafkacompat.security.credentials import ScramCredential

__all__ = [
    "AuthenticationFailed",
    "SaslSession",
    "generic_failure",
    "parse_jaas",
]

HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = "handshake", "authenticate", "complete", "failed"
PRE_AUTHENTICATION_KEYS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class HashConstructor(Protocol):
    """hashlib's constructors (`hashlib.sha256`), as SCRAM and hmac call them."""

    def __call__(self, data: bytes = b"", /) -> HASH: ...


SCRAM_HASHES: dict[str, HashConstructor] = {
    "SCRAM-SHA-256": hashlib.sha256,
    "SCRAM-SHA-512": hashlib.sha512,
}


class AuthenticationFailed(Exception):
    """The client's credentials were refused; `message` is what Kafka tells the client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def generic_failure(mechanism: str, reauthentication: bool = False) -> str:
    """Kafka's answer to a mechanism error that must not say more (a user's existence, for one)."""
    phase = "re-authentication" if reauthentication else "authentication"
    return f"Authentication failed during {phase} due to invalid credentials with SASL mechanism {mechanism}"


# --- JAAS configuration ---------------------------------------------------------------------------

_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;]+)')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """A one-module JAAS config (`Module required key="value" ...;`) -> (module class, options).

    Raises ValueError on text that is not of that form (the message names no option value).
    """
    body = text.strip()
    match = re.match(r"([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b", body)
    if match is None:
        raise ValueError("sasl.jaas.config must start with a login module class and a control flag")
    rest = body[match.end() :]
    options: dict[str, str] = {}
    while True:
        rest = rest.lstrip()
        if rest.startswith(";"):
            if rest[1:].strip():
                raise ValueError("sasl.jaas.config must hold exactly one login module")
            return match.group(1), options
        option = _JAAS_OPTION.match(rest)
        if option is None:
            raise ValueError("sasl.jaas.config: expected key=value options ending with ';'")
        value = option.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[option.group(1)] = value
        rest = rest[option.end() :]


def plain_users(jaas: str | None) -> dict[str, str]:
    """user name -> password from PlainLoginModule's `user_NAME="password"` options."""
    if not jaas:
        return {}
    _, options = parse_jaas(jaas)
    return {key[5:]: value for key, value in options.items() if key.startswith("user_") and len(key) > 5}


# --- credentials the mechanisms look up -------------------------------------------------------------


class ScramCredentialLookup(Protocol):
    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """The stored credential (salt, stored_key, server_key, iterations) or None."""


class _Mechanism(Protocol):
    complete: bool
    principal: str | None

    def evaluate(self, token: bytes) -> bytes: ...


# --- PLAIN ------------------------------------------------------------------------------------------


class PlainServer:
    """RFC 4616 PLAIN against a fixed user table (the listener's JAAS users)."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.principal: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed(generic_failure("PLAIN"))
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed(generic_failure("PLAIN"))
        try:
            authzid, user, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed(generic_failure("PLAIN")) from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode("utf-8"), password.encode("utf-8")):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.complete = True
        self.principal = f"User:{user}"
        return b""


# --- SCRAM ------------------------------------------------------------------------------------------

_SCRAM_NAME = re.compile(r"^(?:[^=,]|=2C|=3D)+$")
_PRINTABLE = re.compile(r"^[\x21-\x2b\x2d-\x7e]+$")  # RFC 5802 "printable": no comma


def _attributes(message: str) -> list[tuple[str, str]]:
    result = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ValueError("malformed SCRAM attribute")
        result.append((part[0], part[2:]))
    return result


def scram_keys(mechanism: str, salted_password: bytes) -> tuple[bytes, bytes]:
    """(stored key, server key) of a salted password, as RFC 5802 defines them."""
    digest = SCRAM_HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return stored_key, server_key


def _random_nonce() -> str:
    return base64.b64encode(secrets.token_bytes(24)).decode("ascii")


class ScramServer:
    """RFC 5802 server side for one exchange of SCRAM-SHA-256 or SCRAM-SHA-512."""

    def __init__(
        self,
        mechanism: str,
        credentials: ScramCredentialLookup,
        server_nonce: Callable[[], str] | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._server_nonce = server_nonce or _random_nonce
        self._digest = SCRAM_HASHES[mechanism]
        self._credentials = credentials
        self._step = 0
        self.complete = False
        self.principal: str | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._user = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(generic_failure(self.mechanism)) from None
        try:
            if self._step == 0:
                return self._client_first(text)
            if self._step == 1:
                return self._client_final(text)
        except ValueError:
            raise AuthenticationFailed(generic_failure(self.mechanism)) from None
        raise AuthenticationFailed(generic_failure(self.mechanism))

    def _client_first(self, text: str) -> bytes:
        # gs2-header: "n,," or "n,a=authzid," (no channel binding: "y"/"p" are refused)
        if not text.startswith("n,"):
            raise ValueError("channel binding is not supported")
        authzid_part, sep, bare = text[2:].partition(",")
        if not sep or (authzid_part and not authzid_part.startswith("a=")):
            raise ValueError("malformed gs2 header")
        attributes = _attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise ValueError("client-first needs n= and r=")
        raw_user, client_nonce = attributes[0][1], attributes[1][1]
        if attributes[2:]:  # extensions: Kafka's tokenauth (delegation tokens) is not served here
            raise ValueError("SCRAM extensions are not supported")
        if not _SCRAM_NAME.match(raw_user) or not _PRINTABLE.match(client_nonce):
            raise ValueError("malformed user name or nonce")
        user = raw_user.replace("=2C", ",").replace("=3D", "=")
        authzid = authzid_part[2:].replace("=2C", ",").replace("=3D", "=") if authzid_part else ""
        if authzid and authzid != user:
            raise ValueError("authorization id differs from the user")
        credential = self._credentials.lookup(user, self.mechanism)
        if credential is None:
            raise ValueError("unknown user")
        self._user = user
        self._credential = credential
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce()
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._step = 1
        return self._server_first.encode("ascii")

    def _client_final(self, text: str) -> bytes:
        attributes = _attributes(text)
        names = [name for name, _ in attributes]
        if len(attributes) < 3 or names[0] != "c" or names[1] != "r" or names[-1] != "p":
            raise ValueError("client-final needs c=, r= and p=")
        channel_binding, nonce, proof_text = attributes[0][1], attributes[1][1], attributes[-1][1]
        # Kafka checks only that the nonce ends with the server-first one: some librdkafka versions send
        # the client nonce twice ("r=<client><client><server>"), and Kafka's brokers accept them.
        if not nonce.endswith(self._nonce):
            raise ValueError("nonce mismatch")
        try:
            gs2 = base64.b64decode(channel_binding, validate=True)
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:  # binascii.Error included
            raise ValueError("malformed base64") from None
        if not gs2.startswith(b"n,"):
            raise ValueError("channel binding is not supported")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        assert credential is not None  # set by client-first, step 0
        client_signature = hmac.new(credential.stored_key, auth_message, self._digest).digest()
        if len(proof) != len(client_signature):
            raise ValueError("proof of the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(self._digest(client_key).digest(), credential.stored_key):
            raise ValueError("invalid proof")
        server_signature = hmac.new(credential.server_key, auth_message, self._digest).digest()
        self._step = 2
        self.complete = True
        self.principal = f"User:{self._user}"
        return b"v=" + base64.b64encode(server_signature)


# --- OAUTHBEARER (Kafka's unsecured validator) -------------------------------------------------------


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class OAuthBearerUnsecuredServer:
    """RFC 7628 OAUTHBEARER with unsecured (alg "none") JWTs, as Kafka's default validator accepts them.

    `options` are the listener's OAuthBearerLoginModule JAAS options: `unsecuredValidatorPrincipalClaimName`
    (default "sub"), `unsecuredValidatorRequiredScope`, `unsecuredValidatorAllowableClockSkewMs`.
    """

    def __init__(self, options: Mapping[str, str], clock: Callable[[], float] = time.time) -> None:
        self._principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub")
        self._required_scope = [s for s in options.get("unsecuredValidatorRequiredScope", "").split(",") if s]
        self._skew = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0) / 1000
        self._clock = clock
        self.complete = False
        self.principal: str | None = None
        self._failed = False

    def evaluate(self, token: bytes) -> bytes:
        if self._failed:
            # the client acknowledges the error challenge with a lone %x01; the exchange then fails
            raise AuthenticationFailed(generic_failure("OAUTHBEARER"))
        try:
            text = token.decode("utf-8")
            header, _, rest = text.partition("\x01")
            if not header.startswith("n,") or not rest.endswith("\x01\x01"):
                raise ValueError("malformed client response")
            fields = dict(kv.partition("=")[::2] for kv in rest[:-2].split("\x01") if kv)
            auth = fields.get("auth", "")
            if not auth.startswith("Bearer "):
                raise ValueError("no bearer token")
            self.principal = "User:" + self._validate(auth[7:].strip())
        except (ValueError, UnicodeDecodeError, json.JSONDecodeError):
            self._failed = True
            return json.dumps({"status": "invalid_token"}).encode()
        self.complete = True
        return b""

    def _validate(self, jwt: str) -> str:
        parts = jwt.split(".")
        if len(parts) != 3 or parts[2]:
            raise ValueError("an unsecured JWS has three parts and an empty signature")
        header = json.loads(_b64url(parts[0]))
        claims = json.loads(_b64url(parts[1]))
        if not isinstance(header, dict) or header.get("alg") != "none" or not isinstance(claims, dict):
            raise ValueError("alg must be none")
        now = self._clock()
        expires = claims.get("exp")
        if not isinstance(expires, (int, float)) or expires + self._skew <= now:
            raise ValueError("expired or no exp")
        issued = claims.get("iat")
        if issued is not None and (not isinstance(issued, (int, float)) or issued - self._skew > now):
            raise ValueError("issued in the future")
        subject = claims.get(self._principal_claim)
        if not isinstance(subject, str) or not subject.strip():
            raise ValueError("no principal claim")
        if self._required_scope:
            scope = claims.get("scope", [])
            scopes = scope.split() if isinstance(scope, str) else scope
            if not set(self._required_scope) <= set(scopes if isinstance(scopes, list) else []):
                raise ValueError("missing scope")
        return subject


# --- the per-connection session ---------------------------------------------------------------------


class SaslSession:
    """The SASL state of one connection (see the module docstring). Owned by that connection.

    `mechanism_factory(name)` builds a fresh mechanism server for an enabled mechanism.
    """

    def __init__(
        self,
        enabled: list[str],
        mechanism_factory: Callable[[str], _Mechanism],
        max_token_bytes: int,
        failure_delay_ms: int,
        reauth_ms: int = 0,
    ) -> None:
        self.enabled = enabled
        self._factory = mechanism_factory
        self.max_token_bytes = max_token_bytes
        self.failure_delay_ms = failure_delay_ms
        self.reauth_ms = reauth_ms
        self.state = HANDSHAKE
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.raw_tokens = False  # SaslHandshake v0: tokens follow as bare size-prefixed frames
        #: wall-clock time (seconds) after which the session must be re-authenticated (KIP-368), or None
        self.expires_at: float | None = None
        self.reauthenticating = False
        self._server: _Mechanism | None = None

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    def allows(self, api_key: int, now: float) -> bool:
        """Whether a request with this key may be processed now (else the connection closes)."""
        if self.state == COMPLETE:
            return self.expires_at is None or now < self.expires_at or api_key == ApiKey.SASL_HANDSHAKE
        return api_key in PRE_AUTHENTICATION_KEYS

    def begin_reauthentication(self, mechanism: str, now: float) -> bool:
        """A SaslHandshake on an authenticated connection: KIP-368 re-authentication, same mechanism only."""
        if self.reauth_ms <= 0 or mechanism != self.mechanism:
            return False
        self.state = HANDSHAKE
        self.reauthenticating = True
        return True

    def handshake(self, mechanism: str, version: int) -> bool:
        """Choose the mechanism; False (and FAILED) if the listener does not enable it."""
        if self.state != HANDSHAKE or mechanism not in self.enabled:
            self.state = FAILED
            return False
        self.mechanism = mechanism
        self._server = self._factory(mechanism)
        self.state = AUTHENTICATE
        self.raw_tokens = version == 0
        return True

    def authenticate(self, token: bytes, now: float) -> bytes:
        """One token in, the challenge out; AuthenticationFailed (state FAILED) when refused."""
        mechanism = self.mechanism or "UNKNOWN"
        if self.state != AUTHENTICATE or self._server is None or len(token) > self.max_token_bytes:
            self.state = FAILED
            raise AuthenticationFailed(generic_failure(mechanism, self.reauthenticating))
        try:
            challenge = self._server.evaluate(token)
        except AuthenticationFailed as exc:
            self.state = FAILED
            if self.reauthenticating and exc.message == generic_failure(mechanism):
                raise AuthenticationFailed(generic_failure(mechanism, True)) from None
            raise
        if self._server.complete:
            principal = self._server.principal
            self._server = None
            self.raw_tokens = False
            if self.reauthenticating and principal != self.principal:
                self.state = FAILED
                raise AuthenticationFailed(
                    f"Cannot change principals during re-authentication from {self.principal}: {principal}"
                )
            self.state = COMPLETE
            self.principal = principal
            self.expires_at = now + self.reauth_ms / 1000 if self.reauth_ms > 0 else None
        return challenge
