"""tools/bench_spark.py's load and timed read against a fixture broker, on the shared session (the tool's
figures are only worth something if it loads what it says and the read counts every record)."""

from __future__ import annotations

import importlib.util
import json
import sys
from types import ModuleType
from typing import Any

from spark_it._tests.helpers import REPO


def bench_spark() -> ModuleType:
    name = "kafkacompat_tools_bench_spark"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tools" / "bench_spark.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_load_then_timed_reads_count_every_record(kafka_spark: Any, kafkacompat_broker: Any) -> None:
    tool = bench_spark()
    bootstrap = kafkacompat_broker.bootstrap
    records, reported = tool.load_topic(bootstrap, "bench-small", mib=3, record_bytes=1000, partitions=2)
    assert records == reported == 3 * (1 << 20) // 1000
    assert tool.per_partition(records, 2) == {0: (records + 1) // 2, 1: records // 2}

    whole = tool.timed_read(kafka_spark, bootstrap, "bench-small")  # endingOffsets latest
    assert (whole.records, whole.value_bytes) == (records, records * 1000)
    named = tool.timed_read(
        kafka_spark,
        bootstrap,
        "bench-small",
        tool.ending_offsets_json("bench-small", tool.per_partition(records, 2)),
    )
    assert (named.records, named.value_bytes) == (records, records * 1000)
    assert whole.seconds > 0 and whole.records_per_second == records / whole.seconds

    # The warm-up's bounded read: 100 records of each partition.
    part = tool.timed_read(
        kafka_spark, bootstrap, "bench-small", json.dumps({"bench-small": {"0": 100, "1": 100}})
    )
    assert (part.records, part.value_bytes) == (200, 200_000)

    summary = {"brokers": {"kafkacompat": tool.summarize([whole, part]), "peer": tool.summarize([whole])}}
    assert summary["brokers"]["kafkacompat"]["records_per_second"]["min"] == min(
        whole.records_per_second, part.records_per_second
    )
    text = tool.render(summary)
    assert "| kafkacompat |" in text and "kafkacompat / peer" in text
