"""Replication throttles: which replicas a throttled-replicas list names, and when data is held back."""

from __future__ import annotations

from kafkacompat.config import LONG_MAX
from kafkacompat.replication.throttle import ReplicationThrottle, throttled_partition


def test_throttled_replicas_lists() -> None:
    replicas = ["0:1", " 1 : 2 ", "3:1"]
    assert throttled_partition(replicas, 0, 1) and throttled_partition(replicas, 1, 2)
    assert not throttled_partition(replicas, 0, 2) and not throttled_partition(replicas, 2, 1)
    assert throttled_partition(["*"], 7, 9)
    assert not throttled_partition([], 0, 1)


def test_held_back_only_out_of_sync_and_over_the_rate() -> None:
    throttle = ReplicationThrottle(samples=2, window_seconds=1.0)
    assert not throttle.holds_back(1000, in_sync=False, now=0.0)  # nothing measured yet
    throttle.record(2000, 0.0)  # 2000 B: at t=0.5 the window is 1.5 s (one full sample at least)
    assert throttle.holds_back(1000, in_sync=False, now=0.5)
    assert not throttle.holds_back(1000, in_sync=True, now=0.5)  # in-sync replicas are never held back
    assert not throttle.holds_back(LONG_MAX, in_sync=False, now=0.5)  # the default: unlimited
    assert not throttle.holds_back(1000, in_sync=False, now=2.5)  # the sample expired
