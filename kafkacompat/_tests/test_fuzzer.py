"""The fuzzer's seeds and mutations (the live runs are compat_tests/test_fuzz.py and tools/fuzz.py)."""

from __future__ import annotations

import contextlib
import os
import random
import struct
import time
from functools import partial

import pytest
import trio

from kafkacompat.broker import dispatch
from kafkacompat.fuzzing.cli import main
from kafkacompat.fuzzing.latency import alternating_block, alternating_split, latency_windows, p99_ratio
from kafkacompat.fuzzing.mutations import Mutator
from kafkacompat.fuzzing.pair import pair_result_wait
from kafkacompat.fuzzing.run import AnswerChecker, FuzzStats, fuzz
from kafkacompat.fuzzing.seeds import FuzzTarget, build_seeds
from kafkacompat.fuzzing.watch import scan_log
from kafkacompat.wire import messages
from kafkacompat.wire.header import RequestHeader, encode_request_header, encode_response_header

SERVED = {key: (low, high) for key, low, high in dispatch.supported_versions()}


def test_seeds_cover_every_served_api_and_version_and_decode() -> None:
    seeds = build_seeds(SERVED, FuzzTarget())
    covered = {(seed.api_key, seed.version) for seed in seeds}
    assert covered == {(key, v) for key, (low, high) in SERVED.items() for v in range(low, high + 1)}
    for seed in seeds:
        messages.decode_request(seed.api_key, seed.version, memoryview(seed.body))
    produce = [s for s in seeds if s.api_key == 0 and s.version == 9]
    assert any(b"fuzz-t" in s.body and len(s.body) > 100 for s in produce), "produce seeds carry real batches"


def test_mutated_frames_are_never_the_seed_and_are_reproducible() -> None:
    seeds = build_seeds(SERVED, FuzzTarget())
    first = Mutator(seeds, random.Random(7))
    frames = [first.frame() for _ in range(2000)]
    again = Mutator(seeds, random.Random(7))
    assert frames == [again.frame() for _ in range(2000)]
    originals = set()
    for seed in seeds:
        header = encode_request_header(RequestHeader(seed.api_key, seed.version, 0, "kafkacompat-fuzz"))
        originals.add(struct.pack(">i", len(header) + len(seed.body)) + header + seed.body)
    unchanged = sum(frame[:8] + b"\0\0\0\0" + frame[12:] in originals for frame, _ in frames)
    assert unchanged < len(frames) * 0.05  # a value may be replaced by an equal one, rarely
    lies = [frame for frame, promises_more in frames if promises_more]
    assert lies and all(struct.unpack_from(">i", f)[0] > len(f) - 4 for f in lies)


def test_scan_log_reports_tracebacks_once_each(tmp_path) -> None:
    log = tmp_path / "broker.log"
    log.write_text(
        "INFO fine\nERROR closing connection after an unexpected error\nTraceback (most recent call last):\n"
        '  File "x.py", line 1\nValueError: boom\nINFO fine again\n'
    )
    found = scan_log(log)
    assert len(found) == 1 and "ValueError: boom" in found[0]
    assert scan_log(log, start=log.stat().st_size) == []


def test_latency_windows_group_records_by_send_time() -> None:
    sent = [1000.0, 1500.0, 31000.0, 31100.0, 95000.0]
    latency = [1.0, 12.0, 2.0, 3.0, 40.0]
    windows = latency_windows(sent, latency, 30.0)
    assert [window["t"] for window in windows] == [0, 30, 90]
    assert [window["records"] for window in windows] == [2, 2, 1]
    assert [window["over_10_ms"] for window in windows] == [1, 0, 1]
    assert windows[0]["max_ms"] == 12.0
    assert windows[2]["p99_ms"] == 40.0
    assert latency_windows([], [], 30.0) == []


def test_pacing_lateness_is_summed_up_only_for_paced_runs() -> None:
    assert FuzzStats().as_dict()["pacing_late_ms"] is None  # unpaced: as fast as possible
    stats = FuzzStats()
    for late in [0.001] * 98 + [0.2, 0.4]:
        stats.note_pacing(late)
    assert stats.as_dict()["pacing_late_ms"] == {"p50": 1.0, "p99": 400.0, "max": 400.0}


