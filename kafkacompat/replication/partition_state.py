"""Replication state of one partition on one broker: role, leader epoch, ISR, follower progress, HW.

Theory of operation
-------------------
A `PartitionState` is what a broker knows about one partition it hosts in cluster mode. It is pure:
no clock (every method that cares takes `now_ms`), no I/O, no trio. The trio edges feed it facts and
act on its answers:

- `become_leader(...)` / `become_follower(...)` apply a `LeaderAndIsr` (from the partition state znode
  or a LeaderAndIsr request). An older leader epoch than the one known is refused (`FENCED_LEADER_EPOCH`),
  so a late notification can never undo a newer one.
- On the leader, `record_follower_fetch(replica, fetch_offset, leader_leo, now_ms)` is called for every
  Fetch carrying a replica id. As in Kafka's `Replica.updateFetchState`, a follower is "caught up" at
  `now_ms` when it fetched from the leader's log end offset, and also when it fetched from at least the
  log end offset the leader had at the follower's previous fetch (it was caught up then and fetched
  everything since).
- `high_watermark` only moves forward, to the minimum log end offset of the *maximal* ISR (the committed
  ISR plus any expansion not yet written to ZooKeeper, as Kafka's `maximalIsr`), never below the leader's
  own log end offset view of it. `maybe_advance_high_watermark(leader_leo)` says whether it moved, which
  is when the edge completes parked acks=-1 produces and wakes fetches.
- `out_of_sync_replicas(now_ms, lag_ms)` lists ISR followers not caught up for longer than
  `replica.lag.time.max.ms`; `should_expand_isr(replica)` says a follower outside the ISR has caught up
  to the high watermark (and to the start of the current leader epoch). The edge proposes the new ISR
  to the controller (`propose_isr`, sent as AlterPartition) and applies the controller's answer
  (`commit_isr`) — the ISR only ever changes through the controller, this class only decides.
- `min.insync.replicas`: `check_enough_replicas_for_append(acks, min_isr)` refuses an acks=-1 produce
  before the append (NOT_ENOUGH_REPLICAS); `replicas_reached(required_offset, min_isr)` answers a parked
  acks=-1 produce after it (NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the minimum while
  it waited), with Kafka's `checkEnoughReplicasReachOffset` rules.

Owner: the broker's replica manager (one instance per hosted partition, cluster mode only).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = [
    "NO_LEADER",
    "LeaderAndIsr",
    "PartitionState",
    "ReplicaProgress",
    "Role",
]

NO_LEADER = -1


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    #: known but neither: the broker was dropped from the replicas or the partition is offline
    NONE = "none"


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """The partition state znode's content (and a LeaderAndIsr request's partition entry)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    #: the znode's version: the compare-and-set token for the next write (-1 = not read from ZooKeeper)
    zk_version: int = -1

    def with_isr(self, isr: tuple[int, ...]) -> LeaderAndIsr:
        """The state after an ISR change by the leader: same leader epoch (Kafka's ZK mode bumps only the
        zk version for ISR changes)."""
        return LeaderAndIsr(
            self.leader, self.leader_epoch, tuple(isr), self.controller_epoch, self.zk_version
        )


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one follower, from its fetches."""

    replica_id: int
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    #: the leader's log end offset when this follower last fetched (Kafka's lastFetchLeaderLogEndOffset)
    last_fetch_leader_leo: int = -1


@dataclass(slots=True)
class PartitionState:
    """One hosted partition's replication state (see the module docstring)."""

    topic: str
    partition: int
    local_broker: int
    replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    controller_epoch: int = -1
    zk_version: int = -1
    high_watermark: int = 0
    #: the first offset of the current leader epoch on this leader (a follower joining the ISR must reach it)
    leader_epoch_start_offset: int = 0
    #: an ISR written to ZooKeeper but not yet confirmed (None when nothing is in flight)
    pending_isr: tuple[int, ...] | None = None
    followers: dict[int, ReplicaProgress] = field(default_factory=dict)

    # --- role changes -------------------------------------------------------------------------------

    @property
    def role(self) -> Role:
        if self.leader == self.local_broker:
            return Role.LEADER
        if self.local_broker in self.replicas and self.leader != NO_LEADER:
            return Role.FOLLOWER
        return Role.NONE

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def _check_epoch(self, state: LeaderAndIsr) -> None:
        if state.leader_epoch < self.leader_epoch:
            raise KafkaError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"{self.topic}-{self.partition}: leader epoch {state.leader_epoch} is older than "
                f"the known {self.leader_epoch}",
            )

    def become_leader(
        self, state: LeaderAndIsr, replicas: tuple[int, ...], local_leo: int, now_ms: int
    ) -> bool:
        """Apply a state that makes this broker leader. True if this is a new leadership (new epoch):
        then follower progress restarts (every follower counts as caught up now, as Kafka resets
        lastCaughtUpTime on leadership, so none is dropped from the ISR for lag it had under the old
        leader) and the epoch starts at `local_leo`."""
        self._check_epoch(state)
        new_epoch = state.leader_epoch > self.leader_epoch or not self.is_leader
        self._apply(state, replicas)
        if new_epoch:
            self.leader_epoch_start_offset = local_leo
            self.followers = {
                r: ReplicaProgress(r, -1, now_ms, now_ms, -1) for r in replicas if r != self.local_broker
            }
            self.pending_isr = None
        else:
            for r in replicas:
                if r != self.local_broker and r not in self.followers:
                    self.followers[r] = ReplicaProgress(r, -1, now_ms, now_ms, -1)
            for r in list(self.followers):
                if r not in replicas:
                    del self.followers[r]
        return new_epoch

    def become_follower(self, state: LeaderAndIsr, replicas: tuple[int, ...]) -> bool:
        """Apply a state whose leader is another broker. True if the leader or epoch changed (the
        follower then truncates by leader epoch before it fetches again)."""
        self._check_epoch(state)
        changed = state.leader != self.leader or state.leader_epoch != self.leader_epoch
        self._apply(state, replicas)
        self.followers = {}
        self.pending_isr = None
        return changed

    def _apply(self, state: LeaderAndIsr, replicas: tuple[int, ...]) -> None:
        self.leader = state.leader
        self.leader_epoch = state.leader_epoch
        self.isr = tuple(state.isr)
        self.controller_epoch = state.controller_epoch
        self.zk_version = state.zk_version
        self.replicas = tuple(replicas)

    def resign(self) -> None:
        """Stop acting as leader (the ZooKeeper session ended) but keep the epoch and version: only a
        newer state makes this broker leader again."""
        self.leader = NO_LEADER
        self.followers = {}
        self.pending_isr = None

    def leader_and_isr(self) -> LeaderAndIsr:
        return LeaderAndIsr(self.leader, self.leader_epoch, self.isr, self.controller_epoch, self.zk_version)

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's check of a client's `current_leader_epoch` (-1 = not given): older is
        FENCED_LEADER_EPOCH, newer is UNKNOWN_LEADER_EPOCH (this broker has not heard of it yet)."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(
                ErrorCode.FENCED_LEADER_EPOCH, f"epoch {current_leader_epoch} < {self.leader_epoch}"
            )
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(
                ErrorCode.UNKNOWN_LEADER_EPOCH, f"epoch {current_leader_epoch} > {self.leader_epoch}"
            )

    # --- the leader's view of its followers ---------------------------------------------------------

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        """A follower fetched from `fetch_offset` while the leader's log ended at `leader_leo`."""
        if not self.is_leader:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.topic}-{self.partition}: not the leader"
            )
        progress = self.followers.get(replica_id)
        if progress is None:
            if replica_id not in self.replicas:
                raise KafkaError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"broker {replica_id} is not a replica of {self.topic}-{self.partition}",
                )
            progress = self.followers[replica_id] = ReplicaProgress(replica_id)
        if fetch_offset >= leader_leo:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        elif fetch_offset >= progress.last_fetch_leader_leo >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_ms = now_ms
        progress.last_fetch_leader_leo = leader_leo

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus a pending expansion (the HW waits for everyone who may be in the ISR)."""
        if self.pending_isr is None:
            return self.isr
        return tuple(sorted(set(self.isr) | set(self.pending_isr)))

    def maybe_advance_high_watermark(self, leader_leo: int) -> bool:
        """Move the HW to min(LEO of the maximal ISR); True if it moved (never backwards)."""
        if not self.is_leader:
            return False
        ends = [leader_leo]
        for replica in self.maximal_isr:
            if replica == self.local_broker:
                continue
            progress = self.followers.get(replica)
            ends.append(progress.log_end_offset if progress is not None else -1)
        candidate = min(ends)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def out_of_sync_replicas(self, now_ms: int, lag_ms: int) -> set[int]:
        """ISR followers that have not been caught up for more than `lag_ms` (replica.lag.time.max.ms)."""
        if not self.is_leader:
            return set()
        late: set[int] = set()
        for replica in self.isr:
            if replica == self.local_broker:
                continue
            progress = self.followers.get(replica)
            if progress is None or now_ms - progress.last_caught_up_ms > lag_ms:
                late.add(replica)
        return late

    def should_expand_isr(self, replica_id: int) -> bool:
        """Whether a follower outside the ISR has caught up to the HW and to the current epoch's start."""
        if not self.is_leader or replica_id in self.isr or replica_id not in self.replicas:
            return False
        if self.pending_isr is not None:
            return False
        progress = self.followers.get(replica_id)
        return (
            progress is not None
            and progress.log_end_offset >= self.high_watermark
            and progress.log_end_offset >= self.leader_epoch_start_offset
        )

    def propose_isr(self, isr: tuple[int, ...]) -> LeaderAndIsr:
        """Mark an ISR change in flight and return the state to write (compare-and-set on zk_version)."""
        self.pending_isr = tuple(isr)
        return self.leader_and_isr().with_isr(tuple(isr))

    def commit_isr(self, isr: tuple[int, ...], zk_version: int) -> None:
        """The proposed ISR was written (ZooKeeper answered with the new version)."""
        self.isr = tuple(isr)
        self.zk_version = zk_version
        self.pending_isr = None

    def abort_isr_change(self) -> None:
        """The write failed (a version conflict: the controller changed the state); the edge re-reads."""
        self.pending_isr = None

    # --- min.insync.replicas ------------------------------------------------------------------------

    def check_enough_replicas_for_append(self, acks: int, min_isr: int) -> None:
        """Refuse an acks=-1 append while the ISR is smaller than min.insync.replicas (before the append)."""
        if not self.is_leader:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.topic}-{self.partition}: not the leader"
            )
        if acks == -1 and len(self.isr) < min_isr:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {list(self.isr)} is insufficient to satisfy the min.isr "
                f"requirement of {min_isr} for partition {self.topic}-{self.partition}",
            )

    def replicas_reached(self, required_offset: int, min_isr: int) -> tuple[bool, ErrorCode]:
        """(done, error) for a parked acks=-1 produce whose last offset + 1 is `required_offset`."""
        if not self.is_leader:
            return False, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            if min_isr <= len(self.maximal_isr):
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE
