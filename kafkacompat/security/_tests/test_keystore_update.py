"""Kafka's rules for a listener keystore replaced at run time (tls.check_keystore_update)."""

from __future__ import annotations

import pytest

from kafkacompat.config import ConfigError
from kafkacompat.security.tls import check_keystore_update


def certificate(cn: str, *names: str) -> dict:
    return {
        "subject": ((("organizationName", "kafkacompat development"),), (("commonName", cn),)),
        "subjectAltName": tuple(("DNS", name) for name in names),
    }


def test_same_subject_and_more_names_is_a_renewal() -> None:
    check_keystore_update(
        certificate("localhost", "localhost"),
        certificate("localhost", "localhost", "broker-1"),
        allow_dn_changes=False,
        allow_san_changes=False,
    )


def test_another_subject_is_refused_unless_allowed() -> None:
    old, new = certificate("localhost", "localhost"), certificate("other", "localhost")
    with pytest.raises(ConfigError, match="Keystore DistinguishedName does not match") as refused:
        check_keystore_update(old, new, allow_dn_changes=False, allow_san_changes=False)
    assert "CN=localhost,O=kafkacompat development" in str(refused.value)
    check_keystore_update(old, new, allow_dn_changes=True, allow_san_changes=False)


def test_a_lost_name_is_refused_unless_allowed() -> None:
    old, new = certificate("localhost", "localhost", "broker-1"), certificate("localhost", "localhost")
    with pytest.raises(ConfigError, match="Keystore SubjectAltNames do not match"):
        check_keystore_update(old, new, allow_dn_changes=False, allow_san_changes=False)
    check_keystore_update(old, new, allow_dn_changes=False, allow_san_changes=True)