def _metadata_exchange(topics: int) -> tuple[bytes, bytes]:
    """A Metadata v12 request frame (with its size) and an answer to it (without) naming `topics` topics."""
    header = encode_request_header(RequestHeader(3, 12, 4242, "kafkacompat-fuzz"))
    body = messages.encode_request(3, 12, messages.request_class(3)(topics=None))
    frame = struct.pack(">i", len(header) + len(body)) + header + body
    response = messages.response_class(3)
    answer = response(topics=[
        response.MetadataResponseTopic(name=f"topic-{n}", partitions=[
            response.MetadataResponsePartition(partition_index=p, replica_nodes=[1], isr_nodes=[1])
            for p in range(4)
        ])
        for n in range(topics)
    ])  # fmt: skip
    encoded = b"".join(bytes(chunk) for chunk in messages.encode_response(3, 12, answer))
    return frame, encode_response_header(3, 12, 4242) + encoded


async def test_large_answers_are_checked_in_a_process_while_the_loop_runs_on() -> None:
    frame, answer = _metadata_exchange(2000)
    assert len(answer) > 100_000
    damaged = answer[: len(answer) // 2]
    checker = AnswerChecker(off_loop_bytes=16 << 10)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0)
            ticks += 1

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            await trio.sleep(0)
            before = ticks
            assert await checker.check(frame, answer) is None
            assert ticks > before, "the loop ran other tasks while the answer was checked"
            problem = await checker.check(frame, damaged)
            assert problem is not None and problem.startswith("undecodable answer to api 3 v12")
            small_frame, small_answer = _metadata_exchange(1)
            before = ticks
            assert await checker.check(small_frame, small_answer) is None
            assert ticks == before, "a small answer is checked at once, in the task"
            nursery.cancel_scope.cancel()
    finally:
        checker.close()
    assert checker.checked_off_loop == 2


async def test_a_cancelled_check_of_a_large_answer_stops_waiting_at_once() -> None:
    """A run cancelled mid-check (its broker died, its time is up) does not wait for the check's process:
    here the process is still starting when the wait is cancelled, and so is the close."""
    frame, answer = _metadata_exchange(5000)
    checker = AnswerChecker(off_loop_bytes=16 << 10)
    try:
        started = time.perf_counter()
        with trio.move_on_after(0.02) as scope:
            await checker.check(frame, answer)
        waited = time.perf_counter() - started
        assert scope.cancelled_caught, "starting the process and decoding 5,000 topics outlast 20 ms"
        assert waited < 0.25, f"the cancelled check was waited for ({waited * 1000:.0f} ms)"
    finally:
        closing = time.perf_counter()
        checker.close()
        closed_in = time.perf_counter() - closing
    assert closed_in < 0.25, f"close() waited for the check in flight ({closed_in * 1000:.0f} ms)"


def test_the_p99_ratio_is_fuzzed_over_quiet_and_absent_when_a_run_measured_nothing() -> None:
    assert p99_ratio({"e2e_p99_ms": 2.0}, {"e2e_p99_ms": 5.0}) == 2.5
    assert p99_ratio({"e2e_p99_ms": 3.0}, {"e2e_p99_ms": 1.0}) == 0.33
    assert p99_ratio({}, {"e2e_p99_ms": 5.0}) is None
    assert p99_ratio({"e2e_p99_ms": 2.0}, {"error_count": 1}) is None


