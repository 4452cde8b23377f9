"""Both pipelines end to end: tools/loadgen.py feeds them through a kafkacompat broker (`make spark-demo`).

Theory of operation: the demo does what a user would do by hand, in one command. It starts a broker
in a child process with its data in a temporary directory (or uses `--bootstrap`), starts the
activity and log pipelines as streaming queries in one local Spark session (Kafka source, the
pipeline's transform, Kafka sink, a checkpoint each, a processing-time trigger), and while they run
it starts two `tools/loadgen.py` processes, one per source topic, exactly as the README's worked
example runs them. When the generators are done it waits until each query has read up to the end of
its source topic (the offsets of its last micro-batch equal the topic's high watermarks), stops the
queries and prints a report per pipeline: records loadgen delivered, rows Spark read, rows the
pipeline wrote (Spark's count and what the sink topic holds), the lag left at the end (offsets
behind the source's end; 0 when caught up), the largest lag sampled while loadgen ran (the source
topic's end offsets minus the offsets of the query's last micro-batch), batches and seconds.

`run_demo()` is the part that needs only a session and a broker; the test suite calls it with its
shared session and a fixture broker, `main()` adds the broker, the session and the command line.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_it.pipelines import activity, logs
from spark_it.pipelines.common import build_parser, read_kafka_stream, wire

__all__ = ["PipelineReport", "format_report", "main", "run_demo"]

REPO = Path(__file__).resolve().parents[1]
LOADGEN = REPO / "tools" / "loadgen.py"
SIMULATED_START = "2026-11-22T10:00:00Z"
_LOADGEN_SUMMARY = re.compile(r"loadgen: \w+ -> \S+: records=(\d+) failed=(\d+)")


@dataclass(frozen=True, slots=True)
class Pipeline:
    name: str
    kind: str  # loadgen's --kind
    source_topic: str
    sink_topic: str
    transform: Callable[..., Any]


PIPELINES = (
    Pipeline("activity", "activity", activity.SOURCE_TOPIC, activity.SINK_TOPIC, activity.transform),
    Pipeline("logs", "logs", logs.SOURCE_TOPIC, logs.SINK_TOPIC, logs.transform),
)


@dataclass(frozen=True, slots=True)
class PipelineReport:
    name: str
    source_topic: str
    sink_topic: str
    produced: int  # records loadgen had acknowledged
    rows_in: int  # rows Spark read from the source topic
    rows_out: int  # rows the Kafka sink reported writing
    sink_records: int  # records the sink topic gained
    lag_end: int  # offsets behind the source topic's end when the query stopped
    lag_peak: int  # the largest lag sampled (every half second) while loadgen ran
    batches: int
    seconds: float


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)  # kept alive until the future resolves
    future = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=15)[topic]
    try:
        future.result(20)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> high watermark (the next offset to be written), from the broker."""
    from confluent_kafka import Consumer, TopicPartition

    admin = _admin(bootstrap)
    metadata = admin.list_topics(topic, timeout=10).topics[topic]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-demo-watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in sorted(metadata.partitions)
        }
    finally:
        consumer.close()


def _source_progress(progress: Any) -> dict[str, Any]:
    """A micro-batch's first (only) source progress as the JVM's JSON has it (pyspark's attribute
    view turns the offset documents into Python reprs)."""
    sources = json.loads(progress.json).get("sources") or [{}]
    return sources[0]


def _end_offsets(query: Any, topic: str) -> dict[int, int]:
    """The offsets the query's last micro-batch read up to, per partition of `topic`."""
    progress = query.lastProgress
    if not progress:
        return {}
    end = _source_progress(progress).get("endOffset")
    document = json.loads(end) if isinstance(end, str) else end
    return {int(p): int(o) for p, o in (document or {}).get(topic, {}).items()}


