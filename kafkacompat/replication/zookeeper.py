"""The ZooKeeper edge of cluster mode: Kafka's znodes read and written through kazoo.

Theory of operation
-------------------
`ZooKeeperStore` owns one kazoo session. Its methods are blocking (kazoo's own threads do the socket
work); the broker's trio code calls them through `trio.to_thread.run_sync`, and watch callbacks, which
kazoo runs on its threads, are handed into trio by the caller (a `trio.lowlevel.TrioToken`), never
touching broker state directly. Only cluster mode imports this module (and kazoo): a single node
starts without either.

Every state change is a versioned write, as in Kafka's ZooKeeper mode:

- the controller is whoever created the ephemeral `/controller`; it then increments `/controller_epoch`
  with a compare-and-set on its znode version and keeps that version. Each of its partition state
  writes is a ZooKeeper transaction "check /controller_epoch is still at my version, set the state at
  the version I read": a controller that lost its session and was replaced (the epoch moved on) fails
  the check and is fenced (`StaleController`), exactly Kafka's `checkControllerAndUpdate...` scheme;
- only the controller writes partition states: a leader's ISR change reaches it as an AlterPartition
  request, which it validates and writes with that same compare-and-set (Kafka's ZooKeeper mode since
  AlterPartition; kafkacompat writes no `/isr_change_notification`);
- topic creation writes `/config/topics/T` and `/brokers/topics/T` in one transaction (NodeExists:
  TOPIC_ALREADY_EXISTS); deletion is requested by creating `/admin/delete_topics/T` and carried out by
  the controller.

Registration (`/brokers/ids/N`, ephemeral) fails while another session holds the znode. A broker
restarted right after a crash finds its own registration of before, held by the dead process's session
until ZooKeeper expires it; the caller waits for that (`registration_of` tells what holds the id), and
`register_broker` is tried again.

`close` ends the session. With ZooKeeper unreachable kazoo keeps every call waiting for a reconnect
(there is no timeout on a call); closing the client fails them all at once (ConnectionClosedError), so a
broker that stops without ZooKeeper closes first and the worker threads waiting in kazoo return.
`connected` says whether the session is connected now.

The connect string may carry a chroot (`host:port,host:port/kafka`); the chroot is created first when
it is missing, as Kafka does.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.partition_state import LeaderAndIsr
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kazoo.protocol.states import WatchedEvent

__all__ = ["StaleController", "ZooKeeperStore", "split_chroot"]

log = logging.getLogger("kafkacompat.zookeeper")


class StaleController(Exception):
    """The controller epoch moved on: this broker is no longer the controller."""


def split_chroot(connect: str) -> tuple[str, str]:
    """("h1:p1,h2:p2", "/chroot" or "") from Kafka's zookeeper.connect."""
    slash = connect.find("/")
    if slash < 0:
        return connect, ""
    chroot = connect[slash:].rstrip("/")
    return connect[:slash], chroot


def _start_within(client: KazooClient, timeout: float) -> None:
    """`client.start(timeout)`, except that a client that did not connect in time is stopped off this
    thread: kazoo's stop waits for the connection attempt in progress, which against a server that
    accepts and never answers lasts up to the session timeout."""
    import threading

    from kazoo.handlers.threading import KazooTimeoutError

    client.start_async().wait(timeout)
    if not client.connected:

        def stop() -> None:
            try:
                client.stop()
            finally:
                client.close()

        threading.Thread(target=stop, name="zookeeper-stop", daemon=True).start()
        raise KazooTimeoutError("Connection time-out")


