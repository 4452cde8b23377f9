"""Kafka's password encoder: round trips, a value encrypted elsewhere (the openssl command line, with
Kafka's parameters), wrong secrets, the old secret and re-encoding."""

from __future__ import annotations

import base64

import pytest

pytest.importorskip("cryptography")

from kafkacompat.security.password_encoder import (
    PasswordCodec,
    PasswordDecodeError,
    PasswordEncoder,
)

KEY = "listener.name.ssl.ssl.keystore.key"
# made with `openssl kdf -keylen 16 -kdfopt digest:SHA512 -kdfopt pass:kafka-secret -kdfopt hexsalt:<00..ff>
# -kdfopt iter:4096 PBKDF2` and `openssl enc -aes-128-cbc -K <key> -iv <00..0f>` of "ssl-key-pässword"
OPENSSL_CIPHERTEXT = "2mp6oPA2dWVLDRiWXR3XMeoTg/Jrp6N1CCp704zP3jw="
SALT, IV = bytes(range(256)), bytes(range(16))


def _stored(ciphertext: str, length: int) -> str:
    return (
        f"encryptedPassword:{ciphertext},passwordLength:{length},"
        f"salt:{base64.b64encode(SALT).decode()},initializationVector:{base64.b64encode(IV).decode()},"
        "keyLength:128,cipherAlgorithm:AES/CBC/PKCS5Padding,iterations:4096,"
        "keyFactoryAlgorithm:PBKDF2WithHmacSHA512"
    )


def test_decodes_a_value_encrypted_elsewhere_with_kafkas_parameters() -> None:
    # any field order (Kafka writes a HashMap's order); the length is Java's UTF-16 length
    assert PasswordEncoder("kafka-secret").decode(_stored(OPENSSL_CIPHERTEXT, 16)) == "ssl-key-pässword"
    with pytest.raises(PasswordDecodeError, match="sanity check of length"):
        PasswordEncoder("kafka-secret").decode(_stored(OPENSSL_CIPHERTEXT, 17))
    with pytest.raises(PasswordDecodeError):
        PasswordEncoder("another-secret").decode(_stored(OPENSSL_CIPHERTEXT, 16))


def test_encodes_with_kafkas_fields_and_round_trips() -> None:
    encoder = PasswordEncoder("kafka-secret")
    stored = encoder.encode("ssl-key-pässword", salt=SALT, iv=IV)
    fields = dict(item.split(":", 1) for item in stored.split(","))
    assert fields == {
        "keyFactoryAlgorithm": "PBKDF2WithHmacSHA512",
        "cipherAlgorithm": "AES/CBC/PKCS5Padding",
        "keyLength": "128",
        "salt": base64.b64encode(SALT).decode(),
        "iterations": "4096",
        "encryptedPassword": OPENSSL_CIPHERTEXT,  # what openssl made of the same inputs
        "passwordLength": "16",
        "initializationVector": base64.b64encode(IV).decode(),
    }
    random_salted = encoder.encode("pem\n-----BEGIN PRIVATE KEY-----\n")
    assert random_salted != encoder.encode("pem\n-----BEGIN PRIVATE KEY-----\n")
    assert encoder.decode(random_salted) == "pem\n-----BEGIN PRIVATE KEY-----\n"
    gcm = PasswordEncoder("s", cipher_algorithm="AES/GCM/NoPadding", key_length=256, iterations=1024,
                          key_factory_algorithm="PBKDF2WithHmacSHA1")  # fmt: skip
    stored = gcm.encode("x" * 100)
    assert "authenticationTagLength:128" in stored and "keyLength:256" in stored
    # the parameters come from the stored value, not from the decoding encoder's settings
    assert PasswordEncoder("s").decode(stored) == "x" * 100
    with pytest.raises(PasswordDecodeError, match="not an encoded password"):
        encoder.decode("plain text")


def test_codec_encodes_only_password_configs_and_only_per_broker() -> None:
    codec = PasswordCodec(PasswordEncoder("new"))
    stored = codec.encode_configs({KEY: "-----BEGIN", "log.retention.ms": "5"}, per_broker=True)
    assert stored["log.retention.ms"] == "5" and "encryptedPassword:" in stored[KEY]
    assert codec.decode_configs(stored) == ({KEY: "-----BEGIN", "log.retention.ms": "5"}, [])
    with pytest.raises(ValueError, match="only at broker level"):
        codec.encode_configs({KEY: "x"}, per_broker=False)
    with pytest.raises(ValueError, match="Password encoder secret not configured"):
        PasswordCodec(None).encode_configs({"listener.name.a.plain.sasl.jaas.config": "x"}, per_broker=True)
    assert PasswordCodec(None).encode_configs({"log.retention.ms": "5"}, per_broker=False) == {
        "log.retention.ms": "5"
    }
    # a value of another secret is dropped when read (Kafka logs it and ignores it)
    assert PasswordCodec(PasswordEncoder("other")).decode_configs(stored) == (
        {"log.retention.ms": "5"},
        [KEY],
    )


def test_old_secret_decodes_and_reencoding_moves_values_to_the_new_secret() -> None:
    old_stored = PasswordEncoder("old").encode("pw")
    codec = PasswordCodec(PasswordEncoder("new"), PasswordEncoder("old"))
    assert codec.decode_value(old_stored) == "pw"
    rewritten = codec.reencoded({KEY: old_stored, "log.retention.ms": "5"})
    assert rewritten is not None and rewritten["log.retention.ms"] == "5"
    assert PasswordEncoder("new").decode(rewritten[KEY]) == "pw"
    assert codec.reencoded(rewritten) is None  # nothing left under the old secret
    assert PasswordCodec(PasswordEncoder("new")).reencoded({KEY: old_stored}) is None  # no old secret