def _loadgen(
    pipeline: Pipeline, bootstrap: str, count: int, rate: float | None, partitions: int, seed: int
) -> subprocess.Popen[str]:
    argv = [
        sys.executable, str(LOADGEN), "--kind", pipeline.kind, "--bootstrap", bootstrap,
        "--topic", pipeline.source_topic, "--partitions", str(partitions), "--count", str(count),
        "--seed", str(seed), "--clock", "simulated", "--start", SIMULATED_START, "--spacing-ms", "100",
        "--late-fraction", "0.02", "--quiet",
    ]  # fmt: skip
    if rate is not None:
        argv += ["--rate", str(rate)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_demo(
    spark: Any,
    bootstrap: str,
    *,
    count: int,
    rate: float | None,
    checkpoints: Path,
    partitions: int = 3,
    trigger: str = "processingTime=1 second",
    timeout: float = 300.0,
    log: Callable[[str], None] = lambda _line: None,
) -> list[PipelineReport]:
    """Run both pipelines while loadgen feeds them; the report once they have caught up."""
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")  # keep every batch's progress
    for pipeline in PIPELINES:
        _ensure_topic(bootstrap, pipeline.source_topic, partitions)
        _ensure_topic(bootstrap, pipeline.sink_topic, 1)

    # Start where the topics end now, so a reused broker's older records are not counted (on a fresh
    # broker this is offset 0 everywhere, i.e. earliest); the sink's count is taken as a difference.
    starts = {p.name: high_watermarks(bootstrap, p.source_topic) for p in PIPELINES}
    sinks_before = {p.name: sum(high_watermarks(bootstrap, p.sink_topic).values()) for p in PIPELINES}
    started = time.monotonic()
    queries: dict[str, Any] = {}
    try:
        for pipeline in PIPELINES:
            args = build_parser(
                pipeline.name, source_topic=pipeline.source_topic, sink_topic=pipeline.sink_topic
            ).parse_args(
                [
                    "--bootstrap",
                    bootstrap,
                    "--checkpoint",
                    str(checkpoints / pipeline.name),
                    "--starting-offsets",
                    json.dumps({pipeline.source_topic: starts[pipeline.name]}),
                ]
            )
            result = pipeline.transform(
                read_kafka_stream(spark, args), window="1 minute", watermark="30 seconds"
            )
            queries[pipeline.name] = wire(
                result,
                sink="kafka",
                checkpoint=args.checkpoint,
                trigger=trigger,
                bootstrap=bootstrap,
                sink_topic=pipeline.sink_topic,
                query_name=f"demo_{pipeline.name}",
            ).start()
            log(f"spark-demo: {pipeline.name}: {pipeline.source_topic} -> {pipeline.sink_topic} started")

        generators = {
            p.name: _loadgen(p, bootstrap, count, rate, partitions, seed=i + 1)
            for i, p in enumerate(PIPELINES)
        }
        log(
            f"spark-demo: loadgen producing {count:,} records to each source topic"
            + (f" at {rate:,.0f}/s" if rate else "")
        )
        deadline = time.monotonic() + timeout
        peaks = dict.fromkeys(queries, 0)

        def sample_lag() -> dict[str, int]:
            """Consumer lag as an operator sees it: the source topic's end minus where the query is."""
            lags = {}
            for p in PIPELINES:
                read_to = _end_offsets(queries[p.name], p.source_topic)
                lags[p.name] = sum(
                    end - read_to.get(partition, starts[p.name].get(partition, 0))
                    for partition, end in high_watermarks(bootstrap, p.source_topic).items()
                )
                peaks[p.name] = max(peaks[p.name], lags[p.name])
            for name, query in queries.items():
                if not query.isActive:
                    raise RuntimeError(f"pipeline {name} stopped: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the pipelines did not catch up in {timeout:.0f} s (lag {lags})")
            return lags

        last_log = time.monotonic()
        while any(process.poll() is None for process in generators.values()):
            lags = sample_lag()
            if time.monotonic() - last_log >= 2.0:
                log("spark-demo: lag " + " ".join(f"{name}={lag:,}" for name, lag in lags.items()))
                last_log = time.monotonic()
            time.sleep(0.5)
        produced: dict[str, int] = {}
        for name, process in generators.items():
            output, _ = process.communicate()
            match = _LOADGEN_SUMMARY.search(output)
            if process.returncode != 0 or match is None:
                raise RuntimeError(f"loadgen for {name} failed ({process.returncode}): {output[-2000:]}")
            produced[name] = int(match.group(1))
            log(f"spark-demo: {output.strip().splitlines()[-1]}")

        # Caught up: nothing left to read and no micro-batch half done.
        while any(sample_lag().values()) or any(q.status["isTriggerActive"] for q in queries.values()):
            time.sleep(0.2)
        lag_end = sample_lag()
    finally:
        for query in queries.values():
            query.stop()
    seconds = time.monotonic() - started

    reports = []
    for pipeline in PIPELINES:
        query = queries[pipeline.name]
        progress = query.recentProgress
        reports.append(
            PipelineReport(
                name=pipeline.name,
                source_topic=pipeline.source_topic,
                sink_topic=pipeline.sink_topic,
                produced=produced[pipeline.name],
                rows_in=sum(p.numInputRows for p in progress),
                rows_out=sum(max(p.sink.numOutputRows, 0) for p in progress),
                sink_records=sum(high_watermarks(bootstrap, pipeline.sink_topic).values())
                - sinks_before[pipeline.name],
                lag_end=lag_end[pipeline.name],
                lag_peak=peaks[pipeline.name],
                batches=len(progress),
                seconds=seconds,
            )
        )
    return reports


def format_report(reports: Sequence[PipelineReport]) -> str:
    header = (
        "pipeline",
        "source -> sink",
        "produced",
        "rows in",
        "rows out",
        "in sink",
        "lag end",
        "lag peak",
        "batches",
    )
    rows = [
        (
            r.name,
            f"{r.source_topic} -> {r.sink_topic}",
            f"{r.produced:,}",
            f"{r.rows_in:,}",
            f"{r.rows_out:,}",
            f"{r.sink_records:,}",
            f"{r.lag_end:,}",
            f"{r.lag_peak:,}",
            str(r.batches),
        )
        for r in reports
    ]
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in (header, *rows)
    ]
    seconds = max((r.seconds for r in reports), default=0.0)
    lines.append(f"(wall time {seconds:.1f} s; lag = offsets behind the source topic's end)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap", default=None, help="use this broker (default: start one in a temp dir)"
    )
    parser.add_argument("--count", type=int, default=20_000, help="records loadgen produces per pipeline")
    parser.add_argument(
        "--rate", type=float, default=4_000, help="records per second per loadgen (0: unpaced)"
    )
    parser.add_argument("--trigger", default="processingTime=1 second", help="the pipelines' trigger")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)

    from spark_it.session import build_session, connector_config

    config, reason = connector_config()
    if config is None:
        print(f"spark-demo: {reason}", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="kafkacompat-spark-demo-") as tmp:
        broker = None
        bootstrap = args.bootstrap
        if bootstrap is None:
            from kafkacompat.local_brokers import BrokerProcess

            broker = BrokerProcess(Path(tmp) / "data").start()
            bootstrap = broker.bootstrap
            log(f"spark-demo: kafkacompat broker on {bootstrap} (data in {tmp}/data)")
        spark = build_session(
            "kafkacompat-spark-demo",
            master=args.master,
            extra={
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": "2",
            },
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            reports = run_demo(
                spark,
                bootstrap,
                count=args.count,
                rate=args.rate or None,
                checkpoints=Path(tmp) / "checkpoints",
                trigger=args.trigger,
                timeout=args.timeout,
                log=log,
            )
        finally:
            spark.stop()
            if broker is not None:
                broker.stop()
    print(format_report(reports))
    ok = all(r.rows_in == r.produced and r.lag_end == 0 and r.rows_out == r.sink_records for r in reports)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
