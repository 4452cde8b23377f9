"""The pipelines as streams: watermark eviction, late data, restart from a checkpoint, sink wiring.

The source is a file stream of Kafka-shaped rows (helpers.kafka_shaped_stream), which like Kafka
records its progress in the checkpoint, so a restarted query reads only files it has not seen; the
sink is the json file sink, which (unlike the memory sink) can resume from a checkpoint. Both runs
use trigger(availableNow=True), which processes what is there, then runs one more batch with no
data so the advanced watermark can close windows, and stops.

Append-mode rule under test: a window's row is written once, when the watermark (the largest event
time seen so far minus the allowed delay, as of the end of the previous batch) reaches the window's
end; a later event for an already-closed window is dropped.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spark_it._tests.helpers import (
    REPO,
    closed_windows,
    kafka_row,
    kafka_shaped_stream,
    load_loadgen,
    read_json_sink,
    utc_ms,
    write_kafka_json,
)
from spark_it.pipelines import activity
from spark_it.pipelines.common import wire


def view(offset: int, page: str, ts: str, user: str) -> tuple[Any, ...]:
    value = json.dumps({"user_id": user, "page": page, "ts": ts}).encode()
    return kafka_row(value, key=user.encode(), offset=offset, timestamp_ms=utc_ms(ts))


def run_available_now(
    spark: Any, source_dir: Path, out: Path, checkpoint: Path
) -> list[tuple[str, str, int]]:
    """One availableNow run of the activity pipeline; the rows it added to the sink."""
    before = {json.dumps(r, sort_keys=True) for r in read_json_sink(out)}
    result = activity.transform(
        kafka_shaped_stream(spark, source_dir), window="1 minute", watermark="10 seconds"
    )
    query = wire(
        result, sink="json", path=str(out), checkpoint=str(checkpoint), trigger="availableNow"
    ).start()
    assert query.awaitTermination(60), "availableNow query did not finish"
    assert query.exception() is None
    added = [r for r in read_json_sink(out) if json.dumps(r, sort_keys=True) not in before]
    rows = []
    for row in added:
        value = json.loads(row["value"])
        assert row["key"] == value["page"]
        rows.append((value["page"], value["window_start"][11:16], value["views"]))
    return sorted(rows)


def test_watermark_closes_windows_and_restart_reads_only_new_input(spark: Any, tmp_path: Path) -> None:
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    write_kafka_json(
        source,
        "001",
        [
            view(0, "/a", "2026-11-22T10:00:05Z", "u1"),
            view(1, "/a", "2026-11-22T10:00:50Z", "u2"),
            view(2, "/b", "2026-11-22T10:00:55Z", "u1"),
            view(3, "/a", "2026-11-22T10:01:10Z", "u3"),
            view(4, "/b", "2026-11-22T10:01:15Z", "u2"),
            kafka_row(b"{broken", offset=5),
        ],
    )
    # Largest event time 10:01:15, delay 10 s: watermark 10:01:05 closes [10:00, 10:01) only.
    assert run_available_now(spark, source, out, checkpoint) == [("/a", "10:00", 2), ("/b", "10:00", 1)]

    write_kafka_json(
        source,
        "002",
        [
            view(6, "/a", "2026-11-22T10:00:30Z", "u4"),  # older than the watermark: dropped
            view(7, "/a", "2026-11-22T10:01:40Z", "u1"),
            view(8, "/c", "2026-11-22T10:02:30Z", "u5"),
            view(9, "/a", "2026-11-22T10:02:20Z", "u2"),
        ],
    )
    # Restarted from the checkpoint: file 001 is not read again, windows already written are not
    # written again, and [10:01, 10:02) now closes (watermark 10:02:20) with the state kept from run 1.
    assert run_available_now(spark, source, out, checkpoint) == [("/a", "10:01", 2), ("/b", "10:01", 1)]

    # Nothing new: a third run writes nothing.
    assert run_available_now(spark, source, out, checkpoint) == []


def test_wire_validates_its_sink(spark: Any, tmp_path: Path) -> None:
    stream = kafka_shaped_stream(spark, tmp_path)
    result = activity.transform(stream)
    common = {"checkpoint": str(tmp_path / "c"), "trigger": "availableNow"}
    with pytest.raises(ValueError, match="bootstrap"):
        wire(result, sink="kafka", sink_topic="t", **common)
    with pytest.raises(ValueError, match="query name"):
        wire(result, sink="memory", **common)
    with pytest.raises(ValueError, match="path"):
        wire(result, sink="json", **common)
    with pytest.raises(ValueError, match="sink must be"):
        wire(result, sink="parquet", **common)
    with pytest.raises(ValueError, match="lacks column"):
        wire(stream.select("value"), sink="console", **common)
    with pytest.raises(ValueError):
        wire(result, sink="console", checkpoint=str(tmp_path / "c"), trigger="continuous")
    # A complete kafka wiring builds a writer without touching any broker (nothing is started).
    writer = wire(result, sink="kafka", bootstrap="127.0.0.1:1", sink_topic="t", **common)
    assert type(writer).__name__ == "DataStreamWriter"


def test_memory_sink_update_mode_reports_running_counts(spark: Any, tmp_path: Path) -> None:
    """Update mode emits a window's current count every batch it changes (no waiting for the watermark)."""
    source = tmp_path / "in"
    write_kafka_json(
        source,
        "001",
        [view(0, "/a", "2026-11-22T10:00:05Z", "u1"), view(1, "/a", "2026-11-22T10:00:06Z", "u2")],
    )
    result = activity.transform(kafka_shaped_stream(spark, source), watermark="1 hour")
    query = wire(
        result,
        sink="memory",
        query_name="activity_update",
        output_mode="update",
        checkpoint=str(tmp_path / "c"),
        trigger="availableNow",
    ).start()
    assert query.awaitTermination(60)
    rows = [json.loads(r["value"]) for r in spark.table("activity_update").collect()]
    assert [(r["page"], r["window_start"], r["views"]) for r in rows] == [
        ("/a", "2026-11-22T10:00:00.000Z", 2)
    ]


