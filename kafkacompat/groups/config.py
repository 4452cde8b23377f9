"""``GroupConfig``: the group coordinator's broker configs as one frozen value.

The core reads every limit and timeout from this value, never from the broker's property map:
``from_properties`` maps Kafka's config names onto the fields once, and a missing name keeps Kafka's
default, so the core and its tests can be built without a broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["GroupConfig"]


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Broker configs of the group coordinator (Kafka's names in ``from_properties``)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offsets_topic_num_partitions: int = 50
    offset_metadata_max_bytes: int = 4096
    # Kafka's fixed timeout for a new member's JoinGroup (not a config there either).
    new_member_join_timeout_ms: int = 300_000

    _NAMES = {
        "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
        "group.min.session.timeout.ms": "min_session_timeout_ms",
        "group.max.session.timeout.ms": "max_session_timeout_ms",
        "group.max.size": "max_size",
        "offsets.retention.minutes": "offsets_retention_minutes",
        "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
        "offsets.topic.num.partitions": "offsets_topic_num_partitions",
        "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    }

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> GroupConfig:
        return cls(**{attr: int(props[name]) for name, attr in cls._NAMES.items() if name in props})

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000
