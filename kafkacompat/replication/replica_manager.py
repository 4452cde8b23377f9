"""The partition seam: every write as a partition's leader, and the wait for it to be committed.

Theory of operation
-------------------
Produce, the group coordinator, the transaction coordinator and its markers all append to partitions
this broker leads, and an acks=-1 writer then waits until the append is committed (the high watermark
passed it). `ReplicaManager` is that one sequence, as Kafka's `ReplicaManager.appendRecords` with the
ISR logic owned by each partition:

1. `append_as_leader` checks leadership, refuses an acks=-1 append while the ISR is smaller than the
   partition's `min.insync.replicas` (NOT_ENOUGH_REPLICAS, before anything is written), appends through
   the `PartitionLog` (which validates and assigns offsets), then moves the high watermark as far as the
   ISR allows and wakes whatever is parked on the partition (fetches, acks=-1 produces, followers). It
   returns the log's result and the offset the high watermark must reach for the append to be committed.
   Nothing is awaited inside it, so leadership cannot change between its check and the append.
2. `wait_for_commits` parks until each partition's high watermark reaches its offset, the ISR fell below
   `min.insync.replicas` meanwhile (NOT_ENOUGH_REPLICAS_AFTER_APPEND), leadership moved
   (NOT_LEADER_OR_FOLLOWER), or the deadline passed (REQUEST_TIMED_OUT).

Two implementations, chosen once at start-up (`BrokerState.replicas`): `LocalReplicaManager` for a
single node, which leads every partition at leader epoch 0 with an ISR of itself (the high watermark is
the log end at once, and nothing ever waits), and `ClusterReplicaManager` for ZooKeeper mode, which owns
one `PartitionState` per hosted partition and the leader's side of replication: follower fetches move
the high watermark and propose ISR expansion, and its own task proposes ISR shrinks (Kafka's
isr-expiration task), independently of the reconcile with ZooKeeper.
ISR changes go to the controller as AlterPartition through the `ClusterLink` (the cluster runtime), and
only the controller's answer changes the ISR. Coordinators register leadership listeners for their
internal topics and are told, in tasks of the replica manager's, when this broker starts or stops leading
one of its partitions.

The same object answers what Kafka's MetadataCache and controller answer a request handler, so no
handler asks which mode the broker runs in: who leads a partition and at which epoch (`partition_metadata`,
`leader_of`), which brokers are live and where clients reach them (`live_broker_ids`, `broker_endpoints`),
who the controller is, what replica assignment a new topic may name, the reassignments in progress,
leader elections, a controlled shutdown as controller and the replication figures of the metrics. A
single node answers for a cluster of itself (its `LocalHost` is the broker); the cluster's replica
manager asks the cluster runtime's metadata view and controller duties, through its `ClusterLink`.

The parked-request registry (`Watchers`) and the clock are given by the broker, so this module needs
nothing from the serving package.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, NamedTuple, Protocol

import trio

from kafkacompat.replication.partition_state import LeaderAndIsr, PartitionState
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.log.manager import LogManager
    from kafkacompat.log.partition_log import AppendResult, PartitionLog
    from kafkacompat.replication.cluster.shared import ZkSnapshot
    from kafkacompat.replication.metadata import LocalMetadata
    from kafkacompat.replication.zk_data import BrokerRegistration

__all__ = [
    "BrokerEndpoint",
    "ClusterLink",
    "ClusterReplicaManager",
    "LeaderAppend",
    "LeadershipListener",
    "LocalHost",
    "LocalReplicaManager",
    "PartitionMetadata",
    "ReplicaManager",
    "ReplicationHealth",
    "Watchers",
]

log = logging.getLogger("kafkacompat.replicas")

TopicPartition = tuple[str, int]
ISR_CHECK_MAX_SECONDS = 2.0
#: how a parked request waits: until the event is set or the deadline (trio time) passes
Park = Callable[[trio.Event, float], Awaitable[None]]
#: told (partition, leads, leader epoch) when this broker starts or stops leading a partition of a topic
LeadershipListener = Callable[[int, bool, int], Awaitable[None]]
#: (error, message) per partition of a reassignment or an election
PartitionResults = dict[TopicPartition, tuple[ErrorCode, str | None]]
#: (replicas, adding, removing) of a partition being reassigned
Reassignment = tuple[list[int], list[int], list[int]]
NOT_NEEDED = "Leader election not needed for topic partition."


class Watchers(Protocol):
    """The broker's registry of parked requests, keyed by partition (broker/delayed.py)."""

    def watch(self, partitions: Iterable[TopicPartition]) -> AbstractContextManager[trio.Event]: ...

    def notify(self, topic: str, partition: int) -> None: ...


