"""Small text files of the log dir and partition dirs, in Kafka's formats, written atomically.

Theory of operation: every file here is rewritten whole: write `<name>.tmp`, fsync it, rename it over
the old file, fsync the directory. A crash leaves either the old or the new file, never a mix.

Formats (Kafka's):
- offset checkpoints (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
  `replication-offset-checkpoint`): a version line `0`, a count line, then `topic partition offset` lines.
- `leader-epoch-checkpoint`: a version line `0`, a count line, then `epoch startOffset` lines.
- `meta.properties`: Java properties; version 1 carries `node.id`, `cluster.id` and `directory.id`
  (a random UUID in Kafka's URL-safe base64 form); version 0 carries `broker.id` instead of `node.id`.
- `partition.metadata` (in a partition dir): `version: 0` and `topic_id: <uuid>` lines.
- `.kafka_cleanshutdown`: present only after a clean shutdown; Kafka 3.x writes
  `{"version":0,"brokerEpoch":N}` into it. Its absence at startup means recovery is needed.

Readers raise `CheckpointError` (a ValueError) on malformed content; callers decide whether that is
fatal (meta.properties) or means "start from scratch" (offset checkpoints, with a warning).
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "META_PROPERTIES",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "CheckpointError",
    "atomic_write",
    "fsync_dir",
    "new_directory_id",
    "read_clean_shutdown",
    "read_epoch_checkpoint",
    "read_meta_properties",
    "read_offset_checkpoint",
    "read_partition_metadata",
    "write_clean_shutdown",
    "write_epoch_checkpoint",
    "write_meta_properties",
    "write_offset_checkpoint",
    "write_partition_metadata",
]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


class CheckpointError(ValueError):
    """A checkpoint or properties file whose content does not follow its format."""


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, sync: bool = True, mode: int = 0o644) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new content (a new file gets
    `mode`: 0o600 for secrets)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def _read_text(path: str) -> str:
    """A checkpoint's text; bytes that are not UTF-8 (a garbled file) are a CheckpointError, not a crash."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not text ({exc})") from None


def _read_versioned_lines(path: str) -> list[list[str]]:
    lines = _read_text(path).splitlines()
    if len(lines) < 2:
        raise CheckpointError(f"{path}: missing version or count line")
    if lines[0].strip() != "0":
        raise CheckpointError(f"{path}: unsupported version {lines[0].strip()!r}")
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise CheckpointError(f"{path}: bad count line {lines[1]!r}") from None
    body = [line.split() for line in lines[2:] if line.strip()]
    if count != len(body):
        raise CheckpointError(f"{path}: count {count} but {len(body)} entries")
    return body


def read_offset_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset}; an absent file reads as empty."""
    if not os.path.exists(path):
        return {}
    result: dict[tuple[str, int], int] = {}
    for fields in _read_versioned_lines(path):
        if len(fields) != 3:
            raise CheckpointError(f"{path}: bad entry {' '.join(fields)!r}")
        try:
            result[(fields[0], int(fields[1]))] = int(fields[2])
        except ValueError:
            raise CheckpointError(f"{path}: bad entry {' '.join(fields)!r}") from None
    return result


def write_offset_checkpoint(path: str, offsets: Mapping[tuple[str, int], int], *, sync: bool = True) -> None:
    lines = ["0", str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    atomic_write(path, ("\n".join(lines) + "\n").encode(), sync=sync)


def read_epoch_checkpoint(path: str) -> list[tuple[int, int]]:
    """[(epoch, start_offset)] in file order; an absent file reads as empty."""
    if not os.path.exists(path):
        return []
    entries = []
    for fields in _read_versioned_lines(path):
        if len(fields) != 2:
            raise CheckpointError(f"{path}: bad entry {' '.join(fields)!r}")
        try:
            entries.append((int(fields[0]), int(fields[1])))
        except ValueError:
            raise CheckpointError(f"{path}: bad entry {' '.join(fields)!r}") from None
    return entries


def write_epoch_checkpoint(path: str, entries: Iterable[tuple[int, int]], *, sync: bool = True) -> None:
    items = list(entries)
    lines = ["0", str(len(items))] + [f"{epoch} {offset}" for epoch, offset in items]
    atomic_write(path, ("\n".join(lines) + "\n").encode(), sync=sync)


def new_directory_id() -> str:
    """A random UUID in Kafka's string form: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def read_meta_properties(path: str) -> dict[str, str]:
    """key -> value of a Java-properties file as Kafka writes it (comments skipped)."""
    result: dict[str, str] = {}
    for line in _read_text(path).splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        key, sep, value = stripped.partition("=")
        if not sep:
            raise CheckpointError(f"{path}: bad line {stripped!r}")
        result[key.strip()] = value.strip()
    if "version" not in result:
        raise CheckpointError(f"{path}: no version")
    return result


def write_meta_properties(path: str, properties: Mapping[str, str]) -> None:
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    lines = ["#", f"#{stamp}"] + [f"{key}={value}" for key, value in properties.items()]
    atomic_write(path, ("\n".join(lines) + "\n").encode())


def write_clean_shutdown(log_dir: str, broker_epoch: int = -1) -> None:
    body = json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":"))
    atomic_write(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), body.encode())


def read_clean_shutdown(log_dir: str) -> bool:
    """True when the marker exists (an empty marker, as older Kafka wrote it, counts too)."""
    return os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE))


def write_partition_metadata(partition_dir: str, topic_id: str, *, sync: bool = True) -> None:
    body = f"version: 0\ntopic_id: {topic_id}"
    atomic_write(os.path.join(partition_dir, PARTITION_METADATA), body.encode(), sync=sync)


def read_partition_metadata(partition_dir: str) -> str | None:
    """The topic id stored in the partition dir, None when absent or unreadable."""
    try:
        with open(os.path.join(partition_dir, PARTITION_METADATA), encoding="utf-8") as f:
            lines = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    except (OSError, UnicodeDecodeError):  # garbled: as good as absent
        return None
    if lines.get("version", "").strip() != "0":
        return None
    return lines.get("topic_id", "").strip() or None
