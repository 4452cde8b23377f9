"""Option dictionaries and JSON offset specifications for Spark's Kafka connector (no Spark needed).

Theory of operation: Spark's Kafka source and sink take every setting as a string option. The
awkward ones are JSON documents keyed by topic and then by partition number *as a string*:
`startingOffsets`/`endingOffsets` (offset, or -2 for earliest and -1 for latest),
`startingOffsetsByTimestamp`/`endingOffsetsByTimestamp` (milliseconds since the epoch) and `assign`
(topic -> list of partitions). The builders here produce those documents from plain mappings and
reject what the connector would reject at query start (latest as a batch start, earliest as a batch
end, a negative timestamp, two subscription modes at once, consumer settings the connector owns), so a
mistake shows up as a ValueError at the call site instead of as a JVM stack trace minutes later.

`source_options()` and `sink_options()` return complete `dict[str, str]` for `.options(**...)`;
`trigger_kwargs()` turns a CLI trigger spelling into keyword arguments for `DataStreamWriter.trigger`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

__all__ = [
    "EARLIEST",
    "FORBIDDEN_KAFKA_PARAMS",
    "LATEST",
    "assign_json",
    "offsets_json",
    "sink_options",
    "source_options",
    "timestamps_json",
    "trigger_kwargs",
]

# Sentinels the connector understands inside an offsets JSON document.
EARLIEST = -2
LATEST = -1

# Consumer/producer settings the connector sets itself and refuses when given with the `kafka.` prefix
# (it raises at query start). `group.id` is allowed as `kafka.group.id`, with the connector's caveats.
FORBIDDEN_KAFKA_PARAMS = frozenset(
    {
        "auto.offset.reset",
        "key.deserializer",
        "value.deserializer",
        "key.serializer",
        "value.serializer",
        "enable.auto.commit",
        "interceptor.classes",
    }
)

OffsetSpec = str | Mapping[str, Mapping[int, int]]


def _check_topic(topic: object) -> str:
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"topic names must be non-empty strings, got {topic!r}")
    return topic


def _check_partition(partition: object) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"partitions must be non-negative ints, got {partition!r}")
    return partition


def _per_partition_json(
    values: Mapping[str, Mapping[int, int]], minimum: int, what: str, forbidden: frozenset[int] = frozenset()
) -> str:
    if not values:
        raise ValueError(f"{what}: at least one topic is needed")
    document: dict[str, dict[str, int]] = {}
    for topic, by_partition in values.items():
        _check_topic(topic)
        if not by_partition:
            raise ValueError(f"{what}: topic {topic!r} has no partitions")
        entries: dict[str, int] = {}
        for partition in sorted(by_partition, key=_check_partition):
            value = by_partition[partition]
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{what}: {topic}[{partition}] = {value!r} is not an int >= {minimum}")
            if value in forbidden:
                raise ValueError(f"{what}: {topic}[{partition}] = {value} is not allowed here")
            entries[str(partition)] = value
        document[topic] = entries
    return json.dumps(document, separators=(",", ":"))


def offsets_json(
    offsets: Mapping[str, Mapping[int, int]], *, batch_end: bool = False, batch_start: bool = False
) -> str:
    """`{"topic": {"0": 23, "1": -2}}` for startingOffsets/endingOffsets.

    Offsets are absolute, or EARLIEST (-2) / LATEST (-1). A batch query may not start at LATEST and
    may not end at EARLIEST (the connector refuses both).
    """
    forbidden: set[int] = set()
    if batch_start:
        forbidden.add(LATEST)
    if batch_end:
        forbidden.add(EARLIEST)
    return _per_partition_json(offsets, EARLIEST, "offsets", frozenset(forbidden))


def timestamps_json(timestamps: Mapping[str, Mapping[int, int]]) -> str:
    """`{"topic": {"0": 1700000000000}}` for startingOffsetsByTimestamp/endingOffsetsByTimestamp.

    Each partition starts at the earliest offset whose record timestamp is >= the given milliseconds
    (the answer of a ListOffsets request with that timestamp).
    """
    return _per_partition_json(timestamps, 0, "timestamps")


def assign_json(assignment: Mapping[str, Iterable[int]]) -> str:
    """`{"topicA": [0, 1]}` for the `assign` option (fixed partitions, no discovery)."""
    if not assignment:
        raise ValueError("assign: at least one topic is needed")
    document: dict[str, list[int]] = {}
    for topic, partitions in assignment.items():
        _check_topic(topic)
        listed = sorted({_check_partition(p) for p in partitions})
        if not listed:
            raise ValueError(f"assign: topic {topic!r} has no partitions")
        document[topic] = listed
    return json.dumps(document, separators=(",", ":"))


def _offsets_option(spec: OffsetSpec, *, batch_start: bool = False, batch_end: bool = False) -> str:
    if isinstance(spec, str):
        if spec not in ("earliest", "latest"):
            # An already-built JSON document: check that it parses and is shaped as the connector wants.
            try:
                parsed = json.loads(spec)
            except ValueError as exc:
                raise ValueError(f"offsets must be earliest, latest or JSON, got {spec!r}") from exc
            if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
                raise ValueError(f"offsets JSON must map topic -> {{partition: offset}}, got {spec!r}")
            return offsets_json(
                {t: {int(p): o for p, o in v.items()} for t, v in parsed.items()},
                batch_start=batch_start,
                batch_end=batch_end,
            )
        if batch_start and spec == "latest":
            raise ValueError("a batch query cannot start at latest")
        if batch_end and spec == "earliest":
            raise ValueError("a batch query cannot end at earliest")
        return spec
    return offsets_json(spec, batch_start=batch_start, batch_end=batch_end)


def _kafka_params(kafka_params: Mapping[str, str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for name, value in kafka_params.items():
        bare = name.removeprefix("kafka.")
        if bare in FORBIDDEN_KAFKA_PARAMS:
            raise ValueError(f"kafka.{bare} is managed by the Spark connector and cannot be set")
        if bare == "bootstrap.servers":
            raise ValueError("give the bootstrap servers as `bootstrap`, not as a kafka param")
        options[f"kafka.{bare}"] = str(value)
    return options


def source_options(
    bootstrap: str,
    *,
    streaming: bool,
    subscribe: str | Iterable[str] | None = None,
    subscribe_pattern: str | None = None,
    assign: Mapping[str, Iterable[int]] | None = None,
    starting_offsets: OffsetSpec | None = None,
    ending_offsets: OffsetSpec | None = None,
    starting_offsets_by_timestamp: Mapping[str, Mapping[int, int]] | None = None,
    starting_timestamp: int | None = None,
    by_timestamp_strategy: str | None = None,
    ending_offsets_by_timestamp: Mapping[str, Mapping[int, int]] | None = None,
    fail_on_data_loss: bool | None = None,
    max_offsets_per_trigger: int | None = None,
    include_headers: bool = False,
    kafka_params: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Options for `spark.read`/`spark.readStream` `.format("kafka")`.

    Exactly one of subscribe / subscribe_pattern / assign. Unset optional arguments are left out, so
    the connector's own defaults apply (startingOffsets: latest for streaming, earliest for batch).
    Precedence (the connector's): startingTimestamp over startingOffsetsByTimestamp over
    startingOffsets; `by_timestamp_strategy` says what happens when no record is at or after a
    requested timestamp ("error", the default, fails the query; "latest" starts at the end).
    """
    if not bootstrap:
        raise ValueError("bootstrap servers are required")
    modes = [m for m in (subscribe, subscribe_pattern, assign) if m is not None]
    if len(modes) != 1:
        raise ValueError("give exactly one of subscribe, subscribe_pattern, assign")
    options: dict[str, str] = {"kafka.bootstrap.servers": bootstrap}
    if subscribe is not None:
        topics = [subscribe] if isinstance(subscribe, str) else list(subscribe)
        topics = [t.strip() for name in topics for t in name.split(",") if t.strip()]
        if not topics:
            raise ValueError("subscribe: no topic given")
        options["subscribe"] = ",".join(topics)
    elif subscribe_pattern is not None:
        if not subscribe_pattern:
            raise ValueError("subscribe_pattern must not be empty")
        options["subscribePattern"] = subscribe_pattern
    else:
        assert assign is not None
        options["assign"] = assign_json(assign)
    if starting_offsets is not None:
        options["startingOffsets"] = _offsets_option(starting_offsets, batch_start=not streaming)
    if starting_offsets_by_timestamp is not None:
        options["startingOffsetsByTimestamp"] = timestamps_json(starting_offsets_by_timestamp)
    if starting_timestamp is not None:
        ms = starting_timestamp
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise ValueError(f"starting_timestamp must be milliseconds >= 0, got {starting_timestamp!r}")
        options["startingTimestamp"] = str(starting_timestamp)
    if by_timestamp_strategy is not None:
        if by_timestamp_strategy not in ("error", "latest"):
            raise ValueError("startingOffsetsByTimestampStrategy is error or latest")
        options["startingOffsetsByTimestampStrategy"] = by_timestamp_strategy
    if ending_offsets_by_timestamp is not None:
        if streaming:
            raise ValueError("endingOffsetsByTimestamp applies to batch queries only")
        options["endingOffsetsByTimestamp"] = timestamps_json(ending_offsets_by_timestamp)
    if ending_offsets is not None:
        if streaming:
            raise ValueError("endingOffsets applies to batch queries only")
        options["endingOffsets"] = _offsets_option(ending_offsets, batch_end=True)
    if fail_on_data_loss is not None:
        options["failOnDataLoss"] = "true" if fail_on_data_loss else "false"
    if max_offsets_per_trigger is not None:
        if not streaming:
            raise ValueError("maxOffsetsPerTrigger applies to streaming queries only")
        if max_offsets_per_trigger <= 0:
            raise ValueError("maxOffsetsPerTrigger must be positive")
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    if include_headers:
        options["includeHeaders"] = "true"
    options.update(_kafka_params(kafka_params or {}))
    return options


