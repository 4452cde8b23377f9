"""Fair shares of the one event loop: bounded work per task step for requests of many items.

Theory of operation
-------------------
Every connection is served on one trio event loop, so a request whose handler loops over 1,000 topics,
partitions, groups or config resources without an await holds every other client for the whole loop
(measured with the loop-lag monitor, diagnostics/loop_lag.py: a DescribeConfigs of 1,000 resources held it
120-300 ms, a Produce of 1,000 partitions 50 ms). Kafka runs such requests on a pool of handler threads;
here a handler that iterates over items the client chose takes a `Turn` and calls `await
turn.spend()` once per item: after `TURN_SECONDS` of work since its last yield it gives the loop back
(`trio.lowlevel.checkpoint()`), so every other runnable task (the small requests of other clients) runs
before the next item. A handler of few items never yields (one clock read per item).

Only per-item work whose order across clients does not matter is split this way: each item (one
partition's append, one resource's configs) stays whole, as in Kafka, whose handler threads interleave
the partitions of concurrent produce requests as well.

The yield alone bounds one request's hold, not a turn of the loop: trio runs every runnable task once per
turn, so 10 requests of many items in progress at once made each turn 10 times TURN_SECONDS long, and a
well-behaved client's request waited that long at each of its steps (the long fuzz run: a producer and
consumer pair's 99th percentile at 5-9x its quiet value, made of such turns). So a handler whose share is
used does not just yield: it queues in the `HeavyLane` of its event loop, which lets one queued task go
per turn of the loop (a system task hands it on, then yields itself). Every other runnable task (the
small requests) still runs every turn; the requests of many items take turns among themselves. Nothing is
held while a task waits in the lane (no lock, no slot), so it cannot deadlock with the locks its handler
may hold: the lane's own task always moves on.

`encode_off_loop()` is the counterpart for encoding: a response of very many items (estimated from its
list lengths without walking it) is encoded in shares as well, though the generated encoder is one plain
function. It runs in a greenlet (`_Shares`) whose lists of structs iterate through `_SharingList`:
after each element, once the share is used, the iterator switches back to the task, which queues in the
HeavyLane and then switches into the greenlet again, so the encoding resumes where it stopped. The lists
are swapped in as the encoder reaches them (the response's own, then each element's), so the cost stays
per element encoded. It used to run in a worker thread, but the encoders are pure Python: the thread held
the GIL, and the loop thread waited for it at every system call of its steps (each wait up to the 1 ms
switch interval); beside the fuzzer, encodes of 80-140 ms in a thread stalled the loop's steps 5-12 ms
each, 10-30 times a minute. A greenlet is not a thread: nothing runs beside the loop, so nothing waits
for the GIL. Response objects are built fresh by the handlers (no list shared with live broker state),
so swapping their lists changes nothing else.

`decode_off_loop()` does the same for requests of more than DECODE_OFF_LOOP_BYTES: the generated
decoders loop over arrays through `wire.primitives.elements`, whose hook (installed by this module) is a
plain range except for a large array decoded inside `in_shares`, where it switches back to the task
between elements once the share is used. Such requests used to be decoded in a worker thread, which held
the GIL as the encodes did; and Produce was decoded in one step whatever its size: one of 1,000 topics
took 2-3 ms, the most frequent long step beside the fuzzer. A large body is first decoded plainly until
it meets such an array, so a Produce of one large batch costs no greenlet; and the collector is not
paused for a decode in shares (it would stay off while other requests run between the shares).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import greenlet
import trio

from kafkacompat.wire import messages, primitives
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.primitives import Struct as GeneratedStruct

__all__ = [
    "TURN_SECONDS",
    "HeavyLane",
    "Turn",
    "decode_off_loop",
    "encode_off_loop",
    "estimated_items",
    "in_shares",
]

#: the longest a handler works on its items before it lets the other tasks run: beside the fuzzer (120 s
#: at 300 frames/s, 2 CPUs, 1 ms GIL switch interval) the well-behaved pair's p99 was 8.3 ms at 2 ms, 5.3
#: at 1 ms and 4.2-4.8 at 0.5 ms (quiet: 1.6-2.1 ms). At 0.25 ms the loop's turns beside the fuzzer are
#: shorter (99th percentile 0.42-0.52 ms, from 0.56-0.68) and so is a socket's wait for the loop (0.64-0.82
#: ms, from 0.8-1.0; quiet 0.44-0.52), for 1-2% more of the loop's time in yields (docs/RELIABILITY.md)
TURN_SECONDS = 0.00025
#: responses estimated at more items than this are encoded in shares (in a greenlet; see above). An item
#: encodes in 0.5-1 us, so 1,000 keep one encode near a share; the greenlet costs a few us (3,000 made
#: steps of 1.5-3 ms)
OFF_LOOP_ITEMS = 1000
#: requests of more bytes than this are decoded in shares, in a greenlet (see above): their arrays of
#: many structs give the loop back between elements, through `wire.primitives.elements`
DECODE_OFF_LOOP_BYTES = 16 * 1024
#: an encode in shares moves its buffer's bytes into a chunk of their own at the end of a share once it
#: holds this many (a share writes some 50-100 KB): the buffer stays small, so no resize copies much
FLUSH_BYTES = 64 * 1024


class Turn:
    """One handler's share of the loop: `await spend()` between items yields once the share is used."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter()

    async def spend(self) -> None:
        now = time.perf_counter()
        if now - self._since >= TURN_SECONDS:
            await HeavyLane.current().wait_turn()
            self._since = time.perf_counter()