def test_confining_the_fuzzer_sets_every_thread_and_the_ones_started_later() -> None:
    import subprocess
    import sys
    import textwrap

    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip("one CPU: confining to it changes nothing")
    cpu = min(cpus)
    script = textwrap.dedent(
        f"""
        import os, threading
        from kafkacompat.fuzzing.campaign import confine_process
        started = threading.Event(); done = threading.Event(); seen = []
        def before():
            started.set(); done.wait(); seen.append(os.sched_getaffinity(0))
        early = threading.Thread(target=before); early.start(); started.wait()
        confine_process([{cpu}])
        late = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        late.start(); late.join()
        done.set(); early.join()
        print(sorted(os.sched_getaffinity(0)), [sorted(s) for s in seen])
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split() == [f"[{cpu}]", f"[[{cpu}],", f"[{cpu}]]"], out


def test_idling_the_fuzzer_sets_every_thread_and_the_ones_started_later() -> None:
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import os, threading
        from kafkacompat.fuzzing.campaign import idle_process
        started = threading.Event(); done = threading.Event(); seen = []
        def before():
            started.set(); done.wait(); seen.append(os.sched_getscheduler(0))
        early = threading.Thread(target=before); early.start(); started.wait()
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
        idle_process()
        late = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
        late.start(); late.join()
        done.set(); early.join()
        print(os.sched_getscheduler(0) == os.SCHED_IDLE, [policy == os.SCHED_IDLE for policy in seen])
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "[True,", "True]"], out


def test_alternating_split_puts_each_sample_in_its_block_and_skips_each_block_s_first_second() -> None:
    began = 1000.0  # wall seconds; blocks of 10 s: fuzzed [1000, 1010), quiet [1010, 1020), fuzzed, ...
    samples = [
        [999_500.0, 50.0],  # before the fuzzing: left out
        [1_000_500.0, 60.0],  # in the first second of a block: left out
        *[[1_002_000.0 + i, 8.0] for i in range(100)],  # fuzzed, block 0
        *[[1_012_000.0 + i, 2.0] for i in range(100)],  # quiet, block 1
        *[[1_022_000.0 + i, 6.0] for i in range(99)],  # fuzzed, block 2
        [1_022_500.0, 30.0],
        [1_031_000.0, 1.0],  # quiet, block 3
        [1_040_500.0, 70.0],  # after the fuzzing ended: left out
    ]
    split = alternating_split(samples, began, 1040.0, 10.0)
    assert split["fuzzed"] == {"blocks": 2, "records": 200, "e2e_p50_ms": 8.0, "e2e_p99_ms": 8.0}
    assert split["quiet"] == {"blocks": 2, "records": 101, "e2e_p50_ms": 2.0, "e2e_p99_ms": 2.0}
    assert split["p99_ratio"] == 4.0
    assert split["per_block_p99_ms"] == [[0, 8.0], [1, 2.0], [2, 30.0], [3, 1.0]]
    nothing_quiet = alternating_split(samples[:3], began, 1040.0, 10.0)
    assert nothing_quiet["quiet"]["records"] == 0 and "p99_ratio" not in nothing_quiet


def test_blocks_no_longer_than_the_margin_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert alternating_block(1012.5, 1000.0, 10.0) == ("quiet", 1)
    assert alternating_block(1010.5, 1000.0, 10.0) is None  # the block's first second
    with pytest.raises(ValueError, match="leave nothing"):
        alternating_block(1000.5, 1000.0, 1.0)
    with pytest.raises(SystemExit) as exited:
        main(["run", "--alternate", "1", "--frames", "1"])
    assert exited.value.code == 2
    assert "--alternate must exceed 1.0 s" in capsys.readouterr().err


async def test_an_alternating_fuzzer_sends_nothing_in_its_quiet_blocks() -> None:
    arrivals: list[float] = []

    async def sink(stream: trio.SocketStream) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            async for _ in stream:
                arrivals.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, sink, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        seeds = build_seeds(SERVED, FuzzTarget())
        began = trio.current_time()
        stats = await fuzz("127.0.0.1", port, seeds, frames=10_000, seconds=1.2, connections=4, rate=200,
                           answer_timeout=0.02, alternate=0.3)  # fmt: skip
        nursery.cancel_scope.cancel()
    assert stats.frames_sent > 50, stats.as_dict()
    blocks: dict[int, int] = {}
    for arrived in arrivals:
        block, into = divmod(arrived - began, 0.3)
        if into > 0.03:  # a frame sent at a block's very end may land just after it
            blocks[int(block)] = blocks.get(int(block), 0) + 1
    assert blocks.get(0, 0) > 10 and blocks.get(2, 0) > 10, blocks
    assert not blocks.get(1) and not blocks.get(3), blocks


def test_a_pair_s_summary_larger_than_the_pipe_is_read_while_it_runs() -> None:
    """A pair prints every sample in its summary; waiting for its exit before reading (as the quiet phase
    once did) blocked it on the full pipe until the 300 s timeout."""
    import subprocess
    import sys

    script = "import json; print(json.dumps({'e2e_samples': [[1.5, 2.25]] * 50_000}))"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    started = time.monotonic()
    result = pair_result_wait(child)
    assert len(result["e2e_samples"]) == 50_000
    assert time.monotonic() - started < 30
