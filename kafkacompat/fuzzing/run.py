"""The fuzz run: mutated frames sent to a broker on this machine, every answer checked.

Theory of operation: `fuzz()` runs N trio tasks, each with one connection at a time to 127.0.0.1; each
sends one frame and waits (bounded) for its answer; a frame the broker closes the connection on, or
leaves unanswered, ends that connection and the task opens a new one. A whole run is bounded by a frame
count and a time limit, and may be paced (`rate`: slots the process misses are dropped, not caught up)
or alternate fuzzing and quiet blocks (`alternate`, kafkacompat.fuzzing.latency). Every answer is
checked: its correlation id must be the one sent, and when the request was a served API and version,
the response body must decode with the generated codec; large answers are checked in a worker process
(`AnswerChecker`), so that decoding them does not stall every task of the run's one loop. Outcomes are
counted per kind in `FuzzStats` (answered, closed by the broker, no answer in time, bad answer), with
the slowest answers and the pacing's own lateness.
"""

from __future__ import annotations

import contextlib
import heapq
import random
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from kafkacompat.fuzzing.latency import block_at, percentile
from kafkacompat.fuzzing.mutations import Mutator
from kafkacompat.fuzzing.seeds import CORRELATION, INT16, PREFIX, SIZE, Seed
from kafkacompat.wire import messages
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.header import (
    decode_response_header,
)

__all__ = [
    "CHECK_OFF_LOOP_BYTES",
    "AnswerChecker",
    "FuzzStats",
    "fuzz",
]


@dataclass(slots=True)
class FuzzStats:
    """Counts of one fuzz run."""

    frames_sent: int = 0
    answered: int = 0
    closed_by_broker: int = 0
    unanswered: int = 0
    bad_answers: int = 0
    largest_frame: int = 0  # bytes: a connection's request buffer is bounded by it (RSS bound below)
    connections: int = 0
    connect_errors: int = 0
    seconds: float = 0.0
    by_api: dict[int, int] = field(default_factory=dict)
    bad_answer_samples: list[str] = field(default_factory=list)
    #: the slowest answered frames: (seconds, api key, version), a min-heap of at most 10
    slowest: list[tuple[float, int, int]] = field(default_factory=list)
    #: how late each paced frame was sent after its slot (seconds): the load's own steadiness
    pacing_late: list[float] = field(default_factory=list)
    #: answers large enough to be checked in the checker process (AnswerChecker)
    checked_off_loop: int = 0

    def note_pacing(self, late: float) -> None:
        self.pacing_late.append(late)

    def note_latency(self, seconds: float, frame: bytes) -> None:
        if len(frame) < 8:
            return
        api_key, version = INT16.unpack_from(frame, 4)[0], INT16.unpack_from(frame, 6)[0]
        if len(self.slowest) < 10:
            heapq.heappush(self.slowest, (seconds, api_key, version))
        elif seconds > self.slowest[0][0]:
            heapq.heapreplace(self.slowest, (seconds, api_key, version))

    @property
    def rate(self) -> float:
        return self.frames_sent / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "frames_sent": self.frames_sent,
            "answered": self.answered,
            "closed_by_broker": self.closed_by_broker,
            "unanswered": self.unanswered,
            "bad_answers": self.bad_answers,
            "connections": self.connections,
            "connect_errors": self.connect_errors,
            "largest_frame_bytes": self.largest_frame,
            "seconds": round(self.seconds, 1),
            "frames_per_second": round(self.rate),
            "apis_fuzzed": len(self.by_api),
            "bad_answer_samples": self.bad_answer_samples[:5],
            "checked_off_loop": self.checked_off_loop,
            "slowest_answers_ms": [
                (round(seconds * 1000), _api_name(key), version)
                for seconds, key, version in sorted(self.slowest, reverse=True)
            ],
            "pacing_late_ms": {
                "p50": round(percentile(self.pacing_late, 0.50) * 1000, 1),
                "p99": round(percentile(self.pacing_late, 0.99) * 1000, 1),
                "max": round(max(self.pacing_late, default=0.0) * 1000, 1),
            }
            if self.pacing_late
            else None,
        }


