"""The benchmark run: brokers up, workloads alternated between them, figures collected into one dict.

Theory of operation: `run_benchmark(settings, specs)` owns every broker it starts (all of them stay up
for the whole run, each on its own port and data dir under one temp dir) and walks the workloads in a
fixed order. Within a workload, run r goes to every broker before run r+1 starts (kafkacompat, peer 1,
peer 2, kafkacompat, ...), so a burst of load from elsewhere on the machine hits all brokers alike
rather than one of them. Each run uses a fresh topic (created with our own small client, then waited
for in Metadata), and every topic is deleted as soon as no later run needs it: a produce run's right
after the run, so no broker carries earlier runs' data (in its RSS, or in memory a VM's host has to
back again: see `_produce_runs`).

Order: start-up (each broker started `runs` times; all but the last start are stopped again), idle
RSS, produce (1 KiB and 100 B x acks=1 and acks=all), consume (per size, an unmeasured load into
each broker, then reads from offset 0), end-to-end latency at a fixed rate, group join (1 and 3
consumers, only where the broker serves JoinGroup), and optionally a large partition read from
offset 0 twice per run: by a fully default consumer and by one whose only change is
`fetch.queue.backoff.ms=1` (see `_big`).
While one broker is measured, the other brokers' processes are stopped (SIGSTOP, `_others_paused`),
so a peer's background work cannot take CPU from the broker being measured. The result is a JSON-ready
dict (see `report.py` for the table and the goals).
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kafkacompat.bench import workers
from kafkacompat.bench.brokers import BrokerSpec, RunningBroker
from kafkacompat.bench.procinfo import PeakSampler, process_tree, rss_bytes
from kafkacompat.bench.stats import cdf_points, latency_summary, summarize
from kafkacompat.progress import Progress as SharedProgress

__all__ = ["Progress", "Settings", "count_steps", "run_benchmark"]

#: below this much broker CPU in a timed run (a few /proc clock ticks), the CPU figures are not reported
MIN_MEASURABLE_CPU_SECONDS = 5 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)

MIB = 1024 * 1024
CREATE_TOPICS = 19
DELETE_TOPICS = 20
TOPIC_ALREADY_EXISTS = 36


@dataclass
class Settings:
    """Sizes of one benchmark run (`--quick` shrinks them for a smoke run)."""

    # 1 KiB records per produce run (smaller sizes move as many bytes): 0.5 GB, about a second for the
    # faster brokers. With 0.1 GB runs (0.15-0.2 s) a client's fixed start-up costs were a quarter of a
    # consume run, which flattened the ratios and spread the runs.
    messages: int = 500_000
    sizes: tuple[int, ...] = (1024, 100)
    acks: tuple[str, ...] = ("1", "all")
    runs: int = 3
    e2e_rate: int = 2000
    e2e_seconds: float = 10.0
    e2e_size: int = 100
    group_sizes: tuple[int, ...] = (1, 3)
    big_partition_mib: int = 0  # 0: skip the large-partition read
    timeout: float = 180.0  # per worker
    workloads: tuple[str, ...] = ("startup", "produce", "consume", "e2e", "groups", "big")
    pause_others: bool = True  # SIGSTOP the brokers not being measured (see `_others_paused`)
    replication_factor: int = 1  # of the benchmark's topics (3 against a cluster-mode --bootstrap)

    @classmethod
    def quick(cls) -> Settings:
        return cls(messages=5_000, e2e_seconds=2.0, timeout=60.0)


class Progress(SharedProgress):
    """The benchmark's steps on the shared progress display (kafkacompat.progress): a bar on a terminal,
    a line per step otherwise (each step is a measured run, seconds to minutes long)."""

    def __init__(self, total: int, stream: Any = None, enabled: bool = True) -> None:
        super().__init__(
            "bench", max(total, 1), unit="steps", stream=stream, delay=0, interval=0, enabled=enabled,
            summary=False,
        )  # fmt: skip

    def step(self, label: str) -> None:
        self.advance(1, label)

    def status_text(self) -> str:
        elapsed = self.clock() - self.started
        total = int(self.total or 1)
        return f"[{min(int(self.done), total):3d}/{total}] {elapsed:5.0f}s {self.detail}"


def size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"


def produce_id(size: int, acks: str) -> str:
    return f"produce-{size}-acks{acks}"


def consume_id(size: int) -> str:
    return f"consume-{size}"


def records_for(settings: Settings, size: int) -> int:
    """Records per throughput run: `messages` of 1 KiB, and the same volume of bytes for smaller records
    (so a 100 B run lasts long enough to time and to read the broker's CPU counters meaningfully)."""
    if size >= 1024:
        return settings.messages
    return settings.messages * 1024 // size


def count_steps(settings: Settings, brokers: int, attached: int = 0) -> int:
    """How many progress steps a run has (for the [n/total] display)."""
    steps = 0
    w = settings.workloads
    started = brokers - attached
    if "startup" in w:
        steps += settings.runs * started
    if "produce" in w:
        steps += len(settings.sizes) * len(settings.acks) * settings.runs * brokers
    if "consume" in w:
        steps += len(settings.sizes) * (settings.runs + 1) * brokers  # + one load per broker
    if "e2e" in w:
        steps += settings.runs * brokers
    if "groups" in w:
        steps += len(settings.group_sizes) * settings.runs * brokers
    if "big" in w and settings.big_partition_mib:
        steps += brokers + len(BIG_READS) * settings.runs * brokers
    return steps


# --- topics, through kafkacompat's own small client (works against any broker) -------------------


def create_topic(
    bootstrap: str, name: str, partitions: int, timeout: float = 30.0, replication_factor: int = 1
) -> None:
    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class

    cls = request_class(CREATE_TOPICS)
    with KafkaClient(bootstrap, client_id="kafkacompat-bench", timeout=timeout) as client:
        topic = cls.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            assignments=[],
            configs=[],
        )
        response = client.send(CREATE_TOPICS, cls(topics=[topic], timeout_ms=int(timeout * 1000)))
        for result in response.topics:
            if result.error_code not in (0, TOPIC_ALREADY_EXISTS):
                raise RuntimeError(f"CreateTopics {name}: error {result.error_code} {result.error_message}")
        deadline = time.monotonic() + timeout
        while True:
            meta = client.metadata([name])
            ready = [
                t
                for t in meta.topics
                if t.name == name
                and t.error_code == 0
                and len(t.partitions) == partitions
                and all(p.leader_id >= 0 for p in t.partitions)
            ]
            if ready:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} has no leader after {timeout:.0f} s")
            time.sleep(0.05)


