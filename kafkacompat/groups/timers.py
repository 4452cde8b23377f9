"""Keyed deadlines for the group coordinator core (no clocks, no threads).

``Timers`` maps a hashable key to one deadline in milliseconds. Scheduling a key again replaces its
deadline, cancelling removes it; ``pop_due(now_ms)`` returns the earliest key whose deadline is
<= now_ms. A heap with lazy deletion keeps both cheap; ``next_deadline()`` tells the runtime how long it
may sleep before calling ``GroupCoordinatorCore.tick``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["Timers"]

# The key type is the owner's (the coordinator's tuples), so what pop_due returns can be taken apart.
K = TypeVar("K", bound=Hashable)


class Timers(Generic[K]):
    def __init__(self) -> None:
        self._deadline: dict[K, int] = {}
        self._heap: list[tuple[int, int, K]] = []
        self._seq = itertools.count()

    def schedule(self, key: K, deadline_ms: int) -> None:
        self._deadline[key] = deadline_ms
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), key))

    def cancel(self, key: K) -> None:
        self._deadline.pop(key, None)

    def deadline(self, key: K) -> int | None:
        return self._deadline.get(key)

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap and self._deadline.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        # Stale entries pile up if keys are rescheduled often (heartbeats); rebuild when mostly stale.
        if len(heap) > 64 and len(heap) > 4 * len(self._deadline):
            self._heap = [(d, next(self._seq), k) for k, d in self._deadline.items()]
            heapq.heapify(self._heap)

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> K | None:
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._deadline[key]
        return key