class LeaderAppend(NamedTuple):
    """What an append as leader did: the log's result, and the offset the high watermark must reach
    for it to be committed (the log end after it)."""

    result: AppendResult
    required_offset: int


async def park_until(event: trio.Event, deadline: float) -> None:
    """The park of a wait with no client connection to watch: the event or the deadline (also the
    default park of a broker's RequestContext)."""
    with trio.move_on_at(deadline):
        await event.wait()


class PartitionMetadata(NamedTuple):
    """A partition as clients are told of it (Metadata, DescribeTopicPartitions, KIP-951 leader hints)."""

    leader: int  #: -1 when no live broker leads it
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]  #: replicas not live


class BrokerEndpoint(NamedTuple):
    """A live broker as the clients of one listener reach it."""

    node_id: int
    host: str
    port: int
    rack: str | None


class ReplicationHealth(NamedTuple):
    """The replica manager's figures of the metrics endpoint, as Kafka reports them."""

    leaders: int
    under_replicated: int
    offline_partitions: int
    active_controller: int


def _min_isr(partition_log: PartitionLog) -> int:
    return int(partition_log.config.get("min.insync.replicas"))


class ReplicaManager:
    """The seam (see module docstring). Subclasses decide leadership and when an append is committed."""

    def __init__(self, logs: LogManager, watchers: Watchers) -> None:
        self.logs = logs
        self.watchers = watchers
        self.leadership_listeners: dict[str, list[LeadershipListener]] = {}

    def add_leadership_listener(self, topic: str, listener: LeadershipListener) -> None:
        """Have `listener` told of every election and resignation of this broker for `topic`'s partitions
        (the coordinators follow their internal topics' leadership, as Kafka's are told onElection and
        onResignation). A single node leads everything from the start and never calls it."""
        self.leadership_listeners.setdefault(topic, []).append(listener)

    # --- leadership -----------------------------------------------------------------------------------

    def leader_epoch(self, topic: str, partition: int) -> int:
        raise NotImplementedError

    def check_leader(self, topic: str, partition: int) -> None:
        """NOT_LEADER_OR_FOLLOWER unless this broker leads the partition."""
        raise NotImplementedError

    def is_leader(self, topic: str, partition: int) -> bool:
        try:
            self.check_leader(topic, partition)
        except KafkaError:
            return False
        return True

    def in_sync(self, topic: str, partition: int, replica_id: int) -> bool:
        """Whether `replica_id` is in the partition's ISR as this broker knows it."""
        raise NotImplementedError

    # --- the write path -------------------------------------------------------------------------------

    def append_as_leader(
        self,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        records: memoryview | bytes | bytearray,
        now_ms: int,
        *,
        required_acks: int,
        check_producers: bool = True,
        from_coordinator: bool = False,
    ) -> LeaderAppend:
        """Check, append and advance (step 1 of the module docstring). Raises KafkaError."""
        self._check_append(topic, partition, partition_log, required_acks)
        result = partition_log.append_as_leader(
            records,
            self.leader_epoch(topic, partition),
            now_ms,
            check_producers=check_producers,
            from_coordinator=from_coordinator,
        )
        required = partition_log.log_end_offset
        if not result.duplicate:  # a retried duplicate wrote nothing: nobody to wake
            self._appended(topic, partition, partition_log)
        return LeaderAppend(result, required)

    def _check_append(self, topic: str, partition: int, partition_log: PartitionLog, acks: int) -> None:
        raise NotImplementedError

    def _appended(self, topic: str, partition: int, partition_log: PartitionLog) -> None:
        raise NotImplementedError

    async def wait_for_commits(
        self, required: Mapping[TopicPartition, int], deadline: float, park: Park = park_until
    ) -> dict[TopicPartition, ErrorCode]:
        """Step 2 of the module docstring: the partitions that did not commit, with why (empty when
        every one did)."""
        raise NotImplementedError

    # --- the follower side of a leader ----------------------------------------------------------------

    def follower_fetched(
        self, topic: str, partition: int, replica_id: int, fetch_offset: int, partition_log: PartitionLog
    ) -> None:
        """A follower fetched from `fetch_offset` (its log end): its progress, the HW, ISR expansion."""
        raise NotImplementedError

    # --- the cluster as clients see it (Kafka's MetadataCache) ----------------------------------------

    #: whether a Fetch's replica id names a follower (a single node serves it as a consumer)
    serves_followers = False

    def partition_metadata(self, topic: str, partition: int) -> PartitionMetadata:
        """Leader, leader epoch, replicas, ISR and offline replicas of a partition."""
        raise NotImplementedError

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's live leader, -1 when none."""
        return self.partition_metadata(topic, partition).leader

    def live_broker_ids(self) -> list[int]:
        raise NotImplementedError

    def live_broker_count(self) -> int:
        """How many brokers are live: the bound of a new topic's replication factor."""
        return len(self.live_broker_ids())

    def broker_endpoints(self, listener_name: str) -> list[BrokerEndpoint]:
        """Every live broker with an endpoint on `listener_name`, as that listener's clients reach it."""
        raise NotImplementedError

    def controller_id(self) -> int:
        """The active controller, -1 when none is known."""
        raise NotImplementedError

    async def refresh_live_brokers(self) -> None:
        """Read the live brokers now (a new topic's replica assignment counts them)."""
        return None

    def check_replica_assignment(self, assignments: Iterable[tuple[int, list[int]]]) -> dict[int, list[int]]:
        """A CreateTopics request's explicit replica lists (partition, brokers), checked: the assignment
        to create, or KafkaError(INVALID_REPLICA_ASSIGNMENT)."""
        raise NotImplementedError

    def reassignments(self) -> dict[TopicPartition, Reassignment]:
        """(replicas, adding, removing) of every partition being reassigned."""
        raise NotImplementedError

    async def alter_reassignments(self, wanted: dict[TopicPartition, list[int] | None]) -> PartitionResults:
        """Start (a replica list) or cancel (None) reassignments. Raises KafkaError for the request."""
        raise NotImplementedError

    async def elect_leaders(
        self, wanted: list[TopicPartition] | None, election_type: int
    ) -> PartitionResults:
        """Preferred (0) or unclean (1) leader elections of `wanted` (None: every partition). Raises
        KafkaError for the request."""
        raise NotImplementedError

    async def controlled_shutdown_as_controller(self, broker_id: int) -> list[TopicPartition]:
        """A broker's controlled shutdown, as the controller: the partitions it still leads. Raises
        KafkaError."""
        raise NotImplementedError

    def health(self, hosted: int, offline_logs: int) -> ReplicationHealth:
        """The metrics' figures, given the partition logs loaded here and those that could not be."""
        raise NotImplementedError


