"""The classic group coordinator on the coordinator runtime, over `__consumer_offsets`.

Theory of operation
-------------------
`GroupRuntime` is the `CoordinatorRuntime` (coordinator_runtime.py: per-partition serialisation,
writes through the partition writer with acks=all, loading on leadership, timers, parked JoinGroup and
SyncGroup requests) driving one `kafkacompat.groups.GroupCoordinatorCore`; handlers call `call()`
with the group id as `key`. What is the group coordinator's own:

- `__consumer_offsets` is created (compacted, `offsets.topic.num.partitions` partitions,
  `offsets.topic.segment.bytes`, `offsets.topic.replication.factor` capped at the live brokers) on the
  first operation that may write — FindCoordinator for a group, or any membership/offset operation — as
  Kafka creates it on first use;
- records not in the ISR within `offsets.commit.timeout.ms` fail the operation;
- a transaction marker written into a `__consumer_offsets` partition (by the transaction coordinator's
  marker writer) settles the producer's pending TxnOffsetCommit offsets there (`write_txn_marker`).

Owned by `BrokerState.groups` (set by the server); handlers call `call()`, `ensure_offsets_topic()`
and read `loaded`; nothing else touches the core.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kafkacompat.broker.coordinator_log import create_compacted_internal_topic
from kafkacompat.broker.coordinator_runtime import CoordinatorRuntime
from kafkacompat.groups.manager import GroupConfig, GroupCoordinatorCore

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState

__all__ = ["OFFSETS_TOPIC", "GroupRuntime", "group_config"]

log = logging.getLogger("kafkacompat.groups")

OFFSETS_TOPIC = "__consumer_offsets"


def group_config(broker: BrokerState, partitions: int | None = None) -> GroupConfig:
    """The core's config from the broker's (Kafka names); `partitions` overrides the partition count."""
    props: dict[str, Any] = {}
    for name in GroupConfig._NAMES:
        try:
            props[name] = broker.config[name]
        except KeyError:
            continue
    if partitions is not None:
        props["offsets.topic.num.partitions"] = partitions
    return GroupConfig.from_properties(props)


class GroupRuntime(CoordinatorRuntime[GroupCoordinatorCore]):
    """The group coordinator: its core on the coordinator runtime (module docstring)."""

    def __init__(self, broker: BrokerState) -> None:
        super().__init__(
            broker,
            OFFSETS_TOPIC,
            configured_partitions=group_config(broker).offsets_topic_num_partitions,
            log=log,
            load_buffer_option="offsets.load.buffer.size",
            what="group records",
        )

    def _core_for(self, partitions: int) -> GroupCoordinatorCore:
        return GroupCoordinatorCore(group_config(self.broker, partitions))

    def write_timeout(self) -> float:
        return float(self.broker.config["offsets.commit.timeout.ms"]) / 1000

    async def _create_topic(self) -> None:
        await create_compacted_internal_topic(
            self.broker,
            OFFSETS_TOPIC,
            self.partitions,
            self.broker.config["offsets.topic.segment.bytes"],
            replication_factor=min(
                self.broker.config["offsets.topic.replication.factor"],
                self.broker.live_broker_count(),
            ),
        )

    async def ensure_offsets_topic(self) -> None:
        """Create __consumer_offsets (compacted, internal) if it does not exist yet."""
        await self.ensure_topic()

    async def write_txn_marker(
        self, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> int | None:
        """Write a transaction marker into __consumer_offsets-`partition` and settle the producer's pending
        transactional offsets there. Returns the offset at which the marker is committed (None: the
        partition is not here, nothing was written). Raises KafkaError when it cannot be written."""
        return await self.write_marker(
            partition,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            lambda now: self.core.complete_txn(producer_id, commit, partition, now),
        )


# --- helpers for the group handlers ---------------------------------------------------------------


def runtime_of(broker: BrokerState) -> GroupRuntime | None:
    """The broker's group runtime, or None when none runs (handlers answer COORDINATOR_NOT_AVAILABLE)."""
    return broker.groups


def client_host(peer: str) -> str:
    """A peer "host:port" as Kafka reports a member's host (InetAddress.toString(): "/host")."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return "/" + host.strip("[]")
