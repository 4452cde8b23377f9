"""TLS for SSL and SASL_SSL listeners: an `ssl.SSLContext` from Kafka's ssl.* settings, and principals.

Theory of operation
-------------------
`server_context(config, listener)` reads the listener's settings (`listener.name.<name>.ssl.*` over the
plain `ssl.*` ones, as Kafka resolves them) and builds the server-side context once, at start-up; every
accepted connection of that listener wraps its socket with it (the trio edge does the wrapping). Only
PEM stores are supported, which Kafka accepts since 2.7 (KIP-651): inline
(`ssl.keystore.type=PEM` with `ssl.keystore.certificate.chain`/`ssl.keystore.key`,
`ssl.truststore.certificates`) or as files (`ssl.keystore.location`/`ssl.truststore.location` holding PEM;
the file's content decides, so a PEM file works whatever `ssl.keystore.type` says). JKS and PKCS12
files are refused at start-up with a message saying so. `ssl.key.password` decrypts an encrypted key.

`ssl.client.auth` maps to OpenSSL's verify modes (none: no certificate asked; requested: asked and
verified if sent; required: the handshake fails without one). `ssl.enabled.protocols` bounds the TLS
versions; `ssl.cipher.suites` takes Kafka's (IANA) names for TLS 1.2 suites and OpenSSL's own names,
and restricts TLS 1.2 negotiation to them (Python's ssl cannot restrict TLS 1.3 suites).

`principal_of(peer_certificate)` is Kafka's default SSL principal: "User:" + the subject DN in RFC 2253
form (most specific RDN first, as Java's X500Principal.getName() prints it), or User:ANONYMOUS without
a client certificate. Nothing here imports trio; no key material is ever logged.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

from kafkacompat.config import BrokerConfig, ConfigError

__all__ = ["ANONYMOUS", "check_keystore_update", "keystore_certificate", "principal_of", "server_context"]

ANONYMOUS = "User:ANONYMOUS"

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS server context of one SSL/SASL_SSL listener; ConfigError says what is missing or wrong."""

    def setting(name: str) -> Any:
        return config.for_listener(listener, name)

    where = f"listener {listener}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_keystore(context, setting, where)
    client_auth = setting("ssl.client.auth")
    context.verify_mode = _VERIFY[client_auth]
    _load_truststore(context, setting, where, client_auth)
    protocols = setting("ssl.enabled.protocols")
    if not protocols:
        raise ConfigError(f"{where}: ssl.enabled.protocols is empty")
    versions = sorted(_VERSIONS[name] for name in protocols)
    try:
        context.minimum_version = versions[0]
        context.maximum_version = versions[-1]
    except (ValueError, ssl.SSLError) as exc:
        raise ConfigError(f"{where}: ssl.enabled.protocols {protocols}: {exc}") from None
    suites = setting("ssl.cipher.suites")
    if suites:
        _restrict_ciphers(context, suites, where)
    # Kafka clients never resume sessions across connections in a way that needs tickets; keep OpenSSL's
    # defaults otherwise (compression off, renegotiation off in TLS 1.3).
    context.options |= ssl.OP_NO_COMPRESSION
    return context


def keystore_certificate(config: BrokerConfig, listener: str) -> dict[str, Any]:
    """The listener's own certificate (the first of its keystore chain), decoded as
    `SSLSocket.getpeercert()` gives one; {} when it cannot be read (server_context() then says why)."""

    def setting(name: str) -> Any:
        return config.for_listener(listener, name)

    try:
        text = setting("ssl.keystore.certificate.chain")
        if not text:
            location = setting("ssl.keystore.location")
            if not location:
                return {}
            text = _read_pem_file(location, "ssl.keystore.location", f"listener {listener}")
    except ConfigError:
        return {}
    begin = text.find("-----BEGIN CERTIFICATE-----")
    end = text.find("-----END CERTIFICATE-----", begin)
    if begin < 0 or end < 0:
        return {}
    leaf = text[begin : end + len("-----END CERTIFICATE-----")] + "\n"
    with tempfile.TemporaryDirectory(prefix="kafkacompat-tls-") as directory:
        path = os.path.join(directory, "leaf.pem")
        with open(path, "w", encoding="ascii") as handle:
            handle.write(leaf)
        try:
            # the ssl module's only certificate decoder that takes a file (no third-party X.509 parser)
            return dict(ssl._ssl._test_decode_cert(path))  # type: ignore[attr-defined]
        except (ssl.SSLError, OSError, AttributeError):
            return {}


