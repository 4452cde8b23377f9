"""The transaction coordinator on the coordinator runtime: `__transaction_state`, markers, verification.

Theory of operation
-------------------
`TransactionRuntime` is the `CoordinatorRuntime` (coordinator_runtime.py: per-partition serialisation,
writes through the partition writer with acks=all, loading on leadership, timers) driving one
`kafkacompat.txn.coordinator.TransactionCoordinatorCore`; handlers call `call()` with the
transactional id as `key`. Records not in the ISR within `WRITE_TIMEOUT_SECONDS` (Kafka's coordinator
request timeout) fail the operation. What is the transaction coordinator's own:

Markers. A committed outcome's marker jobs (EndTxn's, a timed-out transaction's, those of a
partition loaded in a Prepare state) go to the marker task. So EndTxn is answered once its
PrepareCommit/PrepareAbort record is committed, as in Kafka; the markers follow asynchronously, and
until every marker of the job is written the transaction stays in its Prepare state, where the
producer's next InitProducerId, AddPartitionsToTxn or AddOffsetsToTxn gets CONCURRENT_TRANSACTIONS
(clients retry it). The marker task (`_marker_loop`) writes each job through `MarkerWriter`: markers
for partitions this broker leads are appended here (for `__consumer_offsets` through the group runtime,
which settles the transaction's pending offsets), the others are sent with WriteTxnMarkers to their
leaders over the inter-broker channels. Every marker is written with acks=all. Once all markers of a
job are written, `core.markers_written(job)` completes the transaction (CompleteCommit/CompleteAbort
record). Partitions whose marker failed for a retriable reason (NOT_LEADER_OR_FOLLOWER after a leader
change, a leader not known yet, a connection failure) are tried again after `RETRY_BACKOFF`, once the
cluster view has been refreshed. A partition that is unloaded drops its pending jobs (its next
coordinator sends them, having replayed the Prepare state).

The topic: compacted, `transaction.state.log.num.partitions` partitions,
`transaction.state.log.segment.bytes`, created on first use (FindCoordinator for a transactional id,
InitProducerId); in a cluster with `transaction.state.log.replication.factor` replicas (refused, as in
Kafka, while fewer brokers are live: COORDINATOR_NOT_AVAILABLE) and `min.insync.replicas` =
`transaction.state.log.min.isr`. The coordinator of a transactional id is the leader of its state
partition, and the partition's leader epoch is the coordinator epoch its markers carry.

Produce-path verification (KIP-890): a partition leader that is not the transaction's coordinator asks
the coordinator with AddPartitionsToTxn v4 `verify_only` (`verify_in_transaction`); so does the group
coordinator for TxnOffsetCommit.

Timers: the core's abort check (`transaction.abort.timed.out.transaction.cleanup.interval.ms`) and
expiry check (`transaction.remove.expired.transaction.cleanup.interval.ms`).

Owned by `BrokerState.transactions` (set by the server).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.broker.coordinator_log import append_txn_marker, create_compacted_internal_topic
from kafkacompat.broker.coordinator_runtime import CoordinatorRuntime
from kafkacompat.broker.inter_broker_channels import InterBrokerChannels
from kafkacompat.coordinator.api import Outcome
from kafkacompat.txn.coordinator import MarkerJob, TransactionCoordinatorCore, TxnConfig, TxnOutcome
from kafkacompat.wire._generated.add_partitions_to_txn_request import AddPartitionsToTxnRequest
from kafkacompat.wire._generated.write_txn_markers_request import WriteTxnMarkersRequest
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

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
        remote: dict[int, list[tuple[str, int]]] = {}
        failed: list[tuple[str, int]] = []
        for topic, partition in job.partitions:
            info = self.broker.metadata.topic(topic)
            if info is None or partition >= info.partitions:
                # Kafka drops the markers of deleted partitions too
                log.warning("dropping %s marker for deleted %s-%d", job.transactional_id, topic, partition)
                continue
            leader = self.broker.replicas.leader_of(topic, partition)
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
        cls = WriteTxnMarkersRequest
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


class TransactionRuntime(CoordinatorRuntime[TransactionCoordinatorCore]):
    """The transaction coordinator: its core on the coordinator runtime, plus its marker task."""

    def __init__(self, broker: BrokerState) -> None:
        self.config = TxnConfig.from_properties(broker.config)
        super().__init__(
            broker,
            TRANSACTION_TOPIC,
            configured_partitions=self.config.num_partitions,
            log=log,
            load_buffer_option="transaction.state.log.load.buffer.size",
            what="coordinator records",
        )
        self.markers = MarkerWriter(broker)
        self.verifiers = InterBrokerChannels(broker, "txn-verify")
        self._marker_wakeup = trio.Event()
        self._pending: list[MarkerJob] = []
        self._retry: list[MarkerJob] = []
        self._spare_producer_id: int | None = None

    def _core_for(self, partitions: int) -> TransactionCoordinatorCore:
        self.config.num_partitions = partitions
        return TransactionCoordinatorCore(self.config)

    def write_timeout(self) -> float:
        return WRITE_TIMEOUT_SECONDS

    async def _create_topic(self) -> None:
        config = self.broker.config
        replication_factor = 1
        extra: dict[str, str] = {}
        if self.follows_leadership:
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
        await create_compacted_internal_topic(
            self.broker,
            TRANSACTION_TOPIC,
            self.partitions,
            config["transaction.state.log.segment.bytes"],
            replication_factor=replication_factor,
            extra_configs=extra,
        )

    def _committed(self, outcome: Outcome[Any]) -> None:
        if isinstance(outcome, TxnOutcome) and outcome.markers:
            self._pending.extend(outcome.markers)
            self._marker_wakeup.set()

    def _unloaded(self, partition: int) -> None:
        """The partition's pending markers are dropped: its next coordinator sends them."""

        def mine(job: MarkerJob) -> bool:
            return self.core.partition_for(job.transactional_id) == partition

        self._pending = [j for j in self._pending if not mine(j)]
        self._retry = [j for j in self._retry if not mine(j)]

    # --- background tasks -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._marker_loop)
            try:
                await super().run(task_status=task_status)
            finally:
                self.markers.close()
                self.verifiers.close()

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
                try:
                    await self.call(
                        lambda now, job=job: (  # type: ignore[misc]
                            self.core.markers_written(job, now) if self._current(job) else TxnOutcome()
                        ),
                        key=job.transactional_id,
                        may_write=False,
                    )
                except KafkaError as exc:
                    log.error("could not record the completion of %s: %s", job.transactional_id, exc)

    def _current(self, job: MarkerJob) -> bool:
        """Whether this coordinator still owns the job's transactional id with the job's coordinator epoch."""
        partition = self.core.partition_for(job.transactional_id)
        if partition not in self.core.owned_partitions or partition in self.core.loading_partitions:
            return False
        epoch = self.core.coordinator_epochs.get(partition, self.core.coordinator_epoch)
        return epoch == job.coordinator_epoch

    def coordinator_of(self, transactional_id: str) -> int:
        """The broker coordinating `transactional_id`: the leader of its state partition (-1: none)."""
        return self.broker.replicas.leader_of(TRANSACTION_TOPIC, self.core.partition_for(transactional_id))

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
        if transactional_id is None or not self.follows_leadership:
            return self.core.producer_in_transaction(producer_id, producer_epoch, tp)
        partition = self.core.partition_for(transactional_id)
        code: int
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
        coordinator = self.coordinator_of(transactional_id)
        if coordinator < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        cls = AddPartitionsToTxnRequest

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


def runtime_of(broker: BrokerState) -> TransactionRuntime | None:
    return broker.transactions


def version_error(code: int, api_version: int, fenced_since: int) -> int:
    """PRODUCER_FENCED for request versions that know it (KIP-588), INVALID_PRODUCER_EPOCH before."""
    if code == ErrorCode.PRODUCER_FENCED and api_version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
