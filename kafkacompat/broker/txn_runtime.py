"""The trio edge of the transaction coordinator: serialization, `__transaction_state`, markers, timers.

Theory of operation
-------------------
`TransactionRuntime` owns one `kafkacompat.txn.coordinator.TransactionCoordinatorCore` (sans-io) and
is the only code that calls it. Every operation goes through `call(op)`, modelled on the group
runtime (group_runtime.py):

1. under one trio lock, run `op(now_ms)` on the core -> `TxnOutcome`;
2. append the outcome's records to `__transaction_state`, one batch per partition, through the log's
   leader append path; a failed append answers COORDINATOR_NOT_AVAILABLE and reloads that partition
   from its log (the core ran ahead of what is durable);
3. hand the outcome's marker jobs to the marker writer; once every marker of a job is in its partition
   log, `core.markers_written(job)` completes the transaction (CompleteCommit/CompleteAbort record).
   A job whose markers could not all be written is retried by the timer task; meanwhile the
   transaction stays in PrepareCommit/PrepareAbort and its producer gets CONCURRENT_TRANSACTIONS.
4. answer. EndTxn therefore answers after its markers are written (Kafka answers after the Prepare
   record and writes markers afterwards; on one node doing both first spares clients a round of
   CONCURRENT_TRANSACTIONS retries and changes nothing they can observe otherwise).

The marker writer is the seam for cluster mode: `LocalMarkerWriter` appends COMMIT/ABORT control
batches to the partitions of this broker (markers for `__consumer_offsets` go through the group
runtime, which settles the transaction's pending offsets); a cluster writer will send WriteTxnMarkers
to each partition's leader instead.

Start-up: if `__transaction_state` exists, its partitions answer COORDINATOR_LOAD_IN_PROGRESS until
`run()` has replayed them; transactions found in a Prepare state get their markers again. Otherwise the
topic (compacted, `transaction.state.log.num.partitions`, `transaction.state.log.segment.bytes`) is
created on first use (FindCoordinator for a transactional id, InitProducerId). Timers: the core's abort
check (`transaction.abort.timed.out.transaction.cleanup.interval.ms`) and expiry check
(`transaction.remove.expired.transaction.cleanup.interval.ms`) run from the timer loop.

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
)
from kafkacompat.txn.coordinator import MarkerJob, TransactionCoordinatorCore, TxnConfig, TxnOutcome
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import RecordBatchView, build_batch, iter_records

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState

__all__ = ["TRANSACTION_TOPIC", "LocalMarkerWriter", "TransactionRuntime", "runtime_of"]

log = logging.getLogger("kafkacompat.txn")

TRANSACTION_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
LEADER_EPOCH = 0
DEFAULT_LOAD_BUFFER = 5 * 1024 * 1024


class LocalMarkerWriter:
    """Writes transaction markers into this broker's partition logs (single node)."""

    def __init__(self, broker: BrokerState) -> None:
        self.broker = broker

    async def write(self, job: MarkerJob) -> list[tuple[str, int]]:
        """Write one marker per partition of `job`; returns the partitions whose marker failed."""
        failed = []
        for topic, partition in job.partitions:
            try:
                await self.write_one(
                    topic, partition, job.producer_id, job.producer_epoch, job.coordinator_epoch, job.commit
                )
            except KafkaError as exc:
                if exc.code in (
                    ErrorCode.INVALID_PRODUCER_EPOCH,
                    ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ):
                    # Kafka gives up on such markers too: a newer epoch or coordinator owns the
                    # partition's producer, or the partition is gone
                    log.warning("dropping %s marker for %s-%d: %s", job, topic, partition, exc)
                    continue
                log.error("could not write a marker to %s-%d: %s", topic, partition, exc)
                failed.append((topic, partition))
        return failed

    async def write_one(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> None:
        """One COMMIT/ABORT control batch into `topic`-`partition` (also WriteTxnMarkers' path)."""
        broker = self.broker
        if topic == OFFSETS_TOPIC:
            groups = getattr(broker, "groups", None)
            if groups is None:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no group coordinator")
            await groups.write_txn_marker(partition, producer_id, producer_epoch, coordinator_epoch, commit)
            return
        partition_log = broker.partition_log(topic, partition)
        if partition_log is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not here")
        append_txn_marker(
            broker,
            partition_log,
            topic,
            partition,
            broker.leader_epoch(topic, partition),
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            broker.now_ms(),
        )


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
        self.markers = LocalMarkerWriter(broker)
        self._lock = trio.Lock()
        self._wakeup = trio.Event()
        self._retry: list[MarkerJob] = []
        self._to_reload: set[int] = set()
        self._topic_ready = topic is not None
        self._spare_producer_id: int | None = None
        self._closed = False
        if topic is None:
            self.core.load_empty_partitions(range(self.partitions))
            self._to_load: list[int] = []
        else:
            for partition in range(self.partitions):
                self.core.begin_loading(partition)
            self._to_load = list(range(self.partitions))
        self.loaded = trio.Event()
        try:
            self.load_buffer = int(broker.config["transaction.state.log.load.buffer.size"])
        except KeyError:
            self.load_buffer = DEFAULT_LOAD_BUFFER

    # --- background task ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            for partition in self._to_load:
                await self._load(partition)
        finally:
            self.loaded.set()
        self._to_load = []
        while True:
            if self._to_reload:
                for partition in sorted(self._to_reload):
                    self._to_reload.discard(partition)
                    await self._load(partition)
            if self._retry:
                jobs, self._retry = self._retry, []
                async with self._lock:
                    await self._write_markers(jobs)
            now = self.broker.now_ms()
            deadline = self.core.next_deadline()
            if deadline <= now:
                async with self._lock:
                    await self._persist(self.core.tick(self.broker.now_ms()))
                continue
            self._wakeup = trio.Event()
            timeout = (deadline - now) / 1000
            if self._retry:
                timeout = min(timeout, 1.0)
            with trio.move_on_after(timeout if timeout < math.inf else 3600):
                await self._wakeup.wait()

    async def _load(self, partition: int) -> None:
        """Replay one `__transaction_state` partition, then serve it (markers of Prepare states resent)."""
        async with self._lock:
            self.core.begin_loading(partition)
            for tid in [t for t in self.core.txns if self.core.partition_for(t) == partition]:
                del self.core.txns[tid]
        partition_log = self.broker.partition_log(TRANSACTION_TOPIC, partition)
        if partition_log is not None:
            try:
                await replay_log(partition_log, self.load_buffer, self._lock, self._replay_batch)
            except LoadStalled as exc:
                log.error("no progress loading %s-%d at %d", TRANSACTION_TOPIC, partition, exc.offset)
        async with self._lock:
            await self._persist(self.core.finish_loading(partition, self.broker.now_ms()))

    def _replay_batch(self, batch: RecordBatchView, from_offset: int) -> None:
        if batch.is_control:
            return
        for record in iter_records(batch):
            if record.offset >= from_offset and record.key is not None:
                self.core.replay(record.key, record.value)

    # --- operations -------------------------------------------------------------------------------------

    async def ensure_topic(self) -> None:
        """Create `__transaction_state` (compacted, internal) if it does not exist yet."""
        if self._topic_ready:
            return
        if self.broker.metadata.topic(TRANSACTION_TOPIC) is None:
            try:
                await create_compacted_internal_topic(
                    self.broker,
                    TRANSACTION_TOPIC,
                    self.partitions,
                    self.broker.config["transaction.state.log.segment.bytes"],
                )
            except KafkaError as exc:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc
        topic = self.broker.metadata.topic(TRANSACTION_TOPIC)
        if topic is not None and topic.partitions != self.partitions:
            async with self._lock:  # created by someone else first: nothing written yet, use its count
                self.partitions = topic.partitions
                self.core.config.num_partitions = topic.partitions
                self.core.load_empty_partitions(range(topic.partitions))
        self._topic_ready = True

    async def call(self, op: Callable[[int], TxnOutcome], *, may_write: bool = True) -> Any:
        """Run `op(now_ms)` on the core, persist its records, write its markers; return its response.
        Raises KafkaError(COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR) when the coordinator cannot serve."""
        if self._closed:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, "the broker is shutting down")
        if may_write:
            await self.ensure_topic()
        async with self._lock:
            outcome = op(self.broker.now_ms())
            await self._persist(outcome, raise_on_failure=True)
        return outcome.response

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

    # --- persistence and markers -------------------------------------------------------------------------

    async def _persist(self, outcome: TxnOutcome, *, raise_on_failure: bool = False) -> None:
        """Append the records, then write the markers. Called with the lock held."""
        failed = self._append(outcome.records)
        if failed:
            self._to_reload |= failed
            self._wakeup.set()
            if raise_on_failure:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"could not write {TRANSACTION_TOPIC}")
            return
        if outcome.markers:
            await self._write_markers(outcome.markers)

    async def _write_markers(self, jobs: list[MarkerJob]) -> None:
        for job in jobs:
            failed = await self.markers.write(job)
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
                self._wakeup.set()
                continue
            done = self.core.markers_written(job, self.broker.now_ms())
            if self._append(done.records):
                log.error("could not record the completion of %s", job.transactional_id)

    def _append(self, records: list[tuple[int, bytes, bytes | None]]) -> set[int]:
        if not records:
            return set()
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for partition, key, value in records:
            by_partition.setdefault(partition, []).append((key, value))
        failed: set[int] = set()
        now = self.broker.now_ms()
        for partition, items in by_partition.items():
            partition_log = self.broker.partition_log(TRANSACTION_TOPIC, partition)
            if partition_log is None:
                failed.add(partition)
                continue
            batch = bytearray(build_batch([(k, v, (), now) for k, v in items], base_timestamp=now))
            try:
                partition_log.append_as_leader(batch, LEADER_EPOCH, now, check_producers=False)
            except KafkaError as exc:
                log.error("append to %s-%d failed: %s", TRANSACTION_TOPIC, partition, exc)
                failed.add(partition)
                continue
            partition_log.update_high_watermark(partition_log.log_end_offset)
            self.broker.watchers.notify(TRANSACTION_TOPIC, partition)
        return failed


def runtime_of(broker: BrokerState) -> TransactionRuntime | None:
    return getattr(broker, "transactions", None)


def version_error(code: int, api_version: int, fenced_since: int) -> int:
    """PRODUCER_FENCED for request versions that know it (KIP-588), INVALID_PRODUCER_EPOCH before."""
    if code == ErrorCode.PRODUCER_FENCED and api_version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
