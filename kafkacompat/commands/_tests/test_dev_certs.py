"""`kafkacompat dev-certs`: the files, a chain that verifies, the broker names, no overwrite."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from kafkacompat.cli import main

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def test_dev_certs_makes_a_verifiable_chain_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "certs"
    assert main(["dev-certs", str(target), "--host", "broker.example", "--client-cn", "tester"]) == 0
    printed = capsys.readouterr().out.split()
    assert sorted(Path(line).name for line in printed) == sorted(p.name for p in target.iterdir())
    for name in ("broker.pem", "client.pem"):
        check = subprocess.run(
            ["openssl", "verify", "-CAfile", str(target / "ca.pem"), str(target / name)],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stderr
    text = subprocess.run(
        ["openssl", "x509", "-in", str(target / "broker.pem"), "-noout", "-text"],
        capture_output=True,
        text=True,
    ).stdout
    assert "DNS:broker.example" in text and "IP Address:127.0.0.1" in text
    assert (target / "broker.key").stat().st_mode & 0o077 == 0
    context = ssl.create_default_context(cafile=str(target / "ca.pem"))
    context.load_cert_chain(str(target / "client-keystore.pem"))  # key and certificate in one PEM file
    assert "ssl.keystore.location=" in (target / "broker-ssl.properties").read_text()
    before = (target / "ca.pem").read_bytes()
    assert main(["dev-certs", str(target)]) == 1
    assert "already holds" in capsys.readouterr().err
    assert (target / "ca.pem").read_bytes() == before
