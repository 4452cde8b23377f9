"""Topic-level storage configuration with Kafka's names, types, defaults and validation.

Theory of operation: `TOPIC_CONFIG_DEFS` is the one machine-readable table of every topic-level config a
topic may carry: `ConfigDef(name, type, default, validator)`. `type` uses Kafka's config type names
(`boolean`, `string`, `int`, `short`, `long`, `double`, `list`), which DescribeConfigs reports.
`LogConfig.from_properties(mapping, base)` parses string values (as they arrive in CreateTopics,
AlterConfigs or from `BrokerConfig.topic_defaults()`), validates each one and returns an immutable
`LogConfig`; any bad or unknown value raises `KafkaError(INVALID_CONFIG)` naming the config. Values not
in the mapping come from `base` (the broker-wide defaults) or, without a base, from the table.
The defaults are Kafka 3.9's.

The storage layer reads the handful of values it acts on through attributes (`segment_bytes`,
`retention_ms`, ...); everything else is kept for DescribeConfigs and for the parts of the broker that
own it (e.g. `min.insync.replicas`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = ["TOPIC_CONFIG_DEFS", "TOPIC_CONFIG_DEFS_BY_NAME", "ConfigDef", "LogConfig"]

LONG_MAX = 9_223_372_036_854_775_807
LONG_MIN = -9_223_372_036_854_775_808
INT_MAX = 2_147_483_647
INT_MIN = -2_147_483_648

Validator = Callable[[Any], str | None]  # returns a complaint, or None when the value is acceptable


def _at_least(minimum: float) -> Validator:
    def check(value: Any) -> str | None:
        return None if value >= minimum else f"Value must be at least {minimum}"

    return check


def _between(low: float, high: float) -> Validator:
    def check(value: Any) -> str | None:
        if value < low:
            return f"Value must be at least {low}"
        return None if value <= high else f"Value must be no more than {high}"

    return check


def _one_of(*choices: str) -> Validator:
    def check(value: Any) -> str | None:
        return None if value in choices else f"String must be one of: {', '.join(choices)}"

    return check


def _each_of(*choices: str) -> Validator:
    def check(value: Any) -> str | None:
        bad = [item for item in value if item not in choices]
        return f"Every item must be one of: {', '.join(choices)}" if bad else None

    return check


def _gzip_level(value: Any) -> str | None:
    return None if value == -1 or 1 <= value <= 9 else "Value must be -1 or between 1 and 9"


@dataclass(frozen=True)
class ConfigDef:
    """One topic-level config: Kafka name, Kafka type name, default (parsed) and an optional validator."""

    name: str
    type: str
    default: Any
    validator: Validator | None = None

    def parse(self, raw: str) -> Any:
        """Parse the string form; raises ValueError, whose text is Kafka's reason, for a value of the
        wrong type (what Python's int()/float() would say is not shown to clients)."""
        text = raw.strip()
        not_a_number = f"Not a number of type {self.type.upper()}"
        if self.type in ("int", "short", "long"):
            # Java's parseInt/parseLong: optional sign and decimal digits only (no "1_000", no "1e3")
            digits = text[1:] if text[:1] in "+-" else text
            if not digits.isascii() or not digits.isdigit():
                raise ValueError(not_a_number)
            value = int(text)
            low, high = {
                "int": (INT_MIN, INT_MAX),
                "short": (-32768, 32767),
                "long": (LONG_MIN, LONG_MAX),
            }[self.type]
            if not low <= value <= high:
                raise ValueError(not_a_number)  # Java's parse fails on overflow the same way
            return value
        if self.type == "double":
            try:
                number = float(text)
            except ValueError:
                raise ValueError(not_a_number) from None
            return number
        if self.type == "boolean":
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ValueError("Expected value to be either true or false")
            return lowered == "true"
        if self.type == "list":
            return [item.strip() for item in text.split(",") if item.strip()]
        return text

    def render(self, value: Any) -> str:
        """Kafka's string form of a parsed value (as DescribeConfigs shows it)."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list):
            return ",".join(value)
        return str(value)


_D = ConfigDef
TOPIC_CONFIG_DEFS: tuple[ConfigDef, ...] = (
    _D("cleanup.policy", "list", ["delete"], _each_of("compact", "delete")),
    _D("compression.gzip.level", "int", -1, _gzip_level),
    _D("compression.lz4.level", "int", 9, _between(1, 17)),
    _D(
        "compression.type",
        "string",
        "producer",
        _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
    _D("compression.zstd.level", "int", 3, _between(-131072, 22)),
    _D("delete.retention.ms", "long", 86400000, _at_least(0)),
    _D("file.delete.delay.ms", "long", 60000, _at_least(0)),
    _D("flush.messages", "long", LONG_MAX, _at_least(1)),
    _D("flush.ms", "long", LONG_MAX, _at_least(0)),
    _D("follower.replication.throttled.replicas", "list", []),
    _D("index.interval.bytes", "int", 4096, _at_least(0)),
    _D("leader.replication.throttled.replicas", "list", []),
    _D("local.retention.bytes", "long", -2, _at_least(-2)),
    _D("local.retention.ms", "long", -2, _at_least(-2)),
    _D("max.compaction.lag.ms", "long", LONG_MAX, _at_least(1)),
    _D("max.message.bytes", "int", 1048588, _at_least(0)),
    _D("message.downconversion.enable", "boolean", True),
    _D("message.format.version", "string", "3.0-IV1"),
    _D("message.timestamp.after.max.ms", "long", LONG_MAX, _at_least(0)),
    _D("message.timestamp.before.max.ms", "long", LONG_MAX, _at_least(0)),
    _D("message.timestamp.difference.max.ms", "long", LONG_MAX, _at_least(0)),
    _D("message.timestamp.type", "string", "CreateTime", _one_of("CreateTime", "LogAppendTime")),
    _D("min.cleanable.dirty.ratio", "double", 0.5, _between(0, 1)),
    _D("min.compaction.lag.ms", "long", 0, _at_least(0)),
    _D("min.insync.replicas", "int", 1, _at_least(1)),
    _D("preallocate", "boolean", False),
    _D("remote.log.copy.disable", "boolean", False),
    _D("remote.log.delete.on.disable", "boolean", False),
    _D("remote.storage.enable", "boolean", False),
    _D("retention.bytes", "long", -1),
    _D("retention.ms", "long", 604800000, _at_least(-1)),
    _D("segment.bytes", "int", 1073741824, _at_least(14)),
    _D("segment.index.bytes", "int", 10485760, _at_least(4)),
    _D("segment.jitter.ms", "long", 0, _at_least(0)),
    _D("segment.ms", "long", 604800000, _at_least(1)),
    _D("unclean.leader.election.enable", "boolean", False),
)
TOPIC_CONFIG_DEFS_BY_NAME: dict[str, ConfigDef] = {d.name: d for d in TOPIC_CONFIG_DEFS}


_TARGET_CODECS = {"producer": None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class LogConfig:
    """An immutable, validated set of topic-level configs. Shared freely; replaced, never mutated."""

    __slots__ = (
        "_explicit",
        "_values",
        "file_delete_delay_ms",
        "flush_messages",
        "flush_ms",
        "index_interval_bytes",
        "log_append_time",
        "max_message_bytes",
        "retention_bytes",
        "retention_ms",
        "segment_bytes",
        "segment_index_bytes",
        "segment_jitter_ms",
        "segment_ms",
        "target_codec",
        "timestamp_after_max_ms",
        "timestamp_before_max_ms",
    )

    def __init__(self, values: Mapping[str, Any] | None = None, explicit: frozenset[str] = frozenset()):
        merged = {d.name: d.default for d in TOPIC_CONFIG_DEFS}
        if values:
            merged.update(values)
        self._values: dict[str, Any] = merged
        self._explicit = explicit
        self.segment_bytes: int = merged["segment.bytes"]
        self.segment_ms: int = merged["segment.ms"]
        self.segment_jitter_ms: int = merged["segment.jitter.ms"]
        self.segment_index_bytes: int = merged["segment.index.bytes"]
        self.index_interval_bytes: int = merged["index.interval.bytes"]
        self.retention_ms: int = merged["retention.ms"]
        self.retention_bytes: int = merged["retention.bytes"]
        self.file_delete_delay_ms: int = merged["file.delete.delay.ms"]
        self.flush_messages: int = merged["flush.messages"]
        self.flush_ms: int = merged["flush.ms"]
        self.max_message_bytes: int = merged["max.message.bytes"]
        self.log_append_time: bool = merged["message.timestamp.type"] == "LogAppendTime"
        # codec id batches must be stored with; None keeps the producer's (compression.type=producer)
        self.target_codec: int | None = _TARGET_CODECS[merged["compression.type"]]
        self.timestamp_before_max_ms: int = merged["message.timestamp.before.max.ms"]
        self.timestamp_after_max_ms: int = merged["message.timestamp.after.max.ms"]
        # The deprecated difference setting still applies where the newer pair was not set (Kafka 3.6+).
        difference = "message.timestamp.difference.max.ms"
        if difference in explicit:
            if "message.timestamp.before.max.ms" not in explicit:
                self.timestamp_before_max_ms = merged[difference]
            if "message.timestamp.after.max.ms" not in explicit:
                self.timestamp_after_max_ms = merged[difference]

    @classmethod
    def from_properties(cls, mapping: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Parse and validate `mapping` (config name -> string) on top of `base` (or Kafka's defaults).

        Raises KafkaError(INVALID_CONFIG) for an unknown name or a bad value.
        """
        values = dict(base._values) if base is not None else {}
        explicit = set(base._explicit) if base is not None else set()
        for name, raw in mapping.items():
            definition = TOPIC_CONFIG_DEFS_BY_NAME.get(name)
            if definition is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
            if raw is None:
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG, f"Null value not supported for topic config {name}"
                )
            try:
                value = definition.parse(str(raw))
                complaint = definition.validator(value) if definition.validator is not None else None
            except ValueError as exc:
                complaint = str(exc)
            if complaint:
                # Kafka's wording (ConfigException): clients and tools show it as it is
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {name}: {complaint}"
                )
            values[name] = value
            explicit.add(name)
        return cls(values, frozenset(explicit))

    def get(self, name: str) -> Any:
        """The parsed value of config `name` (KeyError for an unknown name)."""
        return self._values[name]

    def is_explicit(self, name: str) -> bool:
        """True when `name` was set by a mapping rather than taken from Kafka's default."""
        return name in self._explicit

    def items(self) -> Iterator[tuple[str, str]]:
        """(name, Kafka string form) for every config, in table order."""
        for definition in TOPIC_CONFIG_DEFS:
            yield definition.name, definition.render(self._values[definition.name])

    def to_properties(self) -> dict[str, str]:
        return dict(self.items())

    @property
    def cleanup_policy(self) -> list[str]:
        return list(self._values["cleanup.policy"])

    @property
    def compacted(self) -> bool:
        return "compact" in self._values["cleanup.policy"]

    @property
    def deletes_by_retention(self) -> bool:
        return "delete" in self._values["cleanup.policy"]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogConfig) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self.items()))

    def __repr__(self) -> str:
        changed = {n: v for n, v in self.items() if self._values[n] != TOPIC_CONFIG_DEFS_BY_NAME[n].default}
        return f"LogConfig({changed})"
