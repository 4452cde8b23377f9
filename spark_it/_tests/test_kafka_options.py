"""Connector option builders, JSON offset documents, triggers and jar discovery (no JVM needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_it.kafka_options import (
    EARLIEST,
    LATEST,
    assign_json,
    offsets_json,
    sink_options,
    source_options,
    timestamps_json,
    trigger_kwargs,
)
from spark_it.session import (
    ENABLE_HINT,
    REQUIRED_JARS,
    connector_config,
    connector_coordinates,
    found_connector_jars,
)


def test_offsets_json_uses_string_partitions_in_order() -> None:
    text = offsets_json({"a": {1: EARLIEST, 0: 23}, "b": {0: LATEST}})
    assert json.loads(text) == {"a": {"0": 23, "1": -2}, "b": {"0": -1}}
    assert list(json.loads(text)["a"]) == ["0", "1"]


@pytest.mark.parametrize(
    "bad",
    [{}, {"a": {}}, {"": {0: 1}}, {"a": {-1: 1}}, {"a": {0: -3}}, {"a": {0: 1.5}}, {"a": {0: True}}],
)
def test_offsets_json_rejects_malformed(bad: dict) -> None:
    with pytest.raises(ValueError):
        offsets_json(bad)


def test_batch_bounds_refuse_what_the_connector_refuses() -> None:
    with pytest.raises(ValueError, match="not allowed"):
        offsets_json({"a": {0: LATEST}}, batch_start=True)
    with pytest.raises(ValueError, match="not allowed"):
        offsets_json({"a": {0: EARLIEST}}, batch_end=True)
    with pytest.raises(ValueError, match="latest"):
        source_options("h:1", streaming=False, subscribe="a", starting_offsets="latest")
    with pytest.raises(ValueError, match="earliest"):
        source_options("h:1", streaming=False, subscribe="a", ending_offsets="earliest")
    with pytest.raises(ValueError, match="batch"):
        source_options("h:1", streaming=True, subscribe="a", ending_offsets="latest")
    with pytest.raises(ValueError, match="streaming"):
        source_options("h:1", streaming=False, subscribe="a", max_offsets_per_trigger=10)


def test_timestamps_and_assign_json() -> None:
    assert json.loads(timestamps_json({"t": {2: 1000, 0: 5}})) == {"t": {"0": 5, "2": 1000}}
    with pytest.raises(ValueError):
        timestamps_json({"t": {0: -1}})
    assert json.loads(assign_json({"x": [2, 0, 2], "y": (1,)})) == {"x": [0, 2], "y": [1]}
    with pytest.raises(ValueError):
        assign_json({"x": []})


def test_source_options_complete_dict() -> None:
    options = source_options(
        "b1:9092,b2:9092",
        streaming=True,
        subscribe=["a", "b, c"],
        starting_offsets={"a": {0: 5}},
        fail_on_data_loss=False,
        max_offsets_per_trigger=100,
        include_headers=True,
        kafka_params={"fetch.max.bytes": "1024", "kafka.client.id": "x"},
    )
    assert options == {
        "kafka.bootstrap.servers": "b1:9092,b2:9092",
        "subscribe": "a,b,c",
        "startingOffsets": '{"a":{"0":5}}',
        "failOnDataLoss": "false",
        "maxOffsetsPerTrigger": "100",
        "includeHeaders": "true",
        "kafka.fetch.max.bytes": "1024",
        "kafka.client.id": "x",
    }
    # A JSON string is validated and normalised, not passed blindly.
    batch = source_options(
        "h:1",
        streaming=False,
        assign={"a": [1, 0]},
        starting_offsets='{"a": {"1": 3, "0": -2}}',
        ending_offsets={"a": {0: 9, 1: LATEST}},
    )
    assert batch["assign"] == '{"a":[0,1]}'
    assert json.loads(batch["startingOffsets"]) == {"a": {"0": -2, "1": 3}}
    assert json.loads(batch["endingOffsets"]) == {"a": {"0": 9, "1": -1}}
    by_time = source_options(
        "h:1",
        streaming=True,
        subscribe_pattern="a.*",
        starting_offsets_by_timestamp={"a": {0: 1000}},
        starting_timestamp=7,
    )
    assert by_time["subscribePattern"] == "a.*"
    assert json.loads(by_time["startingOffsetsByTimestamp"]) == {"a": {"0": 1000}}
    assert by_time["startingTimestamp"] == "7"
    strategy = source_options(
        "h:1",
        streaming=False,
        subscribe="a",
        by_timestamp_strategy="latest",
        ending_offsets_by_timestamp={"a": {1: 50}},
    )
    assert strategy["startingOffsetsByTimestampStrategy"] == "latest"
    assert strategy["endingOffsetsByTimestamp"] == '{"a":{"1":50}}'
    with pytest.raises(ValueError):
        source_options("h:1", streaming=False, subscribe="a", by_timestamp_strategy="earliest")
    with pytest.raises(ValueError, match="batch"):
        source_options("h:1", streaming=True, subscribe="a", ending_offsets_by_timestamp={"a": {1: 50}})


def test_source_options_refusals() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        source_options("h:1", streaming=True)
    with pytest.raises(ValueError, match="exactly one"):
        source_options("h:1", streaming=True, subscribe="a", assign={"a": [0]})
    with pytest.raises(ValueError, match="managed by the Spark connector"):
        source_options("h:1", streaming=True, subscribe="a", kafka_params={"auto.offset.reset": "earliest"})
    with pytest.raises(ValueError, match="managed by the Spark connector"):
        sink_options("h:1", "t", kafka_params={"kafka.value.serializer": "x"})
    with pytest.raises(ValueError, match="earliest, latest or JSON"):
        source_options("h:1", streaming=True, subscribe="a", starting_offsets="beginning")
    with pytest.raises(ValueError):
        source_options("", streaming=True, subscribe="a")


def test_sink_options() -> None:
    assert sink_options("h:1", "out") == {"kafka.bootstrap.servers": "h:1", "topic": "out"}
    assert sink_options("h:1", None, include_headers=True, kafka_params={"acks": "all"}) == {
        "kafka.bootstrap.servers": "h:1",
        "includeHeaders": "true",
        "kafka.acks": "all",
    }


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("availableNow", {"availableNow": True}),
        ("available-now", {"availableNow": True}),
        ("once", {"once": True}),
        ("processingTime=10 seconds", {"processingTime": "10 seconds"}),
        ("5 seconds", {"processingTime": "5 seconds"}),
    ],
)
def test_trigger_kwargs(spec: str, expected: dict) -> None:
    assert trigger_kwargs(spec) == expected


def test_trigger_kwargs_rejects_unknown() -> None:
    for spec in ("continuous", "", "processingTime="):
        with pytest.raises(ValueError):
            trigger_kwargs(spec)


def test_connector_config_from_environment(tmp_path: Path) -> None:
    config, reason = connector_config({})
    jars, why = found_connector_jars()
    if jars is None:
        assert config is None and reason.endswith(ENABLE_HINT) and why in reason
    else:
        assert config == {"spark.jars": ",".join(str(j) for j in jars)}
    config, reason = connector_config({"KAFKACOMPAT_SPARK_PACKAGES": "1"})
    assert config == {"spark.jars.packages": connector_coordinates()}
    assert "packages" in reason
    # A jar directory must hold all four artifacts.
    for name in REQUIRED_JARS[:-1]:
        (tmp_path / f"{name}-1.0.jar").write_bytes(b"")
    config, reason = connector_config({"KAFKACOMPAT_SPARK_JARS": str(tmp_path)})
    assert config is None and "commons-pool2" in reason
    (tmp_path / "commons-pool2-2.12.0.jar").write_bytes(b"")
    config, _ = connector_config({"KAFKACOMPAT_SPARK_JARS": str(tmp_path)})
    assert config is not None
    assert sorted(Path(p).name for p in config["spark.jars"].split(",")) == sorted(
        p.name for p in tmp_path.glob("*.jar")
    )
    assert connector_config({"KAFKACOMPAT_SPARK_JARS": str(tmp_path / "nope")})[0] is None


def test_found_connector_jars_needs_all_four_and_a_matching_spark(tmp_path: Path) -> None:
    shared, venv_java = tmp_path / "shared", tmp_path / "java"
    versions = {"pyspark_version": "4.0.5", "scala": "2.13"}
    jars, why = found_connector_jars(shared, [venv_java], **versions)
    assert jars is None and str(shared) in why
    shared.mkdir()
    venv_java.mkdir()
    for name in ("spark-sql-kafka-0-10_2.13-4.0.0", "spark-token-provider-kafka-0-10_2.13-4.0.0"):
        (shared / f"{name}.jar").write_bytes(b"")
    jars, why = found_connector_jars(shared, [venv_java], **versions)
    assert jars is None and "kafka-clients" in why and "fetch_java_client" in why
    (venv_java / "kafka-clients-3.9.2.jar").write_bytes(b"")
    jars, why = found_connector_jars(shared, [venv_java], **versions)
    assert jars is None and "commons-pool2" in why
    (shared / "commons-pool2-2.12.0.jar").write_bytes(b"")
    jars, why = found_connector_jars(shared, [venv_java], **versions)
    assert why == "" and jars is not None
    assert [j.name for j in jars] == [
        "spark-sql-kafka-0-10_2.13-4.0.0.jar",
        "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
        "kafka-clients-3.9.2.jar",
        "commons-pool2-2.12.0.jar",
    ]
    # Built for Spark 4.0 on Scala 2.13: another pyspark gets a reason naming both versions.
    jars, why = found_connector_jars(shared, [venv_java], pyspark_version="4.1.0", scala="2.13")
    assert jars is None and "4.1.0" in why and "4.0" in why


def test_connector_coordinates_match_installed_pyspark() -> None:
    pyspark = pytest.importorskip("pyspark")
    jars = Path(pyspark.__file__).parent / "jars"
    core = next(jars.glob("spark-core_*.jar"))
    scala = core.name.split("_", 1)[1].split("-", 1)[0]
    assert connector_coordinates() == f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{pyspark.__version__}"
    assert connector_coordinates("3.5.1", "2.12") == "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.1"


def test_pipeline_flags_become_source_options() -> None:
    from spark_it.pipelines.common import build_parser, stream_source_options

    parser = build_parser("x", source_topic="in", sink_topic="out")
    args = parser.parse_args(
        [
            "--checkpoint",
            "/c",
            "--bootstrap",
            "b:1",
            "--starting-offsets",
            '{"in": {"0": 4}}',
            "--max-offsets-per-trigger",
            "50",
            "--fail-on-data-loss",
            "false",
            "--kafka-param",
            "fetch.min.bytes=1",
        ]
    )
    assert stream_source_options(args) == {
        "kafka.bootstrap.servers": "b:1",
        "subscribe": "in",
        "startingOffsets": '{"in":{"0":4}}',
        "failOnDataLoss": "false",
        "maxOffsetsPerTrigger": "50",
        "includeHeaders": "true",
        "kafka.fetch.min.bytes": "1",
    }
    defaults = parser.parse_args(["--checkpoint", "/c", "--starting-timestamp", "1000"])
    assert (defaults.sink_topic, defaults.trigger, defaults.output_mode) == ("out", "availableNow", "append")
    assert stream_source_options(defaults)["startingTimestamp"] == "1000"
    assert stream_source_options(defaults)["failOnDataLoss"] == "true"
    with pytest.raises(SystemExit):
        parser.parse_args([])  # --checkpoint is required
