"""The client side of TLS and SASL, for kafkacompat's own command line tools (`--command-config`).

Theory of operation
-------------------
`ClientSecurity.from_properties(props)` reads a client properties file as Kafka's tools take it
(`--command-config`), in Java client names or librdkafka's: `security.protocol`; `ssl.truststore.location`
or `ssl.ca.location` (PEM); `ssl.keystore.location` (a PEM file with key and certificate) or
`ssl.certificate.location` + `ssl.key.location` for mutual TLS; `ssl.endpoint.identification.algorithm`
(empty: no host name check); `sasl.mechanism` with `sasl.jaas.config` (PlainLoginModule or
ScramLoginModule `username`/`password`) or `sasl.username`/`sasl.password`. `wrap(sock, host)` does the
TLS handshake on a connected blocking socket; `exchange(send)` runs the SASL exchange over a function
that sends one SaslAuthenticate token and returns the broker's answer. PLAIN and SCRAM-SHA-256/512 only
(RFC 5802 client, the server's signature checked). Nothing here logs a secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kafkacompat.security.sasl import SCRAM_HASHES, parse_jaas

__all__ = ["ClientSecurity", "SecurityConfigError"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class SecurityConfigError(ValueError):
    """A client security setting that cannot be used."""


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    check_hostname: bool = True
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    #: a ready TLS client context (the broker's own inter-broker client, kafkacompat.security.inter_broker);
    #: None: built from the files above
    context: ssl.SSLContext | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(f"security.protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        for store in ("ssl.truststore.type", "ssl.keystore.type"):
            if props.get(store, "PEM").strip().upper() != "PEM":
                raise SecurityConfigError(f"{store}: only PEM stores are supported")
        ca_file = props.get("ssl.truststore.location") or props.get("ssl.ca.location")
        cert_file = props.get("ssl.certificate.location")
        key_file = props.get("ssl.key.location")
        keystore = props.get("ssl.keystore.location")
        if keystore:
            cert_file, key_file = keystore, keystore
        username, password = props.get("sasl.username"), props.get("sasl.password")
        jaas = props.get("sasl.jaas.config")
        if jaas:
            try:
                _, options = parse_jaas(jaas)
            except ValueError as exc:
                raise SecurityConfigError(str(exc)) from None
            username, password = options.get("username", username), options.get("password", password)
        mechanism = props.get("sasl.mechanism", "GSSAPI" if protocol.startswith("SASL_") else "").upper()
        if protocol.startswith("SASL_"):
            if mechanism not in ("PLAIN", *SCRAM_HASHES):
                raise SecurityConfigError(f"sasl.mechanism {mechanism}: the tools speak PLAIN and SCRAM only")
            if not username or password is None:
                raise SecurityConfigError("SASL needs a username and password (sasl.jaas.config)")
        return cls(
            protocol=protocol,
            ca_file=ca_file or None,
            cert_file=cert_file or None,
            key_file=key_file or None,
            check_hostname=props.get("ssl.endpoint.identification.algorithm", "https").strip() != "",
            mechanism=mechanism or None,
            username=username,
            password=password,
        )

    def wrap(self, sock: socket.socket, host: str) -> socket.socket:
        """The TLS handshake on a connected socket (ssl.SSLError/OSError on failure)."""
        if self.context is not None:
            return self.context.wrap_socket(sock, server_hostname=host)
        context = ssl.create_default_context(cafile=self.ca_file)
        context.check_hostname = self.check_hostname
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context.wrap_socket(sock, server_hostname=host)

    def exchange(self, authenticate: Callable[[bytes], bytes]) -> None:
        """Run the SASL exchange; `authenticate(token)` returns the answer or raises on an error code."""
        assert self.mechanism is not None and self.username is not None and self.password is not None
        if self.mechanism == "PLAIN":
            authenticate(f"\x00{self.username}\x00{self.password}".encode())
            return
        digest = SCRAM_HASHES[self.mechanism]
        nonce = base64.b64encode(secrets.token_bytes(24)).decode("ascii")
        user = self.username.replace("=", "=3D").replace(",", "=2C")
        first_bare = f"n={user},r={nonce}"
        server_first = authenticate(f"n,,{first_bare}".encode()).decode()
        fields = dict(part.split("=", 1) for part in server_first.split(","))
        if not fields.get("r", "").startswith(nonce):
            raise ValueError("the broker's SCRAM nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac(
            digest().name, self.password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
        )
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        signature = hmac.new(digest(client_key).digest(), auth_message, digest).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        final = authenticate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
        server_key = hmac.new(salted, b"Server Key", digest).digest()
        expected = b"v=" + base64.b64encode(hmac.new(server_key, auth_message, digest).digest())
        if not hmac.compare_digest(final, expected):
            raise ValueError("the broker's SCRAM signature does not verify")
