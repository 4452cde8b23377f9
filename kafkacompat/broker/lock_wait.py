"""Waiting for a broker-wide lock from a request without holding a request slot.

Theory of operation: the metadata lock serializes topic creation, deletion, partition growth and config
changes; one holder may keep it for many seconds (thousands of logs made in chunks, their
`partition.metadata` fsynced). A request waiting for it used to hold its queued.max.requests slot and
never look at its socket: found by the long fuzz run, fuzzing clients that gave up after 0.5 s and
reconnected left hundreds of such waiters per second behind a long creation, they took every slot, the
well-behaved producer's requests waited for a slot for up to 72 s (its connection timed out), and the
dead connections piled up (descriptors and memory) while the broker's CPU idled.

`holding(lock)` acquires the lock at once when it is free. Otherwise, in a request's task, it hands the
wait to the connection (`WAITER`, set by connection.py for its request loop): the slot (and pipelining
gate) is released for the wait, as for a parked fetch, and the socket is watched; a client that leaves
meanwhile abandons the request (`PeerGone`) instead of queueing behind the holder. Kafka's handler
threads likewise never block on a controller operation: CreateTopics waits in a purgatory. Outside a
request (background tasks, tests) it is a plain acquire. Used for the metadata lock and the group and
transaction coordinators' locks (and the transaction coordinator's per-broker verification channel).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar

import trio

__all__ = ["WAITER", "holding"]

#: the current request's connection: runs `acquire` without a request slot, watching the client
WAITER: ContextVar[Callable[[Callable[[], Awaitable[object]]], Awaitable[None]] | None] = ContextVar(
    "lock_waiter", default=None
)


@asynccontextmanager
async def holding(lock: trio.Lock) -> AsyncIterator[None]:
    """`async with lock`, with the wait of a request done without its slot (see the module docstring)."""
    waiter = WAITER.get()
    if waiter is None:
        await lock.acquire()
    else:
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await waiter(lock.acquire)
    try:
        yield
    finally:
        lock.release()
