"""Cluster mode's trio edge: the broker's view of ZooKeeper, the controller's duties, replica roles.

Theory of operation
-------------------
Only built when `zookeeper.connect` is set (`server.Broker` imports this module then and only then;
single-node mode never loads it, kazoo or a JVM). `ClusterRuntime` owns the broker's `ZooKeeperStore`,
the replica manager (`replicas`, which holds one `PartitionState` per hosted partition),
`num.replica.fetchers` `FetcherTask`s per broker it follows and, while it is the controller, the
`ControllerChannel` to every live broker.

How brokers learn leadership: as in Kafka's ZooKeeper mode, the controller writes every state change to
ZooKeeper first (versioned, fenced by the controller epoch) and then tells the brokers with Kafka's
inter-broker requests over its channel (one ordered queue and connection per live broker, requests
retried on reconnect): LeaderAndIsr to the replicas of the changed partitions, UpdateMetadata to every
live broker, StopReplica (with deletion) to replicas that must go. A broker acts on those requests
(handlers leader_and_isr.py, update_metadata.py, stop_replica.py, checked by `broker_requests.py`:
broker epoch = the czxid of its `/brokers/ids/N`, controller epoch, per-partition leader epoch).

What each broker still reads from ZooKeeper itself, in `reconcile()` (a watch firing only pokes the trio
loop; the loop re-reads the tree in a worker thread and applies it on the trio thread; also every
`RECONCILE_SECONDS`): the live brokers, the controller, topics and their assignments and configs (the
topic table handlers read, the logs of assigned partitions, deleted topics' logs), and the partition
states, read without watches. Partition states from that read are only a repair path: one newer (leader
epoch, then znode version) than what the broker acts on, and still unapplied after
`REPAIR_DELAY_SECONDS`, is applied (a request lost with a connection, a controller that died between
its write and its request); an older or equal one never is, and a read that raced a newer request never
undoes it (`_merged`).

Each reconcile:

1. controller election: no `/controller` -> try to create it (the winner bumps `/controller_epoch`);
2. as controller (`controller.py` decides, `ZooKeeperStore.controller_write_states` writes with the
   controller-epoch check, then `_announce` tells the brokers): partitions of new topics get their first
   state (first live replica leads, the live replicas form the ISR); partitions led by a dead broker get
   a new leader from the ISR (`unclean.leader.election.enable` honoured per topic) with leader epoch + 1;
   dead followers leave the ISR; topics in `/admin/delete_topics` get StopReplica with deletion and are
   removed; reassignments whose new replicas joined the ISR complete. `_sync_channel` keeps one queue per
   live broker: a broker new to this controller (just registered, back with a new session, or every
   broker right after a controller failover) gets a full LeaderAndIsr for its partitions, and every
   broker a full UpdateMetadata when the live set changed. Elections (ElectLeaders, preferred
   rebalance), controlled shutdown and reassignment steps announce their writes the same way;
3. as every broker: the topic table mirrors ZooKeeper, logs of assigned partitions exist, followers
   whose leader became known start fetching, the repair path above.

The leader's side of replication is the replica manager's (`replica_manager.ClusterReplicaManager`,
`self.replicas`, which owns `self.partitions`): appends, follower fetches, the high watermark and the
ISR. ISR shrink (`replica.lag.time.max.ms`) and expansion reach the controller as AlterPartition
through `alter_partition` here; the controller validates them against ZooKeeper's state, writes them
with the compare-and-set, answers with the new state (which the leader then applies) and sends
UpdateMetadata to every broker. Leaders never write ZooKeeper.

ZooKeeper session loss (`SessionFence`): LOST resigns every leadership at once (Produce and Fetch get
NOT_LEADER_OR_FOLLOWER, no parked acks=-1 produce is answered) and drops the controller role; a
suspension longer than `zookeeper.session.timeout.ms`, or a pause of the whole process as long (a
SIGSTOP, seen as a gap in the liveness tick), fences leadership until the same session is confirmed.
With a new session the broker registers again (a new broker epoch); the controller, which moved its
leaderships away with newer leader epochs when the old session ended, sends it a full LeaderAndIsr.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.broker_requests import (
    EPOCH_DURING_DELETE,
    LEADER_AND_ISR,
    STOP_REPLICA,
    UPDATE_METADATA,
    IsrProposal,
    PartitionInfo,
    SessionFence,
    alter_partition_decision,
    check_controller_request,
    leader_and_isr_partition,
    leader_and_isr_request,
    stop_replica_partition,
    stop_replica_request,
    update_metadata_request,
)
from kafkacompat.replication.controller import (
    BrokerMetadata,
    assign_replicas,
    elect_for_controlled_shutdown,
    elect_offline_leader,
    elect_preferred_leader,
    on_brokers_lost,
    preferred_leader_moves,
)
from kafkacompat.replication.controller_channel import ControllerChannel
from kafkacompat.replication.metadata import LocalMetadata, TopicInfo
from kafkacompat.replication.partition_state import NO_LEADER, LeaderAndIsr, PartitionState
from kafkacompat.replication.replica_manager import ClusterReplicaManager
from kafkacompat.replication.zookeeper import StaleController, ZooKeeperStore
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.client import BrokerConnection
    from kafkacompat.replication.broker_host import BrokerHost
    from kafkacompat.replication.config_sync import ConfigSync
    from kafkacompat.replication.fetcher_task import FetcherTask
    from kafkacompat.security.client_auth import ClientSecurity

__all__ = ["ClusterMetadataCache", "ClusterRuntime", "ZkSnapshot"]

log = logging.getLogger("kafkacompat.cluster")

RECONCILE_SECONDS = 2.0
#: how long a newer partition state in ZooKeeper waits for the controller's LeaderAndIsr before the
#: repair path applies it
REPAIR_DELAY_SECONDS = 3.0
#: how long the controller waits for the replicas' StopReplica answers before removing a deleted topic
DELETION_WAIT_SECONDS = 10.0
CONTROLLED_SHUTDOWN = ApiKey.CONTROLLED_SHUTDOWN
PREFERRED_ELECTION = 0
UNCLEAN_ELECTION = 1
INTERNAL = frozenset({"__consumer_offsets", "__transaction_state"})


class ClusterMetadataCache(LocalMetadata):
    """The topic table in cluster mode: the same read interface as LocalMetadata, filled from ZooKeeper
    by the runtime and never persisted locally (ZooKeeper is where topics live)."""

    def __init__(self) -> None:
        self._topics = {}
        self._by_id = {}
        self._next_producer_id_block = 0
        self._dirty = False

    def commit(self) -> None:
        self._dirty = False

    def write_snapshot(self, data: bytes) -> None:  # never written: ZooKeeper holds the table
        return None


@dataclass(slots=True)
class ZkSnapshot:
    """One consistent-enough read of the tree (every read re-arms its watch)."""

    brokers: dict[int, zd.BrokerRegistration] = field(default_factory=dict)
    #: broker id -> broker epoch (the czxid of its registration)
    broker_epochs: dict[int, int] = field(default_factory=dict)
    controller: int | None = None
    #: /controller_epoch: the epoch of the newest controller (older controllers' requests are refused)
    controller_epoch: int = 0
    topics: dict[str, zd.TopicAssignment] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    states: dict[tuple[str, int], LeaderAndIsr] = field(default_factory=dict)
    deletions: list[str] = field(default_factory=list)


def read_snapshot(store: ZooKeeperStore, watch: Callable[[Any], None]) -> ZkSnapshot:
    """Blocking: the whole tree kafkacompat uses, every read but the partition states' with `watch`
    armed (partition states reach brokers in the controller's requests; only the controller writes
    them, so nobody needs to be told they changed).

    The live brokers are read last: the controller takes an ISR member missing from them for lost, so
    they must be at least as new as the states. Read first, a broker that registered again during the
    read (a zombie leader back with a new session) and was put back in an ISR by AlterPartition in the
    meantime would be shrunk out of it again, with a needless leader epoch bump."""
    snapshot = ZkSnapshot()
    snapshot.controller = store.current_controller(watch)
    snapshot.controller_epoch = store.stored_controller_epoch()
    snapshot.deletions = store.pending_topic_deletions(watch)
    for name in store.topic_names(watch):
        try:
            data, _ = store.client.get(zd.topic_path(name), watch=watch)
        except Exception:  # deleted between the listing and the read
            continue
        assignment = zd.decode_topic(name, data)
        snapshot.topics[name] = assignment
        snapshot.configs[name] = store.topic_configs(name)
        for partition in assignment.partitions:
            state = store.partition_state(name, partition)
            if state is not None:
                snapshot.states[(name, partition)] = state
    snapshot.brokers = store.live_brokers(watch, snapshot.broker_epochs)
    return snapshot


class ClusterRuntime:
    """The broker's cluster-mode state and tasks (see module docstring)."""

    def __init__(self, broker: BrokerHost, store: ZooKeeperStore) -> None:
        self.broker = broker
        self.store = store
        self.node_id = broker.node_id
        self.snapshot = ZkSnapshot()
        #: the partition seam: the replication state of every hosted partition, the leader's side
        self.replicas = ClusterReplicaManager(
            broker.logs,
            broker.watchers,
            self,
            now_ms=broker.now_ms,
            lag_ms=int(broker.config["replica.lag.time.max.ms"]),
            closing=lambda: broker.closing,
        )
        self.partitions: dict[tuple[str, int], PartitionState] = self.replicas.partitions
        #: (leader, fetcher index) -> its fetcher task (num.replica.fetchers per leader)
        self.fetchers: dict[tuple[int, int], FetcherTask] = {}
        self.is_controller = False
        self._poked = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._reconciled = trio.Event()
        self.registration: zd.BrokerRegistration | None = None
        #: set once a controlled shutdown moved this broker's leaderships away: no more fetching
        self.shutting_down = False
        #: ACLs, SCRAM credentials, quotas and dynamic broker configs in ZooKeeper (set by the server)
        self.config_sync: ConfigSync | None = None
        self._inter_broker_security: tuple[str, ClientSecurity | None] | None = None
        #: the czxid of this broker's /brokers/ids/N (Kafka's broker epoch); -1 before registration
        self.broker_epoch = -1
        #: the newest controller epoch seen in a controller request (older ones are refused)
        self.known_controller_epoch = -1
        self.fence = SessionFence(int(broker.config["zookeeper.session.timeout.ms"]))
        #: as controller: the request queues to the live brokers
        self.channel = ControllerChannel(self)
        #: as controller: brokers whose controlled shutdown was asked (INELIGIBLE_REPLICA for ISRs)
        self.shutting_down_brokers: set[int] = set()
        #: the live brokers of the last read of ZooKeeper
        self._read_brokers: dict[int, zd.BrokerRegistration] = {}
        #: partition states the last read found newer than the local ones (leader epoch, zk version)
        self._unapplied: dict[tuple[str, int], tuple[tuple[int, int], int]] = {}

    # --- wiring --------------------------------------------------------------------------------------

    def _watch(self, _event: Any) -> None:
        """Kazoo thread: a watch fired. Only pokes the trio loop."""
        token = self._token
        if token is not None:
            try:
                token.run_sync_soon(self.poke)
            except trio.RunFinishedError:
                pass

    def poke(self) -> None:
        self._poked.set()

    def _session_state(self, state: str) -> None:
        """Kazoo thread: the session changed. Hands the state to the trio loop."""
        token = self._token
        if token is not None:
            try:
                token.run_sync_soon(self._on_session_state, state)
            except trio.RunFinishedError:
                pass

    def _clock_ms(self) -> int:
        """Monotonic milliseconds (trio's clock), which keep running while the process is stopped."""
        return int(trio.current_time() * 1000)

    def _on_session_state(self, state: str) -> None:
        if self.broker.closing:
            return  # our own close ends the session
        was_fenced = self.fence.fenced(self._clock_ms())
        self.fence.on_state(state, self._clock_ms())
        if state == "LOST":
            self._session_lost()
        elif not was_fenced and self.fence.fenced(self._clock_ms()):
            log.warning("broker %d: ZooKeeper session suspended past its timeout; not leading", self.node_id)
        self.poke()

    def _session_lost(self) -> None:
        """The ZooKeeper session ended: the controller has moved (or will move) every leadership away
        with a newer leader epoch, so stop leading now; only a newer LeaderAndIsr makes this broker
        leader again, after it registered with its new session."""
        log.warning("broker %d: ZooKeeper session lost; resigning every leadership", self.node_id)
        for key, state in self.partitions.items():
            if state.is_leader:
                state.resign()
                self.replicas.leadership_changed(key, False)
                self.broker.watchers.notify(*key)
        if self.is_controller:
            self.is_controller = False
            self.store.controller_epoch_zk_version = -1
            self.channel.stop_all()

    def is_fenced(self) -> bool:
        return self.fence.fenced(self._clock_ms())

    async def _tick(self) -> None:
        """The liveness tick: a gap longer than the session timeout (the process was stopped) fences
        leadership until ZooKeeper confirms this session still holds the registration."""
        while True:
            if self.fence.on_tick(self._clock_ms()):
                log.warning(
                    "broker %d stood still past the session timeout; checking its session", self.node_id
                )
            if self.fence.paused:
                try:
                    confirmed = await trio.to_thread.run_sync(
                        self.store.registered_by_this_session, self.node_id, abandon_on_cancel=True
                    )
                except Exception:
                    confirmed = False
                if confirmed and not self.fence.lost:
                    self.fence.registration_confirmed()
                    log.info("broker %d: session still valid after the pause", self.node_id)
            await trio.sleep(0.1)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, then reconcile with ZooKeeper until cancelled."""
        self._token = trio.lowlevel.current_trio_token()
        self.store.on_state_change(self._session_state)
        self.registration = self._registration()
        self.broker_epoch = await trio.to_thread.run_sync(self.store.register_broker, self.registration)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._tick)
            await nursery.start(self.replicas.run)
            await self.reconcile()
            task_status.started()
            config = self.broker.config
            next_rebalance = trio.current_time() + config["leader.imbalance.check.interval.seconds"]
            try:
                while True:
                    with trio.move_on_after(RECONCILE_SECONDS):
                        await self._poked.wait()
                    self._poked = trio.Event()
                    try:
                        await self.reconcile()
                        if trio.current_time() >= next_rebalance:
                            next_rebalance = (
                                trio.current_time() + config["leader.imbalance.check.interval.seconds"]
                            )
                            if self.is_controller and config["auto.leader.rebalance.enable"]:
                                await self.auto_rebalance()
                    except Exception as exc:  # ZooKeeper away: try again at the next tick
                        log.warning("cluster reconcile failed: %r", exc)
                        await trio.sleep(0.2)
            finally:
                for fetcher in self.fetchers.values():
                    fetcher.stop()
                self.channel.stop_all()
                nursery.cancel_scope.cancel()

    def _registration(self) -> zd.BrokerRegistration:
        protocols = self.broker.config.security_protocol_map
        endpoints = dict(self.broker.endpoints)
        return zd.BrokerRegistration(
            self.node_id,
            endpoints,
            {name: protocols.get(name, "PLAINTEXT") for name in endpoints},
            self.broker.config["broker.rack"],
        )

    def inter_broker_listener(self) -> str:
        """The listener other brokers are reached at, as Kafka chooses it: inter.broker.listener.name, else
        the listener named after security.inter.broker.protocol (default PLAINTEXT), else the first
        listener of that protocol (kafkacompat.security.inter_broker)."""
        from kafkacompat.security.inter_broker import inter_broker_listener_name

        return inter_broker_listener_name(self.broker.config, self.broker.endpoints)

    def inter_broker_security(self) -> ClientSecurity | None:
        """How this broker authenticates to another broker's inter-broker listener (None: PLAINTEXT).

        The one place replication fetchers, the controller's requests and controlled shutdown get their
        connection settings from: TLS from the listener's trust and key stores, SASL with
        sasl.mechanism.inter.broker.protocol and the listener's JAAS username/password, resolved once
        (kafkacompat.security.inter_broker; the server checked them at start-up)."""
        if self._inter_broker_security is None:
            from kafkacompat.security.inter_broker import inter_broker_client

            self._inter_broker_security = inter_broker_client(self.broker.config, self.broker.endpoints)
        return self._inter_broker_security[1]

    def inter_broker_connection(self, broker_id: int, purpose: str, timeout: float) -> BrokerConnection:
        """Blocking (call from a worker thread): a connection to `broker_id`'s inter-broker listener."""
        from kafkacompat.client import BrokerConnection

        registration = self.snapshot.brokers.get(broker_id)
        if registration is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not live")
        endpoint = registration.endpoint(self.inter_broker_listener())
        if endpoint is None:
            endpoint = next(iter(registration.endpoints.values()))
        client_id = f"broker-{self.node_id}-{purpose}"
        return BrokerConnection(endpoint[0], endpoint[1], client_id, timeout, self.inter_broker_security())

    async def close(self) -> None:
        await trio.to_thread.run_sync(self._close_blocking)

    def _close_blocking(self) -> None:
        if self.is_controller:
            self.store.resign_controller(self.node_id)
        self.store.close()

    # --- reconcile -----------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        snapshot = await trio.to_thread.run_sync(read_snapshot, self.store, self._watch)
        if self.node_id not in snapshot.brokers and self.registration is not None:
            # a new session (the old one expired): register again, with a new broker epoch
            epoch = await trio.to_thread.run_sync(self.store.register_broker, self.registration)
            snapshot.brokers[self.node_id] = self.registration
            snapshot.broker_epochs[self.node_id] = epoch
            self.broker_epoch = epoch
            if self.fence.lost:
                log.info("broker %d registered again (broker epoch %d)", self.node_id, epoch)
            self.fence.rejoined()
        elif self.fence.lost and snapshot.broker_epochs.get(self.node_id) not in (None, self.broker_epoch):
            self.fence.rejoined()
        if snapshot.controller is None:
            if await trio.to_thread.run_sync(self.store.try_become_controller, self.node_id):
                log.info("broker %d is the controller (epoch %d)", self.node_id, self.store.controller_epoch)
                snapshot.controller = self.node_id
                snapshot.controller_epoch = self.store.controller_epoch
        was_controller, self.is_controller = self.is_controller, snapshot.controller == self.node_id
        if was_controller and not self.is_controller:
            self.store.controller_epoch_zk_version = -1
            self.channel.stop_all()
        if self.is_controller:
            try:
                if await self._controller_duties(snapshot):
                    snapshot = await trio.to_thread.run_sync(read_snapshot, self.store, self._watch)
                self._sync_channel(snapshot)
            except StaleController as exc:
                log.warning("fenced as controller: %s", exc)
                self.is_controller = False
                self.channel.stop_all()
        self._read_brokers = dict(snapshot.brokers)
        # a broker that has not heard from the newest controller yet still refuses older ones
        self.known_controller_epoch = max(self.known_controller_epoch, snapshot.controller_epoch)
        self.snapshot = self._merged(snapshot)
        self._apply(self.snapshot)
        self._reconciled.set()
        self._reconciled = trio.Event()

    async def _next_reconcile(self) -> None:
        """Ask for a reconcile and wait until one has finished (many waiters share one event)."""
        event = self._reconciled
        self.poke()
        await event.wait()

    def _merged(self, snapshot: ZkSnapshot) -> ZkSnapshot:
        """The read, with any partition state newer than it (from a controller request that arrived
        while the read was in flight) kept: a stale read never undoes a newer request."""
        for key, known in self.snapshot.states.items():
            read = snapshot.states.get(key)
            before, after = self.snapshot.topics.get(key[0]), snapshot.topics.get(key[0])
            same_topic = before is not None and after is not None and before.topic_id == after.topic_id
            if read is not None and same_topic and _newer(known, read):
                snapshot.states[key] = known
        return snapshot

    async def _controller_duties(self, snapshot: ZkSnapshot) -> bool:
        """Write the states the controller decides; True if anything was written."""
        live = set(snapshot.brokers)
        epoch = self.store.controller_epoch
        writes: dict[tuple[str, int], LeaderAndIsr] = {}
        for name, assignment in snapshot.topics.items():
            if name in snapshot.deletions:
                continue
            for partition, replicas in assignment.partitions.items():
                if (name, partition) not in snapshot.states:
                    alive = tuple(r for r in replicas if r in live)
                    if alive:
                        writes[(name, partition)] = LeaderAndIsr(alive[0], 0, alive, epoch, -1)
        existing = {
            key: (snapshot.topics[key[0]].partitions.get(key[1], []), state)
            for key, state in snapshot.states.items()
            if key[0] in snapshot.topics and key[0] not in snapshot.deletions
        }
        unclean = {name: self._unclean(snapshot.configs.get(name, {})) for name in snapshot.topics}
        lost = {r for _, (replicas, _) in existing.items() for r in replicas if r not in live}
        writes.update(on_brokers_lost(existing, lost, live, epoch, unclean=unclean))
        if writes:
            results = await trio.to_thread.run_sync(self.store.controller_write_states, writes)
            written: dict[tuple[str, int], LeaderAndIsr] = {}
            for key, version in results.items():
                if version < 0:
                    log.info("controller: state of %s-%d changed meanwhile; deciding again", *key)
                    self.poke()
                else:
                    written[key] = _at_version(writes[key], version)
                    log.info("controller: %s-%d is now %s", key[0], key[1], written[key])
            new = {key for key in written if key not in snapshot.states}
            self._announce(snapshot, written, new=new)
        for name in snapshot.deletions:
            assignment = snapshot.topics.get(name)
            if assignment is not None:
                stops: dict[int, list[tuple[str, int, int, bool]]] = {}
                for partition, replicas in assignment.partitions.items():
                    for replica in replicas:
                        stops.setdefault(replica, []).append((name, partition, EPOCH_DURING_DELETE, True))
                answered = self._send_stop_replica(stops)
                # as Kafka's topic deletion: the replicas stop and delete first (bounded wait: a replica
                # that died meanwhile drops the topic when it comes back and reads ZooKeeper)
                with trio.move_on_after(DELETION_WAIT_SECONDS):
                    for event in answered:
                        await event.wait()
            await trio.to_thread.run_sync(self.store.remove_topic, name)
            log.info("controller: deleted topic %s", name)
        finished = await self._finish_reassignments(snapshot)
        return bool(writes or snapshot.deletions or finished)

    # --- the controller's requests to brokers --------------------------------------------------------

    def _partition_info(
        self,
        snapshot: ZkSnapshot,
        key: tuple[str, int],
        state: LeaderAndIsr,
        replicas: list[int] | None = None,
        new: bool = False,
    ) -> PartitionInfo:
        assignment = snapshot.topics.get(key[0])
        if replicas is None:
            replicas = list(assignment.partitions.get(key[1], [])) if assignment is not None else []
        adding = tuple(assignment.adding.get(key[1], [])) if assignment is not None else ()
        removing = tuple(assignment.removing.get(key[1], [])) if assignment is not None else ()
        return PartitionInfo(
            key[0],
            assignment.topic_id if assignment is not None else None,
            key[1],
            state,
            tuple(replicas),
            adding,
            removing,
            tuple(r for r in replicas if r not in snapshot.brokers),
            new,
        )

    def _announce(
        self,
        snapshot: ZkSnapshot,
        states: dict[tuple[str, int], LeaderAndIsr],
        *,
        replicas: dict[tuple[str, int], list[int]] | None = None,
        new: set[tuple[str, int]] | None = None,
        leader_and_isr: bool = True,
    ) -> None:
        """After a state change was written: LeaderAndIsr to every live replica of the changed
        partitions (unless `leader_and_isr` is False), UpdateMetadata to every live broker."""
        if not states or not self.is_controller:
            return
        infos = [
            self._partition_info(snapshot, key, state, (replicas or {}).get(key), key in (new or set()))
            for key, state in sorted(states.items())
        ]
        epoch = self.store.controller_epoch
        if leader_and_isr:
            per_broker: dict[int, list[PartitionInfo]] = {}
            for info in infos:
                for replica in info.replicas:
                    per_broker.setdefault(replica, []).append(info)
            for broker_id, partitions in sorted(per_broker.items()):
                self._send_leader_and_isr(snapshot, broker_id, partitions, full=False)
        for broker_id in sorted(self.channel.queues):
            request = update_metadata_request(
                self.node_id, epoch, self.channel.broker_epoch(broker_id), infos, self._brokers_of(snapshot)
            )
            self.channel.send(broker_id, UPDATE_METADATA, request)

    def _brokers_of(self, snapshot: ZkSnapshot) -> list[zd.BrokerRegistration]:
        return [snapshot.brokers[b] for b in sorted(snapshot.brokers)]

    def _send_leader_and_isr(
        self, snapshot: ZkSnapshot, broker_id: int, partitions: list[PartitionInfo], *, full: bool
    ) -> None:
        if broker_id not in self.channel.queues or not partitions:
            return
        leaders = {p.state.leader for p in partitions}
        request = leader_and_isr_request(
            self.node_id,
            self.store.controller_epoch,
            self.channel.broker_epoch(broker_id),
            partitions,
            [snapshot.brokers[b] for b in sorted(leaders) if b in snapshot.brokers],
            self.inter_broker_listener(),
            full,
        )
        self.channel.send(broker_id, LEADER_AND_ISR, request)

    def _send_stop_replica(self, stops: dict[int, list[tuple[str, int, int, bool]]]) -> list[trio.Event]:
        """StopReplica to each broker; the events of their answers."""
        answered = []
        for broker_id, partitions in sorted(stops.items()):
            if broker_id in self.channel.queues:
                request = stop_replica_request(
                    self.node_id,
                    self.store.controller_epoch,
                    self.channel.broker_epoch(broker_id),
                    partitions,
                )
                event = self.channel.send(broker_id, STOP_REPLICA, request)
                if event is not None:
                    answered.append(event)
        return answered

    def _sync_channel(self, snapshot: ZkSnapshot) -> None:
        """One queue per live broker. A broker that is new to this controller (just registered, came
        back with a new session, or this broker just became controller) gets a full LeaderAndIsr for
        its partitions; every broker gets a full UpdateMetadata when the set of live brokers changed."""
        assert self._nursery is not None
        before = set(self.channel.queues)
        fresh = self.channel.sync(self._nursery, dict(snapshot.broker_epochs))
        self.shutting_down_brokers &= set(snapshot.brokers)
        if not fresh and before == set(self.channel.queues):
            return
        infos = [
            self._partition_info(snapshot, key, state)
            for key, state in sorted(snapshot.states.items())
            if key[0] in snapshot.topics and key[0] not in snapshot.deletions
        ]
        for broker_id in sorted(fresh):
            hosted = [info for info in infos if broker_id in info.replicas]
            self._send_leader_and_isr(snapshot, broker_id, hosted, full=True)
        epoch = self.store.controller_epoch
        for broker_id in sorted(self.channel.queues):
            request = update_metadata_request(
                self.node_id, epoch, self.channel.broker_epoch(broker_id), infos, self._brokers_of(snapshot)
            )
            self.channel.send(broker_id, UPDATE_METADATA, request)

    async def _finish_reassignments(self, snapshot: ZkSnapshot) -> bool:
        """Complete reassignments whose new replicas are all in the ISR: the assignment becomes the
        target, the removed replicas leave the ISR, leadership moves into the target if it must, with
        leader epoch + 1 (Kafka's KIP-455 completion). True if anything was written."""
        epoch = self.store.controller_epoch
        live = set(snapshot.brokers)
        changed = False
        for name, assignment in snapshot.topics.items():
            if not assignment.adding and not assignment.removing:
                continue
            done: dict[int, list[int]] = {}
            states: dict[tuple[str, int], LeaderAndIsr] = {}
            for partition in set(assignment.adding) | set(assignment.removing):
                state = snapshot.states.get((name, partition))
                adding = assignment.adding.get(partition, [])
                removing = set(assignment.removing.get(partition, []))
                if state is None or not set(adding) <= set(state.isr):
                    continue
                target = [r for r in assignment.partitions.get(partition, []) if r not in removing]
                isr = tuple(r for r in state.isr if r in target)
                leader = state.leader
                if leader not in target or leader not in live:
                    leader = next((r for r in target if r in isr and r in live), NO_LEADER)
                if leader == NO_LEADER:
                    continue
                done[partition] = target
                states[(name, partition)] = LeaderAndIsr(
                    leader, state.leader_epoch + 1, isr, epoch, state.zk_version
                )
            if not done:
                continue
            versions = await trio.to_thread.run_sync(self.store.controller_write_states, states)
            finished = {p: t for p, t in done.items() if versions.get((name, p), -1) >= 0}
            if finished:
                completed = zd.TopicAssignment(
                    name,
                    assignment.topic_id,
                    {**assignment.partitions, **finished},
                    {p: r for p, r in assignment.adding.items() if p not in finished},
                    {p: r for p, r in assignment.removing.items() if p not in finished},
                )
                await trio.to_thread.run_sync(self.store.set_assignment, completed)
                written = {(name, p): _at_version(states[(name, p)], versions[(name, p)]) for p in finished}
                after = ZkSnapshot(snapshot.brokers, snapshot.broker_epochs, snapshot.controller)
                after.topics = {**snapshot.topics, name: completed}
                self._announce(after, written)
                # the replicas reassigned away stop and delete the partition (Kafka's StopReplica)
                stops: dict[int, list[tuple[str, int, int, bool]]] = {}
                for p in finished:
                    for replica in assignment.removing.get(p, []):
                        stops.setdefault(replica, []).append((name, p, states[(name, p)].leader_epoch, True))
                self._send_stop_replica(stops)
                log.info("controller: reassignment of %s partitions %s complete", name, sorted(finished))
                changed = True
        return changed

    async def alter_reassignments(
        self, wanted: dict[tuple[str, int], list[int] | None]
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments as the controller: target replica lists (None cancels). The
        assignment becomes target + original replicas with adding/removing recorded; the new replicas
        copy the data as followers and the reassignment completes once they are all in the ISR."""
        if not self.is_controller:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.node_id} is not the controller")
        snapshot = await trio.to_thread.run_sync(read_snapshot, self.store, self._watch)
        live = set(snapshot.brokers)
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        changed: dict[str, zd.TopicAssignment] = {}
        for (name, partition), target in sorted(wanted.items()):
            assignment = changed.get(name) or snapshot.topics.get(name)
            if assignment is None or partition not in assignment.partitions or name in snapshot.deletions:
                results[(name, partition)] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "The partition does not exist.",
                )
                continue
            current = assignment.partitions[partition]
            adding = assignment.adding.get(partition, [])
            removing = assignment.removing.get(partition, [])
            original = [r for r in current if r not in adding]
            if target is None:
                if not adding and not removing:
                    results[(name, partition)] = (
                        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                        "No reassignment in progress.",
                    )
                    continue
                new_replicas, new_adding, new_removing = original, [], []
            else:
                if not target or len(set(target)) != len(target) or not set(target) <= live:
                    results[(name, partition)] = (
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Replica assignment {target} must name distinct live brokers ({sorted(live)}).",
                    )
                    continue
                new_replicas = list(dict.fromkeys([*target, *original]))
                new_adding = [r for r in target if r not in original]
                new_removing = [r for r in original if r not in target]
            partitions = dict(assignment.partitions)
            partitions[partition] = new_replicas
            adding_map = {p: r for p, r in assignment.adding.items() if p != partition}
            removing_map = {p: r for p, r in assignment.removing.items() if p != partition}
            if new_adding:
                adding_map[partition] = new_adding
            if new_removing:
                removing_map[partition] = new_removing
            changed[name] = zd.TopicAssignment(
                name, assignment.topic_id, partitions, adding_map, removing_map
            )
            results[(name, partition)] = (ErrorCode.NONE, None)
        for assignment in changed.values():
            await trio.to_thread.run_sync(self.store.set_assignment, assignment)
        if changed:
            # the replica set changed: leader epoch + 1 and LeaderAndIsr to every replica, old and new
            # (KIP-455), so the leader accepts the new followers' fetches and they start fetching
            bumped: dict[tuple[str, int], LeaderAndIsr] = {}
            for (name, partition), (error, _) in results.items():
                state = snapshot.states.get((name, partition))
                if error == ErrorCode.NONE and state is not None and name in changed:
                    bumped[(name, partition)] = LeaderAndIsr(
                        state.leader,
                        state.leader_epoch + 1,
                        state.isr,
                        self.store.controller_epoch,
                        state.zk_version,
                    )
            if bumped:
                try:
                    versions = await trio.to_thread.run_sync(self.store.controller_write_states, bumped)
                except StaleController as exc:
                    raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from exc
                after = ZkSnapshot(snapshot.brokers, snapshot.broker_epochs, snapshot.controller)
                after.topics = {**snapshot.topics, **changed}
                self._announce(
                    after,
                    {k: _at_version(v, versions[k]) for k, v in bumped.items() if versions.get(k, -1) >= 0},
                )
            self.poke()
        return results

    def reassignments(self) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """(replicas, adding, removing) of every partition being reassigned."""
        result = {}
        for name, assignment in self.snapshot.topics.items():
            for partition in sorted(set(assignment.adding) | set(assignment.removing)):
                result[(name, partition)] = (
                    list(assignment.partitions.get(partition, [])),
                    list(assignment.adding.get(partition, [])),
                    list(assignment.removing.get(partition, [])),
                )
        return result

    async def auto_rebalance(self) -> None:
        """auto.leader.rebalance.enable: move leaders back to preferred replicas past the threshold."""
        snapshot = self.snapshot
        partitions = {
            key: (snapshot.topics[key[0]].partitions.get(key[1], []), state)
            for key, state in snapshot.states.items()
            if key[0] in snapshot.topics and key[0] not in snapshot.deletions
        }
        moves = preferred_leader_moves(
            partitions, set(snapshot.brokers), self.broker.config["leader.imbalance.per.broker.percentage"]
        )
        if moves:
            log.info("controller: moving %d partition(s) back to their preferred leader", len(moves))
            await self.elect_leaders(moves, PREFERRED_ELECTION)

    async def elect_leaders(
        self, wanted: list[tuple[str, int]] | None, election_type: int
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """ElectLeaders as the controller: preferred (0) or unclean (1) elections, written with the
        controller-epoch check. Raises KafkaError(NOT_CONTROLLER) on any other broker."""
        if not self.is_controller:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.node_id} is not the controller")
        snapshot = await trio.to_thread.run_sync(read_snapshot, self.store, self._watch)
        live = set(snapshot.brokers)
        if wanted is None:
            wanted = sorted(k for k in snapshot.states if k[0] in snapshot.topics)
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        writes: dict[tuple[str, int], LeaderAndIsr] = {}
        epoch = self.store.controller_epoch
        for key in wanted:
            assignment = snapshot.topics.get(key[0])
            replicas = assignment.partitions.get(key[1]) if assignment is not None else None
            state = snapshot.states.get(key)
            if replicas is None or state is None:
                results[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            if election_type == PREFERRED_ELECTION:
                if state.leader == replicas[0]:
                    results[key] = (
                        ErrorCode.ELECTION_NOT_NEEDED,
                        "Leader election not needed for topic partition.",
                    )
                    continue
                leader = elect_preferred_leader(replicas, state.isr, live)
                if leader == NO_LEADER:
                    results[key] = (
                        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                        f"Failed to elect leader for partition {key[0]}-{key[1]}: preferred replica "
                        f"{replicas[0]} is not alive or not in the ISR",
                    )
                    continue
                writes[key] = LeaderAndIsr(leader, state.leader_epoch + 1, state.isr, epoch, state.zk_version)
            else:
                if state.leader in live:
                    results[key] = (
                        ErrorCode.ELECTION_NOT_NEEDED,
                        "Leader election not needed for topic partition.",
                    )
                    continue
                leader, isr = elect_offline_leader(replicas, state.isr, live, True)
                if leader == NO_LEADER:
                    results[key] = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "No live replica to elect.")
                    continue
                writes[key] = LeaderAndIsr(leader, state.leader_epoch + 1, isr, epoch, state.zk_version)
        if writes:
            try:
                versions = await trio.to_thread.run_sync(self.store.controller_write_states, writes)
            except StaleController as exc:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from exc
            for key, version in versions.items():
                if version < 0:
                    results[key] = (ErrorCode.NOT_CONTROLLER, "The partition state changed meanwhile; retry.")
                else:
                    results[key] = (ErrorCode.NONE, None)
                    log.info("controller: %s-%d elected %s", key[0], key[1], writes[key])
            self._announce(snapshot, {k: _at_version(writes[k], v) for k, v in versions.items() if v >= 0})
            self.poke()
        return results

    async def controlled_shutdown_as_controller(self, broker_id: int) -> list[tuple[str, int]]:
        """ControlledShutdown as the controller: leadership of `broker_id`'s partitions moves to another
        ISR member (leader epoch + 1) and it leaves the ISRs it follows in; returns the partitions it
        still leads (no other replica could take over). Replication factor 1 partitions stay, as in
        Kafka. KafkaError: NOT_CONTROLLER elsewhere, BROKER_NOT_AVAILABLE for an unknown broker."""
        if not self.is_controller:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.node_id} is not the controller")
        snapshot = await trio.to_thread.run_sync(read_snapshot, self.store, self._watch)
        if broker_id not in snapshot.brokers:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        live = set(snapshot.brokers)
        epoch = self.store.controller_epoch
        self.shutting_down_brokers.add(broker_id)
        writes: dict[tuple[str, int], LeaderAndIsr] = {}
        remaining: list[tuple[str, int]] = []
        for key, state in snapshot.states.items():
            assignment = snapshot.topics.get(key[0])
            replicas = assignment.partitions.get(key[1], []) if assignment is not None else []
            if broker_id not in replicas or len(replicas) < 2:
                continue
            if state.leader == broker_id:
                leader, isr = elect_for_controlled_shutdown(replicas, state.isr, live, {broker_id})
                if leader == NO_LEADER:
                    remaining.append(key)
                    continue
                writes[key] = LeaderAndIsr(leader, state.leader_epoch + 1, isr, epoch, state.zk_version)
            elif broker_id in state.isr and len(state.isr) > 1:
                isr = tuple(r for r in state.isr if r != broker_id)
                writes[key] = LeaderAndIsr(state.leader, state.leader_epoch + 1, isr, epoch, state.zk_version)
        if writes:
            try:
                versions = await trio.to_thread.run_sync(self.store.controller_write_states, writes)
            except StaleController as exc:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from exc
            for key, version in versions.items():
                if version < 0 and writes[key].leader != snapshot.states[key].leader:
                    remaining.append(key)  # changed meanwhile: the broker asks again
            self._announce(snapshot, {k: _at_version(writes[k], v) for k, v in versions.items() if v >= 0})
            self.poke()
        log.info(
            "controller: controlled shutdown of broker %d moved %d partition state(s), %d remain",
            broker_id,
            len(writes),
            len(remaining),
        )
        return sorted(remaining)

    async def controlled_shutdown(self) -> bool:
        """This broker is stopping: ask the controller to move its leaderships away first (Kafka's
        controlled.shutdown.*), so clients switch leaders without waiting for the session to expire.
        True once nothing is left to move."""
        config = self.broker.config
        if not config["controlled.shutdown.enable"]:
            return False
        attempts = max(int(config["controlled.shutdown.max.retries"]), 0) + 1
        for attempt in range(attempts):
            try:
                remaining = await self._request_controlled_shutdown()
            except Exception as exc:
                log.warning("controlled shutdown attempt %d failed: %r", attempt + 1, exc)
                remaining = None
            if remaining == []:
                # wait until this broker's own view shows the moves, so no request is answered as leader
                with trio.move_on_after(5):
                    while any(s.is_leader and len(s.replicas) > 1 for s in self.partitions.values()):
                        await self._next_reconcile()
                # as Kafka's StopReplica to a stopping broker: stop fetching, so no leader takes this
                # broker back into an ISR in the moments before its session ends
                self.shutting_down = True
                for fetcher in self.fetchers.values():
                    fetcher.stop()
                log.info("controlled shutdown of broker %d complete", self.node_id)
                return True
            if remaining is not None:
                log.info("controlled shutdown: %d partition(s) could not move yet", len(remaining))
            if attempt + 1 < attempts:
                await trio.sleep(config["controlled.shutdown.retry.backoff.ms"] / 1000)
        return False

    async def _request_controlled_shutdown(self) -> list[tuple[str, int]]:
        if self.is_controller:
            return await self.controlled_shutdown_as_controller(self.node_id)
        from kafkacompat.wire.messages import request_class

        controller_id = self.controller_id()
        if controller_id not in self.snapshot.brokers:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller")
        timeout = self.broker.config["replica.socket.timeout.ms"] / 1000
        request = request_class(CONTROLLED_SHUTDOWN)(broker_id=self.node_id, broker_epoch=-1)

        def ask() -> Any:
            connection = self.inter_broker_connection(controller_id, "shutdown", timeout)
            try:
                return connection.send(
                    CONTROLLED_SHUTDOWN, connection.version_for(CONTROLLED_SHUTDOWN), request
                )
            finally:
                connection.close()

        response = await trio.to_thread.run_sync(ask)
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(response.error_code), "controlled shutdown refused")
        return [(p.topic_name, p.partition_index) for p in response.remaining_partitions]

    def _unclean(self, configs: dict[str, str]) -> bool:
        value = configs.get("unclean.leader.election.enable")
        if value is None:
            return bool(self.broker.config["unclean.leader.election.enable"])
        return value.strip().lower() == "true"

    def _apply(self, snapshot: ZkSnapshot) -> None:
        """Trio thread: mirror topics, create logs, take roles, hand partitions to fetchers."""
        broker = self.broker
        metadata = broker.metadata
        now = broker.now_ms()
        unapplied, self._unapplied = self._unapplied, {}
        # a topic whose deletion is requested stays until the controller removes it, after its replicas
        # answered StopReplica with deletion (as in Kafka, brokers do not act on the request themselves)
        live_topics = snapshot.topics
        for topic in list(metadata.topics()):
            assignment = live_topics.get(topic.name)
            if assignment is None or (
                assignment.topic_id is not None and assignment.topic_id != topic.topic_id
            ):
                self._drop_topic(topic)
        for name, assignment in live_topics.items():
            configs = snapshot.configs.get(name, {})
            topic = metadata.topic(name)
            count = max(assignment.partitions) + 1 if assignment.partitions else 0
            if topic is None:
                topic = metadata.create_topic(
                    name,
                    count,
                    configs,
                    topic_id=assignment.topic_id or uuid.uuid4(),
                    internal=name in INTERNAL,
                )
                broker.logs.set_topic_config(name, broker.topic_log_config(topic))
            else:
                if count > topic.partitions:
                    metadata.add_partitions(name, count)
                if topic.configs != configs:
                    metadata.set_topic_configs(name, configs)
                    broker.logs.set_topic_config(name, broker.topic_log_config(topic))
            if name in snapshot.deletions:
                continue  # no logs created, no roles taken for a topic being deleted
            for partition, replicas in assignment.partitions.items():
                key = (name, partition)
                if self.node_id not in replicas:
                    self._stop_replica(key)
                    if broker.logs.get_log(name, partition) is not None:
                        # reassigned away (Kafka's StopReplica with deletion): the files go after
                        # file.delete.delay.ms, as a deleted topic's do
                        broker.logs.delete_log(name, partition, now)
                        log.info("broker %d is no longer a replica of %s-%d", self.node_id, name, partition)
                    continue
                partition_log = broker.logs.get_log(name, partition)
                if partition_log is None:
                    partition_log = broker.logs.create_log(
                        name, partition, broker.topic_log_config(topic), now_ms=now
                    )
                state = snapshot.states.get(key)
                if state is None:
                    continue
                current = self.partitions.get(key)
                if current is not None and not _newer(state, current.leader_and_isr()):
                    continue
                # the repair path: ZooKeeper holds a newer state than the one this broker acts on. It
                # is applied only once REPAIR_DELAY_SECONDS went by without the controller's
                # LeaderAndIsr bringing it: a request lost with its connection, a controller that
                # died between its write and its request
                seen = (state.leader_epoch, state.zk_version)
                first_seen = unapplied.get(key)
                if first_seen is not None and first_seen[0] == seen:
                    if self._clock_ms() - first_seen[1] >= REPAIR_DELAY_SECONDS * 1000:
                        self._take_role(key, state, tuple(replicas), partition_log, now)
                    else:
                        self._unapplied[key] = first_seen
                else:
                    self._unapplied[key] = (seen, self._clock_ms())
        metadata.commit()
        self._ensure_following()

    def _ensure_following(self) -> None:
        """Followers whose leader was not known live when they became followers start fetching now."""
        if self.shutting_down:
            return
        followed = self._followed()
        for key, state in self.partitions.items():
            if (
                state.role.name == "FOLLOWER"
                and key not in followed
                and state.leader in self.snapshot.brokers
            ):
                self._fetcher_for(state.leader, key).add(key, state.leader_epoch)

    # --- the controller's requests, broker side ------------------------------------------------------

    def check_controller_request(self, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        """The top-level checks of LeaderAndIsr/UpdateMetadata/StopReplica; remembers the epoch."""
        error = check_controller_request(
            controller_epoch, self.known_controller_epoch, broker_epoch, self.broker_epoch
        )
        if error == ErrorCode.NONE:
            self.known_controller_epoch = max(self.known_controller_epoch, controller_epoch)
        return error

    def _remember(self, key: tuple[str, int], state: LeaderAndIsr) -> None:
        known = self.snapshot.states.get(key)
        if known is None or _newer(state, known):
            self.snapshot.states[key] = state

    async def apply_leader_and_isr(
        self,
        controller_id: int,
        controller_epoch: int,
        states: list[tuple[str, Any, int, LeaderAndIsr, tuple[int, ...]]],
    ) -> dict[tuple[str, int], ErrorCode]:
        """LeaderAndIsr: take the role each newer partition state gives (see leader_and_isr.py)."""
        metadata = self.broker.metadata

        def known() -> bool:
            for topic, topic_id, partition, _, _ in states:
                info = metadata.topic(topic)
                if info is None or info.partitions <= partition:
                    return False
                if topic_id is not None and topic_id.int != 0 and info.topic_id != topic_id:
                    return False  # a recreated topic whose old incarnation this broker still holds
            return True

        if not known():
            # a topic (or partitions) this broker's ZooKeeper view has not seen yet: read it first
            await self._wait_for_view(known, timeout=10)
        now = self.broker.now_ms()
        results: dict[tuple[str, int], ErrorCode] = {}
        for topic, topic_id, partition, state, replicas in states:
            key = (topic, partition)
            current = self.partitions.get(key)
            info = metadata.topic(topic)
            if topic_id is not None and topic_id.int != 0 and info is not None and info.topic_id != topic_id:
                error = ErrorCode.INCONSISTENT_TOPIC_ID
            else:
                error = leader_and_isr_partition(
                    state.leader_epoch,
                    current.leader_epoch if current is not None else -1,
                    replicas,
                    self.node_id,
                )
            if error == ErrorCode.NONE and (info is None or info.partitions <= partition):
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if error == ErrorCode.NONE and info is not None:
                partition_log = self.broker.logs.get_log(topic, partition)
                if partition_log is None:
                    partition_log = self.broker.logs.create_log(
                        topic, partition, self.broker.topic_log_config(info), now_ms=now
                    )
                self._remember(key, state)
                self._take_role(
                    key, state, replicas, partition_log, now, f"LeaderAndIsr of controller {controller_id}"
                )
            results[key] = error
        return results

    def apply_update_metadata(
        self,
        controller_id: int,
        brokers: dict[int, zd.BrokerRegistration],
        states: list[tuple[str, int, LeaderAndIsr, tuple[int, ...]]],
    ) -> None:
        """UpdateMetadata: the live brokers and partition states clients are answered from. The live
        brokers are the request's plus those this broker's own last read of `/brokers/ids` found (a
        request built before a registration can arrive after this broker read it; a broker that went
        away leaves with the next read, which its watch triggers)."""
        self.snapshot.brokers = {**self._read_brokers, **brokers}
        self.snapshot.controller = controller_id
        for topic, partition, state, _ in states:
            self._remember((topic, partition), state)
        self._ensure_following()

    def apply_stop_replica(
        self, entries: list[tuple[str, int, int, bool]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """StopReplica: stop following (and delete) partitions (see stop_replica.py)."""
        now = self.broker.now_ms()
        results: dict[tuple[str, int], ErrorCode] = {}
        for topic, partition, leader_epoch, delete in entries:
            key = (topic, partition)
            current = self.partitions.get(key)
            error = ErrorCode.NONE
            if current is not None:
                error = stop_replica_partition(leader_epoch, current.leader_epoch)
            if error == ErrorCode.NONE:
                self._stop_replica(key)
                if delete and self.broker.logs.get_log(topic, partition) is not None:
                    self.broker.logs.delete_log(topic, partition, now)
                    log.info("broker %d deleted its replica of %s-%d", self.node_id, topic, partition)
                self.broker.watchers.notify(*key)
            results[key] = error
        return results

    async def refresh_live_brokers(self) -> None:
        """Read the registered brokers now (replica assignment counts them, as Kafka's controller reads
        `/brokers/ids` when it assigns a new topic's replicas)."""
        epochs: dict[int, int] = {}
        brokers = await trio.to_thread.run_sync(self.store.live_brokers, None, epochs)
        self._read_brokers = dict(brokers)
        self.snapshot.brokers = dict(brokers)
        self.snapshot.broker_epochs = epochs

    def topic_names_by_id(self) -> dict[uuid.UUID, str]:
        return {a.topic_id: name for name, a in self.snapshot.topics.items() if a.topic_id is not None}

    def topic_id(self, name: str) -> uuid.UUID:
        assignment = self.snapshot.topics.get(name)
        if assignment is None or assignment.topic_id is None:
            return uuid.UUID(int=0)
        return assignment.topic_id

    # --- AlterPartition ------------------------------------------------------------------------------

    async def alter_partition_as_controller(
        self, broker_id: int, broker_epoch: int, proposals: dict[tuple[str, int], IsrProposal]
    ) -> tuple[ErrorCode, dict[tuple[str, int], tuple[ErrorCode, LeaderAndIsr | None]]]:
        """Validate ISR proposals against ZooKeeper's current states and write the accepted ones with
        compare-and-set; the answer per partition is the state now in ZooKeeper."""
        if not self.is_controller:
            return ErrorCode.NOT_CONTROLLER, {}
        epochs: dict[int, int] = {}
        await trio.to_thread.run_sync(self.store.live_brokers, None, epochs)
        if broker_id not in epochs or (broker_epoch != -1 and epochs[broker_id] != broker_epoch):
            return ErrorCode.STALE_BROKER_EPOCH, {}

        def read_states() -> dict[tuple[str, int], LeaderAndIsr | None]:
            return {key: self.store.partition_state(*key) for key in proposals}

        current = await trio.to_thread.run_sync(read_states)
        results: dict[tuple[str, int], tuple[ErrorCode, LeaderAndIsr | None]] = {}
        writes: dict[tuple[str, int], LeaderAndIsr] = {}
        for key, proposal in proposals.items():
            error, state = alter_partition_decision(
                proposal, current.get(key), epochs, self.shutting_down_brokers
            )
            if error != ErrorCode.NONE or state is None:
                results[key] = (error, None)
            elif state is current.get(key):
                results[key] = (ErrorCode.NONE, state)
            else:
                writes[key] = LeaderAndIsr(
                    state.leader, state.leader_epoch, state.isr, self.store.controller_epoch, state.zk_version
                )
        if writes:
            try:
                versions = await trio.to_thread.run_sync(self.store.controller_write_states, writes)
            except StaleController:
                return ErrorCode.NOT_CONTROLLER, {}
            written: dict[tuple[str, int], LeaderAndIsr] = {}
            for key, version in versions.items():
                if version < 0:
                    results[key] = (ErrorCode.INVALID_UPDATE_VERSION, None)
                else:
                    written[key] = _at_version(writes[key], version)
                    results[key] = (ErrorCode.NONE, written[key])
                    log.info(
                        "controller: %s-%d ISR is now %s (AlterPartition)",
                        key[0],
                        key[1],
                        list(written[key].isr),
                    )
            # the leader learns the new state from the answer; every broker's metadata from this
            self._announce(self.snapshot, written, leader_and_isr=False)
        return ErrorCode.NONE, results

    def _take_role(
        self,
        key: tuple[str, int],
        state: LeaderAndIsr,
        replicas: tuple[int, ...],
        partition_log: Any,
        now: int,
        source: str = "the repair read of ZooKeeper",
    ) -> None:
        current = self.partitions.get(key)
        if current is None:
            current = self.partitions[key] = PartitionState(key[0], key[1], self.node_id)
            current.high_watermark = partition_log.high_watermark
        if state.leader_epoch < current.leader_epoch:
            return
        if state.leader == self.node_id:
            was_leader = current.is_leader
            if current.become_leader(state, replicas, partition_log.log_end_offset, now):
                partition_log.leader_epochs.assign(state.leader_epoch, partition_log.log_end_offset)
                self._unfollow(key)
                self.replicas.leadership_changed(key, True)
                log.info(
                    "broker %d leads %s-%d at epoch %d (from %s)",
                    self.node_id,
                    key[0],
                    key[1],
                    state.leader_epoch,
                    source,
                )
            if not was_leader:
                current.high_watermark = partition_log.high_watermark
            if current.maybe_advance_high_watermark(partition_log.log_end_offset):
                partition_log.update_high_watermark(current.high_watermark)
        else:
            if current.become_follower(state, replicas) or key not in self._followed():
                self._unfollow(key)
                self.replicas.leadership_changed(key, False)
                if (
                    state.leader != NO_LEADER
                    and state.leader in self.snapshot_brokers()
                    and not self.shutting_down
                ):
                    self._fetcher_for(state.leader, key).add(key, state.leader_epoch)
        self.broker.watchers.notify(*key)  # parked produces and fetches look at the new role

    def snapshot_brokers(self) -> dict[int, zd.BrokerRegistration]:
        return self.snapshot.brokers

    def _followed(self) -> set[tuple[str, int]]:
        return {key for fetcher in self.fetchers.values() for key in fetcher.partitions}

    def _fetcher_for(self, leader: int, key: tuple[str, int]) -> FetcherTask:
        """The fetcher task of `key` on `leader`: one of num.replica.fetchers per leader, by Kafka's hash."""
        from kafkacompat.replication.fetcher import fetcher_id
        from kafkacompat.replication.fetcher_task import FetcherTask

        slot = (leader, fetcher_id(key[0], key[1], int(self.broker.config["num.replica.fetchers"])))
        fetcher = self.fetchers.get(slot)
        if fetcher is None or fetcher.stopped:
            fetcher = self.fetchers[slot] = FetcherTask(self, leader)
            assert self._nursery is not None
            self._nursery.start_soon(fetcher.run)
        return fetcher

    def _unfollow(self, key: tuple[str, int]) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(key)

    def _stop_replica(self, key: tuple[str, int]) -> None:
        self._unfollow(key)
        if self.partitions.pop(key, None) is not None:
            self.replicas.leadership_changed(key, False)

    def _drop_topic(self, topic: TopicInfo) -> None:
        for index in range(topic.partitions):
            self._stop_replica((topic.name, index))
        self.broker.drop_topic_locally(topic)
        log.info("broker %d dropped topic %s", self.node_id, topic.name)

    # --- the replica manager's link (replica_manager.ClusterLink) -------------------------------------

    def known_leader_epoch(self, topic: str, partition: int) -> int:
        known = self.snapshot.states.get((topic, partition))
        return known.leader_epoch if known is not None else -1

    def isr_committed(self, key: tuple[str, int], state: LeaderAndIsr) -> None:
        self._remember(key, state)

    def isr_refused(self, key: tuple[str, int]) -> None:
        self.poke()

    async def alter_partition(self, key: tuple[str, int], proposal: LeaderAndIsr) -> LeaderAndIsr | None:
        """Send one AlterPartition to the controller; the state it answers with, None on an error."""
        from kafkacompat.replication.broker_requests import ALTER_PARTITION, alter_partition_request

        controller_id = self.controller_id()
        if controller_id < 0 or self.is_fenced():
            return None
        request = alter_partition_request(
            self.node_id,
            self.broker_epoch,
            key[0],
            self.topic_id(key[0]),
            key[1],
            proposal,
            self.snapshot.broker_epochs,
        )
        timeout = self.broker.config["replica.socket.timeout.ms"] / 1000

        def ask() -> Any:
            connection = self.inter_broker_connection(controller_id, "alter-partition", timeout)
            try:
                return connection.send(ALTER_PARTITION, connection.version_for(ALTER_PARTITION), request)
            finally:
                connection.close()

        response = await trio.to_thread.run_sync(ask)
        if response.error_code != ErrorCode.NONE:
            log.info("AlterPartition for %s-%d: %s", key[0], key[1], ErrorCode(response.error_code).name)
            return None
        for topic in response.topics:
            for answer in topic.partitions:
                if answer.partition_index != key[1]:
                    continue
                if answer.error_code != ErrorCode.NONE:
                    log.info(
                        "AlterPartition for %s-%d: %s", key[0], key[1], ErrorCode(answer.error_code).name
                    )
                    return None
                return LeaderAndIsr(
                    answer.leader_id,
                    answer.leader_epoch,
                    tuple(answer.isr),
                    self.known_controller_epoch,
                    answer.partition_epoch,
                )
        return None

    # --- what clients see ----------------------------------------------------------------------------

    def live_brokers(self) -> list[zd.BrokerRegistration]:
        return [self.snapshot.brokers[b] for b in sorted(self.snapshot.brokers)]

    def controller_id(self) -> int:
        return self.snapshot.controller if self.snapshot.controller is not None else -1

    def partition_metadata(
        self, topic: str, partition: int
    ) -> tuple[int, int, list[int], list[int], list[int]]:
        """(leader, leader epoch, replicas, isr, offline replicas) as ZooKeeper says."""
        assignment = self.snapshot.topics.get(topic)
        replicas = list(assignment.partitions.get(partition, [])) if assignment else []
        state = self.snapshot.states.get((topic, partition))
        local = self.partitions.get((topic, partition))
        if local is not None and state is not None and local.leader_epoch >= state.leader_epoch:
            state = local.leader_and_isr()
        offline = [r for r in replicas if r not in self.snapshot.brokers]
        if state is None:
            return NO_LEADER, -1, replicas, [], offline
        leader = state.leader if state.leader in self.snapshot.brokers else NO_LEADER
        return leader, state.leader_epoch, replicas, list(state.isr), offline

    # --- topics --------------------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        replication_factor: int,
        assignment: dict[int, list[int]] | None = None,
    ) -> TopicInfo:
        """Write a new topic to ZooKeeper (as Kafka's AdminZkClient does from any broker) and wait until
        this broker's view has it."""
        if assignment is None:
            brokers = [BrokerMetadata(b.broker_id, b.rack) for b in self.live_brokers()]
            assignment = assign_replicas(brokers, partitions, replication_factor)
        topic_id = uuid.uuid4()
        await trio.to_thread.run_sync(self.store.create_topic, name, assignment, topic_id, configs)
        # as Kafka's CreateTopics (a delayed operation), answer once this broker sees every partition
        # with a leader, so a client's next Metadata request finds them led
        await self._wait_for_view(
            lambda: (
                self.broker.metadata.topic(name) is not None
                and all(self.partition_metadata(name, p)[0] >= 0 for p in assignment)
            )
        )
        topic = self.broker.metadata.topic(name)
        if topic is None:
            return TopicInfo(name, topic_id, partitions, dict(configs))
        return topic

    async def delete_topic(self, name: str) -> None:
        """Request the deletion and answer once this broker's view no longer has the topic (Kafka's
        DeleteTopics waits for the controller the same way)."""
        await trio.to_thread.run_sync(self.store.request_topic_deletion, name)
        await self._wait_for_view(lambda: self.broker.metadata.topic(name) is None)

    async def _wait_for_view(self, done: Callable[[], bool], timeout: float = 30.0) -> bool:
        """Reconcile until `done()` holds (at most `timeout` seconds); whether it does."""
        with trio.move_on_after(timeout):
            while not done():
                await self._next_reconcile()
        return done()

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        await trio.to_thread.run_sync(self.store.set_topic_configs, name, configs)
        self.poke()

    async def add_partitions(self, name: str, total: int) -> None:
        """Extend the topic's assignment to `total` partitions and wait until this broker sees them."""
        assignment = self.snapshot.topics.get(name)
        if assignment is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        current = max(assignment.partitions) + 1 if assignment.partitions else 0
        factor = len(next(iter(assignment.partitions.values()), [])) or 1
        brokers = [BrokerMetadata(b.broker_id, b.rack) for b in self.live_brokers()]
        added = assign_replicas(brokers, total - current, factor, start_partition=current)
        grown = zd.TopicAssignment(
            name,
            assignment.topic_id,
            {**assignment.partitions, **added},
            assignment.adding,
            assignment.removing,
        )
        await trio.to_thread.run_sync(self.store.set_assignment, grown)
        with trio.move_on_after(10):
            while (topic := self.broker.metadata.topic(name)) is not None and topic.partitions < total:
                await self._next_reconcile()

    async def allocate_producer_id_block(self, size: int) -> int:
        return await trio.to_thread.run_sync(self.store.allocate_producer_id_block, self.node_id, size)


def _at_version(state: LeaderAndIsr, zk_version: int) -> LeaderAndIsr:
    """The state as written: its new znode version is the partition epoch brokers are told."""
    return LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch, zk_version)


def _newer(a: LeaderAndIsr, b: LeaderAndIsr) -> bool:
    """Whether `a` is a later state of the partition than `b` (leader epoch, then znode version)."""
    return (a.leader_epoch, a.zk_version) > (b.leader_epoch, b.zk_version)
