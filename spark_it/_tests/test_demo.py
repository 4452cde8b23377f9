"""`make spark-demo`'s engine (spark_it.demo.run_demo) on the shared session and a fixture broker:
loadgen (the real CLI, in child processes) feeds both pipelines through the broker; the report's
counts must agree with the broker's and with each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_it.demo import format_report, high_watermarks, run_demo


def test_demo_feeds_both_pipelines_and_reports_in_out_and_lag(
    kafka_spark: Any, kafkacompat_broker: Any, tmp_path: Path
) -> None:
    bootstrap = kafkacompat_broker.bootstrap
    reports = run_demo(
        kafka_spark,
        bootstrap,
        count=1500,
        rate=None,
        checkpoints=tmp_path / "checkpoints",
        trigger="processingTime=500 milliseconds",
        timeout=240,
    )
    assert [r.name for r in reports] == ["activity", "logs"]
    for report in reports:
        assert report.produced == 1500
        assert sum(high_watermarks(bootstrap, report.source_topic).values()) == 1500
        assert report.rows_in == 1500  # every record read once
        assert report.lag_end == 0
        assert report.lag_peak <= 1500
        # 150 s of simulated event time per topic: closed one-minute windows reach the sink, and the
        # sink topic holds exactly the rows Spark says it wrote.
        assert report.rows_out > 0
        assert report.sink_records == report.rows_out
        assert report.batches >= 1
    text = format_report(reports)
    assert "page-views -> page-view-counts" in text and "app-logs -> log-metrics" in text
    assert len(text.splitlines()) == 4
