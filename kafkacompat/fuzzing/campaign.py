"""A fuzzing campaign: the pair alone, then the pair beside the fuzzer, the broker watched throughout.

Theory of operation: `run_campaign()` prepares the target and the seeds, runs the well-behaved pair alone
for its quiet figures, then starts it again and fuzzes beside it (`fuzz()`), while trio tasks sample the
broker's RSS, descriptors and state (kafkacompat.fuzzing.watch). The summary is one JSON-ready dict: the
run's counts, the pair's latency beside the fuzzer over its quiet latency, the RSS against its bound, the
log's unhandled errors and the loop probe's figures per phase. Options separate what the fuzzer's own
load on a small shared machine costs from what the broker's serving of it costs: a control pair against
a second, idle broker, and the fuzzer's process at a niceness, on chosen CPUs or under SCHED_IDLE (taken
once the broker and the pairs have started, so that only the fuzzer's process has them).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from kafkacompat.fuzzing.latency import alternating_split, p99_ratio
from kafkacompat.fuzzing.pair import pair_result, pair_result_wait, pair_subprocess
from kafkacompat.fuzzing.run import FuzzStats, fuzz
from kafkacompat.fuzzing.seeds import build_seeds, prepare_target
from kafkacompat.fuzzing.watch import (
    broker_state_counts,
    descriptor_census,
    loop_probe_alternating,
    loop_probe_phase,
    loop_probe_windows,
    read_rss_kib,
    read_threads,
    rss_bound_kib,
    scan_log,
)

__all__ = [
    "Campaign",
    "confine_process",
    "idle_process",
    "run_campaign",
]


@dataclass(slots=True)
class Campaign:
    """What one run asks for."""

    bootstrap: str
    broker_pid: int | None = None
    broker_log: str | None = None
    frames: int = 10_000
    seconds: float = 60.0
    connections: int = 64
    rate: float | None = None
    quiet_seconds: float = 10.0
    pair_rate: float = 100.0
    seed: int = 0
    progress: bool = False
    apis: list[int] | None = None  # fuzz only these api keys (default: every served one)
    #: niceness the fuzzer process takes once the broker and the pair are started (0: none): a hostile
    #: client normally runs on another machine, and its own CPU use on a small shared box is not broker
    #: unfairness; the broker and the pair keep their priority
    fuzzer_nice: int = 0
    #: CPUs the fuzzer process is confined to once the broker and the pair are started (None: any), for
    #: the same reason: so that it competes with the broker and the pair on those CPUs only
    fuzzer_cpus: list[int] | None = None
    #: run the fuzzer under SCHED_IDLE (see `idle_process`)
    fuzzer_idle: bool = False
    #: alternate fuzzing and quiet blocks of this many seconds beside the pair (`fuzz(alternate=...)`,
    #: `alternating_split`); None: fuzz throughout
    alternate: float | None = None
    data_dir_is_log_dir: bool = False  # the broker log lies in the broker's data dir (a broker we started)
    #: a second, idle broker: a second pair runs against it (alone for its quiet figure, then beside the
    #: first pair and the fuzzer), so that what the fuzzer's load on the machine costs any client is
    #: measured apart from what the fuzzed broker's serving of it costs
    control_bootstrap: str | None = None
    control_log: str | None = None  # the control broker's log (its loop probe, when on)


def _every_thread(action: Callable[[int], None]) -> None:
    """Apply `action` to each thread of this process (Linux keeps affinity and scheduling policy per
    thread; the threads started later inherit them from the one that starts them)."""
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            action(int(task))


def confine_process(cpus: list[int]) -> None:
    """Confine every thread of this process, and the threads it starts later, to `cpus`."""
    _every_thread(lambda tid: os.sched_setaffinity(tid, cpus))


def idle_process() -> None:
    """Put every thread of this process, and the threads it starts later, under SCHED_IDLE: it runs
    only on a CPU that nothing else wants, and any other task that wakes takes the CPU from it at once
    (a niced task keeps a small weight, and the scheduler may let it finish its slice first)."""
    _every_thread(lambda tid: os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0)))


def run_campaign(c: Campaign) -> dict[str, Any]:
    """Prepare, run the pair alone (quiet), then the pair beside the fuzzer; watch the broker throughout."""
    import json
    import sys

    host, _, port_text = c.bootstrap.rpartition(":")
    log_start = Path(c.broker_log).stat().st_size if c.broker_log else 0
    control_log_start = Path(c.control_log).stat().st_size if c.control_log else 0
    phases: dict[str, tuple[float, float]] = {}  # monotonic bounds of the quiet and the fuzzed phase
    served, target = prepare_target(c.bootstrap)
    if c.apis:
        served = {key: versions for key, versions in served.items() if key in c.apis}
    seeds = build_seeds(served, target)
    result: dict[str, Any] = {"seeds": len(seeds), "apis": len({s.api_key for s in seeds})}
    run_tag = f"{os.getpid()}-{int(time.time())}"  # a pair of an earlier run must never share names
    if c.quiet_seconds > 0:
        quiet_began = time.monotonic()
        quiet = pair_subprocess(c.bootstrap, f"good-pair-quiet-{run_tag}", c.quiet_seconds, c.pair_rate)
        result["quiet_pair"] = pair_result_wait(quiet)
        phases["quiet"] = (quiet_began, time.monotonic())
        if c.control_bootstrap:
            # after the pair's quiet run, not beside it: each quiet figure is one pair alone on the
            # machine, as without a control (beside the fuzzer both pairs run, which weighs on both)
            control_began = time.monotonic()
            control_quiet = pair_subprocess(
                c.control_bootstrap, f"control-pair-quiet-{run_tag}", c.quiet_seconds, c.pair_rate
            )
            result["control_pair"] = {"quiet": pair_result_wait(control_quiet)}
            phases["control_quiet"] = (control_began, time.monotonic())
    rss: list[int] = []
    fds: list[int] = []
    timeline: list[dict[str, Any]] = []  # every 10 s: RSS, descriptors by kind, threads
    state_peak: dict[str, int] = {}  # every 30 s: the largest of each count of broker_state_counts
    data_dir = Path(c.broker_log).parent if c.broker_log and c.data_dir_is_log_dir else None

    async def census() -> None:
        while True:
            try:
                counts = await trio.to_thread.run_sync(
                    broker_state_counts, c.bootstrap, data_dir, abandon_on_cancel=True
                )
            except Exception as exc:  # a busy broker may time the census out: try again
                print(f"\nstate census failed: {exc}", file=sys.stderr)
            else:
                for key, value in counts.items():
                    state_peak[key] = max(state_peak.get(key, 0), value)
                if c.progress:
                    print(f"\nstate {json.dumps(counts)}", file=sys.stderr, flush=True)
            await trio.sleep(30)

    alive = [True]
    began = time.monotonic()

    async def watch_broker(cancel: trio.CancelScope) -> None:
        while c.broker_pid is not None:
            sample = read_rss_kib(c.broker_pid)
            if sample is None:
                alive[0] = False
                cancel.cancel()
                return
            rss.append(sample)
            with contextlib.suppress(OSError):
                fds.append(len(os.listdir(f"/proc/{c.broker_pid}/fd")))
            if not timeline or time.monotonic() - began >= timeline[-1]["t"] + 10:
                census = descriptor_census(c.broker_pid) or {}
                timeline.append({"t": round(time.monotonic() - began), "rss_mib": sample // 1024,
                                 "threads": read_threads(c.broker_pid), **census})  # fmt: skip
                if c.progress:
                    print(f"\n{json.dumps(timeline[-1])}", file=sys.stderr, flush=True)
            await trio.sleep(0.5)

    def show(stats: FuzzStats) -> None:
        line = (f"\r{stats.frames_sent:>9} frames {stats.rate:>7.0f}/s  answered {stats.answered}  closed "
                f"{stats.closed_by_broker}  unanswered {stats.unanswered}  bad {stats.bad_answers}  rss "
                f"{(rss[-1] if rss else 0) // 1024} MiB")  # fmt: skip
        print(line, end="", file=sys.stderr, flush=True)

    fuzz_wall: list[float] = []  # wall seconds when the fuzzing began and ended (alternating blocks)

    async def main() -> FuzzStats:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_broker, nursery.cancel_scope)
            nursery.start_soon(census)
            fuzz_wall.append(time.time())
            stats = await fuzz(
                host,
                int(port_text),
                seeds,
                frames=c.frames,
                seconds=c.seconds,
                connections=c.connections,
                rate=c.rate,
                seed=c.seed,
                progress=show if c.progress else None,
                alternate=c.alternate,
            )
            fuzz_wall.append(time.time())
            nursery.cancel_scope.cancel()
        return stats

    pair = pair_subprocess(c.bootstrap, f"good-pair-fuzzed-{run_tag}", c.seconds + 60, c.pair_rate)
    control = None
    if c.control_bootstrap:
        control = pair_subprocess(
            c.control_bootstrap, f"control-pair-fuzzed-{run_tag}", c.seconds + 60, c.pair_rate
        )
    try:
        time.sleep(3)  # the pair has joined its group and is producing before the fuzzing starts
        if c.fuzzer_nice:
            os.nice(c.fuzzer_nice)  # this process only: the broker and the pair were started before
        if c.fuzzer_cpus:
            confine_process(c.fuzzer_cpus)
        if c.fuzzer_idle:
            idle_process()
        fuzz_began = time.monotonic()
        stats = trio.run(main)
        phases["fuzzed"] = (fuzz_began, time.monotonic())
    except BaseException:
        pair.kill()
        if control is not None:
            control.kill()
        raise
    if c.progress:
        print(file=sys.stderr)
    result["fuzzed_pair"] = pair_result(pair)
    if control is not None:
        control_result = result.setdefault("control_pair", {})
        control_result["fuzzed"] = pair_result(control)
        control_ratio = p99_ratio(control_result.get("quiet", {}), control_result["fuzzed"])
        if control_ratio is not None and not c.alternate:  # alternating: see control_pair.alternating
            control_result["p99_ratio"] = control_ratio
    # each pair's samples: split by block when the fuzzer alternated, then out of the summary
    control_pair = result.get("control_pair", {})
    result.get("quiet_pair", {}).pop("e2e_samples", None)
    control_pair.get("quiet", {}).pop("e2e_samples", None)
    samples = result["fuzzed_pair"].pop("e2e_samples", [])
    control_samples = control_pair.get("fuzzed", {}).pop("e2e_samples", [])
    if c.alternate and len(fuzz_wall) == 2:
        result["alternating"] = alternating_split(samples, *fuzz_wall, c.alternate)
        # the fuzzed blocks against the quiet run before the fuzzing too: the quiet blocks follow fuzzed
        # ones, on a broker whose state the fuzzer grew (the loop probe's quiet_blocks say how busy it is)
        over_quiet_run = p99_ratio(result.get("quiet_pair", {}), result["alternating"]["fuzzed"])
        if over_quiet_run is not None:
            result["alternating"]["fuzzed_blocks_over_quiet_run"] = over_quiet_run
        if control is not None:
            control_split = alternating_split(control_samples, *fuzz_wall, c.alternate)
            result["control_pair"]["alternating"] = control_split
            if result["alternating"].get("p99_ratio") and control_split.get("p99_ratio"):
                result["alternating"]["p99_ratio_beyond_control"] = round(
                    result["alternating"]["p99_ratio"] / control_split["p99_ratio"], 2
                )
    result["fuzz"] = stats.as_dict()
    result["broker_alive"] = alive[0] and (c.broker_pid is None or read_rss_kib(c.broker_pid) is not None)
    if rss:
        result["rss_mib"] = {"start": rss[0] // 1024, "peak": max(rss) // 1024, "end": rss[-1] // 1024}
    if fds:
        result["open_fds"] = {"start": fds[0], "peak": max(fds), "end": fds[-1]}
    result["timeline"] = timeline
    with contextlib.suppress(Exception):  # the state at the end counts too (it may be the largest)
        for key, value in broker_state_counts(c.bootstrap, data_dir).items():
            state_peak[key] = max(state_peak.get(key, 0), value)
    if rss and timeline:
        sockets_peak = max(sample.get("sockets", 0) for sample in timeline)
        bound = rss_bound_kib(rss[0], sockets_peak, c.connections, stats.largest_frame, state_peak)
        result["rss_bound"] = {
            "state_peak": state_peak,
            "sockets_peak": sockets_peak,
            "bound_mib": bound // 1024,
            "rss_peak_mib": max(rss) // 1024,
            "within": max(rss) <= bound,
        }
    if c.alternate:
        # the whole run's figures mix fuzzed and quiet blocks: labelled, and no ratio made of them
        result["fuzzed_pair"]["mixes_fuzzed_and_quiet_blocks"] = True
    ratio = p99_ratio(result.get("quiet_pair", {}), result["fuzzed_pair"])
    if ratio is not None and not c.alternate:
        result["p99_ratio"] = ratio
        control_ratio = result.get("control_pair", {}).get("p99_ratio")
        if control_ratio:
            # the part of the ratio that the broker's own serving of the fuzzer accounts for
            result["p99_ratio_beyond_control"] = round(result["p99_ratio"] / control_ratio, 2)
    result["load_average"] = os.getloadavg()
    result["fuzzer_nice"] = c.fuzzer_nice
    result["fuzzer_cpus"] = c.fuzzer_cpus
    result["fuzzer_idle"] = c.fuzzer_idle
    result["alternate"] = c.alternate
    if c.broker_log:
        result["log_problems"] = scan_log(c.broker_log, log_start)[:10]
    # the loop probe, when the brokers run it: the fuzzed broker's turns and wake-ups against the idle
    # control broker's (the machine's share of a wake-up's delay), each per phase
    for key, path, start, quiet_phase in (
        ("loop_probe", c.broker_log, log_start, "quiet"),
        ("control_loop_probe", c.control_log, control_log_start, "control_quiet"),
    ):
        if path:
            windows = loop_probe_windows(path, start)
            probe: dict[str, dict[str, Any] | None] = {}
            if quiet_phase in phases:
                probe["quiet"] = loop_probe_phase(windows, *phases[quiet_phase])
            if c.alternate and "fuzzed" in phases:
                # the blocks as the loop probe's windows see them (monotonic): the fuzzed phase began
                # a trio start-up before the blocks did, well inside the margin of alternating_block
                probe.update(loop_probe_alternating(windows, *phases["fuzzed"], c.alternate))
            elif "fuzzed" in phases:
                probe["fuzzed"] = loop_probe_phase(windows, *phases["fuzzed"])
            if any(probe.values()):
                result[key] = probe
    return result