def _api_name(api_key: int) -> str:
    spec = messages.API_SPECS.get(api_key)
    return spec.name if spec is not None else str(api_key)


class _ConnectionClosed(Exception):
    pass


async def _receive_exactly(sock: trio.socket.SocketType, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        data = await sock.recv(count - len(chunks))
        if not data:
            raise _ConnectionClosed
        chunks += data
    return bytes(chunks)


def _check_answer(frame: bytes, answer: bytes) -> str | None:
    """Why the answer to `frame` is wrong, or None. `frame` includes its size prefix."""
    if len(frame) < 4 + PREFIX.size:
        return None  # the request had no complete prefix: nothing to match the answer against
    api_key, version, correlation = PREFIX.unpack_from(frame, 4)
    if len(answer) < 4:
        return f"answer of {len(answer)} bytes to api {api_key} v{version}"
    (answered_correlation,) = CORRELATION.unpack_from(answer)
    if answered_correlation != correlation:
        return f"correlation id {answered_correlation} answers {correlation} (api {api_key} v{version})"
    spec = messages.API_SPECS.get(api_key)
    if spec is None or not spec.min_version <= version <= spec.max_version:
        return None
    answer_version = version
    try:
        if api_key == ApiKey.API_VERSIONS and len(answer) >= 6 and INT16.unpack_from(answer, 4)[0] == 35:
            answer_version = 0  # UNSUPPORTED_VERSION answers come in the v0 layout (KIP-511)
        _, offset = decode_response_header(api_key, answer_version, answer)
        messages.decode_response(api_key, answer_version, memoryview(answer)[offset:])
    except Exception as exc:
        return f"undecodable answer to api {api_key} v{version}: {exc}"
    return None


#: answers at least this large are checked in a process of their own (`AnswerChecker`)
CHECK_OFF_LOOP_BYTES = 16 << 10


class AnswerChecker:
    """Checks answers (`_check_answer`): small ones in the calling task, large ones in a worker process.

    Decoding an answer of hundreds of KiB (a Metadata or DescribeGroups answer grows with the broker's
    state) holds the fuzzer's one loop for tens to hundreds of milliseconds, and every worker stalls
    with it: a paced run stops being paced and its sends bunch up behind each check. A thread would not
    do (the decode holds the GIL); a process keeps the loop free, at the cost of copying the answer
    there (small next to decoding it). The process is started on first use, so it inherits the
    fuzzer's niceness. Owned by one `fuzz()` run; its worker tasks call `check()`.
    """

    def __init__(self, off_loop_bytes: int = CHECK_OFF_LOOP_BYTES) -> None:
        self.off_loop_bytes = off_loop_bytes
        self.checked_off_loop = 0
        self._pool: Any = None

    async def check(self, frame: bytes, answer: bytes) -> str | None:
        if len(answer) < self.off_loop_bytes:
            return _check_answer(frame, answer)
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # forkserver, not fork: a fork of this process would copy a running trio loop's threads' state
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver"))
        self.checked_off_loop += 1
        future = self._pool.submit(_check_answer, frame, answer)
        # a cancelled run (the broker died, the time is up) stops waiting at once; the check itself ends
        # in its process, and close() does not wait for it either
        problem: str | None = await trio.to_thread.run_sync(future.result, abandon_on_cancel=True)
        return problem

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


async def fuzz(
    host: str,
    port: int,
    mutator_seeds: list[Seed],
    *,
    frames: int,
    seconds: float,
    connections: int = 64,
    rate: float | None = None,
    answer_timeout: float = 0.5,
    seed: int = 0,
    progress: Callable[[FuzzStats], None] | None = None,
    alternate: float | None = None,
) -> FuzzStats:
    """Send up to `frames` mutated frames for at most `seconds`, over `connections` concurrent tasks.
    With `alternate`, blocks of that many seconds take turns from the start: the first fuzzes, the
    next is quiet (every task waits, its connection open), and so on (see `alternating_split`)."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("the fuzzer only targets this machine")
    stats = FuzzStats()
    started = trio.current_time()
    deadline = started + seconds
    interval = 1.0 / rate if rate else 0.0
    next_slot = [started]

    def more() -> bool:
        return stats.frames_sent < frames and trio.current_time() < deadline

    def fuzzing_at(moment: float) -> float:
        """`moment`, or the start of the next fuzzing block if it falls in a quiet one."""
        if not alternate:
            return moment
        index, _, kind = block_at(moment - started, alternate)
        return moment if kind == "fuzzed" else started + (index + 1) * alternate

    async def pace() -> None:
        # No catching up: slots this process missed (its one loop checking a large answer, or starved
        # at a high niceness) are dropped, not sent at once, and a worker woken over a slot late takes
        # a fresh slot rather than send with every other worker woken by the same stall. With a second
        # of catch-up allowed, a 10-minute run's frames came in bursts of up to 80 in 10 ms by its third
        # minute (the answers it checks grow with the broker's state, and one check of a large answer
        # stalls every worker): a load that was no longer the paced one asked for.
        if not interval:
            if alternate:
                await trio.sleep_until(fuzzing_at(trio.current_time()))
            return
        first_late = None
        while True:
            slot = next_slot[0] = fuzzing_at(max(next_slot[0] + interval, trio.current_time()))
            await trio.sleep_until(slot)
            late = trio.current_time() - slot
            first_late = late if first_late is None else first_late
            if late <= interval:
                break
        stats.note_pacing(first_late)

    async def worker(index: int) -> None:
        mutator = Mutator(mutator_seeds, random.Random(seed * 1_000_003 + index))
        while more():
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                try:
                    await sock.connect((host, port))
                except OSError:
                    stats.connect_errors += 1
                    await trio.sleep(0.05)
                    continue
                stats.connections += 1
                while more():
                    await pace()
                    frame, promises_more = mutator.frame()
                    stats.frames_sent += 1
                    stats.largest_frame = max(stats.largest_frame, len(frame))
                    if len(frame) >= 6:
                        key = INT16.unpack_from(frame, 4)[0]
                        stats.by_api[key] = stats.by_api.get(key, 0) + 1
                    try:
                        await sock.send(frame)
                        if promises_more:
                            sock.shutdown(socket.SHUT_WR)  # the promised bytes never come
                        sent_at = trio.current_time()
                        answer = None
                        with trio.move_on_after(answer_timeout):  # for the answer, not its check
                            (size,) = SIZE.unpack(await _receive_exactly(sock, 4))
                            answer = await _receive_exactly(sock, size)
                            answered_in = trio.current_time() - sent_at
                        if answer is not None:
                            problem = await checker.check(frame, answer)
                            if problem is None:
                                stats.answered += 1
                                stats.note_latency(answered_in, frame)
                            else:
                                stats.bad_answers += 1
                                if len(stats.bad_answer_samples) < 20:
                                    stats.bad_answer_samples.append(problem)
                            if not promises_more:
                                continue
                    except (_ConnectionClosed, OSError):
                        stats.closed_by_broker += 1
                        break
                    stats.unanswered += 1
                    break
            finally:
                # reset, not FIN: no TIME_WAIT pile-up on this side over a million connections
                with contextlib.suppress(OSError):  # already closed by a failed connect
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()

    async def report() -> None:
        while progress is not None:
            await trio.sleep(2)
            stats.seconds = trio.current_time() - started
            progress(stats)

    checker = AnswerChecker()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(report)
            async with trio.open_nursery() as workers:
                for index in range(connections):
                    workers.start_soon(worker, index)
            nursery.cancel_scope.cancel()
    finally:
        checker.close()
    stats.seconds = trio.current_time() - started
    stats.checked_off_loop = checker.checked_off_loop
    return stats
