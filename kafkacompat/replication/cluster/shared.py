"""What every part of the cluster runtime shares: the view of ZooKeeper, the replica states, the
reconcile triggers and the connections to other brokers.

Theory of operation
-------------------
`ClusterState` is the one mutable state of cluster mode; each part of the runtime (session, controller
duties, controller requests, replica roles, metadata view, topic admin, requests to the controller) is
an object with one job holding a reference to it, so what the parts share is written down here and
nowhere else. It holds:

- `snapshot`, the broker's `ZkSnapshot`: the last read of ZooKeeper (`read_snapshot`) with the newer
  partition states controller requests brought merged in (`remember`), which clients are answered from;
- the replica manager (`replicas`) and its `partitions`, one `PartitionState` per hosted partition, and
  the follower `fetchers`;
- the session's facts the other parts read: `broker_epoch`, the newest controller epoch seen,
  `is_controller`, the `SessionFence`, whether a controlled shutdown completed;
- the reconcile triggers: `poke` asks for a reconcile (a kazoo watch calls it through the trio token,
  from its own thread), `next_reconcile` and `wait_for_view` wait for one to finish, which is how admin
  requests answer only once this broker's view shows their change;
- how to reach another broker (`connect_inter_broker`, an async `InterBrokerConnection` of
  `replication/inter_broker_client.py`), used by fetchers, the controller's channel, the requests to the
  controller and the coordinators' requests alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.broker_requests import SessionFence
from kafkacompat.replication.inter_broker_client import InterBrokerConnection, connect
from kafkacompat.replication.metadata import LocalMetadata
from kafkacompat.replication.partition_state import LeaderAndIsr, PartitionState
from kafkacompat.replication.replica_manager import ClusterLink, ClusterReplicaManager
from kafkacompat.replication.zookeeper import ZooKeeperStore
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.replication.broker_host import BrokerHost
    from kafkacompat.replication.fetcher_task import FetcherTask
    from kafkacompat.security.client_auth import ClientSecurity

__all__ = ["ClusterMetadataCache", "ClusterState", "ZkSnapshot", "at_version", "newer", "read_snapshot"]

log = logging.getLogger("kafkacompat.cluster")

TopicPartition = tuple[str, int]


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


def at_version(state: LeaderAndIsr, zk_version: int) -> LeaderAndIsr:
    """The state as written: its new znode version is the partition epoch brokers are told."""
    return LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch, zk_version)


def newer(a: LeaderAndIsr, b: LeaderAndIsr) -> bool:
    """Whether `a` is a later state of the partition than `b` (leader epoch, then znode version)."""
    return (a.leader_epoch, a.zk_version) > (b.leader_epoch, b.zk_version)


class ClusterState:
    """The state the parts of the cluster runtime share (see module docstring)."""

    def __init__(self, broker: BrokerHost, store: ZooKeeperStore, link: ClusterLink) -> None:
        self.broker = broker
        self.store = store
        self.node_id = broker.node_id
        self.snapshot = ZkSnapshot()
        #: the partition seam: the replication state of every hosted partition, the leader's side
        self.replicas = ClusterReplicaManager(
            broker.logs,
            broker.watchers,
            link,
            now_ms=broker.now_ms,
            lag_ms=int(broker.config["replica.lag.time.max.ms"]),
            closing=lambda: broker.closing,
        )
        self.partitions: dict[TopicPartition, PartitionState] = self.replicas.partitions
        #: (leader, fetcher index) -> its fetcher task (num.replica.fetchers per leader)
        self.fetchers: dict[tuple[int, int], FetcherTask] = {}
        self.is_controller = False
        #: set once a controlled shutdown moved this broker's leaderships away: no more fetching
        self.shutting_down = False
        #: the czxid of this broker's /brokers/ids/N (Kafka's broker epoch); -1 before registration
        self.broker_epoch = -1
        #: the newest controller epoch seen in a controller request (older ones are refused)
        self.known_controller_epoch = -1
        self.fence = SessionFence(int(broker.config["zookeeper.session.timeout.ms"]))
        #: as controller: brokers whose controlled shutdown was asked (INELIGIBLE_REPLICA for ISRs)
        self.shutting_down_brokers: set[int] = set()
        #: the live brokers of the last read of ZooKeeper
        self.read_brokers: dict[int, zd.BrokerRegistration] = {}
        #: the runtime's nursery (fetchers and the controller's queues run in it), set by `Session.run`
        self.nursery: trio.Nursery | None = None
        #: the trio loop's token, for kazoo threads to reach it (set by `Session.run`)
        self.token: trio.lowlevel.TrioToken | None = None
        self._poked = trio.Event()
        self._reconciled = trio.Event()
        self._inter_broker_security: tuple[str, ClientSecurity | None] | None = None

    # --- the reconcile triggers ------------------------------------------------------------------------

    def poke(self) -> None:
        self._poked.set()

    def watch(self, _event: Any) -> None:
        """Kazoo thread: a watch fired. Only pokes the trio loop."""
        token = self.token
        if token is not None:
            try:
                token.run_sync_soon(self.poke)
            except trio.RunFinishedError:
                pass

    async def wait_for_poke(self, timeout: float) -> None:
        """Until the next poke (or `timeout` seconds); pokes meanwhile wait for the next call."""
        with trio.move_on_after(timeout):
            await self._poked.wait()
        self._poked = trio.Event()

    def reconciled(self) -> None:
        """A reconcile finished: wake its waiters."""
        self._reconciled.set()
        self._reconciled = trio.Event()

    async def next_reconcile(self) -> None:
        """Ask for a reconcile and wait until one has finished (many waiters share one event)."""
        event = self._reconciled
        self.poke()
        await event.wait()

    async def wait_for_view(self, done: Callable[[], bool], timeout: float = 30.0) -> bool:
        """Reconcile until `done()` holds (at most `timeout` seconds); whether it does."""
        with trio.move_on_after(timeout):
            while not done():
                await self.next_reconcile()
        return done()

    # --- the session's facts ---------------------------------------------------------------------------

    def clock_ms(self) -> int:
        """Monotonic milliseconds (trio's clock), which keep running while the process is stopped."""
        return int(trio.current_time() * 1000)

    def is_fenced(self) -> bool:
        return self.fence.fenced(self.clock_ms())

    def remember(self, key: TopicPartition, state: LeaderAndIsr) -> None:
        """Keep a partition state a controller request (or an AlterPartition answer) brought, if newer."""
        known = self.snapshot.states.get(key)
        if known is None or newer(state, known):
            self.snapshot.states[key] = state

    # --- other brokers ---------------------------------------------------------------------------------

    def inter_broker_listener(self) -> str:
        """The listener other brokers are reached at, as Kafka chooses it: inter.broker.listener.name, else
        the listener named after security.inter.broker.protocol (default PLAINTEXT), else the first
        listener of that protocol (kafkacompat.security.inter_broker)."""
        from kafkacompat.security.inter_broker import inter_broker_listener_name

        return inter_broker_listener_name(self.broker.config, self.broker.endpoints)

    def inter_broker_security(self) -> ClientSecurity | None:
        """How this broker authenticates to another broker's inter-broker listener (None: PLAINTEXT).

        The one place every inter-broker connection (`connect_inter_broker`) gets its settings from: TLS
        from the listener's trust and key stores, SASL with sasl.mechanism.inter.broker.protocol and the
        listener's JAAS username/password, resolved once (kafkacompat.security.inter_broker; the server
        checked them at start-up)."""
        if self._inter_broker_security is None:
            from kafkacompat.security.inter_broker import inter_broker_client

            self._inter_broker_security = inter_broker_client(self.broker.config, self.broker.endpoints)
        return self._inter_broker_security[1]

    async def connect_inter_broker(
        self, broker_id: int, purpose: str, timeout: float
    ) -> InterBrokerConnection:
        """A connection to `broker_id`'s inter-broker listener, negotiated and authenticated, whose requests
        each time out after `timeout` seconds. KafkaError(BROKER_NOT_AVAILABLE) when the broker is not
        live; InterBrokerError (InterBrokerTimeout) when it cannot be reached."""
        registration = self.snapshot.brokers.get(broker_id)
        if registration is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not live")
        endpoint = registration.endpoint(self.inter_broker_listener())
        if endpoint is None:
            endpoint = next(iter(registration.endpoints.values()))
        return await connect(
            endpoint[0],
            endpoint[1],
            client_id=f"broker-{self.node_id}-{purpose}",
            timeout=timeout,
            security=self.inter_broker_security(),
        )
