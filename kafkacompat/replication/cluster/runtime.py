"""`ClusterRuntime`: the one object the broker holds in cluster mode, built from the parts of this package.

Theory of operation
-------------------
The broker (`BrokerState.cluster`), its handlers and the replica manager see one object; the work is
done by the parts it builds around one shared `ClusterState`, each with one job (see the package
docstring). This class builds them in dependency order and forwards every public name its callers use
to the part that owns it, so a caller never needs to know the split. It is also the replica manager's
`ClusterLink`: the link is given to the replica manager when the shared state is built, before the part
that sends AlterPartition exists, so the runtime stands in for it and forwards.

Stopping (`controlled_shutdown`): the controlled part of a stop, where the controller moves this
broker's leaderships away, runs only while ZooKeeper is connected, and for at most what Kafka's
`controlled.shutdown.*` settings allow: `controlled.shutdown.max.retries` + 1 attempts, each a request
of up to `replica.socket.timeout.ms` (the timeout of this broker's requests to the controller), with
`controlled.shutdown.retry.backoff.ms` between them, plus the wait for this broker's view to show the
moves. With ZooKeeper unreachable, before or during it, the controller can move nothing (its moves are
ZooKeeper writes): the broker says so in one line, ends its session (`Session.close`, which fails every
kazoo call waiting for a reconnect) and stops without it. A stop therefore ends within that bound
whatever ZooKeeper does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.replication.cluster.controller_client import ControllerClient
from kafkacompat.replication.cluster.controller_duties import ControllerDuties
from kafkacompat.replication.cluster.controller_requests import ControllerRequests
from kafkacompat.replication.cluster.metadata_view import MetadataView
from kafkacompat.replication.cluster.replica_roles import ReplicaRoles
from kafkacompat.replication.cluster.session import Session
from kafkacompat.replication.cluster.shared import ClusterState, ZkSnapshot
from kafkacompat.replication.cluster.topic_admin import TopicAdmin
from kafkacompat.replication.partition_state import LeaderAndIsr, PartitionState
from kafkacompat.replication.replica_manager import ClusterReplicaManager
from kafkacompat.replication.zookeeper import ZooKeeperStore

if TYPE_CHECKING:
    from kafkacompat.replication.broker_host import BrokerHost
    from kafkacompat.replication.config_sync import ConfigSync

__all__ = ["ClusterRuntime", "controlled_shutdown_bound"]

log = logging.getLogger("kafkacompat.cluster")

#: how often a controlled shutdown looks whether ZooKeeper is still connected
ZOOKEEPER_CHECK_SECONDS = 0.1
#: the controlled shutdown's wait for this broker's view to show the moves (controller_client.py)
VIEW_WAIT_SECONDS = 5.0


def controlled_shutdown_bound(config: Any) -> float:
    """Seconds a controlled shutdown may take (see module docstring)."""
    retries = max(int(config["controlled.shutdown.max.retries"]), 0)
    return (
        (retries + 1) * config["replica.socket.timeout.ms"] / 1000
        + retries * config["controlled.shutdown.retry.backoff.ms"] / 1000
        + VIEW_WAIT_SECONDS
    )


class ClusterRuntime:
    """The broker's cluster-mode state and tasks: a facade over the parts (see module docstring)."""

    def __init__(self, broker: BrokerHost, store: ZooKeeperStore) -> None:
        self.node_id = broker.node_id
        self.state = ClusterState(broker, store, link=self)
        self.view = MetadataView(self.state)
        self.requests = ControllerRequests(self.state)
        self.duties = ControllerDuties(self.state, self.requests)
        self.roles = ReplicaRoles(self.state)
        self.to_controller = ControllerClient(self.state, self.view, self.duties)
        self.topics = TopicAdmin(self.state, self.view)
        self.session = Session(self.state, self.duties, self.requests, self.roles)
        #: ACLs, SCRAM credentials, quotas and dynamic broker configs in ZooKeeper (set by the server)
        self.config_sync: ConfigSync | None = None

        # the session: the task the server runs, its end, the reconcile trigger
        self.run = self.session.run
        self.close = self.session.close
        self.reconcile = self.session.reconcile
        self.poke = self.state.poke
        self.is_fenced = self.state.is_fenced
        self.inter_broker_listener = self.state.inter_broker_listener
        self.inter_broker_security = self.state.inter_broker_security
        self.connect_inter_broker = self.state.connect_inter_broker
        # what clients see (Metadata, DescribeCluster, FindCoordinator, Produce, Fetch, the coordinators)
        self.live_brokers = self.view.live_brokers
        self.controller_id = self.view.controller_id
        self.partition_metadata = self.view.partition_metadata
        self.topic_names_by_id = self.view.topic_names_by_id
        self.topic_id = self.view.topic_id
        self.reassignments = self.view.reassignments
        self.refresh_live_brokers = self.view.refresh_live_brokers
        # topic administration from any broker
        self.create_topic = self.topics.create_topic
        self.delete_topic = self.topics.delete_topic
        self.set_topic_configs = self.topics.set_topic_configs
        self.add_partitions = self.topics.add_partitions
        self.allocate_producer_id_block = self.topics.allocate_producer_id_block
        # the controller's requests, as the broker they are sent to
        self.check_controller_request = self.roles.check_controller_request
        self.apply_leader_and_isr = self.roles.apply_leader_and_isr
        self.apply_update_metadata = self.roles.apply_update_metadata
        self.apply_stop_replica = self.roles.apply_stop_replica
        # requests served as the controller
        self.alter_partition_as_controller = self.duties.alter_partition_as_controller
        self.controlled_shutdown_as_controller = self.duties.controlled_shutdown_as_controller
        self.alter_reassignments = self.duties.alter_reassignments
        self.elect_leaders = self.duties.elect_leaders
        self.auto_rebalance = self.duties.auto_rebalance

    # --- stopping ------------------------------------------------------------------------------------

    @property
    def zookeeper_reachable(self) -> bool:
        """Whether the ZooKeeper session is connected now."""
        return self.session.zookeeper_reachable

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away, within the bound of Kafka's
        controlled.shutdown.* settings and only while ZooKeeper is connected (see module docstring).
        True once nothing was left to move."""
        config = self.state.broker.config
        if not config["controlled.shutdown.enable"]:
            return False
        if not self.zookeeper_reachable:
            await self._stop_without_zookeeper()
            return False
        bound = controlled_shutdown_bound(config)
        done = False
        unreachable = False
        async with trio.open_nursery() as nursery:

            async def watch_zookeeper() -> None:
                nonlocal unreachable
                while self.zookeeper_reachable:
                    await trio.sleep(ZOOKEEPER_CHECK_SECONDS)
                unreachable = True
                # the kazoo calls the controlled shutdown waits in fail once the session is closed
                await self._stop_without_zookeeper()
                nursery.cancel_scope.cancel()

            async def shut_down() -> None:
                nonlocal done
                with trio.move_on_after(bound) as scope:
                    done = await self.to_controller.controlled_shutdown()
                if scope.cancelled_caught:
                    log.warning(
                        "broker %d: controlled shutdown did not finish within %.0f s "
                        "(controlled.shutdown.max.retries, controlled.shutdown.retry.backoff.ms, "
                        "replica.socket.timeout.ms); stopping without it",
                        self.node_id,
                        bound,
                    )
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch_zookeeper)
            nursery.start_soon(shut_down)
        return done and not unreachable

    async def _stop_without_zookeeper(self) -> None:
        log.warning(
            "broker %d: ZooKeeper (%s) is unreachable: controlled shutdown skipped, leaderships move "
            "when the session expires",
            self.node_id,
            self.state.store.hosts,
        )
        await self.session.close()

    # --- the replica manager's link (replica_manager.ClusterLink) --------------------------------------

    def known_leader_epoch(self, topic: str, partition: int) -> int:
        return self.to_controller.known_leader_epoch(topic, partition)

    def isr_committed(self, key: tuple[str, int], state: LeaderAndIsr) -> None:
        self.to_controller.isr_committed(key, state)

    def isr_refused(self, key: tuple[str, int]) -> None:
        self.to_controller.isr_refused(key)

    async def alter_partition(self, key: tuple[str, int], proposal: LeaderAndIsr) -> LeaderAndIsr | None:
        return await self.to_controller.alter_partition(key, proposal)

    # --- the shared state its callers read (metrics, handlers, tests) ----------------------------------

    @property
    def broker(self) -> BrokerHost:
        return self.state.broker

    @property
    def store(self) -> ZooKeeperStore:
        return self.state.store

    @property
    def replicas(self) -> ClusterReplicaManager:
        return self.state.replicas

    @property
    def partitions(self) -> dict[tuple[str, int], PartitionState]:
        return self.state.partitions

    @property
    def snapshot(self) -> ZkSnapshot:
        return self.state.snapshot

    @property
    def is_controller(self) -> bool:
        return self.state.is_controller

    @property
    def shutting_down(self) -> bool:
        return self.state.shutting_down

    @property
    def broker_epoch(self) -> int:
        return self.state.broker_epoch

    @broker_epoch.setter
    def broker_epoch(self, epoch: int) -> None:
        self.state.broker_epoch = epoch

    @property
    def known_controller_epoch(self) -> int:
        return self.state.known_controller_epoch

    @known_controller_epoch.setter
    def known_controller_epoch(self, epoch: int) -> None:
        self.state.known_controller_epoch = epoch