def test_pipeline_main_without_connector_explains_how_to_enable_it(tmp_path: Path) -> None:
    """A pipeline started where the connector is not on the class path exits 2 and says why. The shared
    session may carry the connector, so this runs in its own process (and JVM), with the connector
    pointed at an empty directory."""
    import subprocess
    import sys

    empty = tmp_path / "no-jars"
    empty.mkdir()
    env = {**os.environ, "KAFKACOMPAT_SPARK_JARS": str(empty), "PYTHONPATH": str(REPO)}
    argv = ["--bootstrap", "127.0.0.1:1", "--checkpoint", str(tmp_path / "c"), "--master", "local[1]"]
    result = subprocess.run(
        [sys.executable, "-m", "spark_it.pipelines.activity", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "the Kafka connector is not on Spark's class path" in result.stderr
    assert f"KAFKACOMPAT_SPARK_JARS={empty} lacks" in result.stderr


def test_generated_traffic_in_many_micro_batches_matches_the_append_model(spark: Any, tmp_path: Path) -> None:
    """Loadgen events arriving over several micro-batches (one file each): the rows written are exactly
    the windows the final watermark closed, each once, with full counts. The same model is what
    test_kafka_integration expects from the Kafka source."""
    loadgen = load_loadgen()
    events = list(
        loadgen.events(
            "activity", seed=21, count=600, start_ms=utc_ms("2026-11-22T10:00:00Z"), spacing_ms=400
        )
    )
    source, out = tmp_path / "in", tmp_path / "out"
    for n in range(4):
        chunk = events[n * 150 : (n + 1) * 150]
        rows = [
            kafka_row(e.value, key=e.key, offset=n * 150 + i, timestamp_ms=e.timestamp_ms)
            for i, e in enumerate(chunk)
        ]
        write_kafka_json(source, f"{n:03d}", rows)
    stream = spark.readStream.option("maxFilesPerTrigger", 1)
    frame = kafka_shaped_stream(spark, source, reader=stream)
    result = activity.transform(frame, window="1 minute", watermark="30 seconds")
    query = wire(
        result, sink="json", path=str(out), checkpoint=str(tmp_path / "c"), trigger="availableNow"
    ).start()
    assert query.awaitTermination(60)
    assert sum(p.numInputRows for p in query.recentProgress) == 600
    assert len([p for p in query.recentProgress if p.numInputRows]) == 4

    watermark = max(e.timestamp_ms for e in events) - 30_000
    expected = closed_windows(events, watermark, lambda e: (json.loads(e.value)["page"],))
    written = [json.loads(r["value"]) for r in read_json_sink(out)]
    got = Counter({(v["page"], utc_ms(v["window_start"])): v["views"] for v in written})
    assert len(written) == len(got) == len(expected)
    assert got == expected
