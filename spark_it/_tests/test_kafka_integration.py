"""Spark's Kafka connector against a kafkacompat broker (the `kafkacompat_broker` fixture).

These need the connector jars (see spark_it.session; KAFKACOMPAT_SPARK_PACKAGES=1 or
KAFKACOMPAT_SPARK_JARS=<dir>) and skip with that hint otherwise. Every expectation follows the
"Structured Streaming + Kafka Integration Guide":

- batch reads default to earliest..latest; JSON offsets take -2/-1 for earliest/latest; the end is
  exclusive; `assign` reads only the listed partitions; rows carry key, value, topic, partition,
  offset, timestamp, timestampType (0 = CreateTime) and, with includeHeaders, headers;
- a timestamp start resolves, per partition, to the earliest offset whose timestamp is >= the given
  one; with startingOffsetsByTimestampStrategy=latest an unmatched partition starts at the end;
- startingOffsets applies only when a query starts without a checkpoint: a restarted query resumes
  from its checkpoint whatever startingOffsets says;
- failOnDataLoss=true fails the query when offsets it needs are gone (e.g. deleted with
  DeleteRecords); false carries on from what is still there.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spark_it._tests.helpers import closed_windows, load_loadgen, read_json_sink, utc_ms
from spark_it._tests.kafka_helpers import Produced, create_topic, delete_records, produce, read_topic
from spark_it.kafka_options import EARLIEST, LATEST, source_options
from spark_it.pipelines import activity, logs
from spark_it.pipelines.common import wire

T0 = utc_ms("2026-11-22T10:00:00Z")
MINUTE_MS = 60_000


@pytest.fixture
def bootstrap(kafka_spark: Any, kafkacompat_broker: Any) -> str:
    """The broker's address, only once the connector is known to be there."""
    return kafkacompat_broker.bootstrap


def batch_rows(spark: Any, **options: Any) -> list[tuple[Any, ...]]:
    frame = spark.read.format("kafka").options(**options).load()
    return sorted(
        (
            r["partition"],
            r["offset"],
            r["key"] and bytes(r["key"]),
            bytes(r["value"]),
            round(r["timestamp"].timestamp() * 1000),
            r["timestampType"],
            r["topic"],
        )
        for r in frame.collect()
    )


def test_batch_reads_return_exactly_the_produced_records(kafka_spark: Any, bootstrap: str) -> None:
    topic = "batch-src"
    create_topic(bootstrap, topic, 3)
    records = [
        Produced(
            i % 3, f"k{i}".encode(), f"value-{i}".encode(), T0 + i, (("n", str(i).encode()),) if i % 5 else ()
        )
        for i in range(120)
    ]
    offsets = produce(bootstrap, topic, records, batch_size=7)
    expected = sorted(
        (r.partition, off, r.key, r.value, r.timestamp_ms, 0, topic)
        for r, off in zip(records, offsets, strict=True)
    )
    assert [e[1] for e in expected if e[0] == 1] == list(range(40))

    assert batch_rows(kafka_spark, **source_options(bootstrap, streaming=False, subscribe=topic)) == expected
    explicit = source_options(
        bootstrap, streaming=False, subscribe=topic, starting_offsets="earliest", ending_offsets="latest"
    )
    assert batch_rows(kafka_spark, **explicit) == expected

    # Per-partition JSON bounds: start inclusive, end exclusive, -2 earliest, -1 latest.
    bounded = source_options(
        bootstrap,
        streaming=False,
        subscribe=topic,
        starting_offsets={topic: {0: 5, 1: EARLIEST, 2: 39}},
        ending_offsets={topic: {0: 10, 1: 3, 2: LATEST}},
    )
    want = [
        e
        for e in expected
        if (e[0], e[1]) in {(0, o) for o in range(5, 10)} | {(1, 0), (1, 1), (1, 2), (2, 39)}
    ]
    assert batch_rows(kafka_spark, **bounded) == want

    assigned = source_options(bootstrap, streaming=False, assign={topic: [1]})
    assert batch_rows(kafka_spark, **assigned) == [e for e in expected if e[0] == 1]

    with_headers = source_options(bootstrap, streaming=False, assign={topic: [2]}, include_headers=True)
    frame = kafka_spark.read.format("kafka").options(**with_headers).load()
    headers = {
        r["offset"]: [(h["key"], bytes(h["value"])) for h in (r["headers"] or [])] for r in frame.collect()
    }
    by_offset = {off: r for r, off in zip(records, offsets, strict=True) if r.partition == 2}
    assert headers == {off: list(r.headers) for off, r in by_offset.items()}


