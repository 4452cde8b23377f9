"""Log aggregation: log lines -> counts per service and level in event-time windows.

Theory of operation: every source record's value is one log line,
`<timestamp> key=value ... msg=<free text to the end of the line>`, e.g.
`2026-11-22T10:00:00Z service=api level=ERROR msg=upstream timed out`. `parse()` extracts the leading
timestamp (ISO-8601 or epoch ms; the Kafka record timestamp when there is none), `service`, `level`
(upper-cased) and `msg`; lines without a service or level are dropped.

`transform()` counts lines per (service, level) in tumbling event-time windows under a watermark; in
append mode each window's row is written once, when the watermark passes the window's end. Output:
key = service, value = JSON `{"service", "window_start", "window_end", "level", "count"}`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from spark_it.pipelines.common import event_time, run, window_json

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["main", "parse", "transform"]

SOURCE_TOPIC = "app-logs"
SINK_TOPIC = "log-metrics"


def _field(line: Column, name: str, pattern: str = r"(\S+)") -> Column:
    from pyspark.sql import functions as F

    value = F.regexp_extract(line, rf"(?:^|\s){name}={pattern}", 1)
    return F.when(value != "", value)


def parse(source: DataFrame) -> DataFrame:
    """Kafka rows -> one row per readable log line: event_time, service, level, msg."""
    from pyspark.sql import functions as F

    line = F.col("line")
    first_token = F.regexp_extract(line, r"^\s*(\S+)", 1)
    return (
        source.select(
            F.col("value").cast("string").alias("line"), F.col("timestamp").alias("kafka_timestamp")
        )
        .select(
            event_time(first_token, F.col("kafka_timestamp")).alias("event_time"),
            _field(line, "service").alias("service"),
            F.upper(_field(line, "level")).alias("level"),
            _field(line, "msg", r"(.*)$").alias("msg"),
        )
        .where(F.col("service").isNotNull() & F.col("level").isNotNull())
    )


def transform(
    source: DataFrame,
    *,
    window: str = "1 minute",
    watermark: str = "30 seconds",
) -> DataFrame:
    """Kafka rows -> sink rows (key service, value JSON window counts per level)."""
    from pyspark.sql import functions as F

    counts = (
        parse(source)
        .withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window).alias("window"), F.col("service"), F.col("level"))
        .agg(F.count(F.lit(1)).alias("count"))
    )
    return counts.select(
        F.col("service").alias("key"), window_json("service", "level", "count").alias("value")
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run(
        argv,
        name="logs",
        description="Log-line counts per service and level in event-time windows, Kafka to Kafka.",
        source_topic=SOURCE_TOPIC,
        sink_topic=SINK_TOPIC,
        transform=transform,
    )


if __name__ == "__main__":
    raise SystemExit(main())
