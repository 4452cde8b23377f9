"""Watching the fuzzed broker: its process, its state and its log.

Theory of operation: the caller of a run (kafkacompat.fuzzing.campaign, compat_tests/test_fuzz.py)
watches the broker itself rather than trusting the answers alone: the process alive and its RSS, open
descriptors by kind and thread count, from /proc (`read_rss_kib`, `descriptor_census`, `read_threads`);
the state the run made it keep, as the broker reports it (`broker_state_counts`: partition logs, groups
and their members, transactional ids), from which `rss_bound_kib()` computes the RSS the broker must stay
within; its log's unhandled errors (`scan_log()`: tracebacks and the like); and the loop probe's windows
(loop.probe.window.seconds, kafkacompat.diagnostics.loop_probe) merged per phase of the run or per alternating
block.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

from kafkacompat.fuzzing.latency import alternating_block
from kafkacompat.fuzzing.seeds import module_of
from kafkacompat.wire.api_keys import ApiKey

__all__ = [
    "RSS_PER_CONNECTION_KIB",
    "RSS_PER_GROUP_KIB",
    "RSS_PER_MEMBER_KIB",
    "RSS_PER_PARTITION_LOG_KIB",
    "RSS_PER_TRANSACTIONAL_ID_KIB",
    "RSS_SCRATCH_BUFFERS_KIB",
    "RSS_SLACK_KIB",
    "broker_state_counts",
    "descriptor_census",
    "loop_probe_alternating",
    "loop_probe_phase",
    "loop_probe_windows",
    "read_rss_kib",
    "read_threads",
    "rss_bound_kib",
    "scan_log",
]


_UNHANDLED = re.compile(r"Traceback \(most recent call last\)|unexpected error|Unhandled|CRITICAL")


def scan_log(path: str | Path, start: int = 0) -> list[str]:
    """Lines of the broker's log from byte `start` that show an unhandled error (tracebacks and the like)."""
    with open(path, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    lines = text.splitlines()
    found: list[str] = []
    covered = -1  # a traceback right after its "unexpected error" line is the same problem
    for i, line in enumerate(lines):
        if i > covered and _UNHANDLED.search(line):
            found.append("\n".join(lines[i : i + 12]))
            covered = i + 2
    return found


def loop_probe_windows(path: str | Path, start: int) -> list[dict[str, Any]]:
    """The loop probe's windows (loop.probe.window.seconds, diagnostics/loop_probe.py) in the broker's log
    from byte `start`, in order; garbled lines are skipped. Read once per log, then shared out by phase."""
    import json

    from kafkacompat.diagnostics.loop_probe import LOG_MARKER

    with open(path, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    windows: list[dict[str, Any]] = []
    for line in text.splitlines():
        _, marker, payload = line.partition(LOG_MARKER)
        if not marker:
            continue
        try:
            windows.append(json.loads(payload))
        except ValueError:
            continue
    return windows


def loop_probe_phase(windows: list[dict[str, Any]], began: float, ended: float) -> dict[str, Any] | None:
    """The loop probe over one phase: the windows that lie wholly between the monotonic times `began` and
    `ended`, merged. None when there is no such window (the probe was off)."""
    return _merge_loop_probe(
        [
            row
            for row in windows
            if row["end_monotonic"] - row["seconds"] >= began and row["end_monotonic"] <= ended
        ]
    )


def loop_probe_alternating(
    windows: list[dict[str, Any]], began: float, ended: float, block_seconds: float
) -> dict[str, dict[str, Any] | None]:
    """The loop probe over an alternating fuzzer's blocks (as `alternating_split`, but in monotonic
    time): the windows that lie wholly inside one fuzzed block, merged, and those wholly inside one quiet
    block; a window across two blocks, or one that starts in a block's first second, counts for neither.
    A block holds a whole window for sure only when it is twice the window, margin aside."""
    rows: dict[str, list[dict[str, Any]]] = {"fuzzed_blocks": [], "quiet_blocks": []}
    for row in windows:
        start, end = row["end_monotonic"] - row["seconds"], row["end_monotonic"]
        block = alternating_block(start, began, block_seconds)
        if block is None or end > ended or end > began + (block[1] + 1) * block_seconds:
            continue
        rows[f"{block[0]}_blocks"].append(row)
    return {kind: _merge_loop_probe(chosen) for kind, chosen in rows.items()}


def _merge_loop_probe(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Loop-probe windows merged into one summary; None for no window."""
    from kafkacompat.diagnostics.loop_probe import Histogram

    if not rows:
        return None
    turns, wakeups = Histogram(), Histogram()
    busy_seconds = seconds = 0.0
    for row in rows:
        seconds += row["seconds"]
        busy_seconds += row["busy"] * row["seconds"]
        turns.merge(row["turns_buckets"], row["turns_max_ms"] / 1000)
        wakeups.merge(row["wakeups_buckets"], row["wakeups_max_ms"] / 1000)
    summary: dict[str, Any] = {"windows": len(rows), "seconds": round(seconds, 1),
                               "busy": round(busy_seconds / seconds, 3) if seconds else 0.0}  # fmt: skip
    for name, histogram in (("turns", turns), ("wakeups", wakeups)):
        summary.update({key: value for key, value in histogram.summary(name).items() if "buckets" not in key})
    return summary


def read_rss_kib(pid: int) -> int | None:
    """Resident set size of a process in KiB (VmRSS from /proc), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def descriptor_census(pid: int) -> dict[str, int] | None:
    """The process's open descriptors by kind: sockets, partition-log files (.log/.index/.timeindex under
    a partition dir), other files, other (pipes, eventfds...); None if it is gone."""
    counts = {"total": 0, "sockets": 0, "log_files": 0, "deleted_log_files": 0, "other_files": 0, "other": 0}
    base = f"/proc/{pid}/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return None
    for name in names:
        try:
            target = os.readlink(f"{base}/{name}")
        except OSError:
            continue
        counts["total"] += 1
        if target.startswith("socket:"):
            counts["sockets"] += 1
        elif target.startswith("/"):
            if target.endswith((".log", ".index", ".timeindex", ".txnindex")):
                deleted = "-delete/" in target or target.endswith(" (deleted)") or ".deleted" in target
                counts["deleted_log_files" if deleted else "log_files"] += 1
            else:
                counts["other_files"] += 1
        else:
            counts["other"] += 1
    return counts


def read_threads(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def broker_state_counts(bootstrap: str, data_dir: Path | None) -> dict[str, int]:
    """What the run made the broker keep, as the broker itself reports it: partition logs (the data dir's
    partition dirs, deleted ones waiting for file.delete.delay.ms included; from Metadata when the data
    dir is unknown), groups and their members (ListGroups, DescribeGroups) with the bytes each member
    holds (ids, protocol metadata, assignment), and transactional ids (ListTransactions)."""
    from kafkacompat.client import KafkaClient

    counts = {"partition_logs": 0, "groups": 0, "members": 0, "member_bytes": 0, "transactional_ids": 0}
    if data_dir is not None:
        with contextlib.suppress(OSError):
            partition_dir = re.compile(r"-\d+(\.\w+-delete)?$")
            entries = os.scandir(data_dir)
            counts["partition_logs"] = sum(1 for e in entries if e.is_dir() and partition_dir.search(e.name))
    with KafkaClient(bootstrap, client_id="kafkacompat-fuzz-census", timeout=60) as client:
        if data_dir is None:
            answer = client.send(ApiKey.METADATA, module_of(ApiKey.METADATA).MetadataRequest(topics=None))
            counts["partition_logs"] = sum(len(t.partitions) for t in answer.topics)
        listed = client.send(ApiKey.LIST_GROUPS, module_of(ApiKey.LIST_GROUPS).ListGroupsRequest())
        groups = [g.group_id for g in listed.groups]
        counts["groups"] = len(groups)
        describe = module_of(ApiKey.DESCRIBE_GROUPS).DescribeGroupsRequest
        for start in range(0, len(groups), 100):
            for group in client.send(
                ApiKey.DESCRIBE_GROUPS, describe(groups=groups[start : start + 100])
            ).groups:
                for member in group.members:
                    counts["members"] += 1
                    held = [member.member_metadata, member.member_assignment, member.member_id]
                    held += [member.client_id, member.client_host]
                    counts["member_bytes"] += sum(len(value or b"") for value in held)
        if ApiKey.LIST_TRANSACTIONS in client.connection().versions:
            counts["transactional_ids"] = len(
                client.send(
                    ApiKey.LIST_TRANSACTIONS, module_of(ApiKey.LIST_TRANSACTIONS).ListTransactionsRequest()
                ).transaction_states
            )
    return counts


# The fuzz run's RSS bound (docs/RELIABILITY.md, "Live fuzzing"), in KiB: the connection terms of the
# "Connections" section, then costs per piece of state measured on this broker (an empty partition log
# 2.7 KiB, a group with one committed offset 1.2 KiB, a transactional id 0.6 KiB: about 3x is allowed
# for indexes, producer state and allocator overhead), plus a fixed slack for the interpreter's caches
# and heap fragmentation.
RSS_PER_CONNECTION_KIB = 16
RSS_SCRATCH_BUFFERS_KIB = 256 * 64
RSS_PER_PARTITION_LOG_KIB = 8
RSS_PER_GROUP_KIB = 4
RSS_PER_MEMBER_KIB = 4
RSS_PER_TRANSACTIONAL_ID_KIB = 2
RSS_SLACK_KIB = 64 * 1024


def rss_bound_kib(
    rss_idle_kib: int, sockets: int, fuzz_connections: int, largest_frame: int, state: dict[str, int]
) -> int:
    """RSS_idle + sockets x 16 KiB + 256 x 64 KiB + fuzzing connections x (64 KiB + 2 x largest frame +
    1 MiB) + partition logs x 8 KiB + groups x 4 KiB + members x 4 KiB + 2 x member bytes +
    transactional ids x 2 KiB + 64 MiB."""
    return int(
        rss_idle_kib
        + sockets * RSS_PER_CONNECTION_KIB
        + RSS_SCRATCH_BUFFERS_KIB
        + fuzz_connections * (64 + 2 * largest_frame / 1024 + 1024)
        + state.get("partition_logs", 0) * RSS_PER_PARTITION_LOG_KIB
        + state.get("groups", 0) * RSS_PER_GROUP_KIB
        + state.get("members", 0) * RSS_PER_MEMBER_KIB
        + 2 * state.get("member_bytes", 0) / 1024
        + state.get("transactional_ids", 0) * RSS_PER_TRANSACTIONAL_ID_KIB
        + RSS_SLACK_KIB
    )
