"""Client workloads, each run in a process of its own with confluent-kafka (librdkafka).

Theory of operation: the runner never talks to a broker with a benchmark client in its own process;
it starts a fresh `spawn`ed process per client (`run_workers`), hands it a plain dict of parameters
(plus multiprocessing events/arrays for the workloads whose clients must meet), and reads one result
dict back through a pipe. So a broker is driven exactly as an application would drive it, client CPU
is measured apart from the runner's, and one client's stall cannot skew another's clock. Every
workload is bounded twice: by its message count and by a deadline; a worker that overstays its
deadline (plus a grace period) is terminated and reported as such.

Workers (the name is the `kind` given to `run_workers`):
- `produce`: N records of S random (incompressible) bytes to partition 0, timed from the first
  produce() to the end of flush(); connection and metadata are set up before the clock starts.
- `consume`: assign partition 0 from the beginning and read N records (no group membership); counts
  the client's fetch back-off pauses (consume() calls that came back short after waiting >= 0.4 s).
- `e2e_producer` / `e2e_consumer`: the producer sends at a fixed rate, embedding time.time_ns() in
  each value; the consumer (another process, same host clock) subtracts it on receipt.
- `group_member`: once its client has found the group coordinator, report ready; subscribe at a common
  start signal and record every assignment and revocation, so the runner can tell when the whole
  group first holds a complete, balanced assignment.
"""

from __future__ import annotations

import collections
import json
import logging
import multiprocessing
import os
import struct
import time
import traceback
import uuid
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["E2E_HEADER", "WORKERS", "run_workers"]

# e2e value layout: send time (ns since the epoch), sequence number, warm-up flag; padded to the size
E2E_HEADER = struct.Struct(">qiB")

_CONTEXT = multiprocessing.get_context("spawn")

# group members poll their client's statistics (its group handler's state) until it has found and
# connected to the group coordinator, for at most this long, before they report ready
SETTLE_STATS_INTERVAL_MS = 10
SETTLE_TIMEOUT_SECONDS = 5.0

# a consume() call (timeout 0.5 s) that waited at least this long and came back short: a back-off pause
PAUSE_SECONDS = 0.4


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def _broker_cpu(params: dict[str, Any]) -> float:
    """CPU seconds used so far by the broker's processes (their pids come from the runner; 0 if none)."""
    from kafkacompat.bench.procinfo import cpu_seconds

    return cpu_seconds(params.get("broker_pids") or [])


def _broker_cpu_delta(params: dict[str, Any], before: float) -> float | None:
    """Broker CPU seconds since `before`, or None when the broker is not ours to watch (--bootstrap)."""
    if not params.get("broker_pids"):
        return None
    return _broker_cpu(params) - before


