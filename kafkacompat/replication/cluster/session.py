"""Cluster mode's ZooKeeper session: registration, the liveness fence and the reconcile loop.

Theory of operation
-------------------
`Session.run` registers the broker (`/brokers/ids/N`; the znode's czxid is its broker epoch), then
reconciles with ZooKeeper until cancelled, whenever a watch fired (a kazoo thread only records what it
names, `ClusterState.watch_for`, and wakes the loop). Nothing is read on a timer: the loop also wakes
every `TICK_SECONDS` for the leader rebalance check, and reads nothing then. Each reconcile:

1. reads: the whole tree after a new session (`zk_view.read_snapshot`: at start-up, and after a session
   expired with its watches), otherwise only what the fired watches name (`zk_view.read_changes`: a
   topic created is its own znodes, not the tree), in a worker thread, and applies it to the view on
   the trio thread; a newer partition state a controller request brought while a full read was in
   flight is kept (`_apply_snapshot`: a stale read never undoes a newer request);
2. registers again if the registration is gone (a new session: a new broker epoch);
3. tries to become the controller when `/controller` is empty (the winner bumps `/controller_epoch`);
   a broker that just became the controller reads the whole tree first (Kafka's
   `initializeControllerContext`);
4. as controller, runs the controller's duties on the view (`ControllerDuties.reconcile`, which keeps
   what it writes in the view and marks what it must read again) and matches the controller's queues
   to the live brokers (`ControllerRequests.sync_channel`); a `StaleController` drops the role;
5. applies the topics that changed as every broker (`ReplicaRoles.apply_view`) and wakes whoever waits
   for the view (`ClusterState.wait_for_view`).

The session's own state changes reach the trio loop the same way. LOST resigns every leadership at once
(Produce and Fetch get NOT_LEADER_OR_FOLLOWER, no parked acks=-1 produce is answered) and drops the
controller role; a suspension longer than `zookeeper.session.timeout.ms`, or a pause of the whole process
as long (a SIGSTOP, seen by `_tick` as a gap in the liveness tick), fences leadership (`SessionFence`)
until the same session is confirmed. With a new session the broker registers again; the controller,
which moved its leaderships away with newer leader epochs when the old session ended, sends it a full
LeaderAndIsr.

Registering at start-up (`_register_at_start`): a broker restarted right after a crash (SIGKILL, a
supervisor's immediate restart) finds `/brokers/ids/N` still held by its previous process's session,
which ZooKeeper keeps until it expires, `zookeeper.session.timeout.ms` after the last heartbeat of the
dead process. The broker id is its own, so that registration is its own stale one: the broker logs once
what it waits for and how long at most, and retries until the znode is gone (STALE_REGISTRATION_POLL_SECONDS),
for at most the session timeout plus STALE_REGISTRATION_GRACE_SECONDS (ZooKeeper expires sessions on its
ticks, 2 s by default, and never negotiates a session shorter than two of them). A registration that
outlives that is another live broker with the same `broker.id`: `BrokerIdInUse`, one line.

Closing (`close`, at the end of the broker's shutdown and whenever the broker stops waiting for
ZooKeeper): as controller it resigns (`/controller` deleted, so a new controller is elected at once)
when ZooKeeper is connected, then ends the session. With ZooKeeper unreachable it only ends the session:
closing the kazoo client fails every kazoo call still waiting in a worker thread, so the tasks behind
them (the reconcile, the controller's writes, a handler's topic write) return and the broker stops.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.cluster.shared import ClusterState, newer
from kafkacompat.replication.cluster.zk_view import ZkChanges, ZkSnapshot, read_changes, read_snapshot
from kafkacompat.replication.zookeeper import StaleController
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.replication.cluster.controller_duties import ControllerDuties
    from kafkacompat.replication.cluster.controller_requests import ControllerRequests
    from kafkacompat.replication.cluster.replica_roles import ReplicaRoles

__all__ = ["TICK_SECONDS", "BrokerIdInUse", "Session"]

log = logging.getLogger("kafkacompat.cluster")

#: how often the loop wakes without a watch firing (for the leader rebalance check; it reads nothing)
TICK_SECONDS = 2.0
#: how often a broker waiting for its stale registration to expire tries to register again
STALE_REGISTRATION_POLL_SECONDS = 0.25
#: beyond zookeeper.session.timeout.ms: ZooKeeper expires sessions on its ticks (tickTime, 2 s by
#: default) and negotiates no session shorter than two ticks
STALE_REGISTRATION_GRACE_SECONDS = 4.0
#: resigning as controller at close, when ZooKeeper is connected but slow to answer
RESIGN_SECONDS = 5.0


class BrokerIdInUse(RuntimeError):
    """/brokers/ids/N stayed registered by another session past its expiry: a second live broker with
    this broker.id. A RuntimeError, which `kafkacompat serve` reports in one line."""


class Session:
    """The broker's ZooKeeper session and reconcile loop (see module docstring)."""

    def __init__(
        self,
        cluster: ClusterState,
        duties: ControllerDuties,
        requests: ControllerRequests,
        roles: ReplicaRoles,
    ) -> None:
        self.cluster = cluster
        self.duties = duties
        self.requests = requests
        self.roles = roles
        self.registration: zd.BrokerRegistration | None = None

    def _session_state(self, state: str) -> None:
        """Kazoo thread: the session changed. Hands the state to the trio loop."""
        token = self.cluster.token
        if token is not None:
            try:
                token.run_sync_soon(self._on_session_state, state)
            except trio.RunFinishedError:
                pass

    def _on_session_state(self, state: str) -> None:
        if self.cluster.broker.closing or self.cluster.store.closed:
            return  # our own close ends the session
        was_fenced = self.cluster.fence.fenced(self.cluster.clock_ms())
        self.cluster.fence.on_state(state, self.cluster.clock_ms())
        if state == "LOST":
            self._session_lost()
        elif not was_fenced and self.cluster.fence.fenced(self.cluster.clock_ms()):
            log.warning(
                "broker %d: ZooKeeper session suspended past its timeout; not leading", self.cluster.node_id
            )
        self.cluster.poke()

    def _session_lost(self) -> None:
        """The ZooKeeper session ended: the controller has moved (or will move) every leadership away
        with a newer leader epoch, so stop leading now; only a newer LeaderAndIsr makes this broker
        leader again, after it registered with its new session."""
        log.warning("broker %d: ZooKeeper session lost; resigning every leadership", self.cluster.node_id)
        self.cluster.full_read_due = True  # the watches went with the session
        self.roles.resign_all()
        if self.cluster.is_controller:
            self.cluster.is_controller = False
            self.cluster.store.controller_epoch_zk_version = -1
            self.requests.stop()

    async def _tick(self) -> None:
        """The liveness tick: a gap longer than the session timeout (the process was stopped) fences
        leadership until ZooKeeper confirms this session still holds the registration."""
        while True:
            if self.cluster.fence.on_tick(self.cluster.clock_ms()):
                log.warning(
                    "broker %d stood still past the session timeout; checking its session",
                    self.cluster.node_id,
                )
            if self.cluster.fence.paused:
                try:
                    confirmed = await trio.to_thread.run_sync(
                        self.cluster.store.registered_by_this_session,
                        self.cluster.node_id,
                        abandon_on_cancel=True,
                    )
                except Exception:
                    confirmed = False
                if confirmed and not self.cluster.fence.lost:
                    self.cluster.fence.registration_confirmed()
                    log.info("broker %d: session still valid after the pause", self.cluster.node_id)
            await trio.sleep(0.1)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, then reconcile with ZooKeeper until cancelled."""
        self.cluster.token = trio.lowlevel.current_trio_token()
        self.cluster.store.on_state_change(self._session_state)
        self.registration = self._registration()
        self.cluster.broker_epoch = await self._register_at_start(self.registration)
        async with trio.open_nursery() as nursery:
            self.cluster.nursery = nursery
            nursery.start_soon(self._tick)
            await nursery.start(self.cluster.replicas.run)
            await self.reconcile()
            task_status.started()
            config = self.cluster.broker.config
            next_rebalance = trio.current_time() + config["leader.imbalance.check.interval.seconds"]
            try:
                while True:
                    await self.cluster.wait_for_poke(TICK_SECONDS)
                    try:
                        await self.reconcile()
                        if trio.current_time() >= next_rebalance:
                            next_rebalance = (
                                trio.current_time() + config["leader.imbalance.check.interval.seconds"]
                            )
                            if self.cluster.is_controller and config["auto.leader.rebalance.enable"]:
                                await self.duties.auto_rebalance()
                    except Exception as exc:  # ZooKeeper away: try again at the next tick
                        if self.cluster.store.closed:
                            return  # the broker stops without ZooKeeper (close): nothing to retry
                        log.warning("cluster reconcile failed: %r", exc)
                        await trio.sleep(0.2)
            finally:
                for fetcher in self.cluster.fetchers.values():
                    fetcher.stop()
                self.requests.stop()
                nursery.cancel_scope.cancel()

    def _registration(self) -> zd.BrokerRegistration:
        protocols = self.cluster.broker.config.security_protocol_map
        endpoints = dict(self.cluster.broker.endpoints)
        return zd.BrokerRegistration(
            self.cluster.node_id,
            endpoints,
            {name: protocols.get(name, "PLAINTEXT") for name in endpoints},
            self.cluster.broker.config["broker.rack"],
        )

    async def _register_at_start(self, registration: zd.BrokerRegistration) -> int:
        """Register, waiting (bounded) for this broker's stale registration of a previous process to
        expire (see module docstring). Returns the broker epoch."""
        store = self.cluster.store
        timeout_ms = self.cluster.broker.config["zookeeper.session.timeout.ms"]
        bound = timeout_ms / 1000 + STALE_REGISTRATION_GRACE_SECONDS
        deadline = trio.current_time() + bound
        announced = False
        while True:
            try:
                return await trio.to_thread.run_sync(store.register_broker, registration)
            except KafkaError as exc:
                if exc.code != ErrorCode.BROKER_NOT_AVAILABLE:
                    raise
            holder = await trio.to_thread.run_sync(store.registration_of, registration.broker_id)
            if holder is None:
                continue  # expired between the two calls
            if trio.current_time() >= deadline:
                raise BrokerIdInUse(
                    f"broker id {registration.broker_id} is registered in ZooKeeper by another session "
                    f"({_endpoints(holder)}) that did not expire within zookeeper.session.timeout.ms "
                    f"({timeout_ms} ms): is another broker running with broker.id={registration.broker_id}?"
                ) from None
            if not announced:
                announced = True
                log.info(
                    "broker %d: ZooKeeper still holds the registration of broker id %d from an earlier "
                    "session (%s%s); waiting up to %.0f s for it to expire (zookeeper.session.timeout.ms "
                    "%d)",
                    registration.broker_id,
                    registration.broker_id,
                    _endpoints(holder),
                    ", this broker's own address" if holder.endpoints == registration.endpoints else "",
                    bound,
                    timeout_ms,
                )
            await trio.sleep(STALE_REGISTRATION_POLL_SECONDS)

    @property
    def zookeeper_reachable(self) -> bool:
        """Whether the ZooKeeper session is connected now."""
        return self.cluster.store.connected

    async def close(self) -> None:
        """Resign as controller (when ZooKeeper answers) and end the session; idempotent. Kazoo calls
        still waiting in worker threads fail, so their tasks return (see module docstring)."""
        store = self.cluster.store
        if store.closed:
            return
        if self.cluster.is_controller and store.connected:
            with trio.move_on_after(RESIGN_SECONDS):
                # abandoned on timeout: closing the store below fails the call it waits in
                await trio.to_thread.run_sync(
                    store.resign_controller, self.cluster.node_id, abandon_on_cancel=True
                )
        await trio.to_thread.run_sync(store.close)

    async def reconcile(self) -> None:
        """Read what changed (everything after a new session), act as controller, apply as broker."""
        cluster = self.cluster
        full = cluster.full_read_due
        if full:
            dirty, cluster.dirty = cluster.dirty, set()
            try:
                snapshot = await trio.to_thread.run_sync(read_snapshot, cluster.store, cluster.watch_for)
            except BaseException:
                cluster.dirty |= dirty
                raise
            cluster.full_read_due = False
            self._apply_snapshot(snapshot)
            changed_topics: set[str] | None = None
        elif cluster.dirty:
            keys, cluster.dirty = cluster.dirty, set()
            known = {name: a.topic_id for name, a in cluster.snapshot.topics.items()}
            try:
                changes = await trio.to_thread.run_sync(
                    read_changes,
                    cluster.store,
                    keys,
                    known,
                    cluster.snapshot.last_config_change,
                    cluster.watch_for,
                )
            except BaseException:
                cluster.dirty |= keys  # read them again next time
                raise
            changed_topics = self._apply_changes(changes)
        else:
            return
        snapshot = cluster.snapshot
        if cluster.node_id not in snapshot.brokers and self.registration is not None:
            # a new session (the old one expired): register again, with a new broker epoch
            epoch = await trio.to_thread.run_sync(cluster.store.register_broker, self.registration)
            snapshot.brokers[cluster.node_id] = self.registration
            snapshot.broker_epochs[cluster.node_id] = epoch
            cluster.read_brokers = dict(snapshot.brokers)
            cluster.broker_epoch = epoch
            if cluster.fence.lost:
                log.info("broker %d registered again (broker epoch %d)", cluster.node_id, epoch)
            cluster.fence.rejoined()
        elif cluster.fence.lost and snapshot.broker_epochs.get(cluster.node_id) not in (
            None,
            cluster.broker_epoch,
        ):
            cluster.fence.rejoined()
        if snapshot.controller is None:
            if await trio.to_thread.run_sync(cluster.store.try_become_controller, cluster.node_id):
                log.info(
                    "broker %d is the controller (epoch %d)", cluster.node_id, cluster.store.controller_epoch
                )
                snapshot.controller = cluster.node_id
                snapshot.controller_epoch = cluster.store.controller_epoch
        was_controller, cluster.is_controller = cluster.is_controller, snapshot.controller == cluster.node_id
        if was_controller and not cluster.is_controller:
            cluster.store.controller_epoch_zk_version = -1
            self.requests.stop()
        if cluster.is_controller and not was_controller and not full:
            # a new controller trusts nothing it learnt before: it reads the whole tree (Kafka's
            # initializeControllerContext), with the watches kept
            fresh = await trio.to_thread.run_sync(read_snapshot, cluster.store, cluster.watch_for)
            self._apply_snapshot(fresh)
            snapshot = cluster.snapshot
            snapshot.controller = cluster.node_id
            snapshot.controller_epoch = max(snapshot.controller_epoch, cluster.store.controller_epoch)
            changed_topics = None
        if cluster.is_controller:
            try:
                await self.duties.reconcile(snapshot)
                self.requests.sync_channel(snapshot)
            except StaleController as exc:
                log.warning("fenced as controller: %s", exc)
                cluster.is_controller = False
                self.requests.stop()
        # a broker that has not heard from the newest controller yet still refuses older ones
        cluster.known_controller_epoch = max(cluster.known_controller_epoch, snapshot.controller_epoch)
        self.roles.apply_view(snapshot, changed_topics)
        cluster.changed()

    def _apply_snapshot(self, snapshot: ZkSnapshot) -> None:
        """Take a full read as the view, with any partition state newer than it (from a controller
        request that arrived while the read was in flight) kept: a stale read never undoes a newer
        request."""
        for key, known in self.cluster.snapshot.states.items():
            read = snapshot.states.get(key)
            before, after = self.cluster.snapshot.topics.get(key[0]), snapshot.topics.get(key[0])
            same_topic = before is not None and after is not None and before.topic_id == after.topic_id
            if read is not None and same_topic and newer(known, read):
                snapshot.states[key] = known
        self.cluster.read_brokers = dict(snapshot.brokers)
        self.cluster.snapshot = snapshot

    def _apply_changes(self, changes: ZkChanges) -> set[str]:
        """Apply what `read_changes` read to the view; the topics whose assignment or configs changed."""
        view = self.cluster.snapshot
        touched: set[str] = set()
        if changes.controller_read:
            view.controller = changes.controller
            if changes.controller_epoch is not None:
                view.controller_epoch = max(view.controller_epoch, changes.controller_epoch)
        if changes.deletions is not None:
            touched |= set(changes.deletions) ^ set(view.deletions)
            view.deletions = changes.deletions
        for name, assignment in changes.topics.items():
            touched.add(name)
            before = view.topics.get(name)
            if assignment is None or (before is not None and before.topic_id != assignment.topic_id):
                # gone, or deleted and created again: nothing of the old incarnation stays
                view.configs.pop(name, None)
                for key in [k for k in view.states if k[0] == name]:
                    del view.states[key]
            if assignment is None:
                view.topics.pop(name, None)
            else:
                view.topics[name] = assignment
        for name, configs in changes.configs.items():
            if name in view.topics:
                touched.add(name)
                view.configs[name] = configs
        for key, state in changes.states.items():
            if state is None:
                view.states.pop(key, None)
            elif key[0] in view.topics:
                self.cluster.remember(key, state)
        if changes.last_config_change is not None:
            view.last_config_change = changes.last_config_change
        if changes.brokers is not None:
            view.brokers = changes.brokers
            view.broker_epochs = changes.broker_epochs
            self.cluster.read_brokers = dict(changes.brokers)
        return touched


def _endpoints(registration: zd.BrokerRegistration) -> str:
    return ", ".join(f"{name}://{host}:{port}" for name, (host, port) in registration.endpoints.items())