class ZooKeeperStore:
    """One ZooKeeper session and Kafka's znodes (see module docstring)."""

    def __init__(
        self, connect: str, session_timeout_ms: int = 18000, connection_timeout_ms: int | None = None
    ) -> None:
        self.hosts, self.chroot = split_chroot(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout = (connection_timeout_ms or session_timeout_ms) / 1000
        self.client = KazooClient(hosts=self.hosts + self.chroot, timeout=session_timeout_ms / 1000)
        #: the /controller_epoch znode version this broker wrote when it became controller
        self.controller_epoch_zk_version = -1
        self.controller_epoch = -1
        self.closed = False
        self._close_lock = threading.Lock()

    # --- session -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect (creating the chroot first), each connection within `connection_timeout` seconds, or
        raise KazooTimeoutError."""
        if self.chroot:
            bootstrap = KazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000)
            _start_within(bootstrap, self.connection_timeout)
            try:
                bootstrap.ensure_path(self.chroot)
            finally:
                bootstrap.stop()
                bootstrap.close()
        _start_within(self.client, self.connection_timeout)
        for path in zd.PERSISTENT_PATHS:
            self.client.ensure_path(path)

    def close(self) -> None:
        """End the session (its ephemeral znodes go); idempotent, callable from any thread. Kazoo calls
        waiting in other threads fail with ConnectionClosedError."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
            try:
                self.client.stop()
            finally:
                self.client.close()

    @property
    def connected(self) -> bool:
        """Whether the session is connected to a ZooKeeper server now (not suspended, lost or closed)."""
        return bool(self.client.connected)

    @property
    def session_id(self) -> int | None:
        ids = self.client.client_id
        return ids[0] if ids else None

    def on_state_change(self, callback: Callable[[str], None]) -> None:
        """`callback("LOST" | "SUSPENDED" | "CONNECTED")` on kazoo's thread when the session changes."""

        def listener(state: KazooState) -> None:
            callback(str(state))

        self.client.add_listener(listener)

    # --- cluster id and brokers ----------------------------------------------------------------------

    def get_or_create_cluster_id(self, candidate: str) -> str:
        try:
            self.client.create(zd.CLUSTER_ID, zd.encode_cluster_id(candidate), makepath=True)
            return candidate
        except NodeExistsError:
            data, _ = self.client.get(zd.CLUSTER_ID)
            return zd.decode_cluster_id(data)

    def register_broker(self, registration: zd.BrokerRegistration) -> int:
        """Create the ephemeral /brokers/ids/N; a live registration of another session is an error.
        Returns the broker epoch: the znode's czxid, as Kafka's ZooKeeper mode defines it."""
        path = zd.broker_path(registration.broker_id)
        data = zd.encode_broker(registration)
        try:
            self.client.create(path, data, ephemeral=True)
        except NodeExistsError:
            stat = self.client.exists(path)
            if stat is not None and stat.ephemeralOwner == self.session_id:
                self.client.set(path, data)
                return int(stat.czxid)
            raise KafkaError(
                ErrorCode.BROKER_NOT_AVAILABLE, f"broker id {registration.broker_id} is already registered"
            ) from None
        stat = self.client.exists(path)
        return int(stat.czxid) if stat is not None else -1

    def registration_of(self, broker_id: int) -> zd.BrokerRegistration | None:
        """What /brokers/ids/N holds now, None when nobody is registered with that id."""
        try:
            data, _ = self.client.get(zd.broker_path(broker_id))
        except NoNodeError:
            return None
        return zd.decode_broker(broker_id, data)

    def registered_by_this_session(self, broker_id: int) -> bool:
        """Whether /brokers/ids/N exists and belongs to this client's current session."""
        stat = self.client.exists(zd.broker_path(broker_id))
        return stat is not None and stat.ephemeralOwner == self.session_id

    def live_brokers(
        self, watch: Callable[[WatchedEvent], None] | None = None, epochs: dict[int, int] | None = None
    ) -> dict[int, zd.BrokerRegistration]:
        """Every registered broker; `epochs`, when given, is filled with each one's broker epoch."""
        brokers: dict[int, zd.BrokerRegistration] = {}
        for child in self.client.get_children(zd.BROKER_IDS, watch=watch):
            try:
                data, stat = self.client.get(f"{zd.BROKER_IDS}/{child}")
            except NoNodeError:
                continue  # went away between the listing and the read
            brokers[int(child)] = zd.decode_broker(int(child), data)
            if epochs is not None:
                epochs[int(child)] = int(stat.czxid)
        return brokers

    # --- controller ----------------------------------------------------------------------------------

    def current_controller(self, watch: Callable[[WatchedEvent], None] | None = None) -> int | None:
        try:
            data, _ = self.client.get(zd.CONTROLLER, watch=watch)
        except NoNodeError:
            if watch is not None:
                self.client.exists(zd.CONTROLLER, watch=watch)
            return None
        return zd.decode_controller(data)

    def try_become_controller(self, broker_id: int) -> bool:
        """Create /controller; on success bump /controller_epoch (compare-and-set) and keep its version."""
        try:
            self.client.create(zd.CONTROLLER, zd.encode_controller(broker_id), ephemeral=True)
        except NodeExistsError:
            return False
        while True:
            try:
                data, stat = self.client.get(zd.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.client.create(zd.CONTROLLER_EPOCH, zd.encode_controller_epoch(1))
                except NodeExistsError:
                    continue
                self.controller_epoch, self.controller_epoch_zk_version = 1, 0
                return True
            epoch = zd.decode_controller_epoch(data) + 1
            try:
                new = self.client.set(
                    zd.CONTROLLER_EPOCH, zd.encode_controller_epoch(epoch), version=stat.version
                )
            except BadVersionError:
                continue
            self.controller_epoch, self.controller_epoch_zk_version = epoch, new.version
            return True

    def resign_controller(self, broker_id: int) -> None:
        try:
            data, stat = self.client.get(zd.CONTROLLER)
            if zd.decode_controller(data) == broker_id:
                self.client.delete(zd.CONTROLLER, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass
        self.controller_epoch_zk_version = -1

    def stored_controller_epoch(self) -> int:
        try:
            data, _ = self.client.get(zd.CONTROLLER_EPOCH)
        except NoNodeError:
            return 0
        return zd.decode_controller_epoch(data)

    # --- topics --------------------------------------------------------------------------------------

    def topic_names(self, watch: Callable[[WatchedEvent], None] | None = None) -> list[str]:
        return sorted(self.client.get_children(zd.TOPICS, watch=watch))

    def topic(
        self, name: str, watch: Callable[[WatchedEvent], None] | None = None
    ) -> zd.TopicAssignment | None:
        """/brokers/topics/T, None when it is gone (a watch is then left on its creation)."""
        try:
            data, _ = self.client.get(zd.topic_path(name), watch=watch)
        except NoNodeError:
            if watch is not None:
                self.client.exists(zd.topic_path(name), watch=watch)
            return None
        return zd.decode_topic(name, data)

    def topic_configs(self, name: str) -> dict[str, str]:
        try:
            data, _ = self.client.get(zd.topic_config_path(name))
        except NoNodeError:
            return {}
        return zd.decode_topic_config(data)

    def config_changes(self, watch: Callable[[WatchedEvent], None] | None = None) -> list[str]:
        """The change notifications under /config/changes, oldest first (their names carry a sequence)."""
        try:
            return sorted(self.client.get_children(zd.CONFIG_CHANGES, watch=watch))
        except NoNodeError:
            return []

    def config_change(self, name: str) -> str | None:
        """The entity path change notification `name` names (None: gone, purged, or names none)."""
        try:
            data, _ = self.client.get(f"{zd.CONFIG_CHANGES}/{name}")
        except NoNodeError:
            return None
        return zd.decode_config_change(data)

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        path = zd.topic_config_path(name)
        try:
            self.client.set(path, zd.encode_topic_config(dict(configs)))
        except NoNodeError:
            self.client.create(path, zd.encode_topic_config(dict(configs)), makepath=True)
        # the change notification Kafka's AdminZkClient leaves (brokers here also see it by their watches)
        self.client.create(
            f"{zd.CONFIG_CHANGES}/{zd.CONFIG_CHANGE_PREFIX}",
            zd.encode_config_change(f"topics/{name}"),
            sequence=True,
            makepath=True,
        )

    def create_topic(
        self, name: str, assignment: Mapping[int, list[int]], topic_id: uuid.UUID, configs: Mapping[str, str]
    ) -> None:
        """Write the topic's config and assignment together; TOPIC_ALREADY_EXISTS if it is there."""
        transaction = self.client.transaction()
        config_path = zd.topic_config_path(name)
        if self.client.exists(config_path) is None:
            transaction.create(config_path, zd.encode_topic_config(dict(configs)))
        else:
            transaction.set_data(config_path, zd.encode_topic_config(dict(configs)))
        transaction.create(
            zd.topic_path(name), zd.encode_topic(zd.TopicAssignment(name, topic_id, dict(assignment)))
        )
        results = transaction.commit()
        for result in results:
            if isinstance(result, NodeExistsError):
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise result

    def create_topics(
        self, topics: Sequence[tuple[str, Mapping[int, list[int]], uuid.UUID, Mapping[str, str]]]
    ) -> dict[str, KafkaError]:
        """Write many topics (name, assignment, topic id, configs) in one transaction, so watchers see
        them together; the topics not created, with why. When the transaction fails as a whole (one of
        them exists), each is written alone, so the others are still created."""
        if not topics:
            return {}
        config_paths = [zd.topic_config_path(name) for name, _, _, _ in topics]
        existing = [r.get() for r in [self.client.exists_async(path) for path in config_paths]]
        transaction = self.client.transaction()
        rows = zip(topics, config_paths, existing, strict=True)
        for (name, assignment, topic_id, configs), path, stat in rows:
            data = zd.encode_topic_config(dict(configs))
            if stat is None:
                transaction.create(path, data)
            else:
                transaction.set_data(path, data)
            transaction.create(
                zd.topic_path(name), zd.encode_topic(zd.TopicAssignment(name, topic_id, dict(assignment)))
            )
        results = transaction.commit()
        if not any(isinstance(result, Exception) for result in results):
            return {}
        failed: dict[str, KafkaError] = {}
        for name, assignment, topic_id, configs in topics:
            try:
                self.create_topic(name, assignment, topic_id, configs)
            except KafkaError as exc:
                failed[name] = exc
        return failed

    def set_assignment(self, assignment: zd.TopicAssignment) -> None:
        self.client.set(zd.topic_path(assignment.topic), zd.encode_topic(assignment))

    def request_topic_deletion(self, name: str) -> None:
        try:
            self.client.create(f"{zd.ADMIN_DELETE_TOPICS}/{name}", b"")
        except NodeExistsError:
            pass

    def request_topic_deletions(self, names: list[str]) -> None:
        """Ask for many deletions in one transaction (each alone when one is already asked for)."""
        transaction = self.client.transaction()
        for name in names:
            transaction.create(f"{zd.ADMIN_DELETE_TOPICS}/{name}", b"")
        if any(isinstance(result, Exception) for result in transaction.commit()):
            for name in names:
                self.request_topic_deletion(name)

    def pending_topic_deletions(self, watch: Callable[[WatchedEvent], None] | None = None) -> list[str]:
        return sorted(self.client.get_children(zd.ADMIN_DELETE_TOPICS, watch=watch))

    def remove_topic(self, name: str) -> None:
        """The controller's last step of a deletion: the topic's znodes and the request go."""
        self.client.delete(zd.topic_path(name), recursive=True)
        for path in (zd.topic_config_path(name), f"{zd.ADMIN_DELETE_TOPICS}/{name}"):
            try:
                self.client.delete(path)
            except NoNodeError:
                pass

    # --- partition state -----------------------------------------------------------------------------

    def partition_state(
        self, topic: str, partition: int, watch: Callable[[WatchedEvent], None] | None = None
    ) -> LeaderAndIsr | None:
        try:
            data, stat = self.client.get(zd.partition_state_path(topic, partition), watch=watch)
        except NoNodeError:
            if watch is not None:
                self.client.exists(zd.partition_state_path(topic, partition), watch=watch)
            return None
        return zd.decode_partition_state(data, stat.version)

    def controller_write_states(
        self, states: Mapping[tuple[str, int], LeaderAndIsr]
    ) -> dict[tuple[str, int], int]:
        """Create or compare-and-set partition states as the controller; key -> new zk version, or -1 for a
        version conflict (someone else wrote the state first: re-read and decide again). Raises
        StaleController when the controller epoch moved on (this broker is fenced)."""
        if self.controller_epoch_zk_version < 0:
            raise StaleController("not the controller")
        results: dict[tuple[str, int], int] = {}
        for (topic, partition), state in states.items():
            path = zd.partition_state_path(topic, partition)
            transaction = self.client.transaction()
            transaction.check(zd.CONTROLLER_EPOCH, self.controller_epoch_zk_version)
            if state.zk_version < 0:
                if self.client.exists(f"{zd.topic_path(topic)}/partitions/{partition}") is None:
                    self.client.ensure_path(f"{zd.topic_path(topic)}/partitions/{partition}")
                transaction.create(path, zd.encode_partition_state(state))
            else:
                transaction.set_data(path, zd.encode_partition_state(state), version=state.zk_version)
            outcome = transaction.commit()
            check = outcome[0]
            if isinstance(check, BadVersionError):
                raise StaleController(f"controller epoch moved past {self.controller_epoch}")
            write = outcome[1]
            if isinstance(write, (BadVersionError, NodeExistsError, NoNodeError)):
                results[(topic, partition)] = -1
            elif isinstance(write, Exception):
                raise write
            else:
                results[(topic, partition)] = 0 if state.zk_version < 0 else write.version
        return results

    # --- producer ids --------------------------------------------------------------------------------

    def allocate_producer_id_block(self, broker_id: int, size: int) -> int:
        """Reserve `size` producer ids cluster-wide (compare-and-set on /latest_producer_id_block)."""
        while True:
            data, stat = self.client.get(zd.PRODUCER_ID_BLOCK)
            start = zd.decode_producer_id_block(data)[2] + 1 if data else 0
            try:
                self.client.set(
                    zd.PRODUCER_ID_BLOCK,
                    zd.encode_producer_id_block(broker_id, start, start + size - 1),
                    version=stat.version,
                )
            except BadVersionError:
                continue
            return start
