"""Cluster mode's trio edge: the broker's view of ZooKeeper, the controller's duties, replica roles.

Theory of operation
-------------------
Only built when `zookeeper.connect` is set (`server.Broker` imports this module then and only then;
single-node mode never loads it, kazoo or a JVM). `ClusterRuntime` owns the broker's `ZooKeeperStore`,
one `PartitionState` per hosted partition and one `FetcherTask` per broker it follows.

How brokers learn leadership: ZooKeeper is the source of truth, so instead of the controller pushing
LeaderAndIsr/UpdateMetadata/StopReplica requests (Kafka's way, which exists to spare ZooKeeper the
reads of every broker), every broker watches the znodes itself and reconciles. A watch firing (kazoo
thread) only pokes the trio loop; the loop re-reads the whole tree in a worker thread (`snapshot()`,
re-arming every watch), then applies it on the trio thread. Reconciling from a full read instead of
acting on individual notifications means a lost or coalesced watch, a ZooKeeper restart or a new
session can never leave a broker with a stale role: the next read (also done every
`RECONCILE_SECONDS`) repairs it. The cost, O(partitions) reads per change, is fine at the sizes this
project runs (tests, CI, development clusters), and stays the documented limit.

Each reconcile:

1. controller election: no `/controller` -> try to create it (the winner bumps `/controller_epoch`);
2. as controller (`controller.py` decides, `ZooKeeperStore.controller_write_states` writes with the
   controller-epoch check): partitions of new topics get their first state (first live replica leads,
   the live replicas form the ISR); partitions led by a dead broker get a new leader from the ISR
   (`unclean.leader.election.enable` honoured per topic) with leader epoch + 1; dead followers leave
   the ISR; topics in `/admin/delete_topics` are removed;
3. as every broker: the topic table (`metadata`, the LocalMetadata interface the handlers read) mirrors
   ZooKeeper; logs of assigned partitions exist; each hosted partition becomes leader or follower with
   the state's epoch; followers are handed to the fetcher task of their leader (which truncates by
   leader epoch, then fetches); logs of deleted topics go.

The leader's side of replication lives in the request path: the Fetch handler reports follower fetches
(`follower_fetched`), which may advance the high watermark and wake parked acks=-1 produces and
consumer fetches; ISR shrink (`replica.lag.time.max.ms`) and expansion are written by the leader with a
compare-and-set on the state's znode version, as Kafka's ZooKeeper-mode leaders did.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.controller import (
    BrokerMetadata,
    assign_replicas,
    elect_for_controlled_shutdown,
    elect_offline_leader,
    elect_preferred_leader,
    on_brokers_lost,
    preferred_leader_moves,
)
from kafkacompat.replication.metadata import LocalMetadata, TopicInfo
from kafkacompat.replication.partition_state import NO_LEADER, LeaderAndIsr, PartitionState
from kafkacompat.replication.zookeeper import StaleController, ZooKeeperStore
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.client import BrokerConnection
    from kafkacompat.replication.config_sync import ConfigSync
    from kafkacompat.replication.fetcher_task import FetcherTask
    from kafkacompat.security.client_auth import ClientSecurity

__all__ = ["ClusterMetadataCache", "ClusterRuntime", "ZkSnapshot"]

log = logging.getLogger("kafkacompat.cluster")

RECONCILE_SECONDS = 2.0
CONTROLLED_SHUTDOWN = 7
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
    controller: int | None = None
    topics: dict[str, zd.TopicAssignment] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    states: dict[tuple[str, int], LeaderAndIsr] = field(default_factory=dict)
    deletions: list[str] = field(default_factory=list)


def read_snapshot(store: ZooKeeperStore, watch: Callable[[Any], None]) -> ZkSnapshot:
    """Blocking: the whole tree kafkacompat uses, every read with `watch` armed."""
    snapshot = ZkSnapshot()
    snapshot.brokers = store.live_brokers(watch)
    snapshot.controller = store.current_controller(watch)
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
            state = store.partition_state(name, partition, watch)
            if state is not None:
                snapshot.states[(name, partition)] = state
    return snapshot


class ClusterRuntime:
    """The broker's cluster-mode state and tasks (see module docstring)."""

    def __init__(self, broker: BrokerState, store: ZooKeeperStore) -> None:
        self.broker = broker
        self.store = store
        self.node_id = broker.node_id
        self.snapshot = ZkSnapshot()
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.fetchers: dict[int, FetcherTask] = {}
        self.is_controller = False
        self._poked = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._reconciled = trio.Event()
        self.registration: zd.BrokerRegistration | None = None
        self.lag_ms = int(broker.config["replica.lag.time.max.ms"])
        #: set once a controlled shutdown moved this broker's leaderships away: no more fetching
        self.shutting_down = False
        #: ACLs, SCRAM credentials, quotas and dynamic broker configs in ZooKeeper (set by the server)
        self.config_sync: ConfigSync | None = None
        self._inter_broker_security: tuple[str, ClientSecurity | None] | None = None

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

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, then reconcile with ZooKeeper until cancelled."""
        self._token = trio.lowlevel.current_trio_token()
        self.store.on_state_change(lambda _state: self._watch(None))
        self.registration = self._registration()
        await trio.to_thread.run_sync(self.store.register_broker, self.registration)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self.reconcile()
            task_status.started()
            config = self.broker.config
            next_rebalance = trio.current_time() + config["leader.imbalance.check.interval.seconds"]
            try:
                while True:
                    with trio.move_on_after(min(RECONCILE_SECONDS, max(self.lag_ms / 2000, 0.05))):
                        await self._poked.wait()
                    self._poked = trio.Event()
                    try:
                        await self.reconcile()
                        await self.check_isr_lag()
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
            # a new session (the old one expired): register again
            await trio.to_thread.run_sync(self.store.register_broker, self.registration)
            snapshot.brokers[self.node_id] = self.registration
        if snapshot.controller is None:
            if await trio.to_thread.run_sync(self.store.try_become_controller, self.node_id):
                log.info("broker %d is the controller (epoch %d)", self.node_id, self.store.controller_epoch)
                snapshot.controller = self.node_id
        was_controller, self.is_controller = self.is_controller, snapshot.controller == self.node_id
        if was_controller and not self.is_controller:
            self.store.controller_epoch_zk_version = -1
        if self.is_controller:
            try:
                if await self._controller_duties(snapshot):
                    snapshot = await trio.to_thread.run_sync(read_snapshot, self.store, self._watch)
            except StaleController as exc:
                log.warning("fenced as controller: %s", exc)
                self.is_controller = False
        self.snapshot = snapshot
        self._apply(snapshot)
        self._reconciled.set()

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
            for key, version in results.items():
                if version < 0:
                    log.info("controller: state of %s-%d changed meanwhile; deciding again", *key)
                    self.poke()
                else:
                    log.info("controller: %s-%d is now %s", key[0], key[1], writes[key])
        for name in snapshot.deletions:
            await trio.to_thread.run_sync(self.store.remove_topic, name)
            log.info("controller: deleted topic %s", name)
        finished = await self._finish_reassignments(snapshot)
        return bool(writes or snapshot.deletions or finished)

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
                await trio.to_thread.run_sync(
                    self.store.set_assignment,
                    zd.TopicAssignment(
                        name,
                        assignment.topic_id,
                        {**assignment.partitions, **finished},
                        {p: r for p, r in assignment.adding.items() if p not in finished},
                        {p: r for p, r in assignment.removing.items() if p not in finished},
                    ),
                )
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
                        self._reconciled = trio.Event()
                        self.poke()
                        await self._reconciled.wait()
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
        live_topics = {n: a for n, a in snapshot.topics.items() if n not in snapshot.deletions}
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
                self._take_role(key, state, tuple(replicas), partition_log, now)
        metadata.commit()

    def _take_role(
        self,
        key: tuple[str, int],
        state: LeaderAndIsr,
        replicas: tuple[int, ...],
        partition_log: Any,
        now: int,
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
                self._offsets_role(key, True)
                log.info(
                    "broker %d leads %s-%d at epoch %d", self.node_id, key[0], key[1], state.leader_epoch
                )
            if not was_leader:
                current.high_watermark = partition_log.high_watermark
            if current.maybe_advance_high_watermark(partition_log.log_end_offset):
                partition_log.update_high_watermark(current.high_watermark)
        else:
            if current.become_follower(state, replicas) or key not in self._followed():
                self._unfollow(key)
                self._offsets_role(key, False)
                if (
                    state.leader != NO_LEADER
                    and state.leader in self.snapshot_brokers()
                    and not self.shutting_down
                ):
                    self._fetcher_for(state.leader).add(key, state.leader_epoch)
        self.broker.watchers.notify(*key)  # parked produces and fetches look at the new role

    def snapshot_brokers(self) -> dict[int, zd.BrokerRegistration]:
        return self.snapshot.brokers

    def _followed(self) -> set[tuple[str, int]]:
        return {key for fetcher in self.fetchers.values() for key in fetcher.partitions}

    def _fetcher_for(self, leader: int) -> FetcherTask:
        from kafkacompat.replication.fetcher_task import FetcherTask

        fetcher = self.fetchers.get(leader)
        if fetcher is None or fetcher.stopped:
            fetcher = self.fetchers[leader] = FetcherTask(self, leader)
            assert self._nursery is not None
            self._nursery.start_soon(fetcher.run)
        return fetcher

    def _unfollow(self, key: tuple[str, int]) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(key)

    def _stop_replica(self, key: tuple[str, int]) -> None:
        self._unfollow(key)
        if self.partitions.pop(key, None) is not None:
            self._offsets_role(key, False)

    def _offsets_role(self, key: tuple[str, int], leader: bool) -> None:
        """The group coordinator follows the leadership of __consumer_offsets partitions."""
        self._txn_role(key, leader)
        groups = getattr(self.broker, "groups", None)
        if key[0] == "__consumer_offsets" and groups is not None and self._nursery is not None:
            self._nursery.start_soon(groups.set_offsets_leadership, key[1], leader)

    def _txn_role(self, key: tuple[str, int], leader: bool) -> None:
        """The transaction coordinator follows the leadership of __transaction_state partitions (the
        leader epoch becomes the coordinator epoch of its markers)."""
        transactions = getattr(self.broker, "transactions", None)
        if key[0] == "__transaction_state" and transactions is not None and self._nursery is not None:
            self._nursery.start_soon(transactions.set_txn_leadership, key[1], leader, self.leader_epoch(*key))

    def _drop_topic(self, topic: TopicInfo) -> None:
        for index in range(topic.partitions):
            self._stop_replica((topic.name, index))
        broker = self.broker
        broker.metadata.delete_topic(topic.name)
        broker._log_configs.pop(topic.name, None)
        broker._delete_logs(topic.name, topic.partitions)
        broker.fetch_sessions.remove_topic(topic.name)
        broker.fetch_sessions.remove_topic(topic.topic_id)
        broker.watchers.notify_topic(topic.name)
        log.info("broker %d dropped topic %s", self.node_id, topic.name)

    # --- leader side ---------------------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        return self.partitions.get((topic, partition))

    def leader_epoch(self, topic: str, partition: int) -> int:
        state = self.partitions.get((topic, partition))
        if state is not None:
            return state.leader_epoch
        known = self.snapshot.states.get((topic, partition))
        return known.leader_epoch if known is not None else -1

    def check_leader(self, topic: str, partition: int) -> PartitionState:
        state = self.partitions.get((topic, partition))
        if state is None or not state.is_leader:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {self.node_id} is not the leader for {topic}-{partition}",
            )
        return state

    def min_isr(self, partition_log: Any) -> int:
        return int(partition_log.config.get("min.insync.replicas"))

    def leader_appended(self, topic: str, partition: int, partition_log: Any) -> None:
        """After a leader append: the HW moves when the ISR is the leader alone; followers are woken."""
        state = self.partitions.get((topic, partition))
        if state is not None and state.maybe_advance_high_watermark(partition_log.log_end_offset):
            partition_log.update_high_watermark(state.high_watermark)
        self.broker.watchers.notify(topic, partition)

    def follower_fetched(
        self, topic: str, partition: int, replica_id: int, fetch_offset: int, partition_log: Any
    ) -> None:
        """The Fetch handler saw a follower fetch: progress, HW, ISR expansion."""
        state = self.check_leader(topic, partition)
        state.record_follower_fetch(
            replica_id, fetch_offset, partition_log.log_end_offset, self.broker.now_ms()
        )
        if state.maybe_advance_high_watermark(partition_log.log_end_offset):
            partition_log.update_high_watermark(state.high_watermark)
            self.broker.watchers.notify(topic, partition)
        if state.should_expand_isr(replica_id) and self._nursery is not None:
            proposal = state.propose_isr(tuple(sorted(set(state.isr) | {replica_id})))
            self._nursery.start_soon(self._write_isr, (topic, partition), proposal)

    async def wait_for_replicas(
        self,
        topic: str,
        partition: int,
        required_offset: int,
        partition_log: Any,
        deadline: float,
        park: Callable[[trio.Event, float], Awaitable[None]],
    ) -> ErrorCode:
        """Park an acks=-1 produce until the ISR has `required_offset` (Kafka's delayed produce)."""
        while True:
            state = self.partitions.get((topic, partition))
            if state is None:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            done, error = state.replicas_reached(required_offset, self.min_isr(partition_log))
            if done or error != ErrorCode.NONE:
                return error
            if trio.current_time() >= deadline or self.broker.closing:
                return ErrorCode.REQUEST_TIMED_OUT
            with self.broker.watchers.watch([(topic, partition)]) as event:
                await park(event, deadline)

    async def check_isr_lag(self) -> None:
        now = self.broker.now_ms()
        for key, state in list(self.partitions.items()):
            if not state.is_leader or state.pending_isr is not None:
                continue
            late = state.out_of_sync_replicas(now, self.lag_ms)
            if late:
                proposal = state.propose_isr(tuple(r for r in state.isr if r not in late))
                log.info(
                    "%s-%d: ISR shrinks to %s (lagging %s)", key[0], key[1], list(proposal.isr), sorted(late)
                )
                await self._write_isr(key, proposal)

    async def _write_isr(self, key: tuple[str, int], proposal: LeaderAndIsr) -> None:
        try:
            version = await trio.to_thread.run_sync(self.store.leader_write_isr, key[0], key[1], proposal)
        except Exception as exc:
            log.warning("ISR write for %s-%d failed: %r", key[0], key[1], exc)
            version = -1
        state = self.partitions.get(key)
        if state is None:
            return
        if version < 0:
            state.abort_isr_change()
            self.poke()  # the controller changed the state: re-read it
            return
        state.commit_isr(proposal.isr, version)
        partition_log = self.broker.logs.get_log(*key)
        if partition_log is not None and state.maybe_advance_high_watermark(partition_log.log_end_offset):
            partition_log.update_high_watermark(state.high_watermark)
        self.broker.watchers.notify(*key)

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
                self._reconciled = trio.Event()
                self.poke()
                await self._reconciled.wait()
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
                self._reconciled = trio.Event()
                self.poke()
                await self._reconciled.wait()

    async def allocate_producer_id_block(self, size: int) -> int:
        return await trio.to_thread.run_sync(self.store.allocate_producer_id_block, self.node_id, size)
