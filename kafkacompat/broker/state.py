"""The broker's shared state, handed to every handler as `ctx.broker`.

Theory of operation: `BrokerState` bundles what a single node knows and owns: the loaded config, the
`LogManager` (partition logs), `LocalMetadata` (topic table), the fetch watchers and fetch-session cache,
the producer-id allocator and the clock. Handlers read freely; changes to the topic table go through
the async helpers here (`create_topic`, `delete_topic`, `auto_create_topic`, `next_producer_id`), which
check the request and hand it to `topic_admin`, chosen once at start-up: a single node's
`LocalTopicAdmin` serialises on one trio lock and persists the table in a worker thread before
returning, so a client never hears of a topic the broker would forget in a crash; a cluster member's
`ZooKeeperTopicAdmin` writes ZooKeeper and answers once its own view has the change. Dynamic broker
config changes (`alter_broker_configs`) take the same lock, persist the same way, then swap in a new
effective `config` and push the new topic defaults into the live logs.

All access happens on the trio thread; worker threads only run the blocking halves (fsync of logs,
writes of the topic table and of checkpoints, closing and unlinking deleted files) of operations whose
in-memory half already ran here: the offsets a checkpoint writes and the files a delayed delete removes
are decided here, because the log manager's tables may only change on this thread (deletion is a rename
at once, the unlinks after file.delete.delay.ms).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import trio

from kafkacompat.broker.delayed import PartitionWatchers
from kafkacompat.broker.fairness import Turn
from kafkacompat.broker.fetch_sessions import FetchSessionCache
from kafkacompat.broker.lock_wait import holding
from kafkacompat.config import BrokerConfig, broker_log_config
from kafkacompat.dynamic_config import (
    DynamicBrokerConfigs,
    DynamicConfigStore,
    LocalDynamicConfigStore,
    masked_configs,
)
from kafkacompat.log.manager import NewLog
from kafkacompat.replication.metadata import (
    PRODUCER_ID_BLOCK_SIZE,
    LocalMetadata,
    TopicInfo,
    kafka_uuid_string,
)
from kafkacompat.replication.replica_manager import LocalReplicaManager, ReplicaManager
from kafkacompat.replication.throttle import ReplicationThrottle
from kafkacompat.security.acls import Authorizer
from kafkacompat.security.credentials import ScramCredentialStore
from kafkacompat.security.quotas import QuotaManager, QuotaStore
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.primitives import ZERO_UUID

if TYPE_CHECKING:
    from kafkacompat.broker.group_runtime import GroupRuntime
    from kafkacompat.broker.request_memory import RequestMemoryPool
    from kafkacompat.broker.txn_runtime import TransactionRuntime
    from kafkacompat.log.config import LogConfig
    from kafkacompat.log.manager import LogManager
    from kafkacompat.log.partition_log import PartitionLog
    from kafkacompat.replication.cluster import ClusterRuntime
    from kafkacompat.replication.config_sync import ConfigSync

__all__ = [
    "CLUSTER_METADATA_TOPIC",
    "INTERNAL_TOPICS",
    "MAX_PARTITIONS_PER_TOPIC",
    "BrokerState",
    "LocalTopicAdmin",
    "TopicAdmin",
    "ZooKeeperTopicAdmin",
    "check_descriptors_for",
    "check_partition_limit",
    "is_internal_topic",
    "record_topic_id",
]

log = logging.getLogger("kafkacompat.broker")

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_TOPIC})
# The KRaft metadata log's name: never a topic clients may create (Kafka's controller refuses it).
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
# Each partition holds a directory and three open files. Kafka sets no limit, but a 30-byte request must
# not make this broker create millions of files; a request above this gets INVALID_PARTITIONS.
MAX_PARTITIONS_PER_TOPIC = 10_000
# Making a partition log costs about a millisecond (a directory and three files): a topic of thousands of
# partitions gives the event loop back between logs (a fairness.Turn), so other clients are not frozen.


def is_internal_topic(name: str) -> bool:
    """Whether a topic is internal. As in Kafka, the name decides, not how the topic came to exist: a
    `__consumer_offsets` made with CreateTopics is as internal as the one the coordinator makes."""
    return name in INTERNAL_TOPICS


def check_partition_limit(partitions: int) -> None:
    """A topic never has more than MAX_PARTITIONS_PER_TOPIC partitions (CreateTopics and
    CreatePartitions both check here)."""
    if partitions > MAX_PARTITIONS_PER_TOPIC:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions {partitions} exceeds the limit of {MAX_PARTITIONS_PER_TOPIC}.",
        )


# A partition log holds up to this many descriptors (its active segment and, once appended to, its two
# indexes; a deleted log keeps them for file.delete.delay.ms). Partition logs may together use only the
# open files the rest of the broker does not need: `descriptors_kept_free` stays free for
# min(max.connections, limit/4) connections plus max(512, limit/20) for segment rolls, checkpoints and
# fetch responses' duplicates. A creation that would not fit is refused before any file is made
# (KAFKA_STORAGE_ERROR, what a failed log creation answers anyway). Found by the long fuzz run: with only
# 256 kept free, only requests of more than limit/12 partitions checked at all, and a new log counted
# by the one descriptor it holds before its first append, fuzzed CreateTopics/CreatePartitions/
# DeleteTopics of a few hundred partitions each filled the 20,000 descriptors with logs; accepts, fetch
# responses and the well-behaved pair's connections then failed with EMFILE.
DESCRIPTORS_PER_LOG = 3
DESCRIPTORS_BESIDE_LOGS = 64  # stdio, listeners, log dir locks, the metadata snapshot being written


def descriptors_kept_free(limit: int, max_connections: int) -> int:
    """Open files that partition logs may never take (see above)."""
    return max(512, limit // 20) + min(max_connections, limit // 4)


def max_open_logs(limit: int, max_connections: int) -> int:
    """Partition logs (live, and deleted ones not yet removed) the open-file limit leaves room for."""
    return max(0, (limit - descriptors_kept_free(limit, max_connections) - DESCRIPTORS_BESIDE_LOGS)) // (
        DESCRIPTORS_PER_LOG
    )


def _open_descriptors() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


#: how long one count of the open descriptors is used for (see `_DescriptorCount`)
DESCRIPTOR_COUNT_SECONDS = 1.0


class _DescriptorCount:
    """The process's last count of its open descriptors, with when it was taken and the partition logs
    open then. The count walks /proc/self/fd: 15-25 ms of CPU for the 12,000 descriptors of a long
    fuzz run, most of it the kernel's, and the walking thread releases and retakes the GIL once per
    entry; the fuzzer's CreateTopics and CreatePartitions asked for it several times a second. Within
    DESCRIPTOR_COUNT_SECONDS the last count is used again, plus DESCRIPTORS_PER_LOG for each log
    opened since; connections opened meanwhile fall within the max(512, limit/20) kept free.

    One per process (`check_descriptors_for`, on the event loop thread); a stale count only makes the
    check as old as it is."""

    taken_at: float | None = None
    in_use = 0
    open_logs = 0

    async def estimate(self, open_logs: int) -> int | None:
        now = time.monotonic()
        if self.taken_at is not None and now - self.taken_at < DESCRIPTOR_COUNT_SECONDS:
            return self.in_use + DESCRIPTORS_PER_LOG * max(0, open_logs - self.open_logs)
        in_use = await trio.to_thread.run_sync(_open_descriptors)
        if in_use is None:
            return None
        self.taken_at, self.in_use, self.open_logs = time.monotonic(), in_use, open_logs
        return in_use


_descriptor_count = _DescriptorCount()


async def check_descriptors_for(new_logs: int, open_logs: int, max_connections: int) -> None:
    """Raise KafkaError(KAFKA_STORAGE_ERROR) if `new_logs` more partition logs beside the `open_logs`
    there are would exceed `max_open_logs`, or would not fit in the descriptors actually left beside
    max(512, limit/20) (Linux). Counting 20,000 descriptors costs tens of ms on a loaded machine: it is
    done in a worker thread (the caller holds the metadata lock, not the event loop), at most once per
    DESCRIPTOR_COUNT_SECONDS (`_DescriptorCount`)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or new_logs <= 0:
        return
    allowed = max_open_logs(soft, max_connections)
    if open_logs + new_logs > allowed:
        raise KafkaError(
            ErrorCode.KAFKA_STORAGE_ERROR,
            f"not enough file descriptors for {new_logs} new partition logs: the process limit of {soft} "
            f"(ulimit -n) leaves room for {allowed} open partition logs beside the connections "
            f"(max.connections, at most a quarter of the limit), and {open_logs} are open",
        )
    in_use = await _descriptor_count.estimate(open_logs)
    if in_use is None:
        return
    left = soft - in_use - max(512, soft // 20)
    if new_logs * DESCRIPTORS_PER_LOG > left:
        raise KafkaError(
            ErrorCode.KAFKA_STORAGE_ERROR,
            f"not enough file descriptors for {new_logs} new partition logs: {max(left, 0)} left under the "
            f"process limit of {soft} (ulimit -n)",
        )


def record_topic_id(new_logs: list[Any], kafka_id: str) -> None:
    """Write the `partition.metadata` of new logs (worker thread: each write is fsynced, and thousands of
    them on the event loop froze every client for seconds). Nothing else uses these logs yet."""
    for partition_log in new_logs:
        partition_log.set_topic_id(kafka_id)


#: partition logs made per worker-thread call (BrokerState.create_partition_logs)
LOG_CREATION_CHUNK = 32


def _build_logs(
    logs: LogManager, plans: list[Any], now_ms: int
) -> tuple[list[Any], tuple[Any, OSError] | None]:
    """Worker thread: the logs of `plans` (an existing log stands for itself), up to the first that
    fails, and that failure."""
    built: list[Any] = []
    for plan in plans:
        if not isinstance(plan, NewLog):
            built.append(plan)
            continue
        try:
            built.append(logs.build_log(plan, now_ms))
        except OSError as exc:
            return built, (plan, exc)
    return built, None


class BrokerState:
    """Shared broker state (see module docstring). Created and shut down by `server.Broker`."""

    def __init__(
        self,
        config: BrokerConfig,
        logs: LogManager,
        metadata: LocalMetadata,
        *,
        cluster_id: str,
        clock: Callable[[], float] = time.time,
        dynamic_store: DynamicConfigStore | None = None,
    ) -> None:
        # the static config with the dynamic broker configs replayed on top (kafkacompat.dynamic_config);
        # `config` is always the effective one and is replaced, never mutated, by a dynamic change. The
        # store is the log dir's file, or ZooKeeper's /config/brokers in cluster mode (`dynamic_store`).
        self.dynamic = DynamicBrokerConfigs(
            config, dynamic_store or LocalDynamicConfigStore(config.log_dirs[0])
        )
        config = self.dynamic.effective
        self.config = config
        # called with (old, new) after a dynamic change took effect (the server wakes its accept loops)
        self.config_listeners: list[Callable[[BrokerConfig, BrokerConfig], None]] = []
        # called with (current, candidate) before a dynamic change is kept; raise KafkaError to refuse it
        # (the server rebuilds its listeners' TLS/SASL settings there, as Kafka's reconfigurables validate)
        self.config_validators: list[Callable[[BrokerConfig, BrokerConfig], None]] = []
        self.logs = logs
        self.metadata = metadata
        self.cluster_id = cluster_id
        self.node_id = config.node_id
        self.clock = clock
        self.watchers = PartitionWatchers()
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        self.metadata_lock = trio.Lock()
        self._checkpoint_lock = trio.Lock()  # trio locks are FIFO: snapshots are written in the order taken
        self.closing = False  # set by the server at shutdown: parked requests answer at once
        # metrics hook: kafkacompat.broker.metrics.RequestMetrics while metrics.listener serves, else None
        self.request_metrics: Any = None
        self.default_log_config: LogConfig = broker_log_config(config)
        logs.default_config = self.default_log_config
        # listener name -> (host, port) clients are told; filled in by the server once bound
        self.endpoints: dict[str, tuple[str, int]] = {}
        # SCRAM credentials (kafkacompat.security.credentials), loaded by the server from the log dir
        self.scram_credentials: ScramCredentialStore = ScramCredentialStore()
        self.scram_write_lock = trio.Lock()
        # ACLs (kafkacompat.security.acls): the authorizer when authorizer.class.name is set, else None
        self.authorizer: Authorizer | None = None
        self.acl_write_lock = trio.Lock()
        # client quotas (kafkacompat.security.quotas), loaded by the server from the log dir
        self.quotas = QuotaManager(
            QuotaStore(), config["quota.window.num"], config["quota.window.size.seconds"]
        )
        self.quota_write_lock = trio.Lock()
        # replication throttles (kafkacompat.replication.throttle): what leaders serve to and followers
        # fetch for throttled replicas, in cluster mode; the rates are read live from `config`
        self.leader_throttle = ReplicationThrottle(
            config["replication.quota.window.num"], config["replication.quota.window.size.seconds"]
        )
        self.follower_throttle = ReplicationThrottle(
            config["replication.quota.window.num"], config["replication.quota.window.size.seconds"]
        )
        self._log_configs: dict[str, tuple[dict[str, str], LogConfig]] = {}
        self._producer_ids = range(0)
        # cluster mode: None on a single node. With zookeeper.connect the server attaches a
        # replication.cluster.ClusterRuntime (`attach_cluster`), and `metadata` is its ZooKeeper-fed topic
        # table (the same read interface as LocalMetadata). Handlers ask the two objects below, never this.
        self.cluster: ClusterRuntime | None = None
        # the partition seam (replication/replica_manager.py): leadership, appends as leader and the wait
        # for them to commit, and the cluster as clients see it (leaders, live brokers, the controller).
        # A single node's; the server puts the cluster runtime's in its place.
        self.replicas: ReplicaManager = LocalReplicaManager(logs, self.watchers, self)
        # where topic changes and producer id blocks are written: this node's own table, or ZooKeeper
        self.topic_admin: TopicAdmin = LocalTopicAdmin(self)
        # set by the server when it runs this state (None in a state built for a handler test): the
        # coordinators, and the limits every connection shares (connection.py)
        self.groups: GroupRuntime | None = None
        self.transactions: TransactionRuntime | None = None
        self.request_slots: trio.Semaphore | None = None  # queued.max.requests
        self.request_memory: RequestMemoryPool | None = None  # queued.max.request.bytes
        self.pipeline_gate: trio.Semaphore | None = None  # pipelined requests handled at once

    def attach_cluster(self, runtime: ClusterRuntime) -> None:
        """Cluster mode, at start-up: the cluster runtime, its replica manager and its topic admin take
        over from the single node's (the ZooKeeper-fed metadata view was given to the constructor)."""
        self.cluster = runtime
        self.replicas = runtime.replicas
        self.topic_admin = ZooKeeperTopicAdmin(self, runtime)

    # what only a ZooKeeper cluster member has (Kafka makes the same distinction)

    @property
    def cluster_mode(self) -> bool:
        """Whether this broker is a ZooKeeper cluster member: the inter-broker APIs (LeaderAndIsr,
        StopReplica, UpdateMetadata, AlterPartition) are served and advertised only then."""
        return self.cluster is not None

    @property
    def config_sync(self) -> ConfigSync | None:
        """ZooKeeper's copy of ACLs, SCRAM users, quotas and broker configs (None on a single node, whose
        copies are files in its log dir)."""
        return self.cluster.config_sync if self.cluster is not None else None

    def require_cluster(self) -> ClusterRuntime:
        """The cluster runtime, for an inter-broker API (never dispatched on a single node; a direct call
        there gets UNKNOWN_SERVER_ERROR)."""
        if self.cluster is None:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "only a ZooKeeper cluster member serves this")
        return self.cluster

    # time

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # topics and partitions

    def advertised_endpoint(self, listener_name: str) -> tuple[str, int]:
        endpoint = self.endpoints.get(listener_name)
        if endpoint is None:
            endpoint = next(iter(self.endpoints.values()))
        return endpoint

    def topic_log_config(self, topic: TopicInfo) -> LogConfig:
        """The topic's effective LogConfig: its overrides on top of the broker defaults (cached)."""
        cached = self._log_configs.get(topic.name)
        if cached is not None and cached[0] == topic.configs:
            return cached[1]
        from kafkacompat.log.config import LogConfig

        config = LogConfig.from_properties(topic.configs, self.default_log_config)
        self._log_configs[topic.name] = (dict(topic.configs), config)
        return config

    def validate_topic_configs(self, configs: dict[str, str]) -> LogConfig:
        """Raise KafkaError(INVALID_CONFIG) unless `configs` are valid topic configs."""
        from kafkacompat.log.config import LogConfig

        return LogConfig.from_properties(configs, self.default_log_config)

    async def alter_broker_configs(
        self,
        node_id: int | None,
        new_configs: Callable[[dict[str, str]], dict[str, str]],
        *,
        validate_only: bool = False,
    ) -> None:
        """Replace the dynamic configs of this node (`node_id`) or of the cluster-wide default (None).

        `new_configs` maps the entity's current configs to the new ones (called under the lock, so
        concurrent incremental changes do not lose each other's updates). The change is validated,
        persisted, then applied to the running broker before this returns. Raises KafkaError:
        INVALID_REQUEST (refused, as Kafka refuses it), KAFKA_STORAGE_ERROR (not persisted, not applied).
        """
        async with holding(self.metadata_lock):  # topic config changes read the broker defaults under it too
            entity = self.dynamic.entity_for(node_id)
            store = self.dynamic.store
            if hasattr(store, "write_entity"):
                # cluster mode: compare-and-set on the entity's znode, from what ZooKeeper holds now
                await self._alter_shared_broker_configs(store, entity, new_configs, validate_only)
                return
            configs = new_configs(self.dynamic.entity(entity))
            effective = self.dynamic.validate(entity, configs)
            for validator in list(self.config_validators):
                validator(self.config, effective)
            if validate_only:
                return
            entities = self.dynamic.entities_with(entity, configs)
            if store is not None:
                try:
                    await trio.to_thread.run_sync(store.write, entities)
                except OSError as exc:
                    raise KafkaError(
                        ErrorCode.KAFKA_STORAGE_ERROR, f"cannot persist the dynamic broker configs: {exc}"
                    ) from exc
            self.dynamic.replace(entity, configs, effective)
            self._reconfigure(effective)
        log.info("dynamic broker configs of %s are now %s", entity, masked_configs(configs))

    async def _alter_shared_broker_configs(
        self,
        store: Any,
        entity: str,
        new_configs: Callable[[dict[str, str]], dict[str, str]],
        validate_only: bool,
    ) -> None:
        """alter_broker_configs in cluster mode (under metadata_lock): read the entity's znode, change,
        validate, write at the version read; a conflict (another broker wrote first) starts again."""
        while True:
            current, version = await trio.to_thread.run_sync(store.read_entity, entity)
            configs = new_configs(dict(current))
            effective = self.dynamic.validate(entity, configs)
            for validator in list(self.config_validators):
                validator(self.config, effective)
            if validate_only:
                return
            if await trio.to_thread.run_sync(store.write_entity, entity, configs, version):
                break
        self.dynamic.replace(entity, configs, effective)
        self._reconfigure(effective)
        log.info("dynamic broker configs of %s are now %s", entity, masked_configs(configs))

    async def apply_stored_broker_configs(self, entities: dict[str, dict[str, str]]) -> None:
        """Cluster mode: the /config/brokers entities as ZooKeeper now holds them (changed through any
        broker) become this broker's dynamic layers, applied at once."""
        async with holding(self.metadata_lock):
            current = {e: self.dynamic.entity(e) for e in (self.dynamic.node_entity, "<default>")}
            wanted = {e: dict(entities.get(e, {})) for e in current}
            if current == wanted:
                return
            effective = self.dynamic.reload(entities)
            if {e: self.dynamic.entity(e) for e in current} == current:
                return  # what changed does not validate here (dropped with a warning): nothing to apply
            self._reconfigure(effective)
            masked = {entity: masked_configs(configs) for entity, configs in wanted.items()}
            log.info("dynamic broker configs changed in ZooKeeper: %s", masked)

    def _reconfigure(self, new: BrokerConfig) -> None:
        """Make the running broker follow a new effective config: topic defaults of every log without an
        override, connection limits (read live by the server), cleaner pace (read live by the cleaner)."""
        old, self.config = self.config, new
        default_log_config = broker_log_config(new)
        if default_log_config != self.default_log_config:
            self.default_log_config = default_log_config
            self.logs.default_config = default_log_config
            self._log_configs.clear()
            for topic in self.metadata.topics():
                self.logs.set_topic_config(topic.name, self.topic_log_config(topic))
        for listener in list(self.config_listeners):
            listener(old, new)

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The log of an existing partition, or None."""
        return self.logs.get_log(topic, partition)

    def leader_epoch(self, topic: str, partition: int) -> int:
        """This node's leader epoch for the partition: always 0 on a single node (no leader changes)."""
        return self.replicas.leader_epoch(topic, partition)

    def check_leader(self, topic: str, partition: int) -> None:
        """NOT_LEADER_OR_FOLLOWER unless this broker leads the partition (always true on a single node)."""
        self.replicas.check_leader(topic, partition)

    def live_broker_count(self) -> int:
        """How many brokers are live (1 on a single node): the bound of a replication factor."""
        return self.replicas.live_broker_count()

    def check_leader_epoch(self, topic: str, partition: int, current_epoch: int) -> None:
        """A client's `current_leader_epoch` against ours (-1 = not checked), as Kafka's leader checks it."""
        if current_epoch < 0:
            return
        ours = self.leader_epoch(topic, partition)
        if current_epoch > ours:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if current_epoch < ours:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str] | None = None,
        *,
        validate_only: bool = False,
        internal: bool = False,
        replication_factor: int = 1,
        assignment: dict[int, list[int]] | None = None,
    ) -> TopicInfo:
        """Create a topic (table entry and partition logs), persisted before it returns.

        Raises KafkaError: INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
        INVALID_CONFIG. With `validate_only` nothing changes and a TopicInfo is still returned.
        In cluster mode the topic is written to ZooKeeper (`replication_factor`, or an explicit
        `assignment`); the single node ignores both (its only replica is itself).
        """
        configs = dict(configs or {})
        check_partition_limit(partitions)
        self.validate_topic_configs(configs)
        return await self.topic_admin.create_topic(
            name,
            partitions,
            configs,
            validate_only=validate_only,
            internal=internal,
            replication_factor=replication_factor,
            assignment=assignment,
        )

    async def create_partition_logs(
        self, name: str, indexes: Iterable[int], log_config: Any, created: list[Any]
    ) -> None:
        """Make the logs of these partitions of topic `name`, appending each to `created` once it is in
        the table (so a caller that fails midway knows which to remove).

        The files are made in worker threads, LOG_CREATION_CHUNK logs at a time: creating a partition's
        dir and files costs about 2 ms of system calls on ext4, which on the event loop held every other
        client for the whole chunk (the long fuzz run's largest loop stalls below 50 ms were CreateTopics
        of fuzzed topics). A worker thread releases the GIL in each system call, so the loop serves
        other connections meanwhile; the table itself is only touched here, on the loop. The metadata
        lock (held by every caller) keeps any other creation or deletion of these dirs out meanwhile.
        Raises KafkaError(KAFKA_STORAGE_ERROR) when a dir cannot be made (its log dir goes offline).
        """
        now_ms = self.now_ms()
        plans = self.logs.plan_logs(name, indexes, log_config)
        for start in range(0, len(plans), LOG_CREATION_CHUNK):
            chunk = plans[start : start + LOG_CREATION_CHUNK]
            built, failure = await trio.to_thread.run_sync(_build_logs, self.logs, chunk, now_ms)
            for plan, partition_log in zip(chunk, built, strict=False):
                if isinstance(plan, NewLog):
                    self.logs.attach_log(plan, partition_log)
                created.append(partition_log)
            if failure is not None:
                plan, exc = failure
                raise self.logs.creation_failed(plan, exc) from exc

    async def auto_create_topic(self, name: str) -> TopicInfo:
        if name == OFFSETS_TOPIC:
            return await self.create_topic(
                name,
                self.config["offsets.topic.num.partitions"],
                {
                    "cleanup.policy": "compact",
                    "segment.bytes": str(self.config["offsets.topic.segment.bytes"]),
                },
                internal=True,
                replication_factor=self.config["offsets.topic.replication.factor"],
            )
        if name == TRANSACTION_TOPIC:
            return await self.create_topic(
                name,
                self.config["transaction.state.log.num.partitions"],
                {"cleanup.policy": "compact"},
                internal=True,
                replication_factor=self.config["transaction.state.log.replication.factor"],
            )
        return await self.create_topic(
            name, self.config["num.partitions"], replication_factor=self.config["default.replication.factor"]
        )

    async def delete_topic(self, name: str) -> TopicInfo:
        """Remove a topic: from this node's table (persisted), its logs to the delayed delete; in cluster
        mode the controller deletes it and every broker drops its logs."""
        return await self.topic_admin.delete_topic(name)

    def drop_topic_locally(self, topic: TopicInfo) -> None:
        """Cluster mode: forget a topic ZooKeeper no longer has (the controller deleted it, or it was
        recreated with a new id). Its table entry, cached log config and logs (to the delayed delete)
        go, its fetch sessions forget it and whatever is parked on it wakes. ZooKeeper holds the table,
        so nothing is persisted here (replication.cluster calls this; BrokerHost names it)."""
        self.metadata.delete_topic(topic.name)
        self._log_configs.pop(topic.name, None)
        self._delete_logs(topic.name, topic.partitions)
        self.fetch_sessions.remove_topic(topic.name, topic.topic_id)
        self.watchers.notify_topic(topic.name)

    def _delete_logs(self, name: str, partitions: int, first: int = 0) -> None:
        now = self.now_ms()
        for index in range(first, partitions):
            try:
                self.logs.delete_log(name, index, now)
            except KafkaError as exc:
                log.error("could not remove the files of %s-%d: %s", name, index, exc)

    # background work (called by the server's periodic tasks)

    async def flush_due(self) -> None:
        """fsync the logs whose flush.messages / flush.ms policy says so (in worker threads)."""
        now = self.now_ms()
        for partition_log in self.logs.logs_needing_flush(now):
            try:
                await trio.to_thread.run_sync(partition_log.flush, now)
            except KafkaError as exc:
                log.error("flush of %s failed: %s", partition_log.name, exc)

    async def enforce_retention(self) -> None:
        # LogManager requires its logs be mutated on one thread; segment deletion here only renames
        # files (the removal happens in delete_expired_files after file.delete.delay.ms)
        deleted = self.logs.run_retention(self.now_ms())
        if deleted:
            log.info("retention removed %d segment(s)", deleted)

    async def delete_expired_files(self) -> None:
        # Deciding what is due happens here, on the thread that owns the logs; closing and unlinking
        # (slow for big segments) happens in a worker, so the event loop never waits on the disk.
        due = self.logs.take_due_deletes(self.now_ms())
        if len(due):
            await trio.to_thread.run_sync(due.remove)

    async def write_checkpoints(self) -> None:
        # The offsets are read here, on the trio thread that owns the manager's table of logs; the
        # worker thread only writes files, so topics may come and go (or the metadata lock be held by a
        # slow CreateTopics) meanwhile. One writer at a time, so an older snapshot never lands last.
        snapshot = self.logs.checkpoint_offsets()
        async with self._checkpoint_lock:
            await trio.to_thread.run_sync(self.logs.write_checkpoints, snapshot)

    async def next_producer_id(self) -> int:
        """A producer id never handed out before, also across restarts (blocks are persisted first)."""
        if not self._producer_ids:
            async with holding(self.metadata_lock):
                if not self._producer_ids:
                    start = await self.topic_admin.allocate_producer_id_block(PRODUCER_ID_BLOCK_SIZE)
                    self._producer_ids = range(start, start + PRODUCER_ID_BLOCK_SIZE)
        producer_id = self._producer_ids[0]
        self._producer_ids = self._producer_ids[1:]
        return producer_id


