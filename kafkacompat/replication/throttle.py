"""Replication throttles (KIP-73): bounding the bytes a reassignment or a lagging replica copies.

Theory of operation
-------------------
Kafka throttles replication per broker with two rates, both dynamic broker configs:
`leader.replication.throttled.rate` (bytes/s a leader serves to throttled followers) and
`follower.replication.throttled.rate` (bytes/s a follower fetches for throttled partitions); the
default, Long.MAX_VALUE, is unlimited. Which replicas are throttled is a topic config:
`leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`, a list of
`partition:broker` pairs (the broker being the one that throttles: the leader, resp. the follower) or
`*` for every replica of the topic.

`ReplicationThrottle` owns one broker-wide sampled rate (`replication.quota.window.num` samples of
`replication.quota.window.size.seconds`, the same Rate as client quotas) for one side. As in Kafka's
ReplicaManager and ReplicaFetcherThread, a throttled partition of a replica that is *not in sync*
carries no data while the measured rate is over the quota (`holds_back`), and every byte of a
throttled partition that is sent (leader) or received (follower) is recorded; in-sync replicas are
never held back, so throttling cannot shrink the ISR. Sans-io: the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafkacompat.config import LONG_MAX
from kafkacompat.security.quotas import RateSensor

__all__ = ["ReplicationThrottle", "throttled_partition"]

ALL_REPLICAS = "*"


def throttled_partition(replicas: Iterable[str], partition: int, broker_id: int) -> bool:
    """Whether a `*.replication.throttled.replicas` list names `partition` on `broker_id` (or is `*`)."""
    for entry in replicas:
        entry = entry.strip()
        if entry == ALL_REPLICAS:
            return True
        number, _, broker = entry.partition(":")
        if number.strip() == str(partition) and broker.strip() == str(broker_id):
            return True
    return False


class ReplicationThrottle:
    """One side's (leader or follower) replication rate of this broker; see the module docstring."""

    def __init__(self, samples: int, window_seconds: float) -> None:
        self.samples = samples
        self.window = window_seconds
        self._sensor: RateSensor | None = None

    def _sensor_at(self, now: float) -> RateSensor:
        if self._sensor is None:
            self._sensor = RateSensor(self.samples, self.window, now)
        return self._sensor

    def holds_back(self, rate: int, in_sync: bool, now: float) -> bool:
        """Whether a throttled partition of a replica (in sync or not) gets no data now."""
        if in_sync or rate >= LONG_MAX:
            return False
        return self._sensor_at(now).rate(now) > rate

    def record(self, size: int, now: float) -> None:
        """Bytes of throttled partitions sent (leader) or received (follower)."""
        if size > 0:
            self._sensor_at(now).record(size, now)
