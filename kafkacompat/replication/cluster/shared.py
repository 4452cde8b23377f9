"""What every part of the cluster runtime shares: the view of ZooKeeper, the replica states, the
reconcile triggers and the connections to other brokers.

Theory of operation
-------------------
`ClusterState` is the one mutable state of cluster mode; each part of the runtime (session, controller
duties, controller requests, replica roles, metadata view, topic admin, requests to the controller) is
an object with one job holding a reference to it, so what the parts share is written down here and
nowhere else. It holds:

- `snapshot`, the broker's `ZkSnapshot` (`zk_view`): a full read of ZooKeeper kept current by what the
  watches name, with the newer partition states controller requests brought merged in (`remember`),
  which clients are answered from;
- the replica manager (`replicas`) and its `partitions`, one `PartitionState` per hosted partition, and
  the follower `fetchers`;
- the session's facts the other parts read: `broker_epoch`, the newest controller epoch seen,
  `is_controller`, the `SessionFence`, whether a controlled shutdown completed;
- the reconcile triggers: `watch_for(key)` is the kazoo watch that records `key` in `dirty` (through
  the trio token, from kazoo's thread) and wakes the loop, `mark(key)` does the same from the trio
  thread (a broker that wrote a znode reads it at once), `full_read_due` asks for a full read (a new
  session); `changed` wakes `wait_for_view`, which is how admin requests answer only once this
  broker's view shows their change;
- how to reach another broker (`connect_inter_broker`, an async `InterBrokerConnection` of
  `replication/inter_broker_client.py`), used by fetchers, the controller's channel, the requests to the
  controller and the coordinators' requests alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.broker_requests import SessionFence
from kafkacompat.replication.cluster.zk_view import WatchKey, ZkSnapshot, read_snapshot
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
#: `wait_for_view` looks at its condition at least this often, changed view or not
VIEW_RECHECK_SECONDS = 0.5


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
        self._changed = trio.Event()
        #: what watches named since the last read (`zk_view.WatchKey`), read by the next reconcile
        self.dirty: set[WatchKey] = set()
        #: a full read is due: a new session (every watch of the old one is gone), a new controller
        self.full_read_due = True
        self._watchers: dict[WatchKey, Callable[[Any], None]] = {}
        self._inter_broker_security: tuple[str, ClientSecurity | None] | None = None

    # --- the reconcile triggers ------------------------------------------------------------------------

    def poke(self) -> None:
        self._poked.set()

    def mark(self, key: WatchKey) -> None:
        """Trio thread: read what `key` names at the next reconcile (a watch fired, or this broker wrote
        it and wants its view to show it without waiting for the watch)."""
        self.dirty.add(key)
        self._poked.set()

    def watch_for(self, key: WatchKey) -> Callable[[Any], None]:
        """The kazoo watch that marks `key` when it fires. One callback per key, so re-arming a watch
        that has not fired yet does not add a second one (kazoo keeps a set per path)."""
        watcher = self._watchers.get(key)
        if watcher is None:

            def watcher(_event: Any, key: WatchKey = key) -> None:
                token = self.token
                if token is not None:
                    try:
                        token.run_sync_soon(self.mark, key)
                    except trio.RunFinishedError:
                        pass

            self._watchers[key] = watcher
        return watcher

    async def wait_for_poke(self, timeout: float) -> None:
        """Until the next poke (or `timeout` seconds); pokes meanwhile wait for the next call."""
        with trio.move_on_after(timeout):
            await self._poked.wait()
        self._poked = trio.Event()

    def changed(self) -> None:
        """The view changed (a read applied, a controller request applied): wake its waiters."""
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for_view(self, done: Callable[[], bool], timeout: float = 30.0) -> bool:
        """Until `done()` holds (at most `timeout` seconds), looking again at each change of the view;
        whether it does."""
        with trio.move_on_after(timeout):
            while not done():
                event = self._changed
                with trio.move_on_after(VIEW_RECHECK_SECONDS):
                    await event.wait()
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