class TopicAdmin(Protocol):
    """Where topic changes and producer id blocks are written, chosen once at start-up
    (`BrokerState.topic_admin`): a single node's own table in its log dir (`LocalTopicAdmin`), or
    ZooKeeper, which every broker's view then follows (`ZooKeeperTopicAdmin`; Kafka's AdminZkClient).
    The callers check the request first (names, partition counts, configs)."""

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        *,
        validate_only: bool,
        internal: bool,
        replication_factor: int,
        assignment: dict[int, list[int]] | None,
    ) -> TopicInfo: ...

    async def delete_topic(self, name: str) -> TopicInfo: ...

    async def allocate_producer_id_block(self, size: int) -> int:
        """The first id of a block of `size` never handed out (the caller holds the metadata lock)."""
        ...

    async def refresh_topic_configs(self, name: str) -> None:
        """Bring the topic's configs in the table up to date with where they are kept, before an
        incremental change starts from them (the caller holds the metadata lock)."""
        ...

    async def write_topic_configs(self, topic: TopicInfo, configs: dict[str, str]) -> None:
        """Replace the topic's config overrides and apply them to its logs (under the metadata lock)."""
        ...

    async def add_partitions(
        self, topic: TopicInfo, total: int, assignment: dict[int, list[int]] | None = None
    ) -> None:
        """Grow the topic to `total` partitions (under the metadata lock; `total` is checked), the new
        ones on the replicas `assignment` names (checked; None: assigned as for a new topic)."""
        ...


