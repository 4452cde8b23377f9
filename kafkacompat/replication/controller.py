"""The controller's decisions: replica assignment, leader election, ISR changes on broker loss.

Theory of operation
-------------------
Pure functions over plain values; the trio/ZooKeeper edge (the controller's part of
`cluster.ClusterRuntime`) reads the state, calls these, and writes the results with versioned
compare-and-set writes carrying the controller epoch, so a stale controller is fenced by ZooKeeper.

- `assign_replicas(brokers, partitions, replication_factor, ...)` is Kafka's `AdminUtils`
  assignment: brokers sorted by id; without racks a round robin whose first replica starts at a random
  index and whose followers are shifted by an amount that grows every `len(brokers)` partitions; with
  racks (every broker has `broker.rack`) the brokers are first interleaved rack by rack and each
  further replica skips brokers on racks (and brokers) already used until every rack is used. The
  random start can be fixed (`start_index`) so tests and reassignment tools are deterministic.
- Leader election follows Kafka's `PartitionLeaderElectionAlgorithms`: the first replica in assignment
  order that is alive and in the ISR (`elect_offline_leader`), falling back to any live replica when
  `unclean.leader.election.enable` is true (the ISR then becomes just that leader); the preferred
  replica (`elect_preferred_leader`); the first live ISR replica not shutting down
  (`elect_for_controlled_shutdown`). Every new leader gets leader epoch + 1 and the controller's epoch.
- `preferred_leader_moves(...)` is `auto.leader.rebalance.enable`: for every broker whose share of
  "partitions it prefers but does not lead" exceeds `leader.imbalance.per.broker.percentage`, the
  partitions whose preferred replica could lead now (alive and in the ISR).
- `on_brokers_lost(...)` turns "these brokers' sessions ended" into new partition states: a partition
  led by a lost broker gets a new leader (or leader -1 when none is eligible: offline); a lost follower
  leaves the ISR (except the last member, as Kafka keeps it so a clean election stays possible), with
  the leader epoch bumped so the old members are fenced.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kafkacompat.replication.partition_state import NO_LEADER, LeaderAndIsr
from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = [
    "BrokerMetadata",
    "assign_replicas",
    "elect_for_controlled_shutdown",
    "elect_offline_leader",
    "elect_preferred_leader",
    "on_brokers_lost",
    "preferred_leader_moves",
    "rack_alternated_brokers",
]


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    broker_id: int
    rack: str | None = None


def _replica_index(first_index: int, shift: int, replica: int, n_brokers: int) -> int:
    offset = 1 + (shift + replica) % (n_brokers - 1)
    return (first_index + offset) % n_brokers


def rack_alternated_brokers(brokers: Iterable[BrokerMetadata]) -> list[int]:
    """Broker ids taken one rack at a time (racks sorted, brokers sorted within each rack)."""
    by_rack: dict[str, list[int]] = {}
    for broker in brokers:
        by_rack.setdefault(str(broker.rack), []).append(broker.broker_id)
    racks = sorted(by_rack)
    queues = [sorted(by_rack[rack]) for rack in racks]
    total = sum(len(q) for q in queues)
    result: list[int] = []
    index = 0
    positions = [0] * len(queues)
    while len(result) < total:
        queue = queues[index]
        if positions[index] < len(queue):
            result.append(queue[positions[index]])
            positions[index] += 1
        index = (index + 1) % len(queues)
    return result


def assign_replicas(
    brokers: Sequence[BrokerMetadata],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int = -1,
    start_partition: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """partition -> replica list (first = preferred leader), Kafka's rack-aware round robin."""
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if partitions <= 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor > len(brokers):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
        )
    rng = rng or random.Random()
    with_rack = [b for b in brokers if b.rack is not None]
    if with_rack and len(with_rack) != len(brokers):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Not all brokers have rack information for replica rack aware assignment.",
        )
    n = len(brokers)
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    current = max(0, start_partition)
    result: dict[int, list[int]] = {}
    if not with_rack:
        ids = sorted(b.broker_id for b in brokers)
        for _ in range(partitions):
            if current > 0 and current % n == 0:
                shift += 1
            first = (current + start) % n
            replicas = [ids[first]]
            replicas += [ids[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
            result[current] = replicas
            current += 1
        return result
    rack_of = {b.broker_id: str(b.rack) for b in brokers}
    n_racks = len(set(rack_of.values()))
    arranged = rack_alternated_brokers(brokers)
    for _ in range(partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first, shift * n_racks, k, n)]
                rack = rack_of[broker]
                k += 1
                if (rack not in racks_used or len(racks_used) == n_racks) and (
                    broker not in brokers_used or len(brokers_used) == n
                ):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        result[current] = replicas
        current += 1
    return result


def elect_offline_leader(
    assignment: Sequence[int], isr: Sequence[int], live: set[int], unclean: bool
) -> tuple[int, tuple[int, ...]]:
    """(leader, new ISR) after the leader went away; leader -1 when no replica is eligible."""
    for replica in assignment:
        if replica in live and replica in isr:
            return replica, tuple(r for r in isr if r in live)
    if unclean:
        for replica in assignment:
            if replica in live:
                return replica, (replica,)
    return NO_LEADER, tuple(isr)


def elect_preferred_leader(assignment: Sequence[int], isr: Sequence[int], live: set[int]) -> int:
    """The preferred replica if it can lead now, else -1 (PREFERRED_LEADER_NOT_AVAILABLE)."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return NO_LEADER


def elect_for_controlled_shutdown(
    assignment: Sequence[int], isr: Sequence[int], live: set[int], shutting_down: set[int]
) -> tuple[int, tuple[int, ...]]:
    """(leader, new ISR) moving leadership away from brokers in controlled shutdown."""
    for replica in assignment:
        if replica in live and replica in isr and replica not in shutting_down:
            return replica, tuple(r for r in isr if r not in shutting_down)
    return NO_LEADER, tuple(isr)


def on_brokers_lost(
    partitions: Mapping[tuple[str, int], tuple[Sequence[int], LeaderAndIsr]],
    lost: set[int],
    live: set[int],
    controller_epoch: int,
    *,
    unclean: bool | Mapping[str, bool] = False,
) -> dict[tuple[str, int], LeaderAndIsr]:
    """New states for every partition that a loss of `lost` brokers changes.

    `partitions` maps (topic, partition) to (assignment, current state); `unclean` may be per topic.
    The states returned carry the old zk_version: the edge writes them with compare-and-set on it.
    """
    changes: dict[tuple[str, int], LeaderAndIsr] = {}
    for key, (assignment, state) in partitions.items():
        topic_unclean = unclean.get(key[0], False) if isinstance(unclean, Mapping) else unclean
        if state.leader in lost or (state.leader == NO_LEADER and any(r in live for r in assignment)):
            leader, isr = elect_offline_leader(assignment, state.isr, live, topic_unclean)
            if leader == NO_LEADER and state.leader == NO_LEADER:
                continue  # still offline: nothing to write
            if leader == NO_LEADER:
                # Kafka keeps the last ISR member so that its return allows a clean election.
                isr = tuple(r for r in state.isr if r in live) or tuple(state.isr)
            changes[key] = LeaderAndIsr(
                leader, state.leader_epoch + 1, isr, controller_epoch, state.zk_version
            )
        elif any(r in lost for r in state.isr):
            remaining = tuple(r for r in state.isr if r not in lost)
            if not remaining:
                remaining = tuple(state.isr[:1])
            changes[key] = LeaderAndIsr(
                state.leader, state.leader_epoch + 1, remaining, controller_epoch, state.zk_version
            )
    return changes


def preferred_leader_moves(
    partitions: Mapping[tuple[str, int], tuple[Sequence[int], LeaderAndIsr]],
    live: set[int],
    imbalance_percentage: int,
) -> list[tuple[str, int]]:
    """Partitions to move back to their preferred replica (Kafka's checkAndTriggerAutoLeaderRebalance)."""
    by_preferred: dict[int, list[tuple[tuple[str, int], Sequence[int], LeaderAndIsr]]] = {}
    for key, (assignment, state) in partitions.items():
        if assignment:
            by_preferred.setdefault(assignment[0], []).append((key, assignment, state))
    moves: list[tuple[str, int]] = []
    for preferred, entries in sorted(by_preferred.items()):
        if preferred not in live:
            continue
        not_led = [e for e in entries if e[2].leader != preferred]
        if not entries or len(not_led) * 100 <= imbalance_percentage * len(entries):
            continue
        for key, assignment, state in not_led:
            if elect_preferred_leader(assignment, state.isr, live) == preferred:
                moves.append(key)
    return sorted(moves)
