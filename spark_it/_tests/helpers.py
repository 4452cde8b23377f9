"""Kafka-shaped rows for the pipeline tests, without Kafka.

`kafka_row()` builds one row exactly as Spark's Kafka source delivers it (see
spark_it.pipelines.common.kafka_source_schema); `write_kafka_json()` writes such rows as JSON lines
for a file stream, and `kafka_shaped_stream()` reads them back as a streaming frame of the same shape,
so the pipelines' streaming behaviour (watermarks, checkpoints) is exercised with no broker.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]

KafkaRow = tuple[Any, ...]


def utc_ms(text: str) -> int:
    """'2026-11-22T10:00:05Z' -> epoch milliseconds."""
    return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def kafka_row(
    value: bytes | None,
    *,
    key: bytes | None = None,
    offset: int = 0,
    timestamp_ms: int = 0,
    topic: str = "src",
    partition: int = 0,
    headers: Sequence[tuple[str, bytes]] = (),
) -> KafkaRow:
    timestamp = dt.datetime.fromtimestamp(timestamp_ms / 1000, tz=dt.UTC)
    return (key, value, topic, partition, offset, timestamp, 0, list(headers))


def kafka_frame(spark: Any, rows: Iterable[KafkaRow]) -> Any:
    from spark_it.pipelines.common import kafka_source_schema

    return spark.createDataFrame(list(rows), kafka_source_schema())


def write_kafka_json(directory: Path, name: str, rows: Iterable[KafkaRow]) -> None:
    """One JSON-lines file of Kafka rows (key/value as text); written whole, then renamed into place."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for key, value, topic, partition, offset, timestamp, timestamp_type, _headers in rows:
        lines.append(
            json.dumps(
                {
                    "key": None if key is None else key.decode(),
                    "value": None if value is None else value.decode(),
                    "topic": topic,
                    "partition": partition,
                    "offset": offset,
                    "timestamp": timestamp.isoformat().replace("+00:00", "Z"),
                    "timestampType": timestamp_type,
                }
            )
        )
    tmp = directory / f".{name}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(directory / f"{name}.json")


def kafka_shaped_stream(spark: Any, directory: Path, reader: Any = None) -> Any:
    """A streaming frame over write_kafka_json() files, with the Kafka source's exact schema.

    `reader`: a DataStreamReader with extra options (e.g. maxFilesPerTrigger), else a plain one."""
    from pyspark.sql import functions as F

    from spark_it.pipelines.common import kafka_source_schema

    schema = kafka_source_schema()
    text_schema = (
        "key string, value string, topic string, partition int, offset long, timestamp timestamp, "
        "timestampType int"
    )
    raw = (reader or spark.readStream).schema(text_schema).json(str(directory))
    return raw.select(
        F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        F.lit(None).cast(schema["headers"].dataType).alias("headers"),
    )


def read_json_sink(directory: Path) -> list[dict[str, Any]]:
    """Rows a `json` file sink committed: the files its _spark_metadata log lists, nothing else
    (a failed batch's stray part files are not output)."""
    from urllib.parse import unquote, urlparse

    log = directory / "_spark_metadata"
    if not log.is_dir():
        return []
    committed: list[Path] = []
    for entry in sorted(log.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name.endswith(".tmp"):
            continue
        for line in entry.read_text().splitlines()[1:]:  # first line: the log format version
            status = json.loads(line)
            if status.get("action", "add") == "add":
                committed.append(Path(unquote(urlparse(status["path"]).path)))
    rows = []
    for part in sorted(committed):
        rows.extend(json.loads(line) for line in part.read_text().splitlines() if line.strip())
    return rows


def closed_windows(events: Iterable[Any], watermark_ms: int, key: Any, window_ms: int = 60_000) -> Counter:
    """Plain-Python model of an append-mode windowed count over in-order events: the windows whose
    end is <= the final watermark, counted per `key(event)` (a tuple) and window start (epoch ms)."""
    counts: Counter = Counter()
    for event in events:
        start = event.timestamp_ms - event.timestamp_ms % window_ms
        if start + window_ms <= watermark_ms:
            counts[(*key(event), start)] += 1
    return counts


def load_loadgen() -> ModuleType:
    """tools/loadgen.py as a module (tools/ is not a package)."""
    name = "kafkacompat_tools_loadgen"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / "loadgen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
