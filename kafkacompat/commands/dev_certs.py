"""`kafkacompat dev-certs DIR`: a development CA, a broker certificate and a client certificate (PEM).

Theory of operation: runs the `openssl` command line tool (present wherever Python's ssl is built
against OpenSSL's libraries; Debian package `openssl`) to make, in DIR:

- `ca.pem`/`ca.key`: a self-signed CA (what clients trust: `ssl.ca.location`, `ssl.truststore.location`);
- `broker.pem`/`broker.key`: the broker's certificate signed by that CA, with subject alternative names
  localhost, 127.0.0.1, ::1, this host's name and every `--host` given (what `ssl.keystore.location`
  points at: `broker-keystore.pem` holds both, as Kafka's PEM keystore file does);
- `client.pem`/`client.key`/`client-keystore.pem`: a client certificate (CN from `--client-cn`) for mTLS;
- `broker-ssl.properties`: the ssl.* broker settings for these files, to append to server.properties.

Keys are unencrypted (development only) and written with mode 0600. Existing files are not overwritten
unless `--force` is given. Nothing is printed about key contents.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HELP = "make a development CA, broker and client certificate (PEM) for SSL/SASL_SSL listeners"

OUTPUTS = (
    "ca.pem",
    "ca.key",
    "broker.pem",
    "broker.key",
    "broker-keystore.pem",
    "client.pem",
    "client.key",
    "client-keystore.pem",
    "broker-ssl.properties",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="where to write the files (created if missing)")
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        help="another DNS name or IP address the broker is reached at (repeatable)",
    )
    parser.add_argument("--client-cn", default="client", help="common name of the client certificate")
    parser.add_argument("--days", type=int, default=825, help="validity in days (default 825)")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _san(hosts: list[str]) -> str:
    entries = []
    for host in dict.fromkeys(hosts):
        kind = "IP" if _is_ip(host) else "DNS"
        entries.append(f"{kind}:{host}")
    return ",".join(entries)


def _is_ip(text: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, text)
        except OSError:
            continue
        return True
    return False


def make_dev_certs(
    directory: Path, hosts: list[str] | None = None, client_cn: str = "client", days: int = 825
) -> dict[str, Path]:
    """Write the files listed in OUTPUTS into `directory`; returns name -> path."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {name: directory / name for name in OUTPUTS}
    names = ["localhost", "127.0.0.1", "::1", socket.gethostname(), *(hosts or [])]
    with tempfile.TemporaryDirectory(prefix="kafkacompat-dev-certs-") as scratch:
        work = Path(scratch)
        old_umask = os.umask(0o077)
        try:
            _openssl(
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", str(days),
                "-subj", "/O=kafkacompat development/CN=kafkacompat development CA",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout", str(work / "ca.key"), "-out", str(work / "ca.pem"),
            )  # fmt: skip
            for role, subject, extensions in (
                (
                    "broker",
                    "/O=kafkacompat development/CN=localhost",
                    # clientAuth too: a broker presents it to other brokers on an mTLS inter-broker listener
                    f"subjectAltName={_san(names)}\nextendedKeyUsage=serverAuth,clientAuth\n",
                ),
                ("client", f"/O=kafkacompat development/CN={client_cn}", "extendedKeyUsage=clientAuth\n"),
            ):
                (work / f"{role}.ext").write_text(extensions)
                _openssl(
                    "req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-subj", subject,
                    "-keyout", str(work / f"{role}.key"), "-out", str(work / f"{role}.csr"),
                )  # fmt: skip
                _openssl(
                    "x509", "-req", "-in", str(work / f"{role}.csr"), "-CA", str(work / "ca.pem"),
                    "-CAkey", str(work / "ca.key"), "-CAcreateserial", "-days", str(days), "-sha256",
                    "-extfile", str(work / f"{role}.ext"), "-out", str(work / f"{role}.pem"),
                )  # fmt: skip
                # a Kafka PEM keystore file: the private key followed by the certificate chain
                (work / f"{role}-keystore.pem").write_text(
                    (work / f"{role}.key").read_text() + (work / f"{role}.pem").read_text()
                )
            (work / "broker-ssl.properties").write_text(
                "# TLS for SSL and SASL_SSL listeners (made by kafkacompat dev-certs; development only)\n"
                "ssl.keystore.type=PEM\n"
                f"ssl.keystore.location={paths['broker-keystore.pem']}\n"
                "ssl.truststore.type=PEM\n"
                f"ssl.truststore.location={paths['ca.pem']}\n"
            )
            for name, path in paths.items():
                shutil.copyfile(work / name, path)
                os.chmod(path, 0o600 if name.endswith(".key") or "keystore" in name else 0o644)
        finally:
            os.umask(old_umask)
    return paths


def run(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    existing = [name for name in OUTPUTS if (directory / name).exists()]
    if existing and not args.force:
        held = ", ".join(existing)
        print(f"kafkacompat dev-certs: {directory} already holds {held} (--force)", file=sys.stderr)
        return 1
    if shutil.which("openssl") is None:
        print("kafkacompat dev-certs: needs the openssl command (Debian: openssl)", file=sys.stderr)
        return 1
    try:
        paths = make_dev_certs(directory, args.host, args.client_cn, args.days)
    except RuntimeError as exc:
        print(f"kafkacompat dev-certs: {exc}", file=sys.stderr)
        return 1
    for name in OUTPUTS:
        print(paths[name])
    return 0
