"""What every pipeline shares: the Kafka source row shape, JSON output, sink wiring and the CLI.

Theory of operation: a pipeline is a pure function `transform(source: DataFrame, **settings) ->
DataFrame`. Its input has exactly the columns Spark's Kafka source produces (`KAFKA_SOURCE_SCHEMA`,
headers included), so the same function runs on a `readStream.format("kafka")` frame, on a batch
`read.format("kafka")` frame, and in tests on local rows or a file stream of Kafka-shaped rows. Its
output has a string `key` and a string `value` column, which is what the Kafka sink takes.

`wire()` attaches a transformed frame to a sink (kafka; memory/json/console for tests and debugging)
with checkpoint, trigger and output mode, and returns the unstarted `DataStreamWriter`. `run()` is the
body of every pipeline's `main()`: parse flags, build the session, read Kafka, transform, wire, start,
wait, print a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spark_it.kafka_options import sink_options, source_options, trigger_kwargs

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

__all__ = [
    "JSON_OPTIONS",
    "event_time",
    "kafka_source_schema",
    "run",
    "window_json",
    "wire",
]

# Timestamps in the output JSON: ISO-8601 in UTC with milliseconds, e.g. 2026-11-22T10:00:00.000Z,
# whatever the session's time zone is.
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "timeZone": "UTC"}

SINKS = ("kafka", "memory", "console", "json")


def kafka_source_schema() -> Any:
    """The row shape of Spark's Kafka source with includeHeaders=true (a pyspark StructType)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField("headers", ArrayType(header)),
        ]
    )


def event_time(text: Column, fallback: Column) -> Column:
    """Event time from a string field: epoch milliseconds, or an ISO-8601 timestamp, else `fallback`.

    try_to_timestamp keeps bad input a null under ANSI mode (Spark 4's default) instead of failing
    the whole batch; the fallback is normally the Kafka record timestamp.
    """
    from pyspark.sql import functions as F

    millis = F.when(text.rlike(r"^[0-9]{1,15}$"), F.timestamp_millis(text.cast("long")))
    return F.coalesce(millis, F.try_to_timestamp(text), fallback)


def window_json(*fields: Column | str) -> Column:
    """`to_json(struct(...))` with the window flattened into window_start/window_end (UTC ISO)."""
    from pyspark.sql import functions as F

    columns = [
        *[F.col(f) if isinstance(f, str) else f for f in fields[:1]],
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *[F.col(f) if isinstance(f, str) else f for f in fields[1:]],
    ]
    return F.to_json(F.struct(*columns), JSON_OPTIONS)