def check_keystore_update(
    old: dict[str, Any], new: dict[str, Any], *, allow_dn_changes: bool, allow_san_changes: bool
) -> None:
    """Kafka's rule for a keystore replaced at run time: the certificate keeps its subject DN and every
    subject alternative name it had (unless ssl.allow.dn.changes / ssl.allow.san.changes), so that
    clients verifying the broker's identity keep accepting it. Raises ConfigError with Kafka's words."""
    if not old or not new:
        return
    if not allow_dn_changes and subject_dn(old).lower() != subject_dn(new).lower():
        raise ConfigError(
            "Keystore DistinguishedName does not match:  "
            f"existing={{DN={subject_dn(old)}}}, new={{DN={subject_dn(new)}}}"
        )
    old_sans = set(old.get("subjectAltName", ()))
    new_sans = set(new.get("subjectAltName", ()))
    if not allow_san_changes and not old_sans <= new_sans:
        raise ConfigError(
            "Keystore SubjectAltNames do not match:  "
            f"existing={{SAN={sorted(old_sans)}}}, new={{SAN={sorted(new_sans)}}}"
        )


def _pem(text: str) -> bool:
    return "-----BEGIN " in text


def _read_pem_file(path: str, what: str, where: str) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {what} {path}: {exc.strerror}") from None
    text = data.decode("ascii", errors="replace")
    if not _pem(text):
        raise ConfigError(
            f"{where}: {what} {path} is not a PEM file; JKS and PKCS12 stores are not supported, convert "
            "it to PEM (e.g. openssl pkcs12 -in store.p12 -nodes) and set ssl.keystore.type=PEM"
        )
    return text


def _load_keystore(context: ssl.SSLContext, setting: Callable[[str], Any], where: str) -> None:
    chain = setting("ssl.keystore.certificate.chain")
    key = setting("ssl.keystore.key")
    location = setting("ssl.keystore.location")
    key_password = setting("ssl.key.password") or setting("ssl.keystore.password")
    if chain or key:
        if str(setting("ssl.keystore.type")).upper() != "PEM":
            raise ConfigError(f"{where}: ssl.keystore.certificate.chain/key need ssl.keystore.type=PEM")
        if not (chain and key):
            raise ConfigError(f"{where}: set both ssl.keystore.certificate.chain and ssl.keystore.key")
        if location:
            raise ConfigError(f"{where}: set either ssl.keystore.location or the inline PEM keystore")
        if not (_pem(chain) and _pem(key)):
            raise ConfigError(f"{where}: ssl.keystore.certificate.chain and ssl.keystore.key must be PEM")
        _load_cert_chain_text(context, chain, key, key_password, where)
        return
    if not location:
        raise ConfigError(
            f"{where}: a TLS listener needs a keystore (ssl.keystore.location, or ssl.keystore.type=PEM with "
            "ssl.keystore.certificate.chain and ssl.keystore.key)"
        )
    text = _read_pem_file(location, "ssl.keystore.location", where)
    if "PRIVATE KEY-----" not in text:
        raise ConfigError(f"{where}: the PEM keystore {location} holds no private key")
    _load_cert_chain_text(context, text, text, key_password, where)


def _load_cert_chain_text(
    context: ssl.SSLContext, chain: str, key: str, password: str | None, where: str
) -> None:
    """load_cert_chain reads files only: hand it the PEM text through a private temporary directory."""
    with tempfile.TemporaryDirectory(prefix="kafkacompat-tls-") as directory:
        os.chmod(directory, 0o700)
        chain_path = os.path.join(directory, "chain.pem")
        key_path = os.path.join(directory, "key.pem")
        for path, text in ((chain_path, chain), (key_path, key)):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="ascii") as handle:
                handle.write(text if text.endswith("\n") else text + "\n")
        try:
            context.load_cert_chain(chain_path, key_path, password=password or None)
        except ssl.SSLError as exc:
            raise ConfigError(f"{where}: cannot load the keystore: {exc.reason or exc}") from None