class _ClientLog(logging.Handler):
    """Keeps the client library's last log lines (shown with a failure) instead of printing them all."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: collections.deque[str] = collections.deque(maxlen=5)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


_CLIENT_LOG = _ClientLog()


def _client_logger() -> logging.Logger:
    logger = logging.getLogger("kafkacompat.bench.client")
    if _CLIENT_LOG not in logger.handlers:
        logger.addHandler(_CLIENT_LOG)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def _last_client_log() -> str:
    return _CLIENT_LOG.lines[-1] if _CLIENT_LOG.lines else ""


def _common(params: dict[str, Any]) -> dict[str, Any]:
    return {
        "bootstrap.servers": params["bootstrap"],
        "client.id": f"kafkacompat-bench-{os.getpid()}",
        # loopback only: never let a broker's advertised name send us elsewhere
        "broker.address.family": "v4",
        "logger": _client_logger(),
    }


def _produce(params: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import KafkaException, Producer

    errors: list[str] = []

    def on_error(err: Any) -> None:
        errors.append(str(err))

    conf = _common(params) | {
        "acks": params["acks"],
        "linger.ms": params.get("linger_ms", 5),
        "batch.size": params.get("batch_size", 1_000_000),
        "compression.type": "none",
        "enable.idempotence": False,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 4 * 1024 * 1024,
        # only failed deliveries come back to Python: no per-record callback cost in the client
        "delivery.report.only.error": True,
        "error_cb": on_error,
    }
    failed = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal failed
        if err is not None:
            failed += 1
            if len(errors) < 5:
                errors.append(str(err))

    producer = Producer(conf)
    topic, count, size = params["topic"], params["messages"], params["size"]
    deadline = time.monotonic() + params["timeout"]
    try:
        producer.list_topics(topic, timeout=10)
    except KafkaException as exc:
        return {"ok": False, "error": f"metadata: {exc}"}
    payload = os.urandom(size)
    broker0, cpu0, t0 = _broker_cpu(params), _cpu(), time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for i in range(count):
        while True:
            try:
                produce(topic, payload, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.005)
                if time.monotonic() > deadline:
                    return {"ok": False, "error": f"timed out after {i} records (queue full)"}
        if not i & 1023:
            poll(0)
    remaining = producer.flush(max(0.1, deadline - time.monotonic()))
    elapsed = time.perf_counter() - t0
    cpu, broker_cpu = _cpu() - cpu0, _broker_cpu_delta(params, broker0)
    if remaining or failed:
        return {
            "ok": False,
            "error": f"{remaining} undelivered, {failed} failed: "
            + ("; ".join(errors[:3]) or _last_client_log()),
        }
    return {
        "ok": True,
        "seconds": elapsed,
        "messages": count,
        "bytes": count * size,
        "client_cpu": cpu,
        "broker_cpu": broker_cpu,
    }


def _consumer_conf(params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return _common(params) | {
        "group.id": params.get("group_id") or f"kafkacompat-bench-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        **extra,
    }


def _consume(params: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s by default) whenever its local queue is
    # full, i.e. whenever the application is momentarily slower than the broker: the throughput workload
    # sets it to 1 ms so the figure is the broker's; one of the large-partition reads keeps the default
    backoff = params.get("fetch_queue_backoff_ms")
    extra = {} if backoff is None else {"fetch.queue.backoff.ms": backoff}
    consumer = Consumer(_consumer_conf(params, **extra))
    topic, count, size = params["topic"], params["messages"], params.get("size")
    deadline = time.monotonic() + params["timeout"]
    try:
        consumer.list_topics(topic, timeout=10)
        broker0, cpu0, t0 = _broker_cpu(params), _cpu(), time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = 0
        nbytes = 0
        errors: list[str] = []
        stall = params.get("stall", 20.0)
        progress_at = time.monotonic()
        pauses, paused = 0, 0.0
        while got < count and time.monotonic() < deadline:
            # never ask for more than are left: consume() waits for the full batch or the timeout
            asked, called = min(10_000, count - got), time.monotonic()
            batch = consumer.consume(num_messages=asked, timeout=0.5)
            # one C call per record: the Python loop is the client's bottleneck at several hundred MB/s,
            # so sizes come from the workload (all records of a run have the same size) when known
            before = got
            for msg in batch:
                if msg.error() is None:
                    got += 1
                elif len(errors) < 3:
                    errors.append(str(msg.error()))
            if size is not None:
                nbytes += (got - before) * size
            else:
                nbytes += sum(len(msg) for msg in batch if msg.error() is None)
            now = time.monotonic()
            if len(batch) < asked and now - called >= PAUSE_SECONDS:
                # the data is all there (the partition was loaded first), so a call that waited this
                # long and still came back short was waiting out the client's fetch back-off
                pauses += 1
                paused += now - called
            if batch:
                progress_at = now
            elif now - progress_at > stall:
                errors.append(f"no record for {stall:.0f} s; client log: {_last_client_log()}")
                break
        elapsed = time.perf_counter() - t0
        cpu, broker_cpu = _cpu() - cpu0, _broker_cpu_delta(params, broker0)
    except KafkaException as exc:
        return {"ok": False, "error": str(exc)}
    finally:
        consumer.close()
    if got < count:
        return {"ok": False, "error": f"read {got} of {count} records; {'; '.join(errors)}"}
    return {
        "ok": True,
        "seconds": elapsed,
        "messages": got,
        "bytes": nbytes,
        "client_cpu": cpu,
        "broker_cpu": broker_cpu,
        "pauses": pauses,
        "paused_seconds": paused,
    }


def _e2e_producer(params: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Producer

    conf = _common(params) | {"acks": params.get("acks", "1"), "linger.ms": 0, "enable.idempotence": False}
    producer = Producer(conf)
    topic, rate, size = params["topic"], params["rate"], params["size"]
    warmup, count = params["warmup"], params["messages"]
    producer.list_topics(topic, timeout=10)
    if not params["ready"].wait(30):
        return {"ok": False, "error": "the consumer never became ready"}
    padding = b"\x00" * max(0, size - E2E_HEADER.size)
    acked: list[float] = []  # produce() -> delivery report, ms: the producer's share of the latency

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            sent, _seq, warm = E2E_HEADER.unpack_from(msg.value())
            if not warm:
                # seen at the next poll: up to one send interval after the acknowledgement arrived
                acked.append((time.time_ns() - sent) / 1e6)

    broker0, cpu0 = _broker_cpu(params), _cpu()
    started_at = time.time()
    start = time.perf_counter()
    interval = 1.0 / rate
    total = warmup + count
    for seq in range(total):
        due = start + seq * interval
        while True:
            now = time.perf_counter()
            if now >= due:
                break
            if due - now > 0.002:
                producer.poll(0.001)  # serve delivery reports meanwhile (librdkafka waits in whole ms)
            else:
                # sleep, never spin: a sender spinning on poll(0) keeps a core busy for the whole run,
                # and on a small machine the broker and the consumer then wait for CPU
                time.sleep(due - now)
        value = E2E_HEADER.pack(time.time_ns(), seq, 1 if seq < warmup else 0) + padding
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    remaining = producer.flush(15)
    elapsed = time.perf_counter() - start
    return {
        "ok": remaining == 0,
        "error": f"{remaining} undelivered" if remaining else None,
        "seconds": elapsed,
        "messages": total,
        "achieved_rate": total / elapsed if elapsed else 0.0,
        "started_at": started_at,  # wall clock of the first (warm-up) send: lines the run up with logs
        "ack_latencies_ms": acked,
        "client_cpu": _cpu() - cpu0,
        "broker_cpu": _broker_cpu_delta(params, broker0),
    }


def _e2e_consumer(params: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(_consumer_conf(params))
    topic = params["topic"]
    expected = params["warmup"] + params["messages"]
    consumer.list_topics(topic, timeout=10)
    consumer.assign([TopicPartition(topic, 0, 0)])
    # a few empty polls so the fetcher is connected and waiting before the producer starts
    settle = time.monotonic() + 0.5
    while time.monotonic() < settle:
        consumer.poll(0.05)
    params["ready"].set()
    latencies: list[float] = []
    seen = 0
    deadline = time.monotonic() + params["timeout"]
    cpu0 = _cpu()
    while seen < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is None or msg.error() is not None:
            continue
        received = time.time_ns()
        sent, _seq, warm = E2E_HEADER.unpack_from(msg.value())
        seen += 1
        if not warm:
            latencies.append((received - sent) / 1e6)
    cpu = _cpu() - cpu0
    consumer.close()
    return {
        "ok": seen >= expected,
        "error": None if seen >= expected else f"received {seen} of {expected}",
        "latencies_ms": latencies,
        "client_cpu": cpu,
    }


def _group_member(params: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Consumer

    index = params["index"]
    counts = params["counts"]
    events: list[tuple[float, str, int]] = []

    def on_assign(consumer: Any, partitions: list[Any]) -> None:
        events.append((time.time(), "assign", len(partitions)))
        counts[index] = len(partitions)

    def on_revoke(consumer: Any, partitions: list[Any]) -> None:
        events.append((time.time(), "revoke", len(partitions)))
        counts[index] = 0

    settled = False

    def on_stats(raw: str) -> None:
        nonlocal settled
        if not settled:
            settled = json.loads(raw).get("cgrp", {}).get("state") == "up"

    consumer = Consumer(
        _consumer_conf(
            params,
            **{
                "partition.assignment.strategy": "range",
                "session.timeout.ms": 10_000,
                "statistics.interval.ms": SETTLE_STATS_INTERVAL_MS,
                "stats_cb": on_stats,
            },
        )
    )
    consumer.list_topics(params["topic"], timeout=10)
    # A consumer looks up its group coordinator as soon as it is created, not at subscribe(). librdkafka
    # (>= 2.10) closes its bootstrap connection once the connection to the broker learned from Metadata
    # is up, and a FindCoordinator still in flight on it fails and is retried tens of ms later: enough
    # for that member to miss the first generation and for the others to learn of its join only at
    # their next heartbeat (3 s). So the start signal waits until every member's client has finished
    # its own start-up (coordinator known and connected); the clock then covers the group protocol.
    settle_deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
    while not settled and time.monotonic() < settle_deadline:
        consumer.poll(0.005)
    params["ready"][index].set()
    if not params["go"].wait(30):
        consumer.close()
        return {"ok": False, "error": "no start signal"}
    subscribed = time.time()
    consumer.subscribe([params["topic"]], on_assign=on_assign, on_revoke=on_revoke)
    deadline = time.monotonic() + params["timeout"]
    while not params["stop"].is_set() and time.monotonic() < deadline:
        consumer.poll(0.01)
    consumer.close()
    return {"ok": True, "subscribed": subscribed, "settled": settled, "events": events}


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "produce": _produce,
    "consume": _consume,
    "e2e_producer": _e2e_producer,
    "e2e_consumer": _e2e_consumer,
    "group_member": _group_member,
}


def _entry(conn: Connection, kind: str, params: dict[str, Any]) -> None:
    try:
        result = WORKERS[kind](params)
    except Exception as exc:  # reported to the runner, which prints it next to the workload
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    conn.send(result)
    conn.close()


def context() -> Any:
    """The multiprocessing context the workers run in (for the events and arrays they share)."""
    return _CONTEXT


def run_workers(
    jobs: list[tuple[str, dict[str, Any]]],
    timeout: float,
    while_running: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Start one process per (kind, params), wait for all, return their results in order.

    `while_running` (if given) is called once after every process has started, in this process,
    e.g. to release a start signal and watch shared state. A process still running `timeout` seconds
    after the start is terminated and gives {"ok": False, "error": "timed out"}.
    """
    started = []
    for kind, params in jobs:
        parent, child = _CONTEXT.Pipe(duplex=False)
        process = _CONTEXT.Process(target=_entry, args=(child, kind, params), daemon=True)
        process.start()
        child.close()
        started.append((process, parent))
    if while_running is not None:
        while_running()
    deadline = time.monotonic() + timeout
    results = []
    for process, parent in started:
        result: dict[str, Any]
        if parent.poll(max(0.0, deadline - time.monotonic())):
            try:
                result = parent.recv()
            except EOFError:
                result = {"ok": False, "error": "worker died"}
        else:
            result = {"ok": False, "error": "timed out"}
        process.join(5)
        if process.is_alive():
            process.terminate()
            process.join(5)
        if process.exitcode not in (0, None) and result.get("ok"):
            result = {"ok": False, "error": f"worker exited with {process.exitcode}"}
        results.append(result)
    return results