def wire(
    result: DataFrame,
    *,
    sink: str,
    checkpoint: str,
    trigger: str,
    output_mode: str = "append",
    bootstrap: str | None = None,
    sink_topic: str | None = None,
    query_name: str | None = None,
    kafka_params: Mapping[str, str] | None = None,
    path: str | None = None,
) -> DataStreamWriter:
    """The unstarted writer for a transformed stream (call `.start()` on it).

    Sinks: kafka (needs bootstrap and sink_topic), memory (a table named query_name; cannot resume
    from a checkpoint), json (files under `path`; resumes, so restarts are testable without Kafka),
    console (debugging).
    """
    if sink not in SINKS:
        raise ValueError(f"sink must be one of {SINKS}, got {sink!r}")
    if output_mode not in ("append", "update", "complete"):
        raise ValueError(f"unknown output mode {output_mode!r}")
    missing = [c for c in ("key", "value") if c not in result.columns]
    if missing:
        raise ValueError(f"the transformed frame lacks column(s) {missing} the Kafka sink needs")
    writer = (
        result.writeStream.outputMode(output_mode)
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger_kwargs(trigger))  # type: ignore[arg-type]
    )
    if query_name:
        writer = writer.queryName(query_name)
    if sink == "kafka":
        if not bootstrap or not sink_topic:
            raise ValueError("the kafka sink needs bootstrap servers and a sink topic")
        options = sink_options(bootstrap, sink_topic, kafka_params=kafka_params)
        return writer.format("kafka").options(**options)
    if sink == "memory":
        if not query_name:
            raise ValueError("the memory sink needs a query name (the table it fills)")
        return writer.format("memory")
    if sink == "json":
        if not path:
            raise ValueError("the json sink needs a path")
        return writer.format("json").option("path", path)
    return writer.format("console").option("truncate", "false")


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser(description: str, *, source_topic: str, sink_topic: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap", default="localhost:9092", help="Kafka bootstrap servers")
    parser.add_argument("--source-topic", default=source_topic, help="topic(s) to read, comma-separated")
    parser.add_argument("--sink-topic", default=sink_topic, help="topic the results go to")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory (offsets, state)")
    parser.add_argument(
        "--trigger", default="availableNow", help="availableNow | once | processingTime=<interval>"
    )
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        help='earliest | latest | JSON {"topic":{"0":offset}} (new queries only; a restart resumes)',
    )
    parser.add_argument(
        "--starting-timestamp",
        type=int,
        default=None,
        help="start every partition at the first record with timestamp >= this (epoch ms)",
    )
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--fail-on-data-loss", type=_bool, default=True)
    parser.add_argument("--output-mode", choices=("append", "update"), default="append")
    parser.add_argument("--sink", choices=("kafka", "console"), default="kafka")
    parser.add_argument("--master", default=None, help="Spark master (default: spark-submit's choice)")
    parser.add_argument(
        "--kafka-param",
        type=_key_value,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra Kafka client setting for source and sink (kafka. prefix optional)",
    )
    parser.add_argument("--window", default="1 minute", help="event-time window length")
    parser.add_argument("--watermark", default="30 seconds", help="how late an event may arrive")
    return parser


def stream_source_options(args: argparse.Namespace) -> dict[str, str]:
    """The Kafka source options a pipeline's flags ask for (headers included)."""
    return source_options(
        args.bootstrap,
        streaming=True,
        subscribe=args.source_topic,
        starting_offsets=args.starting_offsets,
        starting_timestamp=args.starting_timestamp,
        fail_on_data_loss=args.fail_on_data_loss,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        include_headers=True,
        kafka_params=dict(args.kafka_param),
    )


def read_kafka_stream(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    return spark.readStream.format("kafka").options(**stream_source_options(args)).load()


def run(
    argv: Sequence[str] | None,
    *,
    name: str,
    description: str,
    source_topic: str,
    sink_topic: str,
    transform: Callable[..., DataFrame],
) -> int:
    """Parse flags, run the pipeline, print a summary line to stderr; the exit status."""
    from spark_it.session import build_session, connector_config

    args = build_parser(description, source_topic=source_topic, sink_topic=sink_topic).parse_args(argv)
    config, reason = connector_config()
    if config is None:
        print(f"note: {reason} (fine under spark-submit --packages/--jars)", file=sys.stderr)
    spark = build_session(name, master=args.master)
    spark.sparkContext.setLogLevel("WARN")
    try:
        source = read_kafka_stream(spark, args)
    except Exception as exc:
        if "Failed to find data source: kafka" not in str(exc):
            raise
        print(f"error: the Kafka connector is not on Spark's class path. {reason}", file=sys.stderr)
        return 2
    result = transform(source, window=args.window, watermark=args.watermark)
    writer = wire(
        result,
        sink=args.sink,
        checkpoint=args.checkpoint,
        trigger=args.trigger,
        output_mode=args.output_mode,
        bootstrap=args.bootstrap,
        sink_topic=args.sink_topic,
        query_name=name,
        kafka_params=dict(args.kafka_param),
    )
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    progress = query.recentProgress
    rows_in = sum(p.numInputRows for p in progress)
    rows_out = sum(max(p.sink.numOutputRows, 0) for p in progress)  # -1: the sink does not count
    summary = {"query": name, "batches": len(progress), "input_rows": rows_in, "output_rows": rows_out}
    print(json.dumps(summary), file=sys.stderr)
    return 0