# After deleting large topics, give the brokers this long to remove the files before the next
# measurement starts (kafkacompat is started with log.segment.delete.delay.ms=0 for this reason).
DELETE_SETTLE_SECONDS = 1.5
# ... and after deleting one produce run's topic, before the next run (one run's data at most)
RUN_DELETE_SETTLE_SECONDS = 0.5


def delete_topics(bootstrap: str, names: list[str]) -> None:
    """Best effort: a broker that cannot delete keeps the data (only its RSS figures suffer)."""
    if not names:
        return
    from kafkacompat.client import ClientError, KafkaClient
    from kafkacompat.wire.messages import request_class

    cls = request_class(DELETE_TOPICS)
    try:
        with KafkaClient(bootstrap, client_id="kafkacompat-bench", timeout=30) as client:
            version = min(5, client.version_for(DELETE_TOPICS))
            client.send(DELETE_TOPICS, cls(topic_names=names, timeout_ms=30000), version=version)
    except (ClientError, OSError):
        pass


# --- the run ---------------------------------------------------------------------------------------


@dataclass
class _BrokerState:
    broker: RunningBroker
    startup: list[float] = field(default_factory=list)
    idle_rss: int | None = None
    peak_rss: int = 0
    errors: list[str] = field(default_factory=list)
    others: list[_BrokerState] = field(default_factory=list, repr=False)  # paused while this one runs