def sink_options(
    bootstrap: str,
    topic: str | None,
    *,
    include_headers: bool = False,
    kafka_params: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Options for `.write`/`.writeStream` `.format("kafka")`.

    With topic None the rows must carry a `topic` column. Checkpoint location is a writer setting,
    not a connector option: pass it to `.option("checkpointLocation", ...)` (see pipelines._runner).
    """
    if not bootstrap:
        raise ValueError("bootstrap servers are required")
    options: dict[str, str] = {"kafka.bootstrap.servers": bootstrap}
    if topic is not None:
        options["topic"] = _check_topic(topic)
    if include_headers:
        options["includeHeaders"] = "true"
    options.update(_kafka_params(kafka_params or {}))
    return options


def trigger_kwargs(spec: str) -> dict[str, object]:
    """CLI trigger spelling -> `DataStreamWriter.trigger(**kwargs)`.

    "availableNow" (everything available at start, in as many batches as the rate limits need, then
    stop), "once" (one batch, then stop), "processingTime=10 seconds" or just "10 seconds" (a batch
    every interval, forever).
    """
    text = spec.strip()
    lowered = text.lower().replace("_", "").replace("-", "")
    if lowered == "availablenow":
        return {"availableNow": True}
    if lowered == "once":
        return {"once": True}
    if lowered.startswith("processingtime="):
        text = text.split("=", 1)[1].strip()
    if not text or not text[0].isdigit():
        raise ValueError(f"trigger must be availableNow, once or processingTime=<interval>, got {spec!r}")
    return {"processingTime": text}
