"""Statistics for the benchmark: run summaries, latency percentiles, CDF points, ratios.

Theory of operation: pure functions over plain lists of floats, no I/O. A throughput figure is the
median of several runs with their min and max (`RunSummary`), so one noisy run neither makes nor breaks
a comparison. Latency percentiles use the nearest-rank definition (the smallest sample such that at
least q of all samples are <= it), which is what "p99 = 5 ms" means to a reader: 99 % of the messages
took at most that long. No interpolation, so every reported figure is a latency that really happened.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "RunSummary",
    "cdf_points",
    "latency_summary",
    "percentile",
    "ratio",
    "summarize",
]


@dataclass(frozen=True, slots=True)
class RunSummary:
    """Median, min and max of the values of several runs (values in the order they were measured)."""

    median: float
    low: float
    high: float
    values: tuple[float, ...]

    def as_dict(self) -> dict[str, object]:
        return {"median": self.median, "min": self.low, "max": self.high, "runs": list(self.values)}


def summarize(values: Sequence[float]) -> RunSummary | None:
    """The median (mean of the middle two for an even count), min and max; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    middle = n // 2
    median = ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return RunSummary(median, ordered[0], ordered[-1], tuple(values))


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted samples, q in (0, 100]."""
    if not ordered:
        raise ValueError("percentile of no samples")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} outside (0, 100]")
    return ordered[_rank(q / 100, len(ordered)) - 1]


def _rank(fraction: float, n: int) -> int:
    """ceil(fraction * n) in 1..n, immune to float noise (0.999 * 1000 must give 999, not 1000)."""
    return min(n, max(1, math.ceil(round(fraction * n, 9))))


def latency_summary(samples_ms: Sequence[float]) -> dict[str, float] | None:
    """p50, p99, p99.9, max, mean and count of latency samples in milliseconds; None for none."""
    if not samples_ms:
        return None
    ordered = sorted(samples_ms)
    return {
        "count": len(ordered),
        "p50": percentile(ordered, 50),
        "p99": percentile(ordered, 99),
        "p99.9": percentile(ordered, 99.9),
        "max": ordered[-1],
        "mean": sum(ordered) / len(ordered),
    }


def cdf_points(samples: Sequence[float], points: int = 200) -> list[tuple[float, float]]:
    """At most `points` (value, fraction <= value) pairs of the empirical CDF, always keeping the max.

    Fractions are spread evenly (plus the tail: p99, p99.9 and the max), enough to draw the curve
    without shipping every sample into the JSON report.
    """
    if not samples or points < 2:
        return []
    ordered = sorted(samples)
    n = len(ordered)
    ranks = {min(n, max(1, round(i * n / (points - 1)))) for i in range(1, points)}
    ranks |= {_rank(0.99, n), _rank(0.999, n), n, 1}
    return [(ordered[rank - 1], rank / n) for rank in sorted(ranks)]


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs, or None when either is missing or theirs is zero."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs
