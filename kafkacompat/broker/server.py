"""The broker process: listeners, connections, background tasks and an orderly shutdown.

Theory of operation
-------------------
`Broker.run()` is one trio task tree:

    run
    ├── listener scope: the admit task, which takes the sockets the acceptor threads accepted (one
    │   thread per listening socket, acceptor.py; TLS and SASL are the connection's business, with
    │   the listener's kafkacompat.security.listeners.ListenerSecurity)
    ├── connection nursery: one task per accepted connection (connection.Connection.run)
    └── background nursery: flush, retention, checkpoints, delayed file deletes, log cleaner

Start-up binds every listener's address first, without listening yet, so that a port in use or a host
that does not resolve stops it before anything is written (`_reserve_listeners`: one line naming the
listener, as does a log dir that is a regular file, and ZooKeeper unreachable within
zookeeper.connection.timeout.ms; `StartupError`). It then opens the log dirs (recovery after an unclean
shutdown happens in a worker thread), loads the topic table, listens on every listener (port 0 picks a
free port; `task_status.started()` reports the bound addresses, which is what tests wait for) and only
then accepts connections.

Shutdown (`request_shutdown()`, e.g. on SIGTERM): stop accepting and close the listening sockets; tell
every connection to finish the request it is processing and then close (idle connections close at
once); after a grace period anything still running is cancelled; background tasks stop; finally the
log manager shuts down in a worker thread (flush, checkpoints, clean-shutdown marker) so the next start
skips recovery.

In cluster mode the stop begins with the controlled shutdown (bounded by Kafka's `controlled.shutdown.*`
settings and skipped, in one log line, when ZooKeeper is unreachable: `ClusterRuntime.controlled_shutdown`)
and ends with the ZooKeeper session. Kazoo calls wait for a reconnect without a timeout, in worker threads
that cancellation cannot interrupt; so while the stop waits for the connections, the background tasks and
the cluster's tasks to end (`_wait_stopping`), it ends the ZooKeeper session as soon as ZooKeeper is
unreachable, which fails those calls, and a stop finishes whatever ZooKeeper does.

Accepting: an acceptor thread per listening socket (acceptor.py) accepts as connections arrive and
hands them to the loop, which admits up to ADMIT_BURST per task step (`_admit`: caps, per-address
refusal, quota throttling, buffer sizes, counting). The accept loop used to run on the event loop, once
per turn: behind 10,000 connections pipelining requests a turn took up to 0.2 s, a connection flood
overflowed the listen backlog and the kernel dropped new clients' SYNs (a first round trip of 30.3 s,
SYN retransmits). The loop grants the threads the connections the caps and
max.connection.creation.rate allow (accepted sockets not yet admitted count), so at the caps they stop
accepting and clients wait in the kernel backlog, as in Kafka.

Open files: at start the soft RLIMIT_NOFILE is raised to the hard limit, and connections are capped
below it (`fd_connection_cap`: the limit minus the files open once the logs are loaded minus a reserve
of max(512, limit/20) for segment rolls, new partitions and checkpoints), whatever max.connections
says: a connection flood then waits in the listen backlog instead of making a segment roll fail with
EMFILE (which would take a log dir offline).

Background work runs on the trio thread for the decisions (which logs are due, which segments expire)
and in worker threads (`trio.to_thread.run_sync`) for the blocking halves: fsync, writing checkpoint
files, deleting files. The log objects are only ever mutated on the trio thread.
"""

from __future__ import annotations

import base64
import collections
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from kafkacompat import diagnostics
from kafkacompat.broker.acceptor import Acceptors
from kafkacompat.broker.state import INTERNAL_TOPICS
from kafkacompat.config import INT_MAX, BrokerConfig, ConfigError
from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = ["BoundListener", "Broker", "StartupError"]

log = logging.getLogger("kafkacompat.broker")

SHUTDOWN_GRACE_SECONDS = 10.0
# how often a stop waiting for its tasks looks whether ZooKeeper is still reachable (cluster mode)
ZOOKEEPER_CHECK_SECONDS = 0.1
# accepted connections admitted in one task step (the acceptor threads accept them; acceptor.py); the
# rest wait a turn. 64 kept a new client behind 600 accepted ones for 10 turns (test_acceptor.py)
ADMIT_BURST = 1024
# requests of pipelining streaks handled at once, broker-wide (connection.PIPELINE_FAIR_SHARE)
PIPELINED_AT_ONCE = 32
DELETE_CHECK_SECONDS = 1.0


class BoundListener:
    """A listener after binding: its name and the address it accepts on."""

    def __init__(self, name: str, host: str, port: int) -> None:
        self.name = name
        self.host = host
        self.port = port

    def __repr__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


class Broker:
    """One broker node. Create, then `await run()`; `request_shutdown()` from any trio task stops it."""

    def __init__(self, config: BrokerConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.state: Any = None
        self.bound: list[BoundListener] = []
        # trio events need no running loop to be created, so a Broker can be built before trio.run
        self._shutdown = trio.Event()
        self.stopped = trio.Event()  # set once run() has finished its shutdown
        self._connections: set[Any] = set()
        self._per_ip: dict[str, int] = {}  # peer address -> open connections (max.connections.per.ip)
        self._open = 0  # accepted connections not yet finished (counted from accept, for the caps)
        self._slot_freed = trio.Event()  # replaced each time a connection ends
        self._creation_rate = ConnectionRate()  # max.connection.creation.rate
        self._next_connection_id = 0
        self.fd_connection_cap = INT_MAX  # connections the open-file limit leaves room for (set at start)
        self.cleaner: Any = None  # cleaner_task.LogCleanerTask once running (tests call run_once())
        self.metrics_address: tuple[str, int] | None = None  # the bound metrics.listener, if set
        self._security: dict[str, Any] = {}  # listener name -> security.listeners.ListenerSecurity
        # (candidate config, listener security built from it) between validation and application
        self._pending_security: tuple[BrokerConfig, dict[str, Any]] | None = None
        # each listener's sockets, bound before the log dirs are opened and listened on once they are
        self._reserved: list[tuple[str, list[socket.socket]]] = []

    # lifecycle

    def request_shutdown(self) -> None:
        self._shutdown.set()

    async def run(
        self, *, task_status: trio.TaskStatus[list[BoundListener]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            # the listeners' addresses first: a port in use or a host that does not resolve stops the
            # start before anything is written to the log dirs
            self._reserved = _reserve_listeners(self.config.listeners)
            state = await trio.to_thread.run_sync(self._open_state)
        except BaseException:
            _close_reserved(self._reserved)
            self.stopped.set()  # nothing was started; waiters must not hang
            raise
        self.state = state
        self.fd_connection_cap = _fd_connection_cap()
        # loop.lag.threshold.ms, loop.probe.window.seconds: profiling only, off unless set
        profiling = diagnostics.install(self.config)
        # queued.max.requests: requests handled at once, broker-wide (connection.py)
        state.request_slots = trio.Semaphore(self.config["queued.max.requests"])
        # queued.max.request.bytes: request bytes charged at once, broker-wide (request_memory.py)
        queued_bytes = self.config["queued.max.request.bytes"]
        if queued_bytes > 0:
            from kafkacompat.broker.request_memory import RequestMemoryPool

            state.request_memory = RequestMemoryPool(queued_bytes)
        # requests of connections deep in a pipelining streak handled at once (connection.py)
        state.pipeline_gate = trio.Semaphore(PIPELINED_AT_ONCE)
        configured = self.config["max.connections"]
        if self.fd_connection_cap < configured:
            # worth a warning only when max.connections was set and cannot be honoured
            (log.info if configured == INT_MAX else log.warning)(
                "the open-file limit leaves room for %d connections: max.connections (%d) is capped there",
                self.fd_connection_cap,
                configured,
            )
        # a dynamic change of the connection caps wakes accept loops that wait for a free slot
        state.config_listeners.append(lambda _old, _new: self._wake_accept_loops())
        # listener TLS/SASL settings change at run time: new connections take the new ones
        state.config_validators.append(self._validate_listener_security)
        state.config_listeners.append(self._apply_listener_security)
        store = getattr(self, "_zk_store", None)
        if store is not None:
            # cluster mode (zookeeper.connect): only then is the replication runtime (and kazoo) loaded
            from kafkacompat.replication.cluster import ClusterRuntime

            runtime = ClusterRuntime(state, store)
            runtime.config_sync = self._config_sync
            state.attach_cluster(runtime)
        # groups hook: the group coordinator runtime (loads __consumer_offsets in the background)
        from kafkacompat.broker.group_runtime import GroupRuntime

        state.groups = GroupRuntime(state)
        from kafkacompat.broker.txn_runtime import TransactionRuntime

        state.transactions = TransactionRuntime(state)  # transactions hook
        from kafkacompat.broker.cleaner_task import LogCleanerTask

        self.cleaner = LogCleanerTask(state)
        acceptors: Acceptors | None = None
        try:
            async with trio.open_nursery() as outer:
                connection_nursery_scope = trio.CancelScope()
                background_scope = trio.CancelScope()
                listener_scope = trio.CancelScope()
                listeners = await self._bind()
                if self.config["metrics.listener"]:  # metrics hook: Prometheus endpoint (broker/metrics.py)
                    from kafkacompat.broker.metrics import serve_metrics

                    self.metrics_address = await outer.start(serve_metrics, self, self._shutdown)
                cluster_scope = trio.CancelScope()
                cluster_done = trio.Event()
                if state.cluster is None:
                    cluster_done.set()
                else:
                    cluster = state.cluster

                    async def run_cluster(
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                    ) -> None:
                        try:
                            with cluster_scope:
                                async with trio.open_nursery() as cluster_nursery:
                                    if cluster.config_sync is not None:  # ACLs, users, quotas, configs
                                        cluster_nursery.start_soon(cluster.config_sync.run)
                                    await cluster.run(task_status=task_status)
                        finally:
                            cluster_done.set()

                    await outer.start(run_cluster)  # registered in ZooKeeper, roles taken
                background_done = trio.Event()

                async def run_background() -> None:
                    try:
                        await self._run_background(background_scope, profiling)
                    finally:
                        background_done.set()

                outer.start_soon(run_background)
                connections_done = trio.Event()

                async def run_connections(
                    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
                ) -> None:
                    with connection_nursery_scope:
                        async with trio.open_nursery() as connection_nursery:
                            task_status.started(connection_nursery)
                            await trio.sleep_forever()
                    connections_done.set()

                connection_nursery = await outer.start(run_connections)

                # acceptor threads drain the backlogs; the loop admits what they accepted (acceptor.py)
                token = trio.lowlevel.current_trio_token()
                acceptors = Acceptors(lambda: _notify_loop(token, self._wake_accept_loops))
                for name, sockets in listeners:
                    for listener in sockets:
                        acceptors.start(name, listener.socket.fileno())

                async def admit_all() -> None:
                    with listener_scope:
                        await self._admit_accepted(acceptors, connection_nursery)

                outer.start_soon(admit_all)
                log.info("broker %d started, listening on %s", state.node_id, ", ".join(map(str, self.bound)))
                task_status.started(list(self.bound))
                await self._shutdown.wait()
                log.info("shutting down")
                if state.cluster is not None:
                    # cluster mode: leaderships move away while clients can still be served
                    await state.cluster.controlled_shutdown()
                listener_scope.cancel()
                acceptors.close()  # joins the threads; what they accepted and nobody took is closed
                for _, sockets in listeners:
                    for listener in sockets:
                        await listener.aclose()
                state.closing = True
                state.watchers.notify_all()  # parked fetches answer now with what they have
                state.groups.shutdown()  # groups hook: parked JoinGroup/SyncGroup answer NOT_COORDINATOR
                state.transactions.shutdown()  # transactions hook
                for connection in list(self._connections):
                    connection.drain()
                with trio.move_on_after(SHUTDOWN_GRACE_SECONDS):
                    while self._connections:
                        await trio.sleep(0.01)
                connection_nursery_scope.cancel()
                await self._wait_stopping(state, connections_done)
                background_scope.cancel()
                cluster_scope.cancel()
                await self._wait_stopping(state, background_done, cluster_done)
        finally:
            _close_reserved(self._reserved)  # a failed start: sockets never listened on are closed too
            if acceptors is not None:
                acceptors.close()  # a failed start or a crash: threads never outlive their broker
            with trio.CancelScope(shield=True):
                if state.cluster is not None:
                    # the session ends: the ephemeral registration goes and the controller moves leaders
                    await state.cluster.close()
                await trio.to_thread.run_sync(self._close_state, state)
            profiling.close()
            log.info("broker stopped")
            self.stopped.set()

    async def _wait_stopping(self, state: Any, *events: trio.Event) -> None:
        """Wait for tasks being stopped to end; in cluster mode, end the ZooKeeper session as soon as
        ZooKeeper is unreachable, so tasks waiting in kazoo calls return (see module docstring)."""
        for event in events:
            while not event.is_set():
                if state.cluster is not None and not state.cluster.zookeeper_reachable:
                    await state.cluster.close()
                with trio.move_on_after(ZOOKEEPER_CHECK_SECONDS):
                    await event.wait()

    def _open_state(self) -> Any:
        """Blocking start-up: log dirs, recovery, topic table. Runs in a worker thread."""
        from kafkacompat.config import broker_log_config
        from kafkacompat.log.manager import LogManager

        config = self.config
        log_dirs = [str(path) for path in config.log_dirs]
        _check_log_dirs(log_dirs)
        cluster_id = config.cluster_id or _stored_cluster_id(log_dirs) or _new_cluster_id()
        if config["zookeeper.connect"]:
            return self._open_cluster_state(log_dirs, cluster_id)
        logs = LogManager(log_dirs, broker_log_config(config), config.node_id, cluster_id)
        logs.lock_dirs()  # before anything is read or written: a second broker on ./data stops here
        try:
            return self._load_state(config, logs, cluster_id)
        except BaseException:
            logs.close_without_marker()  # closes what was loaded and releases the log dirs' locks
            raise

    def _load_state(self, config: BrokerConfig, logs: Any, cluster_id: str) -> Any:
        from kafkacompat.broker.state import BrokerState
        from kafkacompat.replication.metadata import LocalMetadata

        metadata = LocalMetadata(str(config.log_dirs[0]))
        state = BrokerState(config, logs, metadata, cluster_id=cluster_id, clock=self.clock)
        _security_stores(state, config, Path(config.log_dirs[0]))
        topic_configs = {topic.name: state.topic_log_config(topic) for topic in metadata.topics()}
        logs.startup(topic_configs, now_ms=state.now_ms())
        _adopt_unknown_logs(state)
        for topic in metadata.topics():
            for index in range(topic.partitions):
                if logs.get_log(topic.name, index) is None:
                    logs.create_log(topic.name, index, state.topic_log_config(topic), now_ms=state.now_ms())
                partition_log = logs.logs.get((topic.name, index))
                if partition_log is not None and partition_log.topic_id is None:
                    partition_log.set_topic_id(topic.kafka_id)  # Kafka's partition.metadata, if missing
        # Leader of everything with an ISR of one: the high watermark is the log end at once, as
        # Kafka's leader advances it when the ISR holds only itself.
        for _, partition_log in logs.all_logs():
            partition_log.update_high_watermark(partition_log.log_end_offset)
        return state

    def _open_cluster_state(self, log_dirs: list[str], cluster_id: str) -> Any:
        """Cluster mode start-up (blocking): the ZooKeeper session first (the cluster id lives there, as
        in Kafka a log dir of another cluster is refused), then the logs. Topics come from ZooKeeper, so
        the local topic table is a cache and unknown partition dirs are not adopted; high watermarks
        come from replication-offset-checkpoint, never from the log end."""
        from kazoo.handlers.threading import KazooTimeoutError

        from kafkacompat.broker.state import BrokerState
        from kafkacompat.config import broker_log_config
        from kafkacompat.log.manager import LogManager
        from kafkacompat.replication.cluster import ClusterMetadataCache
        from kafkacompat.replication.zookeeper import ZooKeeperStore

        config = self.config
        store = ZooKeeperStore(
            config["zookeeper.connect"],
            config["zookeeper.session.timeout.ms"],
            config["zookeeper.connection.timeout.ms"],
        )
        try:
            store.start()
        except KazooTimeoutError:  # the client that timed out is being stopped (ZooKeeperStore.start)
            raise StartupError(
                f"cannot reach ZooKeeper at {config['zookeeper.connect']} within "
                f"{round(store.connection_timeout * 1000)} ms (zookeeper.connection.timeout.ms); "
                "without zookeeper.connect the broker runs as a single node"
            ) from None
        try:
            stored = _stored_cluster_id(log_dirs)
            zk_cluster_id = store.get_or_create_cluster_id(stored or config.cluster_id or cluster_id)
            if stored is not None and stored != zk_cluster_id:
                raise KafkaError(
                    ErrorCode.INCONSISTENT_CLUSTER_ID,
                    f"the log dirs belong to cluster {stored}, ZooKeeper holds cluster {zk_cluster_id}",
                )
            logs = LogManager(log_dirs, broker_log_config(config), config.node_id, zk_cluster_id)
        except BaseException:
            store.close()
            raise
        logs.lock_dirs()  # as on a single node: a second broker on the same dirs stops here
        try:
            # SCRAM credentials, quotas, ACLs and dynamic broker configs live in ZooKeeper here, in
            # Kafka's /config and /kafka-acl znodes (replication.zk_config), never in the log dir
            from kafkacompat.replication.config_sync import ConfigSync
            from kafkacompat.security.inter_broker import inter_broker_client

            inter_broker_client(config)  # a ConfigError before anything starts, as Kafka checks it
            from kafkacompat.replication.zk_config import ZkConfigStore, ZkDynamicConfigStore

            config_store = ZkConfigStore(store.client)
            config_store.ensure_paths()
            state = BrokerState(
                config,
                logs,
                ClusterMetadataCache(),
                cluster_id=zk_cluster_id,
                clock=self.clock,
                dynamic_store=ZkDynamicConfigStore.for_broker(config_store, config),
            )
            _security_stores(state, config, None)
            self._config_sync = ConfigSync(state, config_store)
            self._config_sync.load(config_store.read_all())
            logs.startup({}, now_ms=state.now_ms())
        except BaseException:
            logs.close_without_marker()
            store.close()
            raise
        self._zk_store = store
        return state

    @staticmethod
    def _close_state(state: Any) -> None:
        state.metadata.commit()
        state.logs.shutdown()  # last: it releases the log dirs' locks

    # listeners and connections

    async def _bind(self) -> list[tuple[str, list[trio.SocketListener]]]:
        from kafkacompat.security.listeners import listener_security

        # TLS contexts and SASL settings (dynamic listener settings included): any mistake is a
        # ConfigError before a port is bound
        self._security = listener_security(self.live_config)
        result = []
        advertised = self.config.advertised_listeners
        backlog = self.config["socket.listen.backlog.size"]
        for listener, (_, reserved) in zip(self.config.listeners, self._reserved, strict=True):
            sockets = []
            for sock in reserved:
                sock.listen(backlog)
                sockets.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
            bound_port = sockets[0].socket.getsockname()[1]
            bound_host = listener.host or sockets[0].socket.getsockname()[0]
            self.bound.append(BoundListener(listener.name, bound_host, bound_port))
            public = advertised[listener.name]
            public_host = public.host or (listener.host if listener.host not in ("", "0.0.0.0", "::") else "")
            if not public_host:
                public_host = socket.gethostname()
            public_port = public.port or bound_port
            self.state.endpoints[listener.name] = (public_host, public_port)
            result.append((listener.name, sockets))
        return result

    def _validate_listener_security(self, _current: BrokerConfig, candidate: BrokerConfig) -> None:
        """Build every listener's TLS/SASL settings from a candidate config (the stores read again, so one
        replaced in place is picked up, as a Kafka broker reloads on an AlterConfigs that names it) and keep
        them for `_apply_listener_security`; KafkaError(INVALID_REQUEST) refuses the change."""
        from kafkacompat.security.listeners import reconfigured_security

        try:
            self._pending_security = (candidate, reconfigured_security(self._security, candidate))
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None

    def _apply_listener_security(self, _old: BrokerConfig, new: BrokerConfig) -> None:
        """New connections use the settings validated for `new`; open ones keep their TLS session."""
        pending, self._pending_security = self._pending_security, None
        if pending is None or pending[0] is not new:
            # a change applied without this server's validation (say, one read from another store)
            from kafkacompat.security.listeners import reconfigured_security

            try:
                pending = (new, reconfigured_security(self._security, new))
            except ConfigError as exc:
                log.error("listener security settings kept as they were: %s", exc)
                return
        self._security = pending[1]
        log.info("listener security settings reloaded: %s", ", ".join(sorted(self._security)))

    @property
    def live_config(self) -> BrokerConfig:
        """The effective config (dynamic broker configs included) once running, else the static one."""
        return self.state.config if self.state is not None else self.config

    def _wake_accept_loops(self) -> None:
        self._slot_freed.set()
        self._slot_freed = trio.Event()

    async def _admit_accepted(self, acceptors: Acceptors, nursery: trio.Nursery) -> None:
        """Admit what the acceptor threads accepted, up to ADMIT_BURST per task step, and grant them
        the connections the caps and max.connection.creation.rate allow now (acceptor.py)."""
        while True:
            woken = self._slot_freed  # before take(): a hand-over or a freed slot after it wakes us
            for name, sock in acceptors.take(ADMIT_BURST):
                self._admit(name, trio.SocketStream(trio.socket.from_stdlib_socket(sock)), nursery)
            # read at every grant: a dynamic change of the caps or the rate applies at once
            allowed, delay = self._creation_rate.allowance(
                self.live_config["max.connection.creation.rate"], time.monotonic()
            )
            # as Kafka: at the caps the threads stop accepting (the kernel backlog holds new
            # clients) until one closes; over the rate, new connections wait to be accepted
            acceptors.grant(min(allowed, self._max_connections() - self._open))
            if acceptors.waiting():
                await trio.lowlevel.checkpoint()  # the rest next turn: other tasks run meanwhile
            elif delay > 0:
                with trio.move_on_after(delay):
                    await woken.wait()
            else:
                await woken.wait()

    def _admit(self, name: str, stream: trio.SocketStream, nursery: trio.Nursery) -> None:
        """A new connection: refused (closed at once) over a cap, or counted and given its task."""
        refusal = self._refusal(stream)
        if refusal is not None:
            log.info("closing new connection: %s", refusal)
            stream.socket.close()
            return
        throttle_ms = self.state.quotas.connection_throttle_ms(_peer_ip(stream), time.monotonic())
        if throttle_ms > 0:
            # as Kafka's ConnectionQuotas: over the address's connection_creation_rate quota,
            # the connection is not served and is closed once the throttle time has passed
            nursery.start_soon(_close_later, stream, throttle_ms / 1000)
            return
        self._creation_rate.record(time.monotonic())
        self._apply_buffer_sizes(stream)
        # counted now, not when the connection's task starts: the next accept, possibly before
        # that task runs, must see this one (a burst admitted one too many otherwise)
        self._open += 1
        ip = _peer_ip(stream)
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        nursery.start_soon(self._serve, name, stream, ip)

    def _max_connections(self) -> int:
        return min(self.live_config["max.connections"], self.fd_connection_cap)

    def _apply_buffer_sizes(self, stream: trio.SocketStream) -> None:
        """socket.send/receive.buffer.bytes on an accepted socket, as Kafka sets them (-1: OS default)."""
        for option, name in (
            (socket.SO_SNDBUF, "socket.send.buffer.bytes"),
            (socket.SO_RCVBUF, "socket.receive.buffer.bytes"),
        ):
            size = self.config[name]
            if size != -1:
                try:
                    stream.setsockopt(socket.SOL_SOCKET, option, size)
                except OSError as exc:
                    log.warning("cannot set %s=%d: %s", name, size, exc)

    def _refusal(self, stream: trio.SocketStream) -> str | None:
        """Why a new connection must be closed at once (connection caps), or None."""
        config = self.live_config
        if self._open >= self._max_connections():  # two listeners raced for the last slot
            return f"max.connections ({self._max_connections()}) reached"
        ip = _peer_ip(stream)
        if self._per_ip.get(ip, 0) >= config["max.connections.per.ip"]:
            return f"max.connections.per.ip ({config['max.connections.per.ip']}) reached for {ip}"
        return None

    async def _serve(self, name: str, stream: trio.SocketStream, ip: str) -> None:
        from kafkacompat.broker.connection import Connection

        self._next_connection_id += 1
        connection = Connection(self.state, stream, name, self._next_connection_id, self._security.get(name))
        self._connections.add(connection)
        try:
            await connection.run()
        finally:
            self._connections.discard(connection)
            remaining = self._per_ip.pop(ip) - 1
            if remaining:
                self._per_ip[ip] = remaining
            self._open -= 1
            self._wake_accept_loops()

    # background tasks

    async def _run_background(self, scope: trio.CancelScope, profiling: diagnostics.Diagnostics) -> None:
        with scope:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.state.groups.run)  # groups hook
                await nursery.start(self.state.transactions.run)  # transactions hook
                nursery.start_soon(self.cleaner.run)  # compaction; returns at once if disabled
                nursery.start_soon(
                    self._every, self.config["log.retention.check.interval.ms"], self._retention
                )
                checkpoint_ms = min(
                    self.config.recovery_point_checkpoint_ms or 60000,
                    self.config["log.flush.start.offset.checkpoint.interval.ms"] or 60000,
                )
                nursery.start_soon(self._every, checkpoint_ms, self._checkpoints)
                nursery.start_soon(self._every, DELETE_CHECK_SECONDS * 1000, self._delete_delayed)
                flush_ms = self.config["log.flush.scheduler.interval.ms"]
                nursery.start_soon(self._every, flush_ms, self._flush)
                profiling.start(nursery)  # the loop probe's task, if on

    async def _every(self, interval_ms: float, job: Callable[[], Any]) -> None:
        if interval_ms <= 0 or interval_ms >= 2**62:
            return
        seconds = max(interval_ms / 1000, 0.001)
        while True:
            await trio.sleep(seconds)
            try:
                await job()
            except Exception:
                log.exception("background job %s failed", getattr(job, "__name__", job))

    async def _flush(self) -> None:
        await self.state.flush_due()

    async def _retention(self) -> None:
        await self.state.enforce_retention()

    async def _checkpoints(self) -> None:
        await self.state.write_checkpoints()

    async def _delete_delayed(self) -> None:
        await self.state.delete_expired_files()


class ConnectionRate:
    """Connections accepted in the last second, for `max.connection.creation.rate` (connections per
    second, broker-wide). Kafka measures the rate over a window of samples and delays accepting past
    it; here the window is the last second and `delay()` tells how long the next accept must wait."""

    WINDOW_SECONDS = 1.0

    def __init__(self) -> None:
        self._times: collections.deque[float] = collections.deque()

    def _trim(self, now: float) -> None:
        while self._times and self._times[0] <= now - self.WINDOW_SECONDS:
            self._times.popleft()

    def delay(self, rate: int, now: float) -> float:
        """Seconds to wait before accepting another connection (0: accept now)."""
        if rate >= INT_MAX:
            self._times.clear()
            return 0.0
        self._trim(now)
        if len(self._times) < rate:
            return 0.0
        if rate <= 0:
            return self.WINDOW_SECONDS  # a rate of 0 admits nobody; look again later
        return self._times[len(self._times) - rate] + self.WINDOW_SECONDS - now

    def allowance(self, rate: int, now: float) -> tuple[int, float]:
        """Connections that may be accepted now, and when none may, seconds until one may."""
        if rate >= INT_MAX:
            self._times.clear()
            return INT_MAX, 0.0
        self._trim(now)
        room = rate - len(self._times)
        if room > 0:
            return room, 0.0
        return 0, self.delay(rate, now)

    def record(self, now: float) -> None:
        self._times.append(now)


def _notify_loop(token: trio.lowlevel.TrioToken, wake: Callable[[], None]) -> None:
    """From an acceptor thread: run `wake` on the trio loop soon (nothing once the run is over)."""
    try:
        token.run_sync_soon(wake, idempotent=True)
    except trio.RunFinishedError:
        pass


def _adopt_unknown_logs(state: Any) -> None:
    """Partition dirs of topics missing from the topic table become topics again (start-up only).

    That happens after a crash between creating a topic's logs and persisting the table, or when the
    log dir was written by Kafka itself. Data is never deleted for not being known; the adopted topic
    gets a new id and the broker's default configs (compaction for the internal topics).
    """
    from kafkacompat.replication.metadata import validate_topic_name

    found: dict[str, int] = {}
    for (topic, partition), _ in state.logs.all_logs():
        if topic not in state.metadata:
            found[topic] = max(found.get(topic, 0), partition + 1)
        elif partition >= state.metadata.topic(topic).partitions:
            log.warning(
                "ignoring %s-%d: the topic has only %d partitions",
                topic,
                partition,
                state.metadata.topic(topic).partitions,
            )
    for topic, partitions in sorted(found.items()):
        try:
            validate_topic_name(topic)
        except KafkaError as exc:
            log.warning("ignoring partition dirs of %r: %s", topic, exc.message)
            continue
        internal = topic in INTERNAL_TOPICS
        configs = {"cleanup.policy": "compact"} if internal else {}
        state.metadata.create_topic(
            topic, partitions, configs, internal=internal, topic_id=_recorded_topic_id(state, topic)
        )
        log.warning(
            "adopted topic %s (%d partitions) found in the log dirs but not in the topic table",
            topic,
            partitions,
        )
    state.metadata.commit()


def _recorded_topic_id(state: Any, topic: str) -> uuid.UUID | None:
    """The topic id the partition dirs of `topic` record in `partition.metadata` (e.g. written by
    Kafka), if they agree on one and no known topic has it; None means a new id."""
    from kafkacompat.replication.metadata import kafka_uuid

    recorded = {pl.topic_id for (name, _), pl in state.logs.all_logs() if name == topic and pl.topic_id}
    if len(recorded) != 1:
        return None
    topic_id = kafka_uuid(recorded.pop())
    if topic_id is None or topic_id.int == 0 or state.metadata.topic_by_id(topic_id) is not None:
        return None
    return topic_id


def _fd_connection_cap() -> int:
    """Raise the soft open-file limit to the hard one; return how many connections fit under it with a
    reserve for the logs (see the module docstring). INT_MAX where the limit cannot be read."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        if soft == resource.RLIM_INFINITY:
            return INT_MAX
        in_use = len(os.listdir("/proc/self/fd"))
    except (ImportError, OSError, ValueError):
        return INT_MAX
    return max(1, soft - in_use - max(512, soft // 20))


async def _close_later(stream: trio.SocketStream, delay: float) -> None:
    """Close a connection refused by an ip quota after its throttle time (never read from)."""
    await trio.sleep(delay)
    await stream.aclose()


def _peer_ip(stream: trio.SocketStream) -> str:
    try:
        return str(stream.socket.getpeername()[0])
    except OSError:
        return "?"


class StartupError(RuntimeError):
    """A broker that cannot start, in one line naming the setting and the place at fault."""


def _reserve_listeners(listeners: list[Any]) -> list[tuple[str, list[socket.socket]]]:
    """Each listener's sockets, bound but not yet listening (connections are refused until the broker
    listens, once its logs are open), as trio.open_tcp_listeners would bind them: every address the host
    resolves to (both wildcards for an empty host), SO_REUSEADDR, IPv6 sockets IPv6-only. A host that
    does not resolve or an address that cannot be bound is a StartupError naming the listener."""
    import errno

    reserved: list[tuple[str, list[socket.socket]]] = []
    try:
        for listener in listeners:
            sockets: list[socket.socket] = []
            reserved.append((listener.name, sockets))
            try:
                addresses = socket.getaddrinfo(
                    listener.host or None, listener.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
                )
            except socket.gaierror as exc:
                raise StartupError(
                    f"listener {listener.name}: cannot resolve host {listener.host!r} ({exc.strerror})"
                ) from None
            for family, kind, proto, _, address in addresses:
                try:
                    sock = socket.socket(family, kind, proto)
                except OSError as exc:
                    if exc.errno == errno.EAFNOSUPPORT:  # an IPv6 address on a system without IPv6
                        continue
                    raise
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind(address)
                except OSError as exc:
                    host = f"[{address[0]}]" if family == socket.AF_INET6 else str(address[0])
                    raise StartupError(
                        f"listener {listener.name} failed to bind to {host}:{address[1]}: {exc.strerror}"
                    ) from None
            if not sockets:
                raise StartupError(
                    f"listener {listener.name}: no address of host {listener.host!r} can be used here"
                )
    except BaseException:
        _close_reserved(reserved)
        raise
    return reserved


def _close_reserved(reserved: list[tuple[str, list[socket.socket]]]) -> None:
    for _, sockets in reserved:
        for sock in sockets:
            sock.close()


def _check_log_dirs(log_dirs: list[str]) -> None:
    """A StartupError naming the entry of log.dirs that is, or lies below, something other than a
    directory (a dir that does not exist yet is created later)."""
    for log_dir in log_dirs:
        path = Path(log_dir)
        for existing in (path, *path.parents):
            if existing.exists():
                if not existing.is_dir():
                    where = "is" if existing == path else f"lies below {existing}, which is"
                    raise StartupError(f"log.dirs: {log_dir} {where} not a directory")
                break


def _stored_cluster_id(log_dirs: list[str]) -> str | None:
    """The cluster id recorded in an existing meta.properties, if any."""
    from kafkacompat.log.checkpoints import META_PROPERTIES, CheckpointError, read_meta_properties

    for log_dir in log_dirs:
        path = os.path.join(log_dir, META_PROPERTIES)
        try:
            cluster_id = read_meta_properties(path).get("cluster.id")
        except (OSError, CheckpointError):
            continue
        if cluster_id:
            return cluster_id
    return None


def _new_cluster_id() -> str:
    """A random cluster id in Kafka's format (a UUID as 22 characters of URL-safe base64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def _security_stores(state: Any, config: BrokerConfig, log_dir: Path | None) -> None:
    """SCRAM credentials, client quotas and (with authorizer.class.name) the ACL authorizer: loaded from
    their files in the log dir on a single node; empty in cluster mode (`log_dir` None), where
    replication.config_sync fills them from ZooKeeper."""
    from kafkacompat.security.credentials import CREDENTIALS_FILE, ScramCredentialStore
    from kafkacompat.security.quotas import QUOTAS_FILE, QuotaManager, QuotaStore

    if log_dir is not None:
        state.scram_credentials = ScramCredentialStore.load(log_dir / CREDENTIALS_FILE)
    state.quotas = QuotaManager(
        QuotaStore.load(log_dir / QUOTAS_FILE) if log_dir is not None else QuotaStore(),
        config["quota.window.num"],
        config["quota.window.size.seconds"],
    )
    if config["authorizer.class.name"]:
        from kafkacompat.security.acls import ACLS_FILE, AclStore, Authorizer, parse_super_users

        state.authorizer = Authorizer(
            AclStore.load(log_dir / ACLS_FILE) if log_dir is not None else AclStore(),
            parse_super_users(config["super.users"]),
            config["allow.everyone.if.no.acl.found"],
        )
