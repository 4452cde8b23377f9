"""Latency figures of the well-behaved pair: percentiles, windows of send time, and alternating blocks.

Theory of operation: the pair (kafkacompat.fuzzing.pair) records each record's send time and end-to-end
latency; these functions reduce them. A run that alternates (`fuzz(alternate=...)`) takes turns in
blocks from its start, the first fuzzing, the next quiet; `block_at()` is the one rule of which block a
moment falls in, which the fuzzer's pacing, `alternating_block()` and `alternating_split()` all use, so
that the samples are split by the same blocks the fuzzer kept. Both kinds of block share the machine's
conditions of the same minutes. Samples sent in a block's first ALTERNATE_MARGIN_SECONDS count for
neither kind: the fuzzer's last answers and the broker's work for them straddle the change.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = [
    "ALTERNATE_MARGIN_SECONDS",
    "PAIR_WINDOW_SECONDS",
    "alternating_block",
    "alternating_split",
    "block_at",
    "latency_windows",
    "now_ms",
    "p99_ratio",
    "percentile",
]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def now_ms() -> float:
    return time.time() * 1000


#: the well-behaved pair's latency is also summed up per window of this many seconds, so a long run
#: tells a tail that grows with the broker's age from one spread evenly or from bursts
PAIR_WINDOW_SECONDS = 30.0


#: samples sent in a block's first this many seconds are left out of `alternating_split`: the fuzzer's
#: last answers (0.5 s at most) and the broker's work for them straddle the change
ALTERNATE_MARGIN_SECONDS = 1.0


def block_at(since: float, block_seconds: float) -> tuple[int, float, str]:
    """The index of the block that `since` seconds after the start fall in, how far into it, and its kind:
    blocks take turns from the start, the first "fuzzed", the next "quiet", and so on."""
    block, into = divmod(since, block_seconds)
    return int(block), into, ("fuzzed" if int(block) % 2 == 0 else "quiet")


def alternating_block(moment: float, began: float, block_seconds: float) -> tuple[str, int] | None:
    """The kind ("fuzzed" or "quiet") and index of the block that `moment` falls in, for a fuzzer that
    alternated (`fuzz(alternate=...)`) from `began`, fuzzing first; None before `began` and in a block's
    first ALTERNATE_MARGIN_SECONDS."""
    if block_seconds <= ALTERNATE_MARGIN_SECONDS:
        raise ValueError(
            f"blocks of {block_seconds} s leave nothing after their first {ALTERNATE_MARGIN_SECONDS} s"
        )
    if moment < began:
        return None
    index, into, kind = block_at(moment - began, block_seconds)
    if into < ALTERNATE_MARGIN_SECONDS:
        return None
    return kind, index


def alternating_split(
    samples: list[list[float]], began: float, ended: float, block_seconds: float
) -> dict[str, Any]:
    """A pair's samples ([wall ms sent, ms taken]) split by the block their send time fell in, for a fuzzer
    that alternated (`fuzz(alternate=...)`): blocks of `block_seconds` from `began` to `ended` (wall
    seconds), the first fuzzing, the next quiet, and so on. Both kinds of block share the machine's
    conditions of the same minutes, which a quiet run before the fuzzing does not: on this 2-core VM the
    quiet p99 swung 1.6-7.2 ms between runs of the same code."""
    taken: dict[str, list[float]] = {"quiet": [], "fuzzed": []}
    by_block: dict[tuple[int, str], list[float]] = {}  # (index, kind): index first, so sorted is in order
    for sent_ms, took in samples:
        sent = sent_ms / 1000
        block = alternating_block(sent, began, block_seconds)
        if block is None or sent >= ended:
            continue
        kind, index = block
        taken[kind].append(took)
        by_block.setdefault((index, kind), []).append(took)
    split: dict[str, Any] = {"block_seconds": block_seconds}
    for kind, values in taken.items():
        split[kind] = {
            "blocks": sum(1 for _, each in by_block if each == kind),
            "records": len(values),
            "e2e_p50_ms": round(percentile(values, 0.50), 2) if values else None,
            "e2e_p99_ms": round(percentile(values, 0.99), 2) if values else None,
        }
    ratio = p99_ratio(split["quiet"], split["fuzzed"])
    if ratio is not None:
        split["p99_ratio"] = ratio
    # each block's own p99, in order: whether the quiet blocks drift with the broker's growing state
    split["per_block_p99_ms"] = [
        [index, round(percentile(values, 0.99), 2)] for (index, _), values in sorted(by_block.items())
    ]
    return split


def latency_windows(
    sent_ms: list[float], latency_ms: list[float], window_seconds: float
) -> list[dict[str, Any]]:
    """Per window of send time: how many records, their p50/p99/max latency, and how many took over 10 ms."""
    if not sent_ms:
        return []
    first = min(sent_ms)
    windows: dict[int, list[float]] = {}
    for sent, latency in zip(sent_ms, latency_ms, strict=True):
        windows.setdefault(int((sent - first) / (window_seconds * 1000)), []).append(latency)
    return [
        {
            "t": round(index * window_seconds),
            "records": len(values),
            "p50_ms": round(percentile(values, 0.50), 2),
            "p99_ms": round(percentile(values, 0.99), 2),
            "max_ms": round(max(values), 2),
            "over_10_ms": sum(1 for value in values if value > 10),
        }
        for index, values in sorted(windows.items())
    ]


def p99_ratio(quiet: dict[str, Any], fuzzed: dict[str, Any]) -> float | None:
    """A pair's end-to-end p99 beside the fuzzer over its quiet one (None when either run measured none)."""
    quiet_p99, fuzzed_p99 = quiet.get("e2e_p99_ms"), fuzzed.get("e2e_p99_ms")
    if not quiet_p99 or not fuzzed_p99:
        return None
    return round(fuzzed_p99 / quiet_p99, 2)