class LocalTopicAdmin:
    """A single node: the topic table in its log dir and its own logs, persisted before answering."""

    def __init__(self, broker: BrokerState) -> None:
        self.broker = broker

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        *,
        validate_only: bool,
        internal: bool,
        replication_factor: int,
        assignment: dict[int, list[int]] | None,
    ) -> TopicInfo:
        """The logs and the table entry (the only replica is this node: the replication factor and
        assignment are not used)."""
        broker = self.broker
        metadata = broker.metadata
        async with holding(broker.metadata_lock):
            # again under the lock: a dynamic broker config change may have moved the defaults meanwhile
            log_config = broker.validate_topic_configs(configs)
            if validate_only:
                metadata.check_new_topic(name, partitions)
                return TopicInfo(name, ZERO_UUID, partitions, configs, internal)
            # The logs first, the table entry once they all exist: nobody sees a topic whose partitions
            # are still being made while this task lets other requests run between chunks of them.
            metadata.check_new_topic(name, partitions)
            await check_descriptors_for(
                partitions, broker.logs.open_log_count(), broker.config["max.connections"]
            )
            topic_id = uuid.uuid4()  # chosen now: each log's partition.metadata names it
            new_logs: list[Any] = []
            try:
                await broker.create_partition_logs(name, range(partitions), log_config, new_logs)
                await trio.to_thread.run_sync(record_topic_id, new_logs, kafka_uuid_string(topic_id))
                topic = metadata.create_topic(name, partitions, configs, topic_id=topic_id, internal=internal)
            except BaseException:
                broker._delete_logs(name, len(new_logs))
                if name in metadata:
                    metadata.delete_topic(name)
                metadata.snapshot()  # the table is as it was on disk: clear the dirty flag
                raise
            snapshot = metadata.snapshot()
            await trio.to_thread.run_sync(metadata.write_snapshot, snapshot)
        log.info("created topic %s with %d partitions (id %s)", name, partitions, topic.topic_id)
        return topic

    async def delete_topic(self, name: str) -> TopicInfo:
        """The table entry (persisted), then the logs to the delayed delete."""
        broker = self.broker
        metadata = broker.metadata
        async with holding(broker.metadata_lock):
            topic = metadata.delete_topic(name)
            snapshot = metadata.snapshot()
            await trio.to_thread.run_sync(metadata.write_snapshot, snapshot)
            broker._log_configs.pop(name, None)
            # LogManager.delete_log renames the partition dir and leaves the files open until
            # file.delete.delay.ms has passed (delete_expired_files removes them then); thousands of
            # renames give the event loop back now and then, as creation does
            with trio.CancelScope(shield=True):  # the table says deleted: so must every log, even at shutdown
                turn = Turn()
                for index in range(topic.partitions):
                    await turn.spend()
                    broker._delete_logs(name, index + 1, index)
        broker.fetch_sessions.remove_topic(name, topic.topic_id)
        broker.watchers.notify_topic(name)
        log.info("deleted topic %s (id %s)", name, topic.topic_id)
        return topic

    async def allocate_producer_id_block(self, size: int) -> int:
        metadata = self.broker.metadata
        start = metadata.allocate_producer_id_block(size)
        snapshot = metadata.snapshot()
        await trio.to_thread.run_sync(metadata.write_snapshot, snapshot)
        return start

    async def refresh_topic_configs(self, name: str) -> None:
        return None  # the table is where they are kept

    async def write_topic_configs(self, topic: TopicInfo, configs: dict[str, str]) -> None:
        broker = self.broker
        metadata = broker.metadata
        previous = dict(topic.configs)
        metadata.set_topic_configs(topic.name, configs)
        snapshot = metadata.snapshot()
        try:
            await trio.to_thread.run_sync(metadata.write_snapshot, snapshot)
        except OSError as exc:
            metadata.set_topic_configs(topic.name, previous)
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot persist the topic configs: {exc}"
            ) from exc
        broker.logs.set_topic_config(topic.name, broker.topic_log_config(topic))

    async def add_partitions(
        self, topic: TopicInfo, total: int, assignment: dict[int, list[int]] | None = None
    ) -> None:
        """The new partitions' logs, then the table (persisted); this node is their only replica, which
        is all a checked `assignment` can name here."""
        broker = self.broker
        name, current = topic.name, topic.partitions
        await check_descriptors_for(
            total - current, broker.logs.open_log_count(), broker.config["max.connections"]
        )
        log_config = broker.topic_log_config(topic)
        new_logs: list[Any] = []
        try:
            await broker.create_partition_logs(name, range(current, total), log_config, new_logs)
            await trio.to_thread.run_sync(record_topic_id, new_logs, topic.kafka_id)
        except BaseException:
            now = broker.now_ms()  # the files stay for file.delete.delay.ms, as for any deleted log
            for index in range(current, current + len(new_logs)):
                broker.logs.delete_log(name, index, now)
            raise
        broker.metadata.add_partitions(name, total)
        snapshot = broker.metadata.snapshot()
        try:
            await trio.to_thread.run_sync(broker.metadata.write_snapshot, snapshot)
        except OSError as exc:
            # the partitions exist (logs and table); the table is written again by the next commit
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot persist the topic table: {exc}") from exc


