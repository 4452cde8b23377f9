"""Delayed operations ("purgatories"): requests that wait for something to happen on a partition.

Theory of operation: a fetch that has not gathered `min_bytes` parks until data arrives or its
`max_wait_ms` runs out. Rather than polling on a timer, it registers one `trio.Event` under every
partition it reads (`PartitionWatchers.watch`); whatever moves a partition (an append as leader through
the replica manager, a follower's append, a new high watermark, a role change, a deletion) calls
`notify(topic, partition)`, which sets and forgets every event
registered there. The woken fetch re-reads its partitions and either answers or parks again with the
time it has left. Registration happens after the fetch has read the logs and before its first await, and
trio runs one task at a time, so an append can never slip between "read: not enough" and "parked".

The same registry is the acks=-1 produce purgatory: in cluster mode a write waiting for the ISR
(`replica_manager.ClusterReplicaManager.wait_for_commits`) parks on its partition and is woken by the
high watermark's move. On a single node the high watermark moves with the append, and nothing waits.

Owned by `BrokerState`, which hands it to the replica manager.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import trio

__all__ = ["PartitionWatchers"]

TopicPartition = tuple[str, int]


class PartitionWatchers:
    """Events of parked requests, keyed by (topic, partition)."""

    def __init__(self) -> None:
        self._waiting: dict[TopicPartition, set[trio.Event]] = {}

    @contextmanager
    def watch(self, partitions: Iterable[TopicPartition]) -> Iterator[trio.Event]:
        """Register one event under every partition; it is set by the first `notify` on any of them."""
        event = trio.Event()
        keys = list(partitions)
        for key in keys:
            self._waiting.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            for key in keys:
                waiting = self._waiting.get(key)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._waiting[key]

    def notify(self, topic: str, partition: int) -> None:
        """Wake everything parked on this partition (new data, a new high watermark, or deletion)."""
        waiting = self._waiting.pop((topic, partition), None)
        if waiting:
            for event in waiting:
                event.set()

    def notify_all(self) -> None:
        for key in list(self._waiting):
            self.notify(*key)

    def notify_topic(self, topic: str) -> None:
        for key in [key for key in self._waiting if key[0] == topic]:
            self.notify(*key)

    def waiting_count(self, topic: str, partition: int) -> int:
        return len(self._waiting.get((topic, partition), ()))
