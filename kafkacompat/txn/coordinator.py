"""The transaction coordinator as a synchronous, event-sourced state machine (no I/O, no clock).

Theory of operation
-------------------
`TransactionCoordinatorCore` owns the `TransactionMetadata` of every transactional id whose
`__transaction_state` partition this broker coordinates. Each operation takes `now_ms` and returns a
`TxnOutcome` (an `Outcome`, coordinator/api.py): the answer, the records to append to
`__transaction_state` (value None is a tombstone) and the transaction markers to write (`MarkerJob`:
producer id and epoch, commit or abort, the partitions). The runtime appends the records first, then
hands the jobs to its marker writer and, once a job's markers are all in the partition logs, calls
`markers_written()`, which moves the transaction from PrepareCommit/PrepareAbort to
CompleteCommit/CompleteAbort (one more record).

States and transitions follow Kafka's TransactionCoordinator / TransactionMetadata:

    Empty / CompleteCommit / CompleteAbort --AddPartitions--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
    Ongoing --EndTxn(abort), timeout, fencing InitProducerId--> PrepareAbort --markers--> CompleteAbort
    Empty / Complete* --expired (transactional.id.expiration.ms)--> Dead (tombstone, forgotten)

InitProducerId on an id with an Ongoing transaction fences it: the epoch is bumped (Kafka's
PrepareEpochFence, never persisted on its own), the transaction aborted with the bumped epoch, and the
caller told CONCURRENT_TRANSACTIONS (it retries and then gets the next epoch). Otherwise it bumps the
epoch (a fresh producer id when the epoch is exhausted), validating a KIP-360 expected producer id and
epoch as Kafka does (a retry of the previous bump gets the same answer). A transaction Ongoing for
longer than its timeout is aborted the same fencing way by `tick()`. While markers are pending
(Prepare* states) AddPartitions, AddOffsets, InitProducerId and a repeated EndTxn get
CONCURRENT_TRANSACTIONS.

`PRODUCER_FENCED` is returned for a stale epoch; handlers map it to INVALID_PRODUCER_EPOCH for request
versions older than KIP-588's. A partition of `__transaction_state` being replayed answers
COORDINATOR_LOAD_IN_PROGRESS. The coordinator epoch written into markers is the leader epoch of the
transactional id's state partition when this coordinator loaded it (0 on a single node), so a partition
refuses the markers of a deposed coordinator (TRANSACTION_COORDINATOR_FENCED). In cluster mode the
runtime loads a partition when this broker becomes its leader and `unload_partition()` forgets it
when leadership moves away (NOT_COORDINATOR from then on).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kafkacompat.coordinator.api import CoordinatorRecord, Outcome
from kafkacompat.txn import records as rec
from kafkacompat.wire.errors import DecodeError, ErrorCode
from kafkacompat.wire.records import RecordBatchView, iter_records

__all__ = [
    "MarkerJob",
    "TransactionCoordinatorCore",
    "TransactionMetadata",
    "TxnConfig",
    "TxnOutcome",
    "TxnState",
]

E = ErrorCode
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767
TopicPartition = tuple[str, int]


class TxnState(IntEnum):
    """Kafka's TransactionState ids (the status byte of TransactionLogValue)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name ListTransactions/DescribeTransactions report (Kafka's TransactionState.name)."""
        return _NAMES[self]


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATE_BY_NAME = {name: state for state, name in _NAMES.items()}
_PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)
_IDLE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(slots=True)
class TxnConfig:
    num_partitions: int = 50
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    abort_check_interval_ms: int = 10_000
    expire_check_interval_ms: int = 3_600_000

    @classmethod
    def from_properties(cls, props: Any) -> TxnConfig:
        def get(name: str, default: int) -> int:
            try:
                return int(props[name])
            except KeyError:
                return default

        return cls(
            num_partitions=get("transaction.state.log.num.partitions", 50),
            max_timeout_ms=get("transaction.max.timeout.ms", 900_000),
            id_expiration_ms=get("transactional.id.expiration.ms", 604_800_000),
            abort_check_interval_ms=get(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms", 10_000
            ),
            expire_check_interval_ms=get(
                "transaction.remove.expired.transaction.cleanup.interval.ms", 3_600_000
            ),
        )


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id: its producer id/epoch, state and the partitions of its transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    def to_value(self) -> rec.TxnLogValue:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in self.partitions:
            by_topic.setdefault(topic, []).append(partition)
        return rec.TxnLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            int(self.state),
            by_topic,
            self.last_update_ms,
            self.start_ms,
        )


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Markers to write: one control batch per partition, with this producer id, epoch and outcome."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]


@dataclass(slots=True)
class TxnOutcome(Outcome[Any]):
    """An outcome (coordinator/api.py) with the marker jobs to start once its records are committed."""

    markers: list[MarkerJob] = field(default_factory=list)


@dataclass(slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(slots=True)
class TxnDescription:
    transactional_id: str
    error: ErrorCode
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: list[TopicPartition] = field(default_factory=list)


class TransactionCoordinatorCore:
    """Every transactional id of the owned `__transaction_state` partitions; the only mutator of them.
    Not thread-safe: the runtime calls it from one task at a time."""

    def __init__(self, config: TxnConfig | None = None, coordinator_epoch: int = 0) -> None:
        self.config = config or TxnConfig()
        #: the coordinator epoch of partitions loaded without one of their own (a single node: 0)
        self.coordinator_epoch = coordinator_epoch
        #: state partition -> the coordinator epoch its markers carry (its leader epoch at load)
        self.coordinator_epochs: dict[int, int] = {}
        self.txns: dict[str, TransactionMetadata] = {}
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        self.skipped_records = 0
        self._records: list[CoordinatorRecord] = []
        self._markers: list[MarkerJob] = []
        self._next_abort_check = 0
        self._next_expire_check = 0

    # --- ownership and replay ---------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return rec.partition_for(transactional_id, self.config.num_partitions)

    def begin_loading(self, partition: int, epoch: int | None = None) -> None:
        """Load `partition`; `epoch` (its leader epoch) is the coordinator epoch its markers carry."""
        self.owned_partitions.add(partition)
        self.loading_partitions.add(partition)
        if epoch is not None:
            self.coordinator_epochs[partition] = epoch

    def set_epoch(self, partition: int, epoch: int) -> None:
        """Still the leader, with a newer leader epoch: markers carry the newer coordinator epoch."""
        self.coordinator_epochs[partition] = epoch

    def unload_partition(self, partition: int, now_ms: int = 0) -> TxnOutcome:
        """Another broker coordinates `partition` now: forget its transactional ids (NOT_COORDINATOR)."""
        self.owned_partitions.discard(partition)
        self.loading_partitions.discard(partition)
        self.coordinator_epochs.pop(partition, None)
        for tid in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[tid]
        return TxnOutcome()

    def replay_batch(self, partition: int, batch: RecordBatchView, from_offset: int) -> int:
        """Apply the records of one `__transaction_state` batch at or past `from_offset` (its control
        batches carry nothing of the coordinator's); returns how many were applied."""
        if batch.is_control:
            return 0
        replayed = 0
        for record in iter_records(batch):
            if record.offset >= from_offset and record.key is not None:
                self.replay(record.key, record.value)
                replayed += 1
        return replayed

    def replay(self, key: bytes | memoryview, value: bytes | memoryview | None) -> None:
        """Apply one `__transaction_state` record; undecodable records are counted and skipped."""
        try:
            tid = rec.decode_key(key)
            if value is None:
                self.txns.pop(tid, None)
                return
            v = rec.decode_value(value)
            state = TxnState(v.status)
        except (DecodeError, ValueError):
            self.skipped_records += 1
            return
        self.txns[tid] = TransactionMetadata(
            tid,
            v.producer_id,
            v.producer_epoch,
            v.timeout_ms,
            state,
            {(t, p) for t, ids in v.partitions.items() for p in ids},
            v.start_ms,
            v.last_update_ms,
        )

    def finish_loading(self, partition: int, now_ms: int) -> TxnOutcome:
        """Serve the partition; transactions replayed in a Prepare state get their markers (again)."""
        self.loading_partitions.discard(partition)
        for meta in self.txns.values():
            if self.partition_for(meta.transactional_id) != partition:
                continue
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._markers.append(self._job(meta, meta.state == TxnState.PREPARE_COMMIT))
        return self._finish(None)

    def load_empty_partitions(self, partitions: Iterable[int], now_ms: int = 0) -> None:
        for p in partitions:
            self.owned_partitions.add(p)

    # --- helpers ------------------------------------------------------------------------------------

    def _finish(self, response: Any) -> TxnOutcome:
        outcome = TxnOutcome(response, records=self._records, markers=self._markers)
        self._records, self._markers = [], []
        return outcome

    def _persist(self, meta: TransactionMetadata) -> None:
        self._records.append(
            CoordinatorRecord(
                self.partition_for(meta.transactional_id),
                rec.encode_key(meta.transactional_id),
                rec.encode_value(meta.to_value()),
            )
        )

    def _job(self, meta: TransactionMetadata, commit: bool) -> MarkerJob:
        return MarkerJob(
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            self.coordinator_epochs.get(self.partition_for(meta.transactional_id), self.coordinator_epoch),
            commit,
            tuple(sorted(meta.partitions)),
        )

    def _availability(self, transactional_id: str | None) -> ErrorCode | None:
        if not transactional_id:
            return E.INVALID_REQUEST
        partition = self.partition_for(transactional_id)
        if partition in self.loading_partitions:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned_partitions:
            return E.NOT_COORDINATOR
        return None

    def _prepare_end(self, meta: TransactionMetadata, commit: bool, now_ms: int) -> None:
        meta.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        meta.last_update_ms = now_ms
        self._persist(meta)
        self._markers.append(self._job(meta, commit))

    def _fence_and_abort(self, meta: TransactionMetadata, now_ms: int) -> None:
        """Kafka's prepareFenceProducerEpoch + abort: the zombie's epoch is no longer accepted anywhere.
        The previous epoch is forgotten too, so no KIP-360 InitProducerId of the fenced epoch passes as a
        retry (Kafka answers it PRODUCER_FENCED)."""
        if meta.producer_epoch < MAX_EPOCH:
            meta.producer_epoch += 1
        meta.last_producer_epoch = NO_PRODUCER_EPOCH
        self._prepare_end(meta, False, now_ms)

    def _check_producer(
        self, meta: TransactionMetadata | None, producer_id: int, producer_epoch: int
    ) -> ErrorCode | None:
        if meta is None or meta.state == TxnState.DEAD or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return E.PRODUCER_FENCED
        return None

    def _producer_txn(self, tid: str, producer_id: int, epoch: int) -> TransactionMetadata | ErrorCode:
        """The transaction of `tid` when this coordinator serves it and it is this producer's at this
        epoch; otherwise the error to answer."""
        error = self._availability(tid)
        if error is not None:
            return error
        meta = self.txns.get(tid)
        error = self._check_producer(meta, producer_id, epoch)
        if error is not None:
            return error
        assert meta is not None
        return meta

    # --- InitProducerId -----------------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int,
        expected_epoch: int,
        now_ms: int,
        allocate_producer_id: Callable[[], int],
    ) -> TxnOutcome:
        return self._finish(
            self._init(
                transactional_id,
                timeout_ms,
                expected_producer_id,
                expected_epoch,
                now_ms,
                allocate_producer_id,
            )
        )

    def _init(
        self,
        tid: str,
        timeout_ms: int,
        expected_pid: int,
        expected_epoch: int,
        now_ms: int,
        allocate: Callable[[], int],
    ) -> InitResult:
        error = self._availability(tid)
        if error is not None:
            return InitResult(error)
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return InitResult(E.INVALID_TRANSACTION_TIMEOUT)
        meta = self.txns.get(tid)
        if meta is None or meta.state == TxnState.DEAD:
            meta = TransactionMetadata(tid, allocate(), NO_PRODUCER_EPOCH, timeout_ms)
            self.txns[tid] = meta
        if meta.state in _PREPARING:
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        if expected_pid != NO_PRODUCER_ID and not (
            meta.producer_epoch == NO_PRODUCER_EPOCH
            or expected_pid == meta.producer_id
            or (expected_pid == meta.last_producer_id and expected_epoch >= MAX_EPOCH - 1)
        ):
            return InitResult(E.PRODUCER_FENCED)
        if meta.state == TxnState.ONGOING:
            self._fence_and_abort(meta, now_ms)
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        # Empty, CompleteCommit or CompleteAbort: bump the epoch
        if expected_pid != NO_PRODUCER_ID and meta.producer_epoch != NO_PRODUCER_EPOCH:
            if expected_pid == meta.producer_id and expected_epoch == meta.producer_epoch:
                pass  # the normal KIP-360 bump below
            elif (expected_pid, expected_epoch) == (meta.last_producer_id, meta.last_producer_epoch) or (
                expected_pid == meta.producer_id and expected_epoch == meta.last_producer_epoch
            ):
                return InitResult(E.NONE, meta.producer_id, meta.producer_epoch)  # retry of our last answer
            else:
                return InitResult(E.PRODUCER_FENCED)
        previous = (meta.producer_id, meta.producer_epoch)
        if meta.producer_epoch >= MAX_EPOCH - 1:
            meta.producer_id, meta.producer_epoch = allocate(), 0
        else:
            meta.producer_epoch += 1
        meta.last_producer_id, meta.last_producer_epoch = previous
        meta.timeout_ms = timeout_ms
        meta.state = TxnState.EMPTY
        meta.partitions = set()
        meta.start_ms = -1
        meta.last_update_ms = now_ms
        self._persist(meta)
        return InitResult(E.NONE, meta.producer_id, meta.producer_epoch)

    # --- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> TxnOutcome:
        """Answer: one ErrorCode for the whole request (NONE or the reason every partition failed)."""
        return self._finish(self._add(transactional_id, producer_id, producer_epoch, set(partitions), now_ms))

    def _add(
        self, tid: str, producer_id: int, epoch: int, partitions: set[TopicPartition], now_ms: int
    ) -> ErrorCode:
        meta = self._producer_txn(tid, producer_id, epoch)
        if isinstance(meta, ErrorCode):
            return meta
        if meta.state in _PREPARING:
            return E.CONCURRENT_TRANSACTIONS
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
            return E.NONE
        if meta.state in _IDLE:
            meta.state = TxnState.ONGOING
            meta.start_ms = now_ms
            meta.partitions = set()
        meta.partitions |= partitions
        meta.last_update_ms = now_ms
        self._persist(meta)
        return E.NONE

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 verification (AddPartitionsToTxn v4+ verify_only, and the produce path): which
        partitions are in the ongoing transaction of this producer. Changes nothing."""
        wanted = list(partitions)
        meta = self._producer_txn(transactional_id, producer_id, producer_epoch)
        if isinstance(meta, ErrorCode):
            return {tp: meta for tp in wanted}
        return {
            tp: E.NONE if meta.state == TxnState.ONGOING and tp in meta.partitions else E.INVALID_TXN_STATE
            for tp in wanted
        }

    def producer_in_transaction(self, producer_id: int, producer_epoch: int, tp: TopicPartition) -> ErrorCode:
        """The produce path's verification when only the producer id is known (records carry no
        transactional id): NONE when some transactional id has this producer's ongoing transaction
        with `tp` in it."""
        for meta in self.txns.values():
            if meta.producer_id != producer_id:
                continue
            if producer_epoch < meta.producer_epoch:
                return E.INVALID_PRODUCER_EPOCH
            if (
                meta.state == TxnState.ONGOING
                and tp in meta.partitions
                and producer_epoch == meta.producer_epoch
            ):
                return E.NONE
            return E.INVALID_TXN_STATE
        return E.INVALID_TXN_STATE

    # --- EndTxn -------------------------------------------------------------------------------------

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
    ) -> TxnOutcome:
        return self._finish(self._end(transactional_id, producer_id, producer_epoch, commit, now_ms))

    def _end(self, tid: str, producer_id: int, epoch: int, commit: bool, now_ms: int) -> ErrorCode:
        meta = self._producer_txn(tid, producer_id, epoch)
        if isinstance(meta, ErrorCode):
            return meta
        state = meta.state
        if state == TxnState.ONGOING:
            self._prepare_end(meta, commit, now_ms)
            return E.NONE
        if state == TxnState.COMPLETE_COMMIT:
            return E.NONE if commit else E.INVALID_TXN_STATE
        if state == TxnState.COMPLETE_ABORT:
            return E.INVALID_TXN_STATE if commit else E.NONE
        if state == TxnState.PREPARE_COMMIT:
            return E.CONCURRENT_TRANSACTIONS if commit else E.INVALID_TXN_STATE
        if state == TxnState.PREPARE_ABORT:
            return E.INVALID_TXN_STATE if commit else E.CONCURRENT_TRANSACTIONS
        return E.INVALID_TXN_STATE  # Empty (nothing to end), PrepareEpochFence

    def markers_written(self, job: MarkerJob, now_ms: int) -> TxnOutcome:
        """All markers of `job` are in their partition logs: complete the transaction."""
        meta = self.txns.get(job.transactional_id)
        want = TxnState.PREPARE_COMMIT if job.commit else TxnState.PREPARE_ABORT
        if (
            meta is not None
            and meta.state == want
            and meta.producer_id == job.producer_id
            and meta.producer_epoch == job.producer_epoch
        ):
            meta.state = TxnState.COMPLETE_COMMIT if job.commit else TxnState.COMPLETE_ABORT
            meta.partitions = set()
            meta.last_update_ms = now_ms
            self._persist(meta)
        return self._finish(None)

    # --- timers -------------------------------------------------------------------------------------

    def next_deadline(self) -> int:
        return min(self._next_abort_check, self._next_expire_check)

    def tick(self, now_ms: int) -> TxnOutcome:
        """Abort transactions past their timeout; forget transactional ids idle past their expiration."""
        if now_ms >= self._next_abort_check:
            self._next_abort_check = now_ms + self.config.abort_check_interval_ms
            for meta in list(self.txns.values()):
                partition = self.partition_for(meta.transactional_id)
                if partition in self.loading_partitions or partition not in self.owned_partitions:
                    continue
                if meta.state == TxnState.ONGOING and meta.start_ms + meta.timeout_ms < now_ms:
                    self._fence_and_abort(meta, now_ms)
        if now_ms >= self._next_expire_check:
            self._next_expire_check = now_ms + self.config.expire_check_interval_ms
            for tid, meta in list(self.txns.items()):
                partition = self.partition_for(tid)
                if partition in self.loading_partitions or partition not in self.owned_partitions:
                    continue
                if meta.state in _IDLE and meta.last_update_ms + self.config.id_expiration_ms < now_ms:
                    del self.txns[tid]
                    self._records.append(CoordinatorRecord(partition, rec.encode_key(tid), None))
        return self._finish(None)

    # --- admin ----------------------------------------------------------------------------------------

    def list_transactions(
        self, state_filters: list[str], producer_id_filters: list[int], duration_filter_ms: int, now_ms: int
    ) -> TxnOutcome:
        """Answer: (unknown state filters, [(transactional id, producer id, state name)])."""
        unknown = [s for s in state_filters if s not in STATE_BY_NAME]
        states = {STATE_BY_NAME[s] for s in state_filters if s in STATE_BY_NAME}
        pids = set(producer_id_filters)
        listed = []
        for tid, meta in sorted(self.txns.items()):
            partition = self.partition_for(tid)
            if partition in self.loading_partitions or partition not in self.owned_partitions:
                continue
            if states and meta.state not in states:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if duration_filter_ms >= 0 and (meta.start_ms < 0 or now_ms - meta.start_ms < duration_filter_ms):
                continue
            listed.append((tid, meta.producer_id, meta.state.kafka_name))
        return self._finish((unknown, listed))

    def describe_transactions(self, transactional_ids: list[str]) -> TxnOutcome:
        out = []
        for tid in transactional_ids:
            error = self._availability(tid)
            meta = self.txns.get(tid)
            if error is None and (meta is None or meta.state == TxnState.DEAD):
                error = E.TRANSACTIONAL_ID_NOT_FOUND
            if error is not None:
                out.append(TxnDescription(tid, error))
                continue
            assert meta is not None
            out.append(
                TxnDescription(
                    tid,
                    E.NONE,
                    meta.state.kafka_name,
                    meta.timeout_ms,
                    meta.start_ms,
                    meta.producer_id,
                    meta.producer_epoch,
                    sorted(meta.partitions),
                )
            )
        return self._finish(out)