class LocalHost(Protocol):
    """What a single node's seam asks of its broker (`kafkacompat.broker.state.BrokerState` is one)."""

    node_id: int
    #: the effective broker config (replaced, never mutated, by a dynamic change: read it each time)
    config: BrokerConfig
    metadata: LocalMetadata

    def advertised_endpoint(self, listener_name: str) -> tuple[str, int]: ...


class LocalReplicaManager(ReplicaManager):
    """A single node: leader of every partition at epoch 0, the ISR itself, every append committed, and
    the controller of a cluster of itself."""

    def __init__(self, logs: LogManager, watchers: Watchers, host: LocalHost) -> None:
        super().__init__(logs, watchers)
        self.host = host

    def leader_epoch(self, topic: str, partition: int) -> int:
        return 0

    def check_leader(self, topic: str, partition: int) -> None:
        return None

    def in_sync(self, topic: str, partition: int, replica_id: int) -> bool:
        return False  # no other replica exists

    def _check_append(self, topic: str, partition: int, partition_log: PartitionLog, acks: int) -> None:
        if acks == -1 and (min_isr := _min_isr(partition_log)) > 1:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR 1 is insufficient to satisfy the min.isr requirement of "
                f"{min_isr}",
            )

    def _appended(self, topic: str, partition: int, partition_log: PartitionLog) -> None:
        partition_log.update_high_watermark(partition_log.log_end_offset)
        self.watchers.notify(topic, partition)

    async def wait_for_commits(
        self, required: Mapping[TopicPartition, int], deadline: float, park: Park = park_until
    ) -> dict[TopicPartition, ErrorCode]:
        return {}

    def follower_fetched(
        self, topic: str, partition: int, replica_id: int, fetch_offset: int, partition_log: PartitionLog
    ) -> None:
        return None  # a replica id on a single node is served as a consumer

    # --- the cluster as clients see it: this node alone -----------------------------------------------

    def partition_metadata(self, topic: str, partition: int) -> PartitionMetadata:
        node = self.host.node_id
        return PartitionMetadata(node, self.leader_epoch(topic, partition), [node], [node], [])

    def live_broker_ids(self) -> list[int]:
        return [self.host.node_id]

    def broker_endpoints(self, listener_name: str) -> list[BrokerEndpoint]:
        host, port = self.host.advertised_endpoint(listener_name)
        return [BrokerEndpoint(self.host.node_id, host, port, self.host.config["broker.rack"])]

    def controller_id(self) -> int:
        return self.host.node_id

    def check_replica_assignment(self, assignments: Iterable[tuple[int, list[int]]]) -> dict[int, list[int]]:
        node = self.host.node_id
        for _, replicas in assignments:
            if list(replicas) != [node]:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Replica assignment {list(replicas)} names brokers other than the only one, {node}.",
                )
        return {index: [node] for index, _ in assignments}

    def reassignments(self) -> dict[TopicPartition, Reassignment]:
        return {}

    def _exists(self, topic: str, partition: int) -> bool:
        info = self.host.metadata.topic(topic)
        return info is not None and 0 <= partition < info.partitions

    async def alter_reassignments(self, wanted: dict[TopicPartition, list[int] | None]) -> PartitionResults:
        """Nothing to move: only a list of this node alone is valid, and nothing is ever in progress."""
        node = self.host.node_id
        results: PartitionResults = {}
        for key, target in wanted.items():
            if not self._exists(*key):
                results[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            elif target is None:
                results[key] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No reassignment in progress.")
            elif target != [node]:
                results[key] = (
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Replica assignment {target} names brokers other than the only one, {node}.",
                )
            else:
                results[key] = (ErrorCode.NONE, None)
        return results

    async def elect_leaders(
        self, wanted: list[TopicPartition] | None, election_type: int
    ) -> PartitionResults:
        """This node already leads every partition: no election is needed."""
        keys = wanted
        if keys is None:
            keys = [(t.name, i) for t in self.host.metadata.topics() for i in range(t.partitions)]
        results: PartitionResults = {}
        for key in keys:
            if not self._exists(*key):
                results[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            else:
                results[key] = (ErrorCode.ELECTION_NOT_NEEDED, NOT_NEEDED)
        return results

    async def controlled_shutdown_as_controller(self, broker_id: int) -> list[TopicPartition]:
        if broker_id != self.host.node_id:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        return []

    def health(self, hosted: int, offline_logs: int) -> ReplicationHealth:
        """Leader of every partition it has, each its own whole ISR, its own controller; a partition is
        offline when its log could not be loaded (a storage error)."""
        return ReplicationHealth(hosted, 0, offline_logs, 1)


class ClusterLink(Protocol):
    """What the leader side needs of the cluster runtime: its fencing, the controller, the known state;
    and what the seam answers clients from: the runtime's metadata view and the controller's duties."""

    node_id: int

    def is_fenced(self) -> bool: ...

    def known_leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch in the newest state known (for a partition not hosted here)."""
        ...

    async def alter_partition(self, key: TopicPartition, proposal: LeaderAndIsr) -> LeaderAndIsr | None:
        """Send the ISR change to the controller; the state it answers with, None when refused."""
        ...

    def isr_committed(self, key: TopicPartition, state: LeaderAndIsr) -> None:
        """The controller accepted an ISR change: remember it as the newest known state."""
        ...

    def isr_refused(self, key: TopicPartition) -> None:
        """The state moved on under a proposal: look at ZooKeeper again."""
        ...

    # what clients are told (the runtime's metadata view) and what the controller answers

    @property
    def is_controller(self) -> bool: ...

    @property
    def snapshot(self) -> ZkSnapshot: ...

    def live_brokers(self) -> list[BrokerRegistration]: ...

    def controller_id(self) -> int: ...

    def partition_metadata(
        self, topic: str, partition: int
    ) -> tuple[int, int, list[int], list[int], list[int]]: ...

    def reassignments(self) -> dict[TopicPartition, Reassignment]: ...

    async def refresh_live_brokers(self) -> None: ...

    async def alter_reassignments(
        self, wanted: dict[TopicPartition, list[int] | None]
    ) -> PartitionResults: ...

    async def elect_leaders(
        self, wanted: list[TopicPartition] | None, election_type: int
    ) -> PartitionResults: ...

    async def controlled_shutdown_as_controller(self, broker_id: int) -> list[TopicPartition]: ...


class ClusterReplicaManager(ReplicaManager):
    """ZooKeeper mode: the replication state of every hosted partition and the leader's side of it."""

    def __init__(
        self,
        logs: LogManager,
        watchers: Watchers,
        link: ClusterLink,
        *,
        now_ms: Callable[[], int],
        lag_ms: int,
        closing: Callable[[], bool],
    ) -> None:
        super().__init__(logs, watchers)
        self.link = link
        self.now_ms = now_ms
        self.lag_ms = lag_ms
        self.closing = closing
        self.partitions: dict[TopicPartition, PartitionState] = {}
        #: Kafka checks every half replica.lag.time.max.ms; at most every 2 s here, so a lagging follower
        #: leaves the ISR within the lag and 2 s whatever the lag is
        self.isr_check_seconds = min(ISR_CHECK_MAX_SECONDS, max(lag_ms / 2000, 0.05))
        self._nursery: trio.Nursery | None = None

    # --- the background task --------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Propose ISR shrinks every `isr_check_seconds` (ISR writes run as tasks of their own)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    await trio.sleep(self.isr_check_seconds)
                    self.check_isr_lag()
            finally:
                self._nursery = None

    # --- leadership -----------------------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        return self.partitions.get((topic, partition))

    def leader_epoch(self, topic: str, partition: int) -> int:
        state = self.partitions.get((topic, partition))
        if state is not None:
            return state.leader_epoch
        return self.link.known_leader_epoch(topic, partition)

    def check_leader(self, topic: str, partition: int) -> None:
        self.leader_state(topic, partition)

    def leader_state(self, topic: str, partition: int) -> PartitionState:
        state = self.partitions.get((topic, partition))
        if state is None or not state.is_leader or self.link.is_fenced():
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {self.link.node_id} is not the leader for {topic}-{partition}",
            )
        return state

    def in_sync(self, topic: str, partition: int, replica_id: int) -> bool:
        state = self.partitions.get((topic, partition))
        return state is not None and replica_id in state.isr

    def led(self) -> list[PartitionState]:
        return [state for state in self.partitions.values() if state.is_leader]

    # --- the cluster as clients see it: the runtime's view ---------------------------------------------

    serves_followers = True

    def partition_metadata(self, topic: str, partition: int) -> PartitionMetadata:
        """As the cluster runtime's view has it; a leader not live is none, replicas not live offline."""
        return PartitionMetadata(*self.link.partition_metadata(topic, partition))

    def live_broker_ids(self) -> list[int]:
        return [registration.broker_id for registration in self.link.live_brokers()]

    def broker_endpoints(self, listener_name: str) -> list[BrokerEndpoint]:
        result = []
        for registration in self.link.live_brokers():
            endpoint = registration.endpoint(listener_name)
            if endpoint is not None:
                result.append(BrokerEndpoint(registration.broker_id, *endpoint, registration.rack))
        return result

    def controller_id(self) -> int:
        return self.link.controller_id()

    async def refresh_live_brokers(self) -> None:
        await self.link.refresh_live_brokers()

    def check_replica_assignment(self, assignments: Iterable[tuple[int, list[int]]]) -> dict[int, list[int]]:
        """Explicit replica lists must name distinct live brokers, all of one length."""
        live = set(self.live_broker_ids())
        result: dict[int, list[int]] = {}
        for index, brokers in assignments:
            replicas = list(brokers)
            if not replicas or len(set(replicas)) != len(replicas) or not set(replicas) <= live:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Replica assignment {replicas} must name distinct live brokers ({sorted(live)}).",
                )
            result[index] = replicas
        if len({len(r) for r in result.values()}) > 1:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All partitions must have the same replication factor."
            )
        return result

    def reassignments(self) -> dict[TopicPartition, Reassignment]:
        return self.link.reassignments()

    async def alter_reassignments(self, wanted: dict[TopicPartition, list[int] | None]) -> PartitionResults:
        return await self.link.alter_reassignments(wanted)

    async def elect_leaders(
        self, wanted: list[TopicPartition] | None, election_type: int
    ) -> PartitionResults:
        return await self.link.elect_leaders(wanted, election_type)

    async def controlled_shutdown_as_controller(self, broker_id: int) -> list[TopicPartition]:
        return await self.link.controlled_shutdown_as_controller(broker_id)

    def health(self, hosted: int, offline_logs: int) -> ReplicationHealth:
        """A leader counts the partitions it leads whose ISR is short of their replicas, and only the
        active controller counts partitions without a live leader."""
        led = self.led()
        under = sum(1 for p in led if len(p.isr) < len(p.replicas))
        offline = 0
        controller = self.link.is_controller
        if controller:
            for topic, partition in list(self.link.snapshot.states):
                if self.leader_of(topic, partition) < 0:
                    offline += 1
        return ReplicationHealth(len(led), under, offline, int(controller))

    # --- the write path -------------------------------------------------------------------------------

    def _check_append(self, topic: str, partition: int, partition_log: PartitionLog, acks: int) -> None:
        self.leader_state(topic, partition).check_enough_replicas_for_append(acks, _min_isr(partition_log))

    def _appended(self, topic: str, partition: int, partition_log: PartitionLog) -> None:
        """The HW moves when the ISR is the leader alone; followers and parked requests are woken."""
        state = self.partitions.get((topic, partition))
        if state is not None and state.maybe_advance_high_watermark(partition_log.log_end_offset):
            partition_log.update_high_watermark(state.high_watermark)
        self.watchers.notify(topic, partition)

    async def wait_for_commits(
        self, required: Mapping[TopicPartition, int], deadline: float, park: Park = park_until
    ) -> dict[TopicPartition, ErrorCode]:
        failed: dict[TopicPartition, ErrorCode] = {}
        for key, offset in required.items():
            error = await self._wait_for_commit(key, offset, deadline, park)
            if error != ErrorCode.NONE:
                failed[key] = error
        return failed

    async def _wait_for_commit(
        self, key: TopicPartition, offset: int, deadline: float, park: Park
    ) -> ErrorCode:
        """Kafka's delayed produce for one partition: until the ISR has `offset`."""
        while True:
            state = self.partitions.get(key)
            try:
                partition_log = self.logs.get_log(*key)
            except KafkaError as exc:  # its log dir went offline meanwhile
                return ErrorCode(exc.code)
            if state is None or partition_log is None or self.link.is_fenced():
                # a fenced leader answers no acks=-1 write: its leadership may have moved on
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            done, error = state.replicas_reached(offset, _min_isr(partition_log))
            if done or error != ErrorCode.NONE:
                return error
            if trio.current_time() >= deadline or self.closing():
                return ErrorCode.REQUEST_TIMED_OUT
            with self.watchers.watch([key]) as event:
                await park(event, deadline)

    # --- ISR ------------------------------------------------------------------------------------------

    def follower_fetched(
        self, topic: str, partition: int, replica_id: int, fetch_offset: int, partition_log: PartitionLog
    ) -> None:
        state = self.leader_state(topic, partition)
        state.record_follower_fetch(replica_id, fetch_offset, partition_log.log_end_offset, self.now_ms())
        if state.maybe_advance_high_watermark(partition_log.log_end_offset):
            partition_log.update_high_watermark(state.high_watermark)
            self.watchers.notify(topic, partition)
        if state.should_expand_isr(replica_id):
            self._propose(state, (topic, partition), tuple(sorted(set(state.isr) | {replica_id})))

    def check_isr_lag(self) -> None:
        """Propose to drop from the ISR every follower not caught up for replica.lag.time.max.ms."""
        now = self.now_ms()
        for key, state in list(self.partitions.items()):
            if not state.is_leader or state.pending_isr is not None:
                continue
            late = state.out_of_sync_replicas(now, self.lag_ms)
            if late:
                isr = tuple(r for r in state.isr if r not in late)
                log.info("%s-%d: ISR shrinks to %s (lagging %s)", key[0], key[1], list(isr), sorted(late))
                self._propose(state, key, isr)

    def leadership_changed(self, key: TopicPartition, leads: bool) -> None:
        """This broker started (True) or stopped leading `key`: its topic's listeners are told, each in a
        task of its own (a coordinator loads or unloads a partition meanwhile)."""
        listeners = self.leadership_listeners.get(key[0])
        if not listeners or self._nursery is None:
            return
        epoch = self.leader_epoch(*key)
        for listener in listeners:
            self._nursery.start_soon(listener, key[1], leads, epoch)

    def _propose(self, state: PartitionState, key: TopicPartition, isr: tuple[int, ...]) -> None:
        if self._nursery is None:
            return  # not running (shutting down): the next leader decides
        self._nursery.start_soon(self._write_isr, key, state.propose_isr(isr))

    async def _write_isr(self, key: TopicPartition, proposal: LeaderAndIsr) -> None:
        """Propose an ISR change to the controller (AlterPartition) and apply its answer."""
        try:
            answer = await self.link.alter_partition(key, proposal)
        except Exception as exc:
            log.warning("AlterPartition for %s-%d failed: %r", key[0], key[1], exc)
            answer = None
        state = self.partitions.get(key)
        if state is None:
            return
        if answer is None or answer.leader_epoch != state.leader_epoch or not state.is_leader:
            state.abort_isr_change()
            self.link.isr_refused(key)  # the controller's requests bring the state
            return
        state.commit_isr(answer.isr, answer.zk_version)
        self.link.isr_committed(key, state.leader_and_isr())
        try:
            partition_log = self.logs.get_log(*key)
        except KafkaError as exc:
            # an offline log (its dir failed): nothing to advance here, and this task must not take the
            # cluster runtime down with it
            log.warning("%s-%d: high watermark not advanced: %s", key[0], key[1], exc)
            return
        if partition_log is not None and state.maybe_advance_high_watermark(partition_log.log_end_offset):
            partition_log.update_high_watermark(state.high_watermark)
        self.watchers.notify(*key)
