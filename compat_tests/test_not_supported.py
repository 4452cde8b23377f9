"""What README's "Not supported yet: TLS, SASL" says a client sees, checked with real clients.

Each test pins one refusal the README describes. When the feature lands these tests fail on purpose:
replace the README paragraph and the test with the feature's own tests. They describe this broker's
refusals, so they are skipped against another broker (`--bootstrap`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LANDED = "works now: replace README's 'Not supported yet' paragraph and this test"


@pytest.fixture(autouse=True)
def _only_our_broker(request: pytest.FixtureRequest) -> None:
    if request.config.getoption("--bootstrap"):
        pytest.skip("describes kafkacompat's own refusals (--bootstrap given)")


@pytest.mark.parametrize("protocol", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_a_tls_or_sasl_listener_stops_start_up(tmp_path: Path, protocol: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafkacompat",
            "serve",
            "--override",
            f"listeners={protocol}://127.0.0.1:0",
            "--override",
            f"log.dirs={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, f"a {protocol} listener {LANDED}"
    assert f"listener {protocol}: security protocol {protocol} is not supported" in result.stderr


def test_a_tls_client_fails_its_handshake(bootstrap: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SSL",
            "enable.ssl.certificate.verification": False,
        }
    )
    with pytest.raises(KafkaException) as caught:
        admin.list_topics(timeout=3)
        pytest.fail(f"TLS {LANDED}")
    assert caught.value.args[0].code() == KafkaError._TRANSPORT


def test_sasl_clients_are_refused(bootstrap: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient
    from kafka.errors import IncompatibleBrokerVersion

    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
    admin = AdminClient({"bootstrap.servers": bootstrap, **sasl, "sasl.username": "u", "sasl.password": "p"})
    with pytest.raises(KafkaException) as caught:
        admin.list_topics(timeout=3)
        pytest.fail(f"SASL {LANDED}")
    assert caught.value.args[0].code() == KafkaError._TRANSPORT
    with pytest.raises(IncompatibleBrokerVersion, match="SaslHandshakeRequest"):
        KafkaAdminClient(
            bootstrap_servers=bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="u",
            sasl_plain_password="p",
            request_timeout_ms=5000,
        ).close()
        pytest.fail(f"SASL {LANDED}")
