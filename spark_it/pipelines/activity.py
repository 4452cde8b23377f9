"""Website activity tracking: page views -> per-page counts in event-time windows.

Theory of operation: every source record's value is a JSON page-view event
(`{"user_id", "session_id", "page", "ts", "referrer", "user_agent", "country"}`, extra fields ignored).
`parse()` turns Kafka rows into typed events; the event time is `ts` (ISO-8601 or epoch
milliseconds), or the Kafka record timestamp when `ts` is missing or unreadable. Records whose value
is not a JSON object with a page are dropped.

`transform()` counts views and approximate distinct users per page in tumbling (or, with `slide`,
sliding) windows under a watermark: in append mode a window's row is written once, when the watermark
(the largest event time seen, minus the allowed lateness) passes the window's end; events older than
the watermark are dropped. Output: key = page, value = JSON
`{"page", "window_start", "window_end", "views", "unique_users"}` with UTC ISO window bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spark_it.pipelines.common import event_time, run, window_json

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["activity_schema", "main", "parse", "transform"]

SOURCE_TOPIC = "page-views"
SINK_TOPIC = "page-view-counts"


def activity_schema() -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    names = ("user_id", "session_id", "page", "ts", "referrer", "user_agent", "country")
    return StructType([StructField(name, StringType()) for name in names])


def parse(source: DataFrame) -> DataFrame:
    """Kafka rows -> one row per readable page view, with an `event_time` timestamp column."""
    from pyspark.sql import functions as F

    event = F.from_json(F.col("value").cast("string"), activity_schema())
    return (
        source.select(event.alias("e"), F.col("timestamp").alias("kafka_timestamp"))
        .select("e.*", event_time(F.col("e.ts"), F.col("kafka_timestamp")).alias("event_time"))
        .where(F.col("page").isNotNull() & (F.col("page") != ""))
        .drop("ts")
    )


def transform(
    source: DataFrame,
    *,
    window: str = "1 minute",
    watermark: str = "30 seconds",
    slide: str | None = None,
) -> DataFrame:
    """Kafka rows -> sink rows (key page, value JSON window counts)."""
    from pyspark.sql import functions as F

    counts = (
        parse(source)
        .withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window, slide).alias("window"), F.col("page"))
        .agg(F.count(F.lit(1)).alias("views"), F.approx_count_distinct("user_id").alias("unique_users"))
    )
    return counts.select(
        F.col("page").alias("key"), window_json("page", "views", "unique_users").alias("value")
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run(
        argv,
        name="activity",
        description="Per-page view counts in event-time windows, Kafka to Kafka.",
        source_topic=SOURCE_TOPIC,
        sink_topic=SINK_TOPIC,
        transform=transform,
    )


if __name__ == "__main__":
    raise SystemExit(main())