class HeavyLane:
    """The queue of tasks whose turn is used up (one per event loop, `current()`); a system task lets
    one go per turn of the loop. Owned by that loop's tasks (no other thread touches it)."""

    __slots__ = ("_idle", "_queue")

    _per_run: trio.lowlevel.RunVar[HeavyLane] = trio.lowlevel.RunVar("kafkacompat_heavy_lane")

    def __init__(self) -> None:
        self._queue: collections.deque[trio.lowlevel.Task] = collections.deque()
        self._idle: trio.lowlevel.Task | None = None  # the lane's task, parked while the queue is empty

    @classmethod
    def current(cls) -> HeavyLane:
        """This event loop's lane (made, and its task started, on first use)."""
        try:
            return cls._per_run.get()
        except LookupError:
            lane = cls()
            cls._per_run.set(lane)
            trio.lowlevel.spawn_system_task(lane._hand_on, name="kafkacompat heavy lane")
            return lane

    @property
    def waiting(self) -> int:
        return len(self._queue)

    async def wait_turn(self) -> None:
        """Yield until the lane lets this task go (a turn of the loop at the least, like a checkpoint)."""
        task = trio.lowlevel.current_task()
        self._queue.append(task)
        if self._idle is not None:
            trio.lowlevel.reschedule(self._idle)
            self._idle = None

        def abort(_raise_cancel: Any) -> trio.lowlevel.Abort:
            self._queue.remove(task)  # cancelled while queued (it was not let go: trio asks only then)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def _hand_on(self) -> None:
        while True:
            if not self._queue:
                self._idle = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.SUCCEEDED)
                continue
            trio.lowlevel.reschedule(self._queue.popleft())
            # the task let go runs in the next turn; this one too, and lets the next go only then
            await trio.lowlevel.checkpoint()


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


#: Produce and Fetch: the hot path, not estimated by walking (the walk would cost twice a small response's
#: encoding); their partitions are counted instead, topic by topic (a fetch of 5,000 partitions encoded
#: in one step of 2-4 ms)
_PARTITIONS_OF_HOT_KEYS: dict[int, str] = {ApiKey.PRODUCE: "partition_responses", ApiKey.FETCH: "partitions"}


def _hot_partitions(api_key: int, response: Any) -> int:
    """The partitions of a Produce or Fetch response (a len() per topic)."""
    field = _PARTITIONS_OF_HOT_KEYS[api_key]
    return sum(len(getattr(topic, field)) for topic in response.responses)


async def decode_off_loop(api_key: int, api_version: int, body: memoryview) -> Any:
    """The request decoded from `body`; in shares when it is large (see DECODE_OFF_LOOP_BYTES).
    Raises DecodeError. The connection reads nothing more while it waits, so `body` stays as it is.

    A large body is first decoded plainly, in one step, until it meets an array of LARGE_ARRAY elements
    or more (`_ShareInstead`): most large requests are one Produce batch of many bytes and few structs,
    which decode in a few µs, less than a greenlet costs (~10 µs). One that has such an array is decoded
    again, in shares; what the first attempt decoded before it was a few structs."""
    if body.nbytes <= DECODE_OFF_LOOP_BYTES:
        return messages.decode_request(api_key, api_version, body, allow_trailing=True)
    _plain_attempt.active = True
    try:
        return messages.decode_request(api_key, api_version, body, allow_trailing=True)
    except _ShareInstead:
        pass
    finally:
        _plain_attempt.active = False
    # the collector stays on: paused, it would be off while other requests run between the shares
    return await in_shares(
        lambda: messages.decode_request(api_key, api_version, body, allow_trailing=True, pause_gc=False)
    )


