"""Run summaries, nearest-rank percentiles, CDF points and ratios."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkacompat.bench.stats import cdf_points, latency_summary, percentile, ratio, summarize

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False)


def test_summarize_odd_and_even_counts() -> None:
    odd = summarize([30.0, 10.0, 20.0])
    assert odd is not None
    assert (odd.median, odd.low, odd.high) == (20.0, 10.0, 30.0)
    assert odd.values == (30.0, 10.0, 20.0)  # run order kept for the report
    even = summarize([4.0, 1.0, 3.0, 2.0])
    assert even is not None and even.median == 2.5
    assert summarize([]) is None


def test_summary_as_dict_keys() -> None:
    summary = summarize([1.0, 2.0, 3.0])
    assert summary is not None
    assert summary.as_dict() == {"median": 2.0, "min": 1.0, "max": 3.0, "runs": [1.0, 2.0, 3.0]}


@given(st.lists(finite, min_size=1, max_size=50))
def test_median_splits_the_samples(values: list[float]) -> None:
    summary = summarize(values)
    assert summary is not None
    assert summary.low <= summary.median <= summary.high
    assert sum(v < summary.median for v in values) <= len(values) // 2
    assert sum(v > summary.median for v in values) <= len(values) // 2


def test_percentile_nearest_rank_on_1_to_1000() -> None:
    ordered = [float(i) for i in range(1, 1001)]
    # nearest rank: the ceil(q * n)-th smallest sample
    assert percentile(ordered, 50) == 500.0
    assert percentile(ordered, 99) == 990.0
    assert percentile(ordered, 99.9) == 999.0
    assert percentile(ordered, 100) == 1000.0
    assert percentile([7.0], 0.001) == 7.0


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 0)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@given(st.lists(finite, min_size=1, max_size=200), st.floats(min_value=0.01, max_value=100))
def test_percentile_definition(values: list[float], q: float) -> None:
    ordered = sorted(values)
    p = percentile(ordered, q)
    assert p in ordered
    # at least q % of the samples are <= p, and fewer than q % are < p
    assert sum(v <= p for v in ordered) >= q / 100 * len(ordered) - 1e-9
    assert sum(v < p for v in ordered) < q / 100 * len(ordered) + 1e-9


def test_latency_summary() -> None:
    samples = [float(i) for i in range(1000, 0, -1)]  # unsorted input
    summary = latency_summary(samples)
    assert summary is not None
    assert summary["count"] == 1000
    assert (summary["p50"], summary["p99"], summary["p99.9"], summary["max"]) == (500.0, 990.0, 999.0, 1000.0)
    assert math.isclose(summary["mean"], 500.5)
    assert latency_summary([]) is None


def test_cdf_points_shape() -> None:
    rng = random.Random(7)
    samples = [rng.expovariate(1.0) for _ in range(10_000)]
    points = cdf_points(samples, points=50)
    assert len(points) <= 50 + 4
    values = [v for v, _ in points]
    fractions = [f for _, f in points]
    assert values == sorted(values) and fractions == sorted(fractions)
    assert points[-1] == (max(samples), 1.0)
    ordered = sorted(samples)
    # the tail points are there, exactly
    assert (ordered[math.ceil(0.99 * 10_000) - 1], 0.99) in points
    assert (ordered[math.ceil(0.999 * 10_000) - 1], 0.999) in points
    for value, fraction in points:
        assert sum(s <= value for s in samples) >= fraction * len(samples) - 1e-6
    assert cdf_points([]) == []


def test_cdf_points_few_samples() -> None:
    points = cdf_points([3.0, 1.0, 2.0], points=200)
    assert points == [(1.0, 1 / 3), (2.0, 2 / 3), (3.0, 1.0)]


def test_ratio() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None
    assert ratio(1.0, None) is None
    assert ratio(1.0, 0.0) is None
