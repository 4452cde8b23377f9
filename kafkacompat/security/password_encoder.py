"""Kafka's password encoder: how ZooKeeper-mode brokers keep sensitive dynamic broker configs.

Theory of operation
-------------------
Kafka never writes a password-type dynamic broker config (`listener.name.<l>.ssl.keystore.key`,
`ssl.key.password`, JAAS configs, ...) to ZooKeeper in the clear: it encrypts it with a key derived from
`password.encoder.secret` and stores the ciphertext with everything needed to decrypt it again, as one
comma-separated `name:value` list (binary values in standard base64):

    keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,keyLength:128,
    salt:<256 random bytes>,iterations:4096,encryptedPassword:<ciphertext>,passwordLength:<n>,
    initializationVector:<16 bytes>

The key is PBKDF2 (`password.encoder.keyfactory.algorithm`, default PBKDF2WithHmacSHA512) of the secret
over the salt, `password.encoder.iterations` rounds, `password.encoder.key.length` bits; the cipher is
`password.encoder.cipher.algorithm` (AES/CBC/PKCS5Padding by default; AES/GCM/NoPadding stores
`authenticationTagLength` too). Decoding reads the parameters from the stored value, not from the
config, so values written under other settings still decode; `passwordLength` (Java's UTF-16 length)
is checked as Kafka checks it. `PasswordCodec` adds `password.encoder.old.secret`: values that do not
decode with the secret are tried with the old one, and `reencoded` rewrites them with the new secret,
as a Kafka broker does with its own entity when it starts after a secret rotation.

Pure computation (the `cryptography` package, imported on first use): no I/O.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.hashes import HashAlgorithm

    from kafkacompat.config import BrokerConfig

__all__ = ["PasswordCodec", "PasswordDecodeError", "PasswordEncoder", "is_password_config"]

DEFAULT_CIPHER = "AES/CBC/PKCS5Padding"
DEFAULT_KEY_FACTORY = "PBKDF2WithHmacSHA512"
DEFAULT_KEY_LENGTH = 128
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 256
GCM_IV_BYTES = 12
GCM_TAG_BITS = 128


class PasswordDecodeError(ValueError):
    """A stored value that is not an encoded password, or not one of this secret."""


def is_password_config(name: str) -> bool:
    """Whether a broker config name (listener-prefixed or not) holds a password-type value."""
    from kafkacompat.config import OPTIONS_BY_NAME
    from kafkacompat.dynamic_config import listener_base_name

    option = OPTIONS_BY_NAME.get(listener_base_name(name) or name)
    return option is not None and option.type == "password"


def _hash(key_factory: str) -> HashAlgorithm:
    from cryptography.hazmat.primitives import hashes

    algorithms: dict[str, Callable[[], HashAlgorithm]] = {
        "PBKDF2WithHmacSHA512": hashes.SHA512,
        "PBKDF2WithHmacSHA256": hashes.SHA256,
        "PBKDF2WithHmacSHA1": hashes.SHA1,
    }
    try:
        return algorithms[key_factory]()
    except KeyError:
        raise PasswordDecodeError(f"unsupported key factory algorithm {key_factory}") from None


def _derive(secret: str, key_factory: str, salt: bytes, iterations: int, key_bits: int) -> bytes:
    from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

    kdf = PBKDF2HMAC(algorithm=_hash(key_factory), length=key_bits // 8, salt=salt, iterations=iterations)
    return kdf.derive(secret.encode("utf-8"))  # Java's PBKDF2 takes the secret's chars as UTF-8


def _java_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True, slots=True)
class PasswordEncoder:
    """Kafka's EncryptingPasswordEncoder for one secret and one set of encoding parameters."""

    secret: str
    cipher_algorithm: str = DEFAULT_CIPHER
    key_length: int = DEFAULT_KEY_LENGTH
    iterations: int = DEFAULT_ITERATIONS
    key_factory_algorithm: str | None = None  # None: PBKDF2WithHmacSHA512, as Kafka picks it

    def encode(self, password: str, *, salt: bytes | None = None, iv: bytes | None = None) -> str:
        """The stored form of `password` (`salt` and `iv` are random unless given: tests only)."""
        key_factory = self.key_factory_algorithm or DEFAULT_KEY_FACTORY
        salt = os.urandom(SALT_BYTES) if salt is None else salt
        key = _derive(self.secret, key_factory, salt, self.iterations, self.key_length)
        gcm = self.cipher_algorithm.upper().startswith("AES/GCM/")
        iv = os.urandom(GCM_IV_BYTES if gcm else 16) if iv is None else iv
        ciphertext = _crypt(self.cipher_algorithm, key, iv, GCM_TAG_BITS, password.encode("utf-8"), True)
        fields = {
            "keyFactoryAlgorithm": key_factory,
            "cipherAlgorithm": self.cipher_algorithm,
            "keyLength": str(self.key_length),
            "salt": base64.b64encode(salt).decode(),
            "iterations": str(self.iterations),
            "encryptedPassword": base64.b64encode(ciphertext).decode(),
            "passwordLength": str(_java_length(password)),
            "initializationVector": base64.b64encode(iv).decode(),
        }
        if gcm:
            fields["authenticationTagLength"] = str(GCM_TAG_BITS)
        return ",".join(f"{name}:{value}" for name, value in fields.items())

    def decode(self, encoded: str) -> str:
        """The password of a stored value; PasswordDecodeError if it is not one, or not of this secret."""
        try:
            fields = dict(item.split(":", 1) for item in encoded.split(",") if item)
            cipher = fields["cipherAlgorithm"]
            key_factory = fields.get("keyFactoryAlgorithm") or DEFAULT_KEY_FACTORY
            key_bits, iterations = int(fields["keyLength"]), int(fields["iterations"])
            salt = base64.b64decode(fields["salt"], validate=True)
            ciphertext = base64.b64decode(fields["encryptedPassword"], validate=True)
            iv = base64.b64decode(fields["initializationVector"], validate=True)
            tag_bits = int(fields.get("authenticationTagLength", GCM_TAG_BITS))
            length = int(fields["passwordLength"])
        except (KeyError, ValueError) as exc:
            raise PasswordDecodeError(f"not an encoded password: {exc}") from None
        key = _derive(self.secret, key_factory, salt, iterations, key_bits)
        try:
            password = _crypt(cipher, key, iv, tag_bits, ciphertext, False).decode("utf-8")
        except PasswordDecodeError:
            raise
        except Exception as exc:  # a wrong secret: bad padding, a failed tag, not UTF-8
            raise PasswordDecodeError("Password could not be decoded") from exc
        if _java_length(password) != length:
            raise PasswordDecodeError("Password could not be decoded, sanity check of length failed")
        return password


def _crypt(cipher_algorithm: str, key: bytes, iv: bytes, tag_bits: int, data: bytes, encrypt: bool) -> bytes:
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    parts = cipher_algorithm.upper().split("/")
    if parts[0] != "AES" or len(parts) != 3:
        raise PasswordDecodeError(f"unsupported cipher algorithm {cipher_algorithm}")
    mode, pad = parts[1], parts[2]
    if mode == "GCM" and pad == "NOPADDING":
        if tag_bits != GCM_TAG_BITS:
            raise PasswordDecodeError(f"unsupported GCM tag length {tag_bits}")
        aead = AESGCM(key)
        return aead.encrypt(iv, data, None) if encrypt else aead.decrypt(iv, data, None)
    if mode != "CBC" or pad not in ("PKCS5PADDING", "NOPADDING"):
        raise PasswordDecodeError(f"unsupported cipher algorithm {cipher_algorithm}")
    cipher = Cipher(algorithms.AES(key), modes.CBC(iv))
    if encrypt:
        if pad == "PKCS5PADDING":
            padder = padding.PKCS7(128).padder()
            data = padder.update(data) + padder.finalize()
        context = cipher.encryptor()
        return context.update(data) + context.finalize()
    context = cipher.decryptor()
    plain = context.update(data) + context.finalize()
    if pad == "PKCS5PADDING":
        unpadder = padding.PKCS7(128).unpadder()
        plain = unpadder.update(plain) + unpadder.finalize()
    return plain


class PasswordCodec:
    """A broker's encoder (`password.encoder.*`) with its old secret: encodes and decodes the
    password-type values of a dynamic broker config map, leaving every other value alone."""

    def __init__(self, encoder: PasswordEncoder | None, old: PasswordEncoder | None = None) -> None:
        self.encoder = encoder  # None: no password.encoder.secret, nothing sensitive may be stored
        self.old = old

    @classmethod
    def from_config(cls, config: BrokerConfig) -> PasswordCodec:
        def encoder(secret_name: str) -> PasswordEncoder | None:
            secret = config[secret_name]
            if not secret:
                return None
            return PasswordEncoder(
                secret=str(secret),
                cipher_algorithm=config["password.encoder.cipher.algorithm"],
                key_length=config["password.encoder.key.length"],
                iterations=config["password.encoder.iterations"],
                key_factory_algorithm=config["password.encoder.keyfactory.algorithm"],
            )

        return cls(encoder("password.encoder.secret"), encoder("password.encoder.old.secret"))

    def encode_configs(self, configs: Mapping[str, str], *, per_broker: bool) -> dict[str, str]:
        """`configs` as they are stored. Raises ValueError with Kafka's reason when a password-type value
        cannot be stored (no secret; or the cluster-wide default entity)."""
        stored = dict(configs)
        for name, value in configs.items():
            if value is None or not is_password_config(name):
                continue
            if not per_broker:
                raise ValueError("Password config can be defined only at broker level")
            if self.encoder is None:
                raise ValueError("Password encoder secret not configured")
            stored[name] = self.encoder.encode(value)
        return stored

    def decode_value(self, encoded: str) -> str:
        """Decode with the secret, else with the old secret; PasswordDecodeError if neither does."""
        for encoder in (self.encoder, self.old):
            if encoder is None:
                continue
            try:
                return encoder.decode(encoded)
            except PasswordDecodeError:
                continue
        raise PasswordDecodeError("Password could not be decoded with password.encoder.secret")

    def decode_configs(self, configs: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
        """(`configs` with password-type values decoded, names of those that did not decode: dropped,
        as a Kafka broker ignores them with an error in its log)."""
        decoded, undecodable = {}, []
        for name, value in configs.items():
            if is_password_config(name):
                try:
                    decoded[name] = self.decode_value(value)
                except PasswordDecodeError:
                    undecodable.append(name)
            else:
                decoded[name] = value
        return decoded, undecodable

    def reencoded(self, configs: Mapping[str, str]) -> dict[str, str] | None:
        """The stored `configs` with every password-type value the old secret decodes (and the current
        one does not) encoded with the current secret; None when there is nothing to rewrite."""
        if self.encoder is None or self.old is None:
            return None
        changed = dict(configs)
        for name, value in configs.items():
            if not is_password_config(name):
                continue
            try:
                self.encoder.decode(value)
                continue  # already under the current secret
            except PasswordDecodeError:
                pass
            try:
                changed[name] = self.encoder.encode(self.old.decode(value))
            except PasswordDecodeError:
                continue  # neither secret: left for an operator, ignored when read
        return changed if changed != dict(configs) else None