class ZooKeeperTopicAdmin:
    """Cluster mode: changes written to ZooKeeper through the cluster runtime's topic admin, answered
    once every live broker knows them (`replication/cluster/topic_admin.py`); the controller and every
    broker's view do the rest."""

    def __init__(self, broker: BrokerState, cluster: ClusterRuntime) -> None:
        self.broker = broker
        self.cluster = cluster

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        *,
        validate_only: bool,
        internal: bool,
        replication_factor: int,
        assignment: dict[int, list[int]] | None,
    ) -> TopicInfo:
        self.broker.metadata.check_new_topic(name, partitions)
        if validate_only:
            return TopicInfo(name, ZERO_UUID, partitions, configs, internal)
        return await self.cluster.create_topic(name, partitions, configs, replication_factor, assignment)

    async def delete_topic(self, name: str) -> TopicInfo:
        topic = self.broker.metadata.topic(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        await self.cluster.delete_topic(name)  # the controller deletes; every broker drops its logs
        return topic

    async def allocate_producer_id_block(self, size: int) -> int:
        return await self.cluster.allocate_producer_id_block(size)

    async def refresh_topic_configs(self, name: str) -> None:
        """An incremental change starts from what ZooKeeper holds now, not from this broker's view, which
        may not have caught up yet with a change made through another broker (that update would be lost);
        Kafka's ZooKeeper mode read the entity config from ZooKeeper likewise."""
        current = await trio.to_thread.run_sync(self.cluster.store.topic_configs, name)
        self.broker.metadata.set_topic_configs(name, current)

    async def write_topic_configs(self, topic: TopicInfo, configs: dict[str, str]) -> None:
        """/config/topics/T is the truth (every broker's reconcile applies it); this broker's view and
        logs take the change at once."""
        broker = self.broker
        await self.cluster.set_topic_configs(topic.name, configs)
        broker.metadata.set_topic_configs(topic.name, configs)
        broker.logs.set_topic_config(topic.name, broker.topic_log_config(topic))

    async def add_partitions(
        self, topic: TopicInfo, total: int, assignment: dict[int, list[int]] | None = None
    ) -> None:
        """The controller-free part of Kafka's AdminZkClient.addPartitions: the new replica lists (the
        given ones, or rack-aware round robin with the same replication factor) appended to
        /brokers/topics/T."""
        await self.cluster.add_partitions(topic.name, total, assignment)
