"""SCRAM credentials: stored salted, as Kafka stores them, and persisted in the log dir.

Theory of operation
-------------------
`ScramCredentialStore` owns the table user -> mechanism -> `ScramCredential(salt, stored_key,
server_key, iterations)`. No password is ever held: AlterUserScramCredentials sends the salted
password (the client salts it), and only the RFC 5802 stored key and server key derived from it are
kept, exactly what Kafka keeps under ZooKeeper's /config/users/<user>
("salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>", one string per mechanism).

The table lives in `scram-credentials.json` in the first log dir ({"version": 1, "users": {user:
{mechanism: that string}}}). `upsert`/`delete` change memory; `snapshot()` + `write(path, snapshot)`
persist (atomically: temporary file, fsync, rename), which the handler runs in a worker thread before
it answers, so an acknowledged change survives a crash. In cluster mode the table is not a file: it
lives in ZooKeeper's /config/users/<user> (kafkacompat.replication.config_sync writes it there and
`replace()`s this store with every fresh read). Sans-io: nothing here imports trio.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkacompat.log.checkpoints import atomic_write
from kafkacompat.security.sasl import SCRAM_HASHES, scram_keys

__all__ = ["CREDENTIALS_FILE", "MAX_ITERATIONS", "MIN_ITERATIONS", "ScramCredential", "ScramCredentialStore"]

CREDENTIALS_FILE = "scram-credentials.json"
# Kafka's bounds for SCRAM iterations (ScramMechanism: minimum 4096; AlterUserScramCredentials: at most 16384)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_IDS = {name: key for key, name in MECHANISM_TYPES.items()}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def encode(self) -> str:
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode("ascii")

        return (
            f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
            f"server_key={b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def decode(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(","))
        return cls(
            base64.b64decode(fields["salt"]),
            base64.b64decode(fields["stored_key"]),
            base64.b64decode(fields["server_key"]),
            int(fields["iterations"]),
        )

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        stored_key, server_key = scram_keys(mechanism, salted_password)
        return cls(salt, stored_key, server_key, iterations)


class ScramCredentialStore:
    """user -> mechanism -> ScramCredential (see the module docstring)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._users: dict[str, dict[str, ScramCredential]] = {}

    @classmethod
    def load(cls, path: Path) -> ScramCredentialStore:
        store = cls(path)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return store
        for user, mechanisms in document.get("users", {}).items():
            store._users[user] = {
                mechanism: ScramCredential.decode(text)
                for mechanism, text in mechanisms.items()
                if mechanism in SCRAM_HASHES
            }
        return store

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> list[str]:
        return sorted(user for user, mechanisms in self._users.items() if mechanisms)

    def mechanisms(self, user: str) -> dict[str, ScramCredential]:
        return dict(self._users.get(user, {}))

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self._users.setdefault(user, {})[mechanism] = credential

    def replace(self, users: dict[str, dict[str, ScramCredential]]) -> None:
        """Take a whole new table (cluster mode: a fresh read of ZooKeeper's /config/users)."""
        self._users = {user: dict(mechanisms) for user, mechanisms in users.items() if mechanisms}

    def delete(self, user: str, mechanism: str) -> bool:
        mechanisms = self._users.get(user)
        if not mechanisms or mechanism not in mechanisms:
            return False
        del mechanisms[mechanism]
        if not mechanisms:
            del self._users[user]
        return True

    def snapshot(self) -> dict[str, Any]:
        return {
            "version": 1,
            "users": {
                user: {mechanism: credential.encode() for mechanism, credential in sorted(mechanisms.items())}
                for user, mechanisms in sorted(self._users.items())
            },
        }

    @staticmethod
    def write(path: Path, snapshot: dict[str, Any]) -> None:
        """Persist a snapshot atomically (blocking: run it in a worker thread)."""
        atomic_write(str(path), json.dumps(snapshot, indent=1, sort_keys=True).encode(), mode=0o600)
