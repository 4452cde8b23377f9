"""The trio edge of the transaction coordinator: serialization, `__transaction_state`, markers, timers.

Theory of operation
-------------------
`TransactionRuntime` owns one `kafkacompat.txn.coordinator.TransactionCoordinatorCore` (sans-io) and
is the only code that calls it. Every operation goes through `call(op)`, modelled on the group
runtime (group_runtime.py):

1. under one trio lock, run `op(now_ms)` on the core -> `TxnOutcome` (a request waits for the lock
   without its queued.max.requests slot and is dropped if its client leaves, lock_wait.py);
2. append the outcome's records to `__transaction_state`, one batch per partition, as the partition's
   leader through the replica manager (`BrokerState.replicas`), and wait until the ISR holds them (Kafka
   appends coordinator records with acks=all; `transaction.state.log.min.isr` is the topic's
   min.insync.replicas). A failed append or replication answers COORDINATOR_NOT_AVAILABLE
   (NOT_COORDINATOR when leadership moved) and reloads that partition from its log (the core ran
   ahead of what is durable);
3. queue the outcome's marker jobs for the marker task and answer. So EndTxn is answered once its
   PrepareCommit/PrepareAbort record is written, as in Kafka; the markers follow asynchronously, and
   until every marker of the job is written the transaction stays in its Prepare state, where the
   producer's next InitProducerId, AddPartitionsToTxn or AddOffsetsToTxn gets CONCURRENT_TRANSACTIONS
   (clients retry it).

The marker task (`_marker_loop`) writes each job through `MarkerWriter` outside the lock: markers
for partitions this broker leads are appended here (for `__consumer_offsets` through the group runtime,
which settles the transaction's pending offsets), the others are sent with WriteTxnMarkers to their
leaders over `ClusterRuntime.inter_broker_connection`. Every marker is written with acks=all. Once all
markers of a job are written, `core.markers_written(job)` completes the transaction
(CompleteCommit/CompleteAbort record). Partitions whose marker failed for a retriable reason
(NOT_LEADER_OR_FOLLOWER after a leader change, a leader not known yet, a connection failure) are tried
again after `RETRY_BACKOFF`, once the cluster view has been refreshed.

Ownership. Single node: this broker coordinates every partition of `__transaction_state`; if the topic
exists its partitions answer COORDINATOR_LOAD_IN_PROGRESS until `run()` has replayed them, otherwise
the topic (compacted, `transaction.state.log.num.partitions`, `transaction.state.log.segment.bytes`)
is created on first use (FindCoordinator for a transactional id, InitProducerId). Cluster mode: the
topic is created with `transaction.state.log.replication.factor` replicas (refused, as in Kafka, while
fewer brokers are live: COORDINATOR_NOT_AVAILABLE) and `min.insync.replicas` =
`transaction.state.log.min.isr`; the coordinator of a transactional id is the leader of its state
partition. The cluster runtime calls `set_txn_leadership()`: on becoming leader the partition is
replayed (COORDINATOR_LOAD_IN_PROGRESS meanwhile) with the partition's leader epoch as its
coordinator epoch, and transactions found in a Prepare state get their markers again; on losing it the
partition's transactional ids are forgotten (NOT_COORDINATOR) and their pending markers dropped (the
new coordinator sends them).

Produce-path verification (KIP-890): a partition leader that is not the transaction's coordinator asks
the coordinator with AddPartitionsToTxn v4 `verify_only` (`verify_in_transaction`); so does the group
coordinator for TxnOffsetCommit.

Timers: the core's abort check (`transaction.abort.timed.out.transaction.cleanup.interval.ms`) and
expiry check (`transaction.remove.expired.transaction.cleanup.interval.ms`) run from the timer loop.

Owned by `BrokerState.transactions` (set by the server).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.broker.coordinator_log import (
    LoadStalled,
    append_txn_marker,
    create_compacted_internal_topic,
    replay_log,
    wait_for_coordinator_writes,
)
from kafkacompat.broker.inter_broker_channels import InterBrokerChannels
from kafkacompat.broker.lock_wait import holding
from kafkacompat.txn.coordinator import MarkerJob, TransactionCoordinatorCore, TxnConfig, TxnOutcome
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import RecordBatchView, build_batch, iter_records

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState

__all__ = ["TRANSACTION_TOPIC", "LocalMarkerWriter", "MarkerWriter", "TransactionRuntime", "runtime_of"]

log = logging.getLogger("kafkacompat.txn")

TRANSACTION_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_LOAD_BUFFER = 5 * 1024 * 1024
#: how long a coordinator write waits for the ISR (Kafka's coordinator request timeout, 30 s)
WRITE_TIMEOUT_SECONDS = 30.0
#: how long a marker that could not be written waits before it is tried again (seconds)
RETRY_BACKOFF = 0.2
#: marker errors after which Kafka gives the marker up: a newer producer epoch or coordinator owns the
#: partition's producer, so the marker is moot
_GIVE_UP = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})
#: coordinator unavailability seen by the produce-path verification: produce answers a retriable
#: error older clients know (as Kafka's AddPartitionsToTxnManager does)
_VERIFY_RETRIABLE = frozenset(
    {
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)


class LocalMarkerWriter:
    """Writes transaction markers into partitions this broker leads (also WriteTxnMarkers' path)."""

    def __init__(self, broker: BrokerState) -> None:
        self.broker = broker

    async def write_one(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> None:
        """One COMMIT/ABORT control batch into `topic`-`partition`, written with acks=all (cluster mode:
        answered once the ISR holds it). Raises KafkaError."""
        broker = self.broker
        if topic == OFFSETS_TOPIC:
            groups = broker.groups
            if groups is None:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no group coordinator")
            required = await groups.write_txn_marker(
                partition, producer_id, producer_epoch, coordinator_epoch, commit
            )
        else:
            partition_log = broker.partition_log(topic, partition)
            if partition_log is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not here")
            required = append_txn_marker(
                broker,
                partition_log,
                topic,
                partition,
                producer_id,
                producer_epoch,
                coordinator_epoch,
                commit,
                broker.now_ms(),
            )
        if required is None:
            return
        deadline = trio.current_time() + WRITE_TIMEOUT_SECONDS
        failed = await broker.replicas.wait_for_commits({(topic, partition): required}, deadline)
        if failed:
            raise KafkaError(failed[(topic, partition)], f"marker in {topic}-{partition} not replicated")


class MarkerWriter:
    """Writes the markers of a job: locally for partitions this broker leads, with WriteTxnMarkers to
    the leader of each other partition (cluster mode)."""

    def __init__(self, broker: BrokerState) -> None:
        self.broker = broker
        self.local = LocalMarkerWriter(broker)
        self.channels = InterBrokerChannels(broker, "txn-markers")

    async def write(self, job: MarkerJob) -> list[tuple[str, int]]:
        """Write one marker per partition of `job`; returns the partitions to try again."""
        cluster = self.broker.cluster
        remote: dict[int, list[tuple[str, int]]] = {}
        failed: list[tuple[str, int]] = []
        for topic, partition in job.partitions:
            info = self.broker.metadata.topic(topic)
            if info is None or partition >= info.partitions:
                # Kafka drops the markers of deleted partitions too
                log.warning("dropping %s marker for deleted %s-%d", job.transactional_id, topic, partition)
                continue
            leader = (
                self.broker.node_id if cluster is None else cluster.partition_metadata(topic, partition)[0]
            )
            if leader < 0:
                failed.append((topic, partition))
            elif leader != self.broker.node_id:
                remote.setdefault(leader, []).append((topic, partition))
            elif not await self._write_local(job, topic, partition):
                failed.append((topic, partition))
        for leader, partitions in remote.items():
            failed.extend(await self._write_remote(job, leader, partitions))
        return failed

    async def _write_local(self, job: MarkerJob, topic: str, partition: int) -> bool:
        try:
            await self.local.write_one(
                topic, partition, job.producer_id, job.producer_epoch, job.coordinator_epoch, job.commit
            )
        except KafkaError as exc:
            return self._settled(job, topic, partition, exc.code)
        return True

    def _settled(self, job: MarkerJob, topic: str, partition: int, code: int) -> bool:
        """Whether a marker answered `code` needs no retry."""
        if code == ErrorCode.NONE:
            return True
        if code in _GIVE_UP:
            log.warning("dropping %s marker for %s-%d: %s", job.transactional_id, topic, partition, code)
            return True
        log.info(
            "marker of %s for %s-%d not written (%s); will retry",
            job.transactional_id,
            topic,
            partition,
            code,
        )
        return False

    async def _write_remote(
        self, job: MarkerJob, leader: int, partitions: list[tuple[str, int]]
    ) -> list[tuple[str, int]]:
        from kafkacompat.wire.messages import request_class

        cls = request_class(ApiKey.WRITE_TXN_MARKERS)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = cls(
            markers=[
                cls.WritableTxnMarker(
                    producer_id=job.producer_id,
                    producer_epoch=job.producer_epoch,
                    transaction_result=job.commit,
                    topics=[
                        cls.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                        for name, indexes in by_topic.items()
                    ],
                    coordinator_epoch=job.coordinator_epoch,
                )
            ]
        )
        try:
            response = await self.channels.send(leader, ApiKey.WRITE_TXN_MARKERS, lambda _version: request)
        except KafkaError as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s; will retry", leader, exc)
            return list(partitions)
        answered: dict[tuple[str, int], int] = {}
        for marker in response.markers:
            for topic in marker.topics:
                for result in topic.partitions:
                    answered[(topic.name, result.partition_index)] = result.error_code
        return [
            tp
            for tp in partitions
            if not self._settled(job, tp[0], tp[1], answered.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR))
        ]

    def close(self) -> None:
        self.channels.close()


class TransactionRuntime:
    """Serializes coordinator operations, persists their records, writes their markers, runs timers."""

    def __init__(self, broker: BrokerState) -> None:
        self.broker = broker
        topic = broker.metadata.topic(TRANSACTION_TOPIC)
        config = TxnConfig.from_properties(broker.config)
        if topic is not None:
            config.num_partitions = topic.partitions
        self.core = TransactionCoordinatorCore(config)
        self.partitions = config.num_partitions
        self.markers = MarkerWriter(broker)
        self.verifiers = InterBrokerChannels(broker, "txn-verify")
        self._lock = trio.Lock()
        self._wakeup = trio.Event()
        self._marker_wakeup = trio.Event()
        self._pending: list[MarkerJob] = []
        self._retry: list[MarkerJob] = []
        self._to_reload: set[int] = set()
        self._topic_ready = topic is not None
        self._spare_producer_id: int | None = None
        self._closed = False
        #: state partition -> how often its leadership changed (a load of an older generation is moot)
        self._generation: dict[int, int] = {}
        self._cluster = broker.cluster is not None
        self._to_load: list[int] = []
        if self._cluster:
            # partitions are loaded when this broker leads them (the replica manager tells
            # set_txn_leadership; the leader epoch becomes the coordinator epoch of its markers)
            broker.replicas.add_leadership_listener(TRANSACTION_TOPIC, self.set_txn_leadership)
        elif topic is None:
            self.core.load_empty_partitions(range(self.partitions))
        else:
            for partition in range(self.partitions):
                self.core.begin_loading(partition)
            self._to_load = list(range(self.partitions))
        self.loaded = trio.Event()
        try:
            self.load_buffer = int(broker.config["transaction.state.log.load.buffer.size"])
        except KeyError:
            self.load_buffer = DEFAULT_LOAD_BUFFER

    # --- background tasks -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._marker_loop)
            task_status.started()
            try:
                for partition in self._to_load:
                    await self._load(partition)
            finally:
                self.loaded.set()
            self._to_load = []
            try:
                await self._timer_loop()
            finally:
                self.markers.close()
                self.verifiers.close()

    async def _timer_loop(self) -> None:
        while True:
            if self._to_reload:
                for partition in sorted(self._to_reload):
                    self._to_reload.discard(partition)
                    if partition in self.core.owned_partitions:
                        await self._load(partition)
            now = self.broker.now_ms()
            deadline = self.core.next_deadline()
            if deadline <= now:
                async with self._lock:
                    await self._persist(self.core.tick(self.broker.now_ms()))
                continue
            self._wakeup = trio.Event()
            timeout = (deadline - now) / 1000
            with trio.move_on_after(timeout if timeout < math.inf else 3600):
                await self._wakeup.wait()

    async def _marker_loop(self) -> None:
        """Write queued marker jobs (outside the lock), then complete their transactions."""
        while True:
            if not self._pending:
                self._marker_wakeup = trio.Event()
                timeout = RETRY_BACKOFF if self._retry else math.inf
                with trio.move_on_after(timeout):
                    await self._marker_wakeup.wait()
                if not self._pending and self._retry:
                    if self.broker.cluster is not None:
                        self.broker.cluster.poke()  # a leader may have moved: refresh the view first
                    self._pending, self._retry = self._retry, []
                continue
            jobs, self._pending = self._pending, []
            for job in jobs:
                if not self._current(job):
                    continue
                try:
                    failed = await self.markers.write(job)
                except Exception as exc:  # an unexpected failure must not stop the marker task
                    log.exception("writing the markers of %s failed: %r", job.transactional_id, exc)
                    failed = list(job.partitions)
                if failed:
                    # only the failed partitions are tried again
                    self._retry.append(
                        MarkerJob(
                            job.transactional_id,
                            job.producer_id,
                            job.producer_epoch,
                            job.coordinator_epoch,
                            job.commit,
                            tuple(failed),
                        )
                    )
                    continue
                async with self._lock:
                    if not self._current(job):
                        continue
                    done = self.core.markers_written(job, self.broker.now_ms())
                    try:
                        await self._persist(done, raise_on_failure=True)
                    except KafkaError as exc:
                        log.error("could not record the completion of %s: %s", job.transactional_id, exc)

    def _current(self, job: MarkerJob) -> bool:
        """Whether this coordinator still owns the job's transactional id with the job's coordinator epoch."""
        partition = self.core.partition_for(job.transactional_id)
        if partition not in self.core.owned_partitions or partition in self.core.loading_partitions:
            return False
        epoch = self.core.coordinator_epochs.get(partition, self.core.coordinator_epoch)
        return epoch == job.coordinator_epoch

    def _queue_markers(self, jobs: list[MarkerJob]) -> None:
        if jobs:
            self._pending.extend(jobs)
            self._marker_wakeup.set()

    async def _load(self, partition: int, coordinator_epoch: int | None = None) -> bool:
        """Replay one `__transaction_state` partition, then serve it (markers of Prepare states resent).
        False if its leadership changed meanwhile (the load is abandoned)."""
        generation = self._generation.get(partition, 0)
        if coordinator_epoch is None:  # a reload keeps the coordinator epoch of the partition's load
            coordinator_epoch = self.core.coordinator_epochs.get(partition)
        async with self._lock:
            if self._generation.get(partition, 0) != generation:
                return False
            self.core.unload_partition(partition)
            self.core.begin_loading(partition, coordinator_epoch)
        partition_log = self.broker.partition_log(TRANSACTION_TOPIC, partition)
        if partition_log is not None:
            try:
                await replay_log(partition_log, self.load_buffer, self._lock, self._replay_batch)
            except LoadStalled as exc:
                log.error("no progress loading %s-%d at %d", TRANSACTION_TOPIC, partition, exc.offset)
        async with self._lock:
            if self._generation.get(partition, 0) != generation:
                if partition not in self.core.owned_partitions:
                    self.core.unload_partition(partition)  # what this abandoned load replayed goes
                return False
            await self._persist(self.core.finish_loading(partition, self.broker.now_ms()))
        return True

    def _replay_batch(self, batch: RecordBatchView, from_offset: int) -> None:
        if batch.is_control:
            return
        for record in iter_records(batch):
            if record.offset >= from_offset and record.key is not None:
                self.core.replay(record.key, record.value)

    async def set_txn_leadership(self, partition: int, leader: bool, leader_epoch: int) -> None:
        """Cluster mode: this broker became (True) or stopped being (False) the leader of
        `__transaction_state` partition `partition`, so the coordinator of its transactional ids (see the
        module docstring)."""
        topic = self.broker.metadata.topic(TRANSACTION_TOPIC)
        if topic is not None and topic.partitions != self.partitions and not self.core.owned_partitions:
            self.partitions = self.core.config.num_partitions = topic.partitions
        if partition >= self.partitions:
            return
        if not leader:
            self._generation[partition] = self._generation.get(partition, 0) + 1
            if partition in self.core.owned_partitions:
                async with self._lock:
                    self.core.unload_partition(partition)
                    self._drop_jobs(partition)
                log.info("unloaded transactions of %s-%d (no longer leader)", TRANSACTION_TOPIC, partition)
            return
        known = self.core.coordinator_epochs.get(partition)
        if partition in self.core.owned_partitions and known is not None and known >= leader_epoch:
            return
        if partition in self.core.owned_partitions and partition not in self.core.loading_partitions:
            # still the leader with a newer leader epoch: the markers carry the newer coordinator epoch
            self.core.coordinator_epochs[partition] = leader_epoch
            return
        self._generation[partition] = self._generation.get(partition, 0) + 1
        self._topic_ready = True
        if await self._load(partition, leader_epoch):
            log.info(
                "loaded transactions of %s-%d as its new leader (epoch %d)",
                TRANSACTION_TOPIC,
                partition,
                leader_epoch,
            )
            self._wakeup.set()

    def _drop_jobs(self, partition: int) -> None:
        def mine(job: MarkerJob) -> bool:
            return self.core.partition_for(job.transactional_id) == partition

        self._pending = [j for j in self._pending if not mine(j)]
        self._retry = [j for j in self._retry if not mine(j)]

    # --- operations -------------------------------------------------------------------------------------

    async def ensure_topic(self) -> None:
        """Create `__transaction_state` (compacted, internal) if it does not exist yet."""
        if self._topic_ready and (not self._cluster or self.broker.metadata.topic(TRANSACTION_TOPIC)):
            return
        config = self.broker.config
        if self.broker.metadata.topic(TRANSACTION_TOPIC) is None:
            replication_factor = 1
            extra: dict[str, str] = {}
            if self._cluster:
                replication_factor = int(config["transaction.state.log.replication.factor"])
                extra["min.insync.replicas"] = str(config["transaction.state.log.min.isr"])
                live = self.broker.live_broker_count()
                if live < replication_factor:
                    # Kafka refuses to create it with fewer replicas than configured
                    raise KafkaError(
                        ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        f"{TRANSACTION_TOPIC} needs transaction.state.log.replication.factor="
                        f"{replication_factor} live brokers, {live} are live",
                    )
            try:
                await create_compacted_internal_topic(
                    self.broker,
                    TRANSACTION_TOPIC,
                    self.partitions,
                    config["transaction.state.log.segment.bytes"],
                    replication_factor=replication_factor,
                    extra_configs=extra,
                )
            except KafkaError as exc:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc
        topic = self.broker.metadata.topic(TRANSACTION_TOPIC)
        if topic is not None and topic.partitions != self.partitions:
            # created by someone else first: nothing written yet, use its count
            async with holding(self._lock):
                self.partitions = topic.partitions
                self.core.config.num_partitions = topic.partitions
                if not self._cluster:
                    self.core.load_empty_partitions(range(topic.partitions))
        self._topic_ready = True

    async def call(self, op: Callable[[int], TxnOutcome], *, may_write: bool = True) -> Any:
        """Run `op(now_ms)` on the core, persist its records, queue its markers; return its response.
        Raises KafkaError(COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR) when the coordinator cannot serve."""
        if self._closed:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, "the broker is shutting down")
        if may_write:
            await self.ensure_topic()
        # a request waits for the lock without its queued.max.requests slot, and is dropped if its client
        # leaves meanwhile (lock_wait.py): a holder may wait for the ISR (cluster mode) or a replay
        async with holding(self._lock):
            outcome = op(self.broker.now_ms())
            await self._persist(outcome, raise_on_failure=True)
        return outcome.response

    def coordinator_of(self, transactional_id: str) -> int:
        """The broker coordinating `transactional_id`: the leader of its state partition (-1: none)."""
        cluster = self.broker.cluster
        if cluster is None:
            return self.broker.node_id
        return cluster.partition_metadata(TRANSACTION_TOPIC, self.core.partition_for(transactional_id))[0]

    async def verify_in_transaction(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        tp: tuple[str, int],
        retriable_as: ErrorCode = ErrorCode.NOT_ENOUGH_REPLICAS,
    ) -> ErrorCode:
        """KIP-890: whether `tp` is in the producer's ongoing transaction, asked of the coordinator (a
        coordinator that cannot answer now gives `retriable_as`, an error the caller's clients retry)."""
        if transactional_id is None or not self._cluster:
            return self.core.producer_in_transaction(producer_id, producer_epoch, tp)
        partition = self.core.partition_for(transactional_id)
        if partition in self.core.owned_partitions and partition not in self.core.loading_partitions:
            code = self.core.verify_partitions(transactional_id, producer_id, producer_epoch, [tp])[tp]
        else:
            code = await self._verify_remote(transactional_id, producer_id, producer_epoch, tp)
        if code in _VERIFY_RETRIABLE:
            return retriable_as
        # what the single-node path answers for these (a stale epoch, a producer id not of this id)
        if code == ErrorCode.PRODUCER_FENCED:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode(code)

    async def _verify_remote(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: tuple[str, int]
    ) -> int:
        from kafkacompat.wire.messages import request_class

        coordinator = self.coordinator_of(transactional_id)
        if coordinator < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        cls = request_class(ApiKey.ADD_PARTITIONS_TO_TXN)

        def request_for(version: int) -> Any:
            if version < 4:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the coordinator cannot verify")
            return cls(
                transactions=[
                    cls.AddPartitionsToTxnTransaction(
                        transactional_id=transactional_id,
                        producer_id=producer_id,
                        producer_epoch=producer_epoch,
                        verify_only=True,
                        topics=[cls.AddPartitionsToTxnTopic(name=tp[0], partitions=[tp[1]])],
                    )
                ]
            )

        try:
            response = await self.verifiers.send(coordinator, ApiKey.ADD_PARTITIONS_TO_TXN, request_for)
        except KafkaError as exc:
            log.info("verification with coordinator %d failed: %s", coordinator, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if response.error_code:
            return int(response.error_code)
        for txn in response.results_by_transaction:
            for topic in txn.topic_results:
                for result in topic.results_by_partition:
                    if (topic.name, result.partition_index) == tp:
                        return int(result.partition_error_code)
        return ErrorCode.INVALID_TXN_STATE

    async def producer_id_allocator(self) -> Callable[[], int]:
        """A synchronous allocator for one core call (the core may need one fresh producer id)."""
        if self._spare_producer_id is None:
            self._spare_producer_id = await self.broker.next_producer_id()

        def allocate() -> int:
            if self._spare_producer_id is None:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no producer id at hand")
            producer_id, self._spare_producer_id = self._spare_producer_id, None
            return producer_id

        return allocate

    def shutdown(self) -> None:
        self._closed = True

    # --- persistence -----------------------------------------------------------------------------------

    async def _persist(self, outcome: TxnOutcome, *, raise_on_failure: bool = False) -> None:
        """Append the records (cluster mode: until the ISR has them), then queue the markers. Called with
        the lock held."""
        failed, required = self._append(outcome.records)
        if not failed and required:
            failed = await wait_for_coordinator_writes(
                self.broker, TRANSACTION_TOPIC, required, WRITE_TIMEOUT_SECONDS, "coordinator records", log
            )
        if failed:
            self._to_reload |= set(failed)
            self._wakeup.set()
            if raise_on_failure:
                code = (
                    ErrorCode.NOT_COORDINATOR
                    if ErrorCode.NOT_LEADER_OR_FOLLOWER in failed.values()
                    else ErrorCode.COORDINATOR_NOT_AVAILABLE
                )
                raise KafkaError(code, f"could not write {TRANSACTION_TOPIC}")
            return
        self._queue_markers(outcome.markers)

    def _append(
        self, records: list[tuple[int, bytes, bytes | None]]
    ) -> tuple[dict[int, ErrorCode], dict[int, int]]:
        """Write the records, one batch per partition: (the partitions whose write failed and why, the
        offset each written partition is committed at)."""
        failed: dict[int, ErrorCode] = {}
        required: dict[int, int] = {}
        if not records:
            return failed, required
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for partition, key, value in records:
            by_partition.setdefault(partition, []).append((key, value))
        now = self.broker.now_ms()
        for partition, items in by_partition.items():
            partition_log = self.broker.partition_log(TRANSACTION_TOPIC, partition)
            if partition_log is None:
                failed[partition] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                continue
            batch = bytearray(build_batch([(k, v, (), now) for k, v in items], base_timestamp=now))
            try:
                appended = self.broker.replicas.append_as_leader(
                    TRANSACTION_TOPIC,
                    partition,
                    partition_log,
                    batch,
                    now,
                    required_acks=-1,
                    check_producers=False,
                )
            except KafkaError as exc:
                log.error("append to %s-%d failed: %s", TRANSACTION_TOPIC, partition, exc)
                failed[partition] = ErrorCode(exc.code)
                continue
            required[partition] = appended.required_offset
        return failed, required


def runtime_of(broker: BrokerState) -> TransactionRuntime | None:
    return broker.transactions


def version_error(code: int, api_version: int, fenced_since: int) -> int:
    """PRODUCER_FENCED for request versions that know it (KIP-588), INVALID_PRODUCER_EPOCH before."""
    if code == ErrorCode.PRODUCER_FENCED and api_version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
