"""`queued.max.request.bytes`: a broker-wide budget of request bytes (Kafka's KIP-72 memory pool).

Theory of operation
-------------------
With `queued.max.request.bytes` > 0 every request is charged its size (the size its prefix announces)
against one `RequestMemoryPool` before the connection reads the rest of it or handles it, and the charge
is released once the request has been handled (or its connection closes). As in Kafka's non-strict
`SimpleMemoryPool`, an allocation succeeds while any budget is left, even one larger than what is left
(so the bytes charged never exceed the budget by more than one request, at most
`socket.request.max.bytes`), and a connection whose allocation finds the budget spent waits, reading
nothing more (Kafka mutes the channel) until a release leaves some budget again. With the default -1
there is no pool and connections pay one None check per read.

Owned by the broker (the server creates it on the state as `request_memory`); used by connections on
the trio thread only.
"""

from __future__ import annotations

import trio

__all__ = ["RequestMemoryPool"]


class RequestMemoryPool:
    """The request byte budget; `available` may go below zero by less than one request."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"a request memory pool needs a positive capacity, got {capacity}")
        self.capacity = capacity
        self.available = capacity
        self._released = trio.Event()  # replaced each time a release leaves budget to waiters

    @property
    def depleted(self) -> bool:
        return self.available <= 0

    async def allocate(self, size: int) -> None:
        """Charge `size` bytes, waiting while the budget is spent (not while merely short of `size`)."""
        while self.available <= 0:
            await self._released.wait()
        self.available -= size

    def release(self, size: int) -> None:
        self.available += size
        if self.available > 0:
            self._released.set()
            self._released = trio.Event()