@contextlib.contextmanager
def _others_paused(state: _BrokerState) -> Iterator[None]:
    """Stop (SIGSTOP) every other broker's processes while `state`'s broker is measured; SIGCONT after.

    All brokers stay up for the whole run, and on a 2-core machine a peer that works while idle takes CPU
    from the broker being measured: noida-db keeps about half a core busy for a while after a load. A
    stopped broker has no client at that moment (each run uses fresh clients on one broker), so it loses
    nothing but background time. Brokers given with --bootstrap have no pid and are never stopped.
    """
    stopped: list[int] = []
    try:
        for other in state.others:
            pid = other.broker.pid
            for member in process_tree(pid) if pid is not None else []:
                try:
                    os.kill(member, signal.SIGSTOP)
                    stopped.append(member)
                except ProcessLookupError:
                    pass
        yield
    finally:
        for member in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGCONT)


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
        info["memory_gib"] = round(mem_kb / MIB, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        import confluent_kafka

        info["librdkafka"] = confluent_kafka.libversion()[0]
        info["confluent_kafka"] = getattr(confluent_kafka, "__version__", None)
    except ImportError:
        pass
    return info


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def run_benchmark(
    settings: Settings,
    specs: list[BrokerSpec],
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
    work_dir: str | None = None,
) -> dict[str, Any]:
    """Run every workload against every broker; return the JSON-ready results."""
    progress = progress or Progress(count_steps(settings, len(specs)), enabled=False)
    note = log or progress.note
    with tempfile.TemporaryDirectory(prefix="kafkacompat-bench-", dir=work_dir) as tmp:
        states = [_BrokerState(RunningBroker(spec, Path(tmp))) for spec in specs]
        if settings.pause_others:
            for state in states:
                state.others = [other for other in states if other is not state]
        results: dict[str, Any] = {
            "meta": {
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "load_before": _load(),
                "machine": _machine(),
                "settings": asdict(settings),
            },
            "brokers": {},
            "throughput": {},
            "latency": {},
            "groups": {},
            "big": {},
        }
        try:
            _startup(settings, states, progress, note)
            # a broker that failed to start is reported with its error and left out of the workloads
            live = [state for state in states if not state.errors]
            if "produce" in settings.workloads or "consume" in settings.workloads:
                _throughput(settings, live, progress, note, results["throughput"])
            if "e2e" in settings.workloads:
                _latency(settings, live, progress, note, results["latency"])
            if "groups" in settings.workloads:
                _groups(settings, live, progress, note, results["groups"])
            if "big" in settings.workloads and settings.big_partition_mib:
                _big(settings, live, progress, note, results["big"])
        finally:
            for state in states:
                state.broker.stop()
            progress.finish()
        results["meta"]["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        results["meta"]["load_after"] = _load()
        for state in states:
            spec = state.broker.spec
            startup = summarize(state.startup)
            results["brokers"][spec.name] = {
                "command": spec.display_command(),
                "startup_s": startup.as_dict() if startup else None,
                "idle_rss_mib": state.idle_rss / MIB if state.idle_rss is not None else None,
                "peak_rss_mib": state.peak_rss / MIB if state.peak_rss else None,
                "serves_groups": state.broker.serves_groups,
                "errors": state.errors,
            }
        return results


def _startup(settings: Settings, states: list[_BrokerState], progress: Progress, note: Any) -> None:
    runs = settings.runs if "startup" in settings.workloads else 1
    for run in range(runs):
        for state in states:
            broker = state.broker
            if state.errors:
                continue
            if broker.spec.command is not None:
                progress.step(f"start-up · {broker.spec.name} · run {run + 1}/{runs}")
            elif run > 0:
                continue
            try:
                seconds = broker.start()
            except Exception as exc:  # e.g. the binary is missing or exits: report, go on without it
                state.errors.append(f"start: {exc}")
                note(f"{broker.spec.name}: {exc}")
                broker.stop()
                continue
            if seconds is not None and "startup" in settings.workloads:
                state.startup.append(seconds)
            if run < runs - 1 and broker.spec.command is not None:
                broker.stop()
    time.sleep(2.0)  # let start-up work (recovery, first flush) settle before reading idle memory
    for state in states:
        if state.broker.pid is not None:
            state.idle_rss = rss_bytes(process_tree(state.broker.pid))


def _run_one(
    state: _BrokerState, kind: str, params: dict[str, Any], timeout: float
) -> tuple[dict[str, Any], float | None, int]:
    """One worker against one broker: (result, broker CPU seconds in the timed window, peak RSS bytes).

    The worker reads the broker's CPU counters itself right at the edges of its timed window, so
    process start-up and connection set-up do not count.
    """
    pid = state.broker.pid
    params = params | {"broker_pids": process_tree(pid) if pid is not None else []}
    with _others_paused(state), PeakSampler(pid) as sampler:
        (result,) = workers.run_workers([(kind, params)], timeout)
    return result, result.get("broker_cpu"), sampler.peak


def _throughput(
    settings: Settings, states: list[_BrokerState], progress: Progress, note: Any, out: dict[str, Any]
) -> None:
    if "produce" in settings.workloads:
        _produce_runs(settings, states, progress, note, out)
    if "consume" in settings.workloads:
        _consume_runs(settings, states, progress, note, out)
    for entry in out.values():
        for record in entry["per_broker"].values():
            _summarize_record(record)


def _create_fresh_topic(
    state: _BrokerState,
    topic: str,
    record: dict[str, Any],
    note: Any,
    label: str,
    replication_factor: int = 1,
) -> bool:
    """Create a one-partition topic; on failure, record and report it and return False."""
    try:
        create_topic(state.broker.bootstrap, topic, 1, replication_factor=replication_factor)
    except Exception as exc:
        record["failures"].append(f"create topic: {exc}")
        note(f"{state.broker.spec.name}: {label}: create topic failed: {exc}")
        return False
    return True


def _produce_params(
    settings: Settings, state: _BrokerState, topic: str, size: int, acks: str
) -> dict[str, Any]:
    return {
        "bootstrap": state.broker.bootstrap,
        "topic": topic,
        "messages": records_for(settings, size),
        "size": size,
        "acks": acks,
        "timeout": settings.timeout,
    }


def _produce_runs(
    settings: Settings, states: list[_BrokerState], progress: Progress, note: Any, out: dict[str, Any]
) -> None:
    # Each run's topic is deleted as soon as the run is over, so no broker holds more than one run's
    # data: on a VM that hands freed memory back to its host, memory taken beyond the few GiB the host
    # keeps backed costs several times the CPU per GB (see docs/BENCHMARKS.md), and a broker that kept
    # five runs' worth would be measured on that rather than on its own work.
    for size, acks in [(size, acks) for size in settings.sizes for acks in settings.acks]:
        entry = out.setdefault(
            produce_id(size, acks),
            {
                "label": f"produce {size_label(size)} acks={acks}",
                "kind": "produce",
                "size": size,
                "acks": acks,
                "messages": records_for(settings, size),
                "per_broker": {},
            },
        )
        for run in range(settings.runs):
            for state in states:
                name = state.broker.spec.name
                progress.step(f"{entry['label']} · {name} · run {run + 1}/{settings.runs}")
                record = entry["per_broker"].setdefault(name, {"runs": [], "failures": []})
                topic = f"bench-{size}-acks{acks}-{run}-{uuid.uuid4().hex[:8]}"
                if not _create_fresh_topic(
                    state, topic, record, note, entry["label"], settings.replication_factor
                ):
                    continue
                params = _produce_params(settings, state, topic, size, acks)
                result, broker_cpu, peak = _run_one(state, "produce", params, settings.timeout + 30)
                state.peak_rss = max(state.peak_rss, peak)
                _record_throughput(record, result, broker_cpu, peak, note, name, entry["label"])
                delete_topics(state.broker.bootstrap, [topic])
                time.sleep(RUN_DELETE_SETTLE_SECONDS)


def _consume_runs(
    settings: Settings, states: list[_BrokerState], progress: Progress, note: Any, out: dict[str, Any]
) -> None:
    """Per size: one unmeasured acks=1 load into each broker, then `runs` reads from offset 0 of it."""
    for size in settings.sizes:
        entry = out.setdefault(
            consume_id(size),
            {
                "label": f"consume {size_label(size)}",
                "kind": "consume",
                "size": size,
                "messages": records_for(settings, size),
                "per_broker": {},
            },
        )
        loaded: dict[str, str] = {}  # broker -> topic the reads take
        for state in states:
            name = state.broker.spec.name
            progress.step(f"{entry['label']} · {name} · load")
            record = entry["per_broker"].setdefault(name, {"runs": [], "failures": []})
            topic = f"bench-{size}-read-{uuid.uuid4().hex[:8]}"
            if not _create_fresh_topic(
                state, topic, record, note, entry["label"], settings.replication_factor
            ):
                continue
            params = _produce_params(settings, state, topic, size, "1")
            (result,) = workers.run_workers([("produce", params)], settings.timeout + 30)
            if result.get("ok"):
                loaded[name] = topic
            else:
                record["failures"].append(f"load: {result.get('error')}")
                note(f"{name}: {entry['label']}: load failed: {result.get('error')}")
                delete_topics(state.broker.bootstrap, [topic])
        for run in range(settings.runs):
            for state in states:
                name = state.broker.spec.name
                progress.step(f"{entry['label']} · {name} · run {run + 1}/{settings.runs}")
                record = entry["per_broker"][name]
                if name not in loaded:
                    continue
                if len(record["failures"]) >= 2 and not record["runs"]:
                    # two failed reads and no good one: e.g. noida-db, whose Fetch answers ignore the
                    # byte limits, so that every read stalls for 20 s
                    record["skipped_runs"] = record.get("skipped_runs", 0) + 1
                    continue
                params = {
                    "bootstrap": state.broker.bootstrap,
                    "topic": loaded[name],
                    "messages": records_for(settings, size),
                    "size": size,
                    "timeout": settings.timeout,
                    "fetch_queue_backoff_ms": 1,  # the broker's rate, not the client's pauses
                }
                result, broker_cpu, peak = _run_one(state, "consume", params, settings.timeout + 30)
                _record_throughput(record, result, broker_cpu, peak, note, name, entry["label"])
        for state in states:
            if state.broker.spec.name in loaded:
                delete_topics(state.broker.bootstrap, [loaded[state.broker.spec.name]])
        time.sleep(DELETE_SETTLE_SECONDS)


def _record_throughput(
    record: dict[str, Any],
    result: dict[str, Any],
    broker_cpu: float | None,
    peak: int,
    note: Any,
    name: str,
    label: str,
) -> None:
    if not result.get("ok"):
        record["failures"].append(result.get("error") or "failed")
        note(f"{name}: {label}: {result.get('error')}")
        return
    seconds = result["seconds"]
    if broker_cpu is not None and broker_cpu < MIN_MEASURABLE_CPU_SECONDS:
        # /proc counts CPU in clock ticks: a run this short (--quick) reads as 0 or 1 tick, a figure that
        # says nothing; it is reported as not measured instead of as 0.00 cores
        broker_cpu = None
    record["runs"].append(
        {
            "seconds": seconds,
            "mb_s": result["bytes"] / seconds / 1e6,
            "msgs_s": result["messages"] / seconds,
            "broker_cpu_cores": broker_cpu / seconds if broker_cpu is not None else None,
            # CPU per byte moved: comparable even when the client, not the broker, sets the pace
            "broker_cpu_s_per_gb": broker_cpu / (result["bytes"] / 1e9) if broker_cpu is not None else None,
            "client_cpu_cores": result["client_cpu"] / seconds,
            "broker_peak_rss_mib": peak / MIB if peak else None,
        }
    )


def _summarize_record(record: dict[str, Any]) -> None:
    runs = record["runs"]
    for key in ("mb_s", "msgs_s", "broker_cpu_cores", "broker_cpu_s_per_gb", "client_cpu_cores"):
        summary = summarize([r[key] for r in runs if r[key] is not None])
        record[key] = summary.as_dict() if summary else None
    peaks = [r["broker_peak_rss_mib"] for r in runs if r.get("broker_peak_rss_mib")]
    record["broker_peak_rss_mib"] = max(peaks) if peaks else None


LATENCY_KEYS = ("p50", "p99", "p99.9", "max")


def _latency(
    settings: Settings, states: list[_BrokerState], progress: Progress, note: Any, out: dict[str, Any]
) -> None:
    """`runs` latency runs per broker, alternated; per percentile the median of the runs' values."""
    per_run: dict[str, list[dict[str, Any]]] = {s.broker.spec.name: [] for s in states}
    for run in range(settings.runs):
        for state in states:
            name = state.broker.spec.name
            progress.step(f"e2e latency {settings.e2e_rate} msg/s · {name} · run {run + 1}/{settings.runs}")
            per_run[name].append(_e2e_once(settings, state, note))
    for name, runs in per_run.items():
        good = [r for r in runs if r.get("summary")]
        record: dict[str, Any] = {"runs": [r.get("summary") for r in runs]}
        for key in LATENCY_KEYS:
            summary = summarize([r["summary"][key] for r in good])
            if summary:
                record[key] = summary.as_dict()
        for key in ("p50", "p99", "max"):
            summary = summarize([r["ack"][key] for r in good if r.get("ack")])
            if summary:
                record.setdefault("ack", {})[key] = summary.as_dict()
        pooled = [x for r in good for x in r["latencies"]]
        record["cdf"] = cdf_points(pooled)
        record["samples"] = len(pooled)
        rates = [r["achieved_rate"] for r in runs if r.get("achieved_rate")]
        record["achieved_rate"] = min(rates) if rates else None
        for key in ("broker_cpu_cores", "producer_cpu_cores"):
            cpu = summarize([r[key] for r in runs if r.get(key) is not None])
            record[key] = cpu.as_dict() if cpu else None
        errors = [r["error"] for r in runs if r.get("error")]
        if errors:
            record["error"] = errors[0]
            record["failures"] = errors
        out[name] = record


def _e2e_once(settings: Settings, state: _BrokerState, note: Any) -> dict[str, Any]:
    """One fixed-rate run: producer and consumer in two processes, latency measured by the consumer."""
    name = state.broker.spec.name
    topic = f"bench-e2e-{uuid.uuid4().hex[:8]}"
    try:
        create_topic(state.broker.bootstrap, topic, 1, replication_factor=settings.replication_factor)
    except Exception as exc:
        note(f"{name}: e2e: create topic failed: {exc}")
        return {"error": f"create topic: {exc}"}
    ctx = workers.context()
    ready = ctx.Event()
    count = int(settings.e2e_rate * settings.e2e_seconds)
    # one second of traffic before the measured part: connections and fetch sessions are warm
    warmup = max(1, min(settings.e2e_rate, count // 5))
    common = {
        "bootstrap": state.broker.bootstrap,
        "topic": topic,
        "messages": count,
        "warmup": warmup,
        "ready": ready,
        "timeout": settings.e2e_seconds + 60,
    }
    consumer = common | {}
    producer = common | {"rate": settings.e2e_rate, "size": settings.e2e_size, "acks": "1"}
    pid = state.broker.pid
    producer["broker_pids"] = process_tree(pid) if pid is not None else []
    with _others_paused(state):
        consumed, produced = workers.run_workers(
            [("e2e_consumer", consumer), ("e2e_producer", producer)], settings.e2e_seconds + 90
        )
    broker_cpu = produced.get("broker_cpu")
    delete_topics(state.broker.bootstrap, [topic])
    latencies = consumed.get("latencies_ms") or []
    out: dict[str, Any] = {"latencies": latencies, "summary": latency_summary(latencies)}
    out["achieved_rate"] = produced.get("achieved_rate")
    acks = latency_summary(produced.get("ack_latencies_ms") or [])
    if acks:  # produce() to delivery report: tells the producer's part from the consumer's
        out["ack"] = acks
    seconds = produced.get("seconds")
    out["broker_cpu_cores"] = broker_cpu / seconds if broker_cpu is not None and seconds else None
    # a paced sender should be nearly idle: one that spins takes a core from the broker and the consumer
    client_cpu = produced.get("client_cpu")
    out["producer_cpu_cores"] = client_cpu / seconds if client_cpu is not None and seconds else None
    errors = [r.get("error") for r in (consumed, produced) if not r.get("ok")]
    if errors:
        out["error"] = "; ".join(str(e) for e in errors)
        note(f"{name}: e2e: {out['error']}")
    return out


def _groups(
    settings: Settings, states: list[_BrokerState], progress: Progress, note: Any, out: dict[str, Any]
) -> None:
    for members in settings.group_sizes:
        per_broker = out.setdefault(str(members), {})
        for run in range(settings.runs):
            for state in states:
                name = state.broker.spec.name
                progress.step(f"group join, {members} consumer(s) · {name} · run {run + 1}/{settings.runs}")
                record = per_broker.setdefault(name, {"runs": [], "failures": []})
                if not state.broker.serves_groups:
                    record["na"] = "n/a (no group coordinator)"
                    continue
                try:
                    seconds, unsettled = _join_once(settings, state, members)
                except RuntimeError as exc:
                    record["failures"].append(str(exc))
                    note(f"{name}: group join ({members}): {exc}")
                    continue
                record["runs"].append(seconds)
                if unsettled:
                    # the member's client was still looking for the coordinator at the start signal, so
                    # this run's time includes that look-up
                    record["unsettled_members"] = record.get("unsettled_members", 0) + unsettled
                    note(f"{name}: group join ({members}): {unsettled} member(s) without a coordinator yet")
        for record in per_broker.values():
            summary = summarize(record["runs"])
            record["seconds"] = summary.as_dict() if summary else None


def _join_once(settings: Settings, state: _BrokerState, members: int) -> tuple[float, int]:
    """Seconds from the common subscribe signal until every member holds its share of 3 partitions, and
    how many members' clients had not found the group coordinator by that signal."""
    partitions = 3
    topic = f"bench-group-{uuid.uuid4().hex[:8]}"
    create_topic(state.broker.bootstrap, topic, partitions, replication_factor=settings.replication_factor)
    ctx = workers.context()
    counts = ctx.Array("i", members)
    ready = [ctx.Event() for _ in range(members)]
    go, stop = ctx.Event(), ctx.Event()
    group_id = f"bench-group-{uuid.uuid4().hex[:8]}"
    timeout = 30.0
    jobs = [
        (
            "group_member",
            {
                "bootstrap": state.broker.bootstrap,
                "topic": topic,
                "group_id": group_id,
                "index": i,
                "counts": counts,
                "ready": ready,
                "go": go,
                "stop": stop,
                "timeout": timeout,
            },
        )
        for i in range(members)
    ]
    share = partitions // members
    started: list[float] = []
    balanced: list[bool] = []

    def release_and_watch() -> None:
        for event in ready:
            event.wait(30)
        started.append(time.time())
        go.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(counts[i] == share for i in range(members)):
                balanced.append(True)
                break
            time.sleep(0.002)
        stop.set()

    with _others_paused(state):
        results = workers.run_workers(jobs, timeout + 60, while_running=release_and_watch)
    delete_topics(state.broker.bootstrap, [topic])
    failures = [r.get("error") for r in results if not r.get("ok")]
    if failures:
        raise RuntimeError("; ".join(str(f) for f in failures))
    if not balanced:
        raise RuntimeError(f"no balanced assignment within {timeout:.0f} s")
    last_assign = [
        max((t for t, kind, n in r["events"] if kind == "assign" and n == share), default=None)
        for r in results
    ]
    if any(t is None for t in last_assign):
        raise RuntimeError("a member reported no assignment")
    unsettled = sum(1 for r in results if not r.get("settled"))
    return max(t for t in last_assign if t is not None) - started[0], unsettled


# The large-partition reads, as (key prefix in the results, label, fetch.queue.backoff.ms or None for
# librdkafka's default). Every setting that shapes the Fetch requests the broker sees (fetch.max.bytes,
# max.partition.fetch.bytes, fetch.min.bytes, fetch.wait.max.ms) stays default in both. The fully
# default consumer stops fetching for a whole second whenever its 64 MiB local queue is full, which
# happens only when the broker fills it faster than the Python loop drains it: its rate is the
# client's, and a faster broker can score lower. The second read takes that pause out.
BIG_READS: tuple[tuple[str, str, int | None], ...] = (
    ("", "default consumer", None),
    ("backoff1_", "default fetch settings, fetch.queue.backoff.ms=1", 1),
)


def _big(
    settings: Settings, states: list[_BrokerState], progress: Progress, note: Any, out: dict[str, Any]
) -> None:
    """A large partition (1 KiB records) read from offset 0, once per `BIG_READS` entry and run.

    Each broker is loaded once; then the partition is read `runs` times by each consumer, alternating
    between brokers. Per broker the record keeps `reads` / `consume_mb_s` (fully default consumer: the
    keys older results files have) and `backoff1_reads` / `backoff1_mb_s`, plus the default reads'
    client back-off pauses (`pauses`). A read that fails twice in a row for a broker is not asked
    again (each failure waits out a stall).
    """
    size = 1024
    messages = settings.big_partition_mib * MIB // size
    timeout = max(settings.timeout, 600.0)
    topics: dict[str, str] = {}
    for state in states:
        name = state.broker.spec.name
        progress.step(f"large partition ({settings.big_partition_mib} MiB) load · {name}")
        topic = f"bench-big-{uuid.uuid4().hex[:8]}"
        record: dict[str, Any] = {"mib": settings.big_partition_mib, "messages": messages}
        for prefix, _, _ in BIG_READS:
            record[prefix + "reads"] = []
        out[name] = record
        try:
            create_topic(state.broker.bootstrap, topic, 1, replication_factor=settings.replication_factor)
        except Exception as exc:
            record["error"] = f"create topic: {exc}"
            continue
        params = {
            "bootstrap": state.broker.bootstrap,
            "topic": topic,
            "messages": messages,
            "size": size,
            "acks": "1",
            "timeout": timeout,
        }
        result, _, peak = _run_one(state, "produce", params, timeout + 30)
        record["produce_mb_s"] = result["bytes"] / result["seconds"] / 1e6 if result.get("ok") else None
        record["produce_peak_rss_mib"] = peak / MIB if peak else None
        if result.get("ok"):
            topics[name] = topic
        else:
            record["error"] = result.get("error")
            note(f"{name}: large partition load: {result.get('error')}")
    failures: dict[tuple[str, str], int] = {}
    for run in range(settings.runs):
        for state in states:
            name = state.broker.spec.name
            for prefix, label, backoff in BIG_READS:
                progress.step(
                    f"large partition ({settings.big_partition_mib} MiB) read from 0, {label} · {name} · "
                    f"run {run + 1}/{settings.runs}"
                )
                if name not in topics or failures.get((name, prefix), 0) >= 2:
                    continue
                record = out[name]
                params = {
                    "bootstrap": state.broker.bootstrap,
                    "topic": topics[name],
                    "messages": messages,
                    "size": size,
                    "timeout": timeout,
                    "fetch_queue_backoff_ms": backoff,
                }
                result, broker_cpu, peak = _run_one(state, "consume", params, timeout + 30)
                if result.get("ok"):
                    record[prefix + "reads"].append(_big_read(result, broker_cpu, peak))
                else:
                    failures[(name, prefix)] = failures.get((name, prefix), 0) + 1
                    record[prefix + "error"] = result.get("error")
                    note(f"{name}: large partition read, {label}: {result.get('error')}")
    for name, record in out.items():
        for prefix, _, _ in BIG_READS:
            summary = summarize([r["mb_s"] for r in record[prefix + "reads"]])
            record[prefix + "mb_s" if prefix else "consume_mb_s"] = summary.as_dict() if summary else None
        pauses = summarize([r["pauses"] for r in record["reads"]])
        record["pauses"] = pauses.as_dict() if pauses else None
        if name in topics:
            state = next(s for s in states if s.broker.spec.name == name)
            delete_topics(state.broker.bootstrap, [topics[name]])


def _big_read(result: dict[str, Any], broker_cpu: float | None, peak: int) -> dict[str, Any]:
    seconds = result["seconds"]
    return {
        "mb_s": result["bytes"] / seconds / 1e6,
        "broker_cpu_cores": broker_cpu / seconds if broker_cpu is not None else None,
        "peak_rss_mib": peak / MIB if peak else None,
        "pauses": result.get("pauses", 0),
        "paused_seconds": result.get("paused_seconds", 0.0),
    }
