"""Fair shares of the one event loop: bounded work per task step for requests of many items.

Theory of operation
-------------------
Every connection is served on one trio event loop, so a request whose handler loops over 1,000 topics,
partitions, groups or config resources without an await holds every other client for the whole loop
(measured with the loop-lag monitor, broker/loop_lag.py: a DescribeConfigs of 1,000 resources held it
120-300 ms, a Produce of 1,000 partitions 50 ms). Kafka runs such requests on a pool of handler threads;
here a handler that iterates over items the client chose takes a `Turn` and calls `await
turn.spend()` once per item: after `TURN_SECONDS` of work since its last yield it gives the loop back
(`trio.lowlevel.checkpoint()`), so every other runnable task (the small requests of other clients) runs
before the next item. A handler of few items never yields (one clock read per item).

Only per-item work whose order across clients does not matter is split this way: each item (one
partition's append, one resource's configs) stays whole, as in Kafka, whose handler threads interleave
the partitions of concurrent produce requests as well.

`encode_off_loop()` is the counterpart for encoding: a response of very many items (estimated from its
list lengths without walking it) is encoded in a worker thread. The encoders are pure Python, so the
thread holds the GIL, but CPython hands it back to the event loop every switch interval (5 ms), which
bounds the loop's wait instead of letting one encode run for 100 ms. Response objects are built fresh
by the handlers (no list shared with live broker state), so nothing mutates them meanwhile.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from kafkacompat.wire import messages
from kafkacompat.wire.primitives import Struct as GeneratedStruct

__all__ = ["TURN_SECONDS", "Turn", "encode_off_loop", "estimated_items"]

#: the longest a handler works on its items before it lets the other tasks run
TURN_SECONDS = 0.002
#: responses estimated at more items than this are encoded in a worker thread
OFF_LOOP_ITEMS = 3000


class Turn:
    """One handler's share of the loop: `await spend()` between items yields once the share is used."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter()

    async def spend(self) -> None:
        now = time.perf_counter()
        if now - self._since >= TURN_SECONDS:
            await trio.lowlevel.checkpoint()
            self._since = time.perf_counter()


def estimated_items(obj: Any, depth: int = 0) -> int:
    """About how many structs and list elements `obj` holds: each list's length times the estimate of its
    first element (a handful of attribute reads, however large the response)."""
    if depth > 6 or not isinstance(obj, GeneratedStruct):
        return 0
    total = 0
    for name in type(obj).__slots__:
        value = getattr(obj, name, None)
        if isinstance(value, list) and value:
            total += len(value) * (1 + estimated_items(value[0], depth + 1))
        elif isinstance(value, GeneratedStruct):
            total += estimated_items(value, depth + 1)
    return total


#: Produce and Fetch: the hot path, never estimated (their responses of 1,000 partitions encode in a
#: few ms; the estimate would cost twice a small response's encoding)
_HOT_KEYS = frozenset({0, 1})


async def encode_off_loop(api_key: int, api_version: int, response: Any) -> list[Any]:
    """The response's chunks; encoded in a worker thread when it is very large (see above)."""
    if api_key in _HOT_KEYS or estimated_items(response) <= OFF_LOOP_ITEMS:
        return messages.encode_response(api_key, api_version, response)
    return await trio.to_thread.run_sync(messages.encode_response, api_key, api_version, response)
