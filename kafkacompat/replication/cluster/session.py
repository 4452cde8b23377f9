"""Cluster mode's ZooKeeper session: registration, the liveness fence and the reconcile loop.

Theory of operation
-------------------
`Session.run` registers the broker (`/brokers/ids/N`; the znode's czxid is its broker epoch), then
reconciles with ZooKeeper until cancelled: whenever a watch pokes the loop (a kazoo thread only pokes
it; the tree is re-read in a worker thread and applied on the trio thread) and at least every
`RECONCILE_SECONDS`. Each reconcile:

1. registers again if the registration is gone (a new session: a new broker epoch);
2. tries to become the controller when `/controller` is empty (the winner bumps `/controller_epoch`);
3. as controller, runs the controller's duties on the read (`ControllerDuties.reconcile`), reads again
   if they wrote anything, and matches the controller's queues to the live brokers
   (`ControllerRequests.sync_channel`); a `StaleController` on the way drops the role;
4. keeps the read, with any newer partition state a controller request brought while it was in flight
   (`_merged`: a stale read never undoes a newer request), and applies it as every broker
   (`ReplicaRoles.apply_view`);
5. wakes whoever waits for a reconcile (`ClusterState.next_reconcile`).

The session's own state changes reach the trio loop the same way. LOST resigns every leadership at once
(Produce and Fetch get NOT_LEADER_OR_FOLLOWER, no parked acks=-1 produce is answered) and drops the
controller role; a suspension longer than `zookeeper.session.timeout.ms`, or a pause of the whole process
as long (a SIGSTOP, seen by `_tick` as a gap in the liveness tick), fences leadership (`SessionFence`)
until the same session is confirmed. With a new session the broker registers again; the controller,
which moved its leaderships away with newer leader epochs when the old session ended, sends it a full
LeaderAndIsr.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.cluster.shared import ClusterState, ZkSnapshot, newer, read_snapshot
from kafkacompat.replication.zookeeper import StaleController

if TYPE_CHECKING:
    from kafkacompat.replication.cluster.controller_duties import ControllerDuties
    from kafkacompat.replication.cluster.controller_requests import ControllerRequests
    from kafkacompat.replication.cluster.replica_roles import ReplicaRoles

__all__ = ["RECONCILE_SECONDS", "Session"]

log = logging.getLogger("kafkacompat.cluster")

RECONCILE_SECONDS = 2.0


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
        if self.cluster.broker.closing:
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
        self.cluster.broker_epoch = await trio.to_thread.run_sync(
            self.cluster.store.register_broker, self.registration
        )
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
                    await self.cluster.wait_for_poke(RECONCILE_SECONDS)
                    try:
                        await self.reconcile()
                        if trio.current_time() >= next_rebalance:
                            next_rebalance = (
                                trio.current_time() + config["leader.imbalance.check.interval.seconds"]
                            )
                            if self.cluster.is_controller and config["auto.leader.rebalance.enable"]:
                                await self.duties.auto_rebalance()
                    except Exception as exc:  # ZooKeeper away: try again at the next tick
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

    async def close(self) -> None:
        await trio.to_thread.run_sync(self._close_blocking)

    def _close_blocking(self) -> None:
        if self.cluster.is_controller:
            self.cluster.store.resign_controller(self.cluster.node_id)
        self.cluster.store.close()

    async def reconcile(self) -> None:
        snapshot = await trio.to_thread.run_sync(read_snapshot, self.cluster.store, self.cluster.watch)
        if self.cluster.node_id not in snapshot.brokers and self.registration is not None:
            # a new session (the old one expired): register again, with a new broker epoch
            epoch = await trio.to_thread.run_sync(self.cluster.store.register_broker, self.registration)
            snapshot.brokers[self.cluster.node_id] = self.registration
            snapshot.broker_epochs[self.cluster.node_id] = epoch
            self.cluster.broker_epoch = epoch
            if self.cluster.fence.lost:
                log.info("broker %d registered again (broker epoch %d)", self.cluster.node_id, epoch)
            self.cluster.fence.rejoined()
        elif self.cluster.fence.lost and snapshot.broker_epochs.get(self.cluster.node_id) not in (
            None,
            self.cluster.broker_epoch,
        ):
            self.cluster.fence.rejoined()
        if snapshot.controller is None:
            if await trio.to_thread.run_sync(self.cluster.store.try_become_controller, self.cluster.node_id):
                log.info(
                    "broker %d is the controller (epoch %d)",
                    self.cluster.node_id,
                    self.cluster.store.controller_epoch,
                )
                snapshot.controller = self.cluster.node_id
                snapshot.controller_epoch = self.cluster.store.controller_epoch
        was_controller, self.cluster.is_controller = (
            self.cluster.is_controller,
            snapshot.controller == self.cluster.node_id,
        )
        if was_controller and not self.cluster.is_controller:
            self.cluster.store.controller_epoch_zk_version = -1
            self.requests.stop()
        if self.cluster.is_controller:
            try:
                if await self.duties.reconcile(snapshot):
                    snapshot = await trio.to_thread.run_sync(
                        read_snapshot, self.cluster.store, self.cluster.watch
                    )
                self.requests.sync_channel(snapshot)
            except StaleController as exc:
                log.warning("fenced as controller: %s", exc)
                self.cluster.is_controller = False
                self.requests.stop()
        self.cluster.read_brokers = dict(snapshot.brokers)
        # a broker that has not heard from the newest controller yet still refuses older ones
        self.cluster.known_controller_epoch = max(
            self.cluster.known_controller_epoch, snapshot.controller_epoch
        )
        self.cluster.snapshot = self._merged(snapshot)
        self.roles.apply_view(self.cluster.snapshot)
        self.cluster.reconciled()

    def _merged(self, snapshot: ZkSnapshot) -> ZkSnapshot:
        """The read, with any partition state newer than it (from a controller request that arrived
        while the read was in flight) kept: a stale read never undoes a newer request."""
        for key, known in self.cluster.snapshot.states.items():
            read = snapshot.states.get(key)
            before, after = self.cluster.snapshot.topics.get(key[0]), snapshot.topics.get(key[0])
            same_topic = before is not None and after is not None and before.topic_id == after.topic_id
            if read is not None and same_topic and newer(known, read):
                snapshot.states[key] = known
        return snapshot
