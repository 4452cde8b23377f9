"""The pipelines' pure transformations on local (batch) Kafka-shaped frames.

Batch frames run the same plan as a stream would, minus the watermark's state eviction (a batch has
no late data); eviction and late-data dropping are tested in test_streaming.py. Expected results are
computed here from the input by hand or by a plain-Python count, never taken from Spark's output.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from spark_it._tests.helpers import kafka_frame, kafka_row, load_loadgen, utc_ms
from spark_it.pipelines import activity, logs

MINUTE_MS = 60_000


def view(page: str, ts: Any, user: str = "u1", **extra: Any) -> bytes:
    return json.dumps({"user_id": user, "page": page, "ts": ts, **extra}).encode()


def decoded(rows: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return sorted(
        ((r["key"], json.loads(r["value"])) for r in rows), key=lambda kv: json.dumps(kv, sort_keys=True)
    )


def window_of(ms: int, loadgen: Any) -> tuple[str, str]:
    start = ms - ms % MINUTE_MS
    return loadgen.iso_millis(start), loadgen.iso_millis(start + MINUTE_MS)


def test_activity_counts_per_page_and_window(spark: Any) -> None:
    kafka_ts = utc_ms("2026-11-22T10:05:30Z")
    rows = [
        kafka_row(view("/a", "2026-11-22T10:00:05Z", "u1"), key=b"u1", offset=0),
        kafka_row(view("/a", "2026-11-22T10:00:59.999Z", "u2", referrer="x"), key=b"u2", offset=1),
        kafka_row(view("/a", "2026-11-22T10:00:30Z", "u1"), key=b"u1", offset=2),
        kafka_row(view("/b", "2026-11-22T10:01:00Z", "u1"), key=b"u1", offset=3),
        # epoch milliseconds are accepted as well
        kafka_row(view("/b", utc_ms("2026-11-22T10:01:10Z"), "u3"), key=b"u3", offset=4),
        # no usable ts: the Kafka record timestamp is the event time
        kafka_row(view("/c", "yesterday-ish", "u1"), offset=5, timestamp_ms=kafka_ts),
        kafka_row(json.dumps({"user_id": "u9", "page": "/c"}).encode(), offset=6, timestamp_ms=kafka_ts),
        # unreadable records are dropped, not fatal (ANSI mode is on in Spark 4)
        kafka_row(b"not json", offset=7),
        kafka_row(b"[1, 2]", offset=8),
        kafka_row(None, offset=9),
        kafka_row(json.dumps({"user_id": "u1", "ts": "2026-11-22T10:00:00Z"}).encode(), offset=10),
        kafka_row(view("", "2026-11-22T10:00:00Z"), offset=11),
    ]
    out = decoded(activity.transform(kafka_frame(spark, rows)).collect())

    def expect(page: str, start: str, end: str, views: int, users: int) -> tuple[str, dict[str, Any]]:
        value = {
            "page": page,
            "window_start": start,
            "window_end": end,
            "views": views,
            "unique_users": users,
        }
        return page, value

    assert out == decoded_expected(
        [
            expect("/a", "2026-11-22T10:00:00.000Z", "2026-11-22T10:01:00.000Z", 3, 2),
            expect("/b", "2026-11-22T10:01:00.000Z", "2026-11-22T10:02:00.000Z", 2, 2),
            expect("/c", "2026-11-22T10:05:00.000Z", "2026-11-22T10:06:00.000Z", 2, 2),
        ]
    )


def decoded_expected(pairs: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return sorted(pairs, key=lambda kv: json.dumps(kv, sort_keys=True))


def test_activity_sliding_windows_count_an_event_in_each_window(spark: Any) -> None:
    rows = [kafka_row(view("/a", "2026-11-22T10:00:45Z"), offset=0)]
    out = decoded(
        activity.transform(kafka_frame(spark, rows), window="1 minute", slide="30 seconds").collect()
    )
    starts = [v["window_start"] for _, v in out]
    assert starts == ["2026-11-22T10:00:00.000Z", "2026-11-22T10:00:30.000Z"]
    assert all(v["views"] == 1 for _, v in out)


def test_logs_parse_fields(spark: Any) -> None:
    fallback = utc_ms("2026-11-22T09:59:00Z")
    lines = [
        b"2026-11-22T10:00:00Z service=api level=ERROR msg=upstream timed out: a=b c",
        b"2026-11-22T10:00:01.5Z   host=h1 level=warn service=auth msg=slow",
        b"service=billing level=INFO msg=no leading time",
        b"2026-11-22T10:00:02Z service=api msg=no level",
        b"garbage",
    ]
    rows = [kafka_row(line, offset=i, timestamp_ms=fallback) for i, line in enumerate(lines)]
    parsed = logs.parse(kafka_frame(spark, rows)).orderBy("event_time").collect()
    got = [(r["service"], r["level"], r["msg"], int(r["event_time"].timestamp() * 1000)) for r in parsed]
    assert got == [
        ("billing", "INFO", "no leading time", fallback),
        ("api", "ERROR", "upstream timed out: a=b c", utc_ms("2026-11-22T10:00:00Z")),
        ("auth", "WARN", "slow", utc_ms("2026-11-22T10:00:01.5Z")),
    ]


def test_generated_events_through_both_pipelines(spark: Any) -> None:
    """loadgen's records are what the pipelines read: counts agree with a plain-Python count."""
    loadgen = load_loadgen()
    start = utc_ms("2026-11-22T10:00:00Z")
    views = list(loadgen.events("activity", seed=3, count=300, start_ms=start, spacing_ms=700))
    lines = list(loadgen.events("logs", seed=4, count=300, start_ms=start, spacing_ms=700))

    expected_views: Counter[tuple[str, tuple[str, str]]] = Counter()
    for event in views:
        record = json.loads(event.value)
        expected_views[(record["page"], window_of(event.timestamp_ms, loadgen))] += 1
    expected_lines: Counter[tuple[str, str, tuple[str, str]]] = Counter()
    for event in lines:
        text = event.value.decode()
        service = text.split(" service=", 1)[1].split(" ", 1)[0]
        level = text.split(" level=", 1)[1].split(" ", 1)[0]
        expected_lines[(service, level, window_of(event.timestamp_ms, loadgen))] += 1

    frame = kafka_frame(
        spark,
        [kafka_row(e.value, key=e.key, offset=i, timestamp_ms=e.timestamp_ms) for i, e in enumerate(views)]
        + [
            kafka_row(e.value, key=e.key, offset=i, timestamp_ms=e.timestamp_ms, topic="logs")
            for i, e in enumerate(lines)
        ],
    )
    activity_rows = activity.transform(frame.where("topic = 'src'")).collect()
    got_views = Counter()
    for row in activity_rows:
        value = json.loads(row["value"])
        assert row["key"] == value["page"]
        got_views[(value["page"], (value["window_start"], value["window_end"]))] += value["views"]
    assert got_views == expected_views

    log_rows = logs.transform(frame.where("topic = 'logs'")).collect()
    got_lines = Counter()
    for row in log_rows:
        value = json.loads(row["value"])
        assert row["key"] == value["service"]
        got_lines[(value["service"], value["level"], (value["window_start"], value["window_end"]))] += value[
            "count"
        ]
    assert got_lines == expected_lines
    assert (
        len(expected_lines) > 10 and len(expected_views) > 10
    )  # the data is varied enough to mean something