def test_starting_offsets_by_timestamp(kafka_spark: Any, bootstrap: str) -> None:
    topic = "by-time"
    create_topic(bootstrap, topic, 2)
    # Partition 0 has one record out of time order: the answer is the first offset at or after the
    # time, not the first record after the "position" of that time.
    p0_times = [T0 + 100, T0 + 300, T0 + 200, T0 + 400, T0 + 500]
    records = [Produced(0, None, f"p0-{i}".encode(), t) for i, t in enumerate(p0_times)]
    records += [Produced(1, None, f"p1-{i}".encode(), T0 + 1000 + 10 * i) for i in range(10)]
    produce(bootstrap, topic, records, batch_size=3)

    def offsets(**options: Any) -> dict[int, list[int]]:
        result: dict[int, list[int]] = {}
        for partition, offset, *_ in batch_rows(kafka_spark, **options):
            result.setdefault(partition, []).append(offset)
        return result

    options = source_options(
        bootstrap,
        streaming=False,
        subscribe=topic,
        starting_offsets_by_timestamp={topic: {0: T0 + 250, 1: T0 + 1055}},
    )
    assert offsets(**options) == {0: [1, 2, 3, 4], 1: [6, 7, 8, 9]}

    # Exactly on a timestamp: that record is included; before everything: the whole partition.
    options = source_options(
        bootstrap,
        streaming=False,
        subscribe=topic,
        starting_offsets_by_timestamp={topic: {0: T0 + 400, 1: 0}},
    )
    assert offsets(**options) == {0: [3, 4], 1: list(range(10))}

    # No record at or after the time in partition 1: with strategy "latest" it contributes nothing.
    options = source_options(
        bootstrap,
        streaming=False,
        subscribe=topic,
        starting_offsets_by_timestamp={topic: {0: T0, 1: T0 + 99_999}},
        by_timestamp_strategy="latest",
    )
    assert offsets(**options) == {0: [0, 1, 2, 3, 4]}

    # The same resolution for a streaming query's first batch.
    stream_options = source_options(
        bootstrap,
        streaming=True,
        subscribe=topic,
        starting_offsets_by_timestamp={topic: {0: T0 + 250, 1: T0 + 1055}},
    )
    stream = kafka_spark.readStream.format("kafka").options(**stream_options).load()
    query = (
        stream.selectExpr("partition", "offset")
        .writeStream.format("memory")
        .queryName("by_time_stream")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(60)
    got = sorted((r["partition"], r["offset"]) for r in kafka_spark.table("by_time_stream").collect())
    assert got == [(0, 1), (0, 2), (0, 3), (0, 4), (1, 6), (1, 7), (1, 8), (1, 9)]


def summary_line(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    return json.loads(lines[-1])


def test_activity_pipeline_available_now_kafka_to_kafka(
    kafka_spark: Any, bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from confluent_kafka import Producer

    loadgen = load_loadgen()
    create_topic(bootstrap, "views", 2)
    create_topic(bootstrap, "view-counts", 1)
    events = list(loadgen.events("activity", seed=21, count=600, start_ms=T0, spacing_ms=400))
    summary = loadgen.produce(
        Producer({"bootstrap.servers": bootstrap}), "views", iter(events), progress_stream=None
    )
    assert summary.records == 600

    argv = [
        "--bootstrap", bootstrap, "--source-topic", "views", "--sink-topic", "view-counts",
        "--checkpoint", str(tmp_path / "checkpoint"), "--trigger", "availableNow",
        "--starting-offsets", "earliest", "--max-offsets-per-trigger", "150", "--watermark", "45 seconds",
    ]  # fmt: skip
    assert activity.main(argv) == 0
    run = summary_line(capsys)
    assert run["input_rows"] == 600
    assert run["batches"] >= 4  # 600 offsets at most 150 per batch, then the no-data batch

    # maxOffsetsPerTrigger takes the same share of every partition's backlog per batch, so the
    # partitions advance through event time together; 45 s of allowed lateness covers their drift.
    watermark = max(e.timestamp_ms for e in events) - 45_000
    expected = closed_windows(events, watermark, lambda e: (json.loads(e.value)["page"],))
    users: dict[tuple[str, int], set[str]] = {}
    for e in events:
        record = json.loads(e.value)
        users.setdefault((record["page"], e.timestamp_ms - e.timestamp_ms % MINUTE_MS), set()).add(
            record["user_id"]
        )

    written = read_topic(bootstrap, "view-counts", [0])
    got: Counter = Counter()
    for record in written:
        value = json.loads(record.value)
        assert record.key == value["page"].encode()
        start = utc_ms(value["window_start"])
        assert utc_ms(value["window_end"]) == start + MINUTE_MS
        got[(value["page"], start)] += value["views"]
        exact = len(users[(value["page"], start)])
        assert abs(value["unique_users"] - exact) <= max(1, exact // 10)  # HyperLogLog++ estimate
    assert len(written) == len(expected)  # one row per closed window, each written once
    assert got == expected


def test_logs_pipeline_restart_processes_only_new_records(
    kafka_spark: Any, bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from confluent_kafka import Producer

    loadgen = load_loadgen()
    create_topic(bootstrap, "logs-in", 3)
    create_topic(bootstrap, "logs-out", 1)
    events = list(loadgen.events("logs", seed=8, count=500, start_ms=T0, spacing_ms=500))
    first, second = events[:300], events[300:]
    producer = Producer({"bootstrap.servers": bootstrap})

    def line_key(event: Any) -> tuple[str, str]:
        text = event.value.decode()
        return text.split(" service=")[1].split()[0], text.split(" level=")[1].split()[0]

    def run(starting: str) -> tuple[dict[str, Any], Counter]:
        before = len(read_topic(bootstrap, "logs-out", [0]))
        argv = [
            "--bootstrap", bootstrap, "--source-topic", "logs-in", "--sink-topic", "logs-out",
            "--checkpoint", str(tmp_path / "checkpoint"), "--starting-offsets", starting,
        ]  # fmt: skip
        assert logs.main(argv) == 0
        counts: Counter = Counter()
        for record in read_topic(bootstrap, "logs-out", [0])[before:]:
            value = json.loads(record.value)
            assert record.key == value["service"].encode()
            counts[(value["service"], value["level"], utc_ms(value["window_start"]))] += value["count"]
        return summary_line(capsys), counts

    assert loadgen.produce(producer, "logs-in", iter(first), progress_stream=None).records == 300
    summary, counts = run("earliest")
    assert summary["input_rows"] == 300
    first_watermark = max(e.timestamp_ms for e in first) - 30_000
    expected_first = closed_windows(first, first_watermark, line_key)
    assert counts == expected_first

    assert loadgen.produce(producer, "logs-in", iter(second), progress_stream=None).records == 200
    # "latest" would skip the new records if it applied; a checkpointed query resumes instead.
    summary, counts = run("latest")
    assert summary["input_rows"] == 200
    final_watermark = max(e.timestamp_ms for e in events) - 30_000
    expected_all = closed_windows(events, final_watermark, line_key)
    assert counts == expected_all - expected_first  # windows spanning the restart use the saved state


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_after_delete_records(
    kafka_spark: Any, bootstrap: str, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    from pyspark.errors import StreamingQueryException

    topic = f"lossy-{str(fail_on_data_loss).lower()}"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [Produced(0, None, f"r{i}".encode(), T0 + i) for i in range(20)], batch_size=5)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start() -> Any:
        options = source_options(
            bootstrap,
            streaming=True,
            subscribe=topic,
            starting_offsets="earliest",
            fail_on_data_loss=fail_on_data_loss,
        )
        stream = kafka_spark.readStream.format("kafka").options(**options).load()
        result = stream.selectExpr("CAST(offset AS STRING) AS key", "CAST(value AS STRING) AS value")
        return wire(
            result, sink="json", path=str(out), checkpoint=str(checkpoint), trigger="availableNow"
        ).start()

    query = start()
    assert query.awaitTermination(60) and query.exception() is None
    assert sorted(int(r["key"]) for r in read_json_sink(out)) == list(range(20))

    # Offsets 20..39 arrive, then 20..29 are deleted before the query runs again: it resumes at 20.
    produce(
        bootstrap, topic, [Produced(0, None, f"r{i}".encode(), T0 + i) for i in range(20, 40)], batch_size=5
    )
    delete_records(bootstrap, topic, 0, 30)
    query = start()
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException, match=r"failOnDataLoss|KAFKA_DATA_LOSS"):
            query.awaitTermination(60)
        assert sorted(int(r["key"]) for r in read_json_sink(out)) == list(range(20))
    else:
        assert query.awaitTermination(60) and query.exception() is None
        assert sorted(int(r["key"]) for r in read_json_sink(out)) == [*range(20), *range(30, 40)]