def _load_truststore(
    context: ssl.SSLContext, setting: Callable[[str], Any], where: str, client_auth: str
) -> None:
    certificates = setting("ssl.truststore.certificates")
    location = setting("ssl.truststore.location")
    if certificates:
        if str(setting("ssl.truststore.type")).upper() != "PEM":
            raise ConfigError(f"{where}: ssl.truststore.certificates needs ssl.truststore.type=PEM")
        if not _pem(certificates):
            raise ConfigError(f"{where}: ssl.truststore.certificates must be PEM")
        cadata = certificates
    elif location:
        cadata = _read_pem_file(location, "ssl.truststore.location", where)
    else:
        if client_auth != "none":
            raise ConfigError(f"{where}: ssl.client.auth={client_auth} needs a truststore of client CAs")
        return
    try:
        context.load_verify_locations(cadata=cadata)
    except ssl.SSLError as exc:
        raise ConfigError(f"{where}: cannot load the truststore: {exc.reason or exc}") from None


# IANA (Java) cipher suite name parts -> OpenSSL's; TLS 1.2 suites only.
_KEY_EXCHANGE = {
    "ECDHE_RSA": "ECDHE-RSA-",
    "ECDHE_ECDSA": "ECDHE-ECDSA-",
    "DHE_RSA": "DHE-RSA-",
    "RSA": "",
}
_BULK = {
    "AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "AES_128_CBC_SHA256": "AES128-SHA256",
    "AES_256_CBC_SHA384": "AES256-SHA384",
    "AES_256_CBC_SHA256": "AES256-SHA256",
    "AES_128_CBC_SHA": "AES128-SHA",
    "AES_256_CBC_SHA": "AES256-SHA",
    "CHACHA20_POLY1305_SHA256": "CHACHA20-POLY1305",
}
_TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}


def openssl_cipher_name(name: str) -> str | None:
    """OpenSSL's name of a TLS 1.2 suite given by its IANA name (or already OpenSSL's); None for 1.3."""
    if name in _TLS13_SUITES:
        return None
    if name.startswith("TLS_") and "_WITH_" in name:
        exchange, _, bulk = name[4:].partition("_WITH_")
        if exchange in _KEY_EXCHANGE and bulk in _BULK:
            return _KEY_EXCHANGE[exchange] + _BULK[bulk]
    return name


def _restrict_ciphers(context: ssl.SSLContext, suites: Iterable[str], where: str) -> None:
    available = {cipher["name"] for cipher in context.get_ciphers()}
    chosen: list[str] = []
    unknown: list[str] = []
    for suite in suites:
        name = openssl_cipher_name(suite)
        if name is None:
            continue  # a TLS 1.3 suite: always on in Python's ssl
        (chosen if name in available else unknown).append(name)
    if unknown:
        raise ConfigError(
            f"{where}: ssl.cipher.suites names unknown or disabled suites: {', '.join(unknown)}"
        )
    if chosen:
        context.set_ciphers(":".join(chosen))


# RFC 2253 attribute keywords Java prints; others print as dotted OIDs with a hex-encoded value.
_DN_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_DN_OIDS = {
    "emailAddress": ("1.2.840.113549.1.9.1", 0x16),  # IA5String
    "serialNumber": ("2.5.4.5", 0x13),  # PrintableString
    "title": ("2.5.4.12", 0x0C),
    "surname": ("2.5.4.4", 0x0C),
    "givenName": ("2.5.4.42", 0x0C),
}


def _escape_rfc2253(value: str) -> str:
    out = []
    for index, char in enumerate(value):
        if (
            char in ',+"\\<>;'
            or (char == "#" and index == 0)
            or (char == " " and index in (0, len(value) - 1))
        ):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def _der_hex(tag: int, value: str) -> str:
    data = value.encode("utf-8")
    if len(data) < 0x80:
        length = bytes([len(data)])
    else:
        size = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    return "#" + (bytes([tag]) + length + data).hex()


def subject_dn(certificate: dict[str, Any]) -> str:
    """The subject of a certificate (as `SSLSocket.getpeercert()` gives it) in RFC 2253 form."""
    rdns = []
    for rdn in reversed(certificate.get("subject", ())):
        parts = []
        for attribute, value in rdn:
            if attribute in _DN_KEYWORDS:
                parts.append(f"{_DN_KEYWORDS[attribute]}={_escape_rfc2253(value)}")
            elif attribute in _DN_OIDS:
                oid, tag = _DN_OIDS[attribute]
                parts.append(f"{oid}={_der_hex(tag, value)}")
            else:
                parts.append(f"{attribute}={_escape_rfc2253(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def principal_of(certificate: dict[str, Any] | None) -> str:
    """Kafka's default SSL principal: User:<subject DN>, or User:ANONYMOUS without a client certificate."""
    if not certificate:
        return ANONYMOUS
    return "User:" + subject_dn(certificate)