async def encode_off_loop(api_key: int, api_version: int, response: Any) -> list[Any]:
    """The response's chunks; encoded in shares, one per turn of the HeavyLane, when it is very large
    (see above)."""
    if api_key in _PARTITIONS_OF_HOT_KEYS:
        small = _hot_partitions(api_key, response) <= OFF_LOOP_ITEMS
    else:
        small = estimated_items(response) <= OFF_LOOP_ITEMS
    if small:
        return messages.encode_response(api_key, api_version, response)
    _share_lists(response)
    output = (bytearray(), [])
    chunks: list[Any] = await in_shares(
        lambda: messages.encode_response(api_key, api_version, response, out=output[0], chunks=output[1]),
        output=output,
    )
    return chunks


class _Shares(greenlet.greenlet):
    """A computation run in shares of TURN_SECONDS: `since` is when its current share began; `output`,
    an encoder's buffer and chunk list, if it has them. Created and switched into only by `in_shares`,
    on the loop thread."""

    since = 0.0
    output: tuple[bytearray, list[Any]] | None = None

    def hand_back(self) -> None:
        """End this share: what the encoder's buffer holds moves to its chunks first, once there is
        enough of it. Otherwise the buffer grows to the whole response (24 MB for 1,000 copies of a
        group of 295 members), and a resize that copies it held the loop 8-11 ms in one share."""
        if self.output is not None:
            out, chunks = self.output
            if len(out) >= FLUSH_BYTES:
                primitives.move_out(out, chunks)
        self.parent.switch()


async def in_shares(compute: Callable[[], Any], output: tuple[bytearray, list[Any]] | None = None) -> Any:
    """`compute()`, run in a greenlet that gives the loop back (through the HeavyLane) whenever a
    `_SharingList` it iterates finds its share used. Exceptions come out as from `compute()` itself;
    a cancelled wait ends the computation (GreenletExit raised where it stopped). `output`: the buffer
    and chunk list an encoder writes to (see `_Shares.hand_back`)."""
    worker = _Shares(compute)
    worker.output = output
    worker.since = time.perf_counter()
    result = worker.switch()
    try:
        while not worker.dead:
            await HeavyLane.current().wait_turn()
            worker.since = time.perf_counter()
            result = worker.switch()
    finally:
        if not worker.dead:
            worker.throw()
    return result


class _SharingList(list):  # type: ignore[type-arg]
    """A response's list of structs whose iteration, inside `in_shares`, yields the loop once the share
    is used; its struct elements' lists are swapped for sharing ones as they are reached."""

    __slots__ = ()

    def __iter__(self) -> Iterator[Any]:
        worker = greenlet.getcurrent()
        if not isinstance(worker, _Shares):
            yield from list.__iter__(self)
            return
        clock = time.perf_counter
        for item in list.__iter__(self):
            _share_lists(item)
            yield item
            if clock() - worker.since >= TURN_SECONDS:
                worker.hand_back()


class _ShareInstead(Exception):
    """A plain first attempt of `decode_off_loop` met a large array: the body is decoded in shares."""


#: whether this thread is in the plain first attempt of a large decode (see decode_off_loop)
_plain_attempt = threading.local()


def _elements_in_shares(count: int) -> Iterable[int]:
    """The generated decoders' loop over a large array (`wire.primitives.elements`): inside
    `in_shares`, it gives the loop back between elements once the share is used; in the plain first
    attempt of a large decode it ends that attempt."""
    worker = greenlet.getcurrent()
    if isinstance(worker, _Shares):
        return _sharing_range(worker, count)
    if getattr(_plain_attempt, "active", False):
        raise _ShareInstead
    return range(count)


def _sharing_range(worker: _Shares, count: int) -> Iterator[int]:
    clock = time.perf_counter
    for index in range(count):
        yield index
        if clock() - worker.since >= TURN_SECONDS:
            worker.hand_back()


primitives.set_elements_hook(_elements_in_shares)


def _share_lists(obj: Any) -> None:
    """Swap `obj`'s lists of structs for sharing ones (in place; each once, however often it is shared)."""
    if not isinstance(obj, GeneratedStruct):
        return
    for name in type(obj).__slots__:
        value = getattr(obj, name, None)
        if type(value) is list and value and isinstance(value[0], GeneratedStruct):
            setattr(obj, name, _SharingList(value))
