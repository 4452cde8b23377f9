"""The trio edge of the classic group coordinator: serialization, persistence, parked replies, timers.

Theory of operation
-------------------
`GroupRuntime` owns one `kafkacompat.groups.GroupCoordinatorCore` (synchronous, sans-io) and is the
only code that calls it. Every operation goes through `call(op)`:

1. under one trio lock, read the broker clock and run `op(now_ms)` on the core -> `Outcome`;
2. append `outcome.records` to `__consumer_offsets`: one batch per partition per operation, built
   with `wire.records.build_batch` and written as the partition's leader through the replica manager
   (`BrokerState.replicas`, as any produce: offsets, indexes, the high watermark, fetchers woken),
   then, acks=all, waited for until the ISR holds them (at once on a single node);
3. deliver `outcome.completions` to the requests parked earlier (each parked JoinGroup/SyncGroup
   waits on a `_Waiter`, a trio.Event plus its answer);
4. answer: the response, or (for `Parked(token)`) register a waiter before the lock is released and
   wait for it outside the lock.

So no response or completion leaves before the records it depends on are in the log, as in Kafka.
If the append fails, the request and every completion of that outcome get a KafkaError, which handlers
turn into its error code: UNKNOWN_SERVER_ERROR when the records were too large for the log (as Kafka's
coordinator answers), COORDINATOR_NOT_AVAILABLE for anything else (a storage error); the
affected partition is unloaded from the core (its other parked requests answer NOT_COORDINATOR), since
the core's state ran ahead of the log, and the timer task then loads it again from the log, so the
state goes back to what was persisted (a partition whose log cannot be read stays unloaded). Clients
rediscover the coordinator and rejoin. In cluster mode records the ISR did not get within
offsets.commit.timeout.ms fail the same way (NOT_COORDINATOR when the leadership moved meanwhile), and
only a partition this broker still leads is loaded again.

Time: the core's timers are deadlines in broker-clock milliseconds (`BrokerState.now_ms()`). The timer
task sleeps until `core.next_deadline()` and calls `core.tick(now_ms)`; an operation that schedules an
earlier deadline wakes it early.

Start-up (`__init__` + `run`): if `__consumer_offsets` exists, every partition is marked loading at once
(groups there answer COORDINATOR_LOAD_IN_PROGRESS), then `run()` replays each partition's records
(`iter_batches` / `iter_records` over the log's read path, batch by batch, yielding to other tasks in
between) and finishes it. If the topic does not exist yet, nothing is read: all partitions are empty,
and the topic is created (compacted, `offsets.topic.num.partitions` partitions) on the first operation
that may write — FindCoordinator for a group, or any membership/offset operation — as Kafka creates it
on first use. When the topic exists, its real partition count decides `partition_for`, as in Kafka.

Shutdown (`shutdown()`, called by the server when it stops accepting): parked requests answer
NOT_COORDINATOR at once and new operations are refused, so draining connections never wait out a
rebalance.

Owned by `BrokerState.groups` (set by the server); handlers call `call()`, `ensure_offsets_topic()`
and read `loaded`; nothing else touches the core.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from kafkacompat.broker.coordinator_log import (
    append_txn_marker,
    create_compacted_internal_topic,
    replay_log,
    wait_for_coordinator_writes,
)
from kafkacompat.broker.lock_wait import holding
from kafkacompat.groups.api import Outcome, Parked
from kafkacompat.groups.manager import GroupConfig, GroupCoordinatorCore
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import (
    COMMIT_MARKER,
    InvalidRecordBatch,
    RecordBatchView,
    build_batch,
    iter_records,
    parse_control_record_key,
)

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState

__all__ = ["OFFSETS_TOPIC", "GroupRuntime", "group_config"]

log = logging.getLogger("kafkacompat.groups")
# errors of a group write that no retry can cure (see _persist_and_deliver)
_TOO_LARGE = frozenset(
    {ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE}
)

OFFSETS_TOPIC = "__consumer_offsets"
#: a batch of more records than this is built and written in task steps of their own (see _append)
_RECORDS_IN_ONE_STEP = 100
# How much of a __consumer_offsets partition one load step reads (Kafka: offsets.load.buffer.size).
DEFAULT_LOAD_BUFFER = 5 * 1024 * 1024

T = TypeVar("T")


def group_config(broker: BrokerState, partitions: int | None = None) -> GroupConfig:
    """The core's config from the broker's (Kafka names); `partitions` overrides the partition count."""
    props: dict[str, Any] = {}
    for name in GroupConfig._NAMES:
        try:
            props[name] = broker.config[name]
        except KeyError:
            continue
    if partitions is not None:
        props["offsets.topic.num.partitions"] = partitions
    return GroupConfig.from_properties(props)


class _Waiter:
    """A parked request: set once with its response (or the KafkaError to raise)."""

    __slots__ = ("event", "value")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.value: Any = None

    def complete(self, value: Any) -> None:
        if not self.event.is_set():
            self.value = value
            self.event.set()


class GroupRuntime:
    """Serializes every coordinator operation, persists its records, answers parked requests."""

    def __init__(self, broker: BrokerState) -> None:
        self.broker = broker
        topic = broker.metadata.topic(OFFSETS_TOPIC)
        count = topic.partitions if topic is not None else None
        self.core = GroupCoordinatorCore(group_config(broker, count))
        self.partitions = self.core.config.offsets_topic_num_partitions
        self._lock = trio.Lock()
        self._waiters: dict[int, _Waiter] = {}
        self._wakeup = trio.Event()
        self._sleeping_until: float = math.inf
        self._to_load: list[int] = []
        self._to_reload: set[int] = set()
        self._topic_ready = topic is not None
        self._closed = False
        now = broker.now_ms()
        if broker.cluster is not None:
            # cluster mode: a partition is loaded when this broker becomes its leader and unloaded when
            # it stops leading (the replica manager tells set_offsets_leadership)
            broker.replicas.add_leadership_listener(
                OFFSETS_TOPIC, lambda partition, leads, _epoch: self.set_offsets_leadership(partition, leads)
            )
        elif topic is None:
            self.core.load_empty_partitions(range(self.partitions), now)
        else:
            for partition in range(self.partitions):
                self.core.begin_loading(partition)
            self._to_load = list(range(self.partitions))
        self.loaded = trio.Event()
        if not self._to_load:
            self.loaded.set()
        try:
            self.load_buffer = int(broker.config["offsets.load.buffer.size"])
        except KeyError:
            self.load_buffer = DEFAULT_LOAD_BUFFER

    # --- the background task ----------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load __consumer_offsets, then fire timers until cancelled."""
        task_status.started()
        try:
            await self._load_all()
        finally:
            self.loaded.set()
        await self._timer_loop()

    async def _load_all(self) -> None:
        started = self.broker.now_ms()
        for partition in self._to_load:
            try:
                count = await self._load_partition(partition)
            except KafkaError as exc:
                log.error("could not load %s-%d: %s", OFFSETS_TOPIC, partition, exc)
                async with self._lock:
                    outcome = self.core.unload_partition(partition, self.broker.now_ms())
                    self._deliver(outcome.completions)
                continue
            async with self._lock:
                outcome = self.core.finish_loading(partition, self.broker.now_ms())
                await self._persist_and_deliver(outcome)
            if count:
                log.info("loaded %d record(s) of %s-%d", count, OFFSETS_TOPIC, partition)
        if self._to_load:
            log.info(
                "group coordinator loaded %d partition(s) of %s in %d ms (%d group(s))",
                len(self._to_load),
                OFFSETS_TOPIC,
                self.broker.now_ms() - started,
                len(self.core.groups),
            )
        self._to_load = []
        self._wake_timer()

    async def _load_partition(self, partition: int) -> int:
        """Replay one partition into the core, one read at a time; returns the number of records."""
        partition_log = self.broker.partition_log(OFFSETS_TOPIC, partition)
        if partition_log is None:
            return 0
        replayed = 0

        def replay_batch(batch: RecordBatchView, from_offset: int) -> None:
            nonlocal replayed
            if batch.is_control:
                # a transaction marker: pending TxnOffsetCommit offsets of that producer settle
                commit = _marker_commits(batch)
                if commit is not None and batch.producer_id >= 0:
                    self.core.replay_txn_marker(batch.producer_id, commit, partition)
                return
            producer_id = batch.producer_id if batch.is_transactional else -1
            for record in iter_records(batch):
                if record.offset < from_offset or record.key is None:
                    continue
                self.core.replay(record.key, record.value, producer_id)
                replayed += 1

        await replay_log(partition_log, self.load_buffer, self._lock, replay_batch)  # raises LoadStalled
        return replayed

    async def _timer_loop(self) -> None:
        while True:
            if self._to_reload:
                await self._reload()
            deadline = self.core.next_deadline()
            now = self.broker.now_ms()
            if deadline is not None and deadline <= now:
                async with self._lock:
                    outcome = self.core.tick(self.broker.now_ms())
                    await self._persist_and_deliver_quietly(outcome)
                continue
            self._wakeup = trio.Event()
            self._sleeping_until = math.inf if deadline is None else deadline
            timeout = math.inf if deadline is None else (deadline - now) / 1000
            with trio.move_on_after(timeout):
                await self._wakeup.wait()
            self._sleeping_until = math.inf

    async def _reload(self) -> None:
        """Load again the partitions whose append failed, so their state matches the log once more.
        A partition that cannot be read stays unloaded (its log is offline)."""
        for partition in sorted(self._to_reload):
            self._to_reload.discard(partition)
            if not self._leads(partition):
                continue  # its new leader loads it; this broker does if it leads it again
            async with self._lock:
                self.core.begin_loading(partition)
            if await self._load_or_unload(partition, "reload") is not None:
                log.info("reloaded %s-%d after a failed write", OFFSETS_TOPIC, partition)

    async def _load_or_unload(self, partition: int, verb: str) -> int | None:
        """Replay `partition` (marked loading) and serve it; returns the number of records replayed.
        A partition whose log cannot be read is unloaded instead (its groups answer NOT_COORDINATOR):
        returns None."""
        try:
            count = await self._load_partition(partition)
        except KafkaError as exc:
            log.error("could not %s %s-%d: %s", verb, OFFSETS_TOPIC, partition, exc)
            async with self._lock:
                self._deliver(self.core.unload_partition(partition, self.broker.now_ms()).completions)
            return None
        async with self._lock:
            await self._persist_and_deliver_quietly(self.core.finish_loading(partition, self.broker.now_ms()))
        return count

    def _leads(self, partition: int) -> bool:
        """Whether this broker leads `__consumer_offsets` partition `partition` (always on one node)."""
        return self.broker.replicas.is_leader(OFFSETS_TOPIC, partition)

    async def set_offsets_leadership(self, partition: int, leader: bool) -> None:
        """Cluster mode: this broker became (True) or stopped being (False) the leader of
        `__consumer_offsets` partition `partition`. Its groups are loaded from the (replicated) log, and
        answer COORDINATOR_LOAD_IN_PROGRESS meanwhile, or unloaded (NOT_COORDINATOR), as Kafka's
        coordinator follows the offsets partition's leadership."""
        if partition >= self.partitions:
            return
        if not leader:
            async with self._lock:
                if partition in self.core.owned_partitions:
                    self._deliver(self.core.unload_partition(partition, self.broker.now_ms()).completions)
                    log.info("unloaded groups of %s-%d (no longer leader)", OFFSETS_TOPIC, partition)
            return
        async with self._lock:
            if partition in self.core.owned_partitions:
                return
            self.core.begin_loading(partition)
        count = await self._load_or_unload(partition, "load")
        if count is None:
            return
        log.info("loaded %d record(s) of %s-%d as its new leader", count, OFFSETS_TOPIC, partition)
        self._topic_ready = True
        self._wake_timer()

    def _wake_timer(self) -> None:
        deadline = self.core.next_deadline()
        if deadline is not None and deadline < self._sleeping_until:
            self._wakeup.set()

    # --- operations -------------------------------------------------------------------------------

    async def ensure_offsets_topic(self) -> None:
        """Create __consumer_offsets (compacted, internal) if it does not exist yet."""
        if self._topic_ready and self.broker.metadata.topic(OFFSETS_TOPIC) is not None:
            return
        if self.broker.metadata.topic(OFFSETS_TOPIC) is None:
            await create_compacted_internal_topic(
                self.broker,
                OFFSETS_TOPIC,
                self.partitions,
                self.broker.config["offsets.topic.segment.bytes"],
                replication_factor=min(
                    self.broker.config["offsets.topic.replication.factor"],
                    self.broker.live_broker_count(),
                ),
            )
        topic = self.broker.metadata.topic(OFFSETS_TOPIC)
        if not self._topic_ready and topic is not None and topic.partitions != self.partitions:
            # Someone else created the topic first (CreateTopics, Metadata auto-creation) with another
            # partition count. Nothing was written yet (every writing operation passes here first), so
            # start over with the topic's real count, which is what partition_for must use.
            async with self._lock:
                log.warning(
                    "%s has %d partitions, not %d: the coordinator uses %d",
                    OFFSETS_TOPIC,
                    topic.partitions,
                    self.partitions,
                    topic.partitions,
                )
                self.partitions = topic.partitions
                self.core = GroupCoordinatorCore(group_config(self.broker, topic.partitions))
                if self.broker.cluster is None:
                    self.core.load_empty_partitions(range(self.partitions), self.broker.now_ms())
        self._topic_ready = True

    async def call(
        self,
        op: Callable[[int], Outcome[T]],
        *,
        may_write: bool = True,
        park: Callable[[trio.Event, float], Awaitable[None]] | None = None,
    ) -> T:
        """Run one core operation (`op(now_ms)`), persist its records, and return its response.

        A parked request returns once its completion arrives; it waits through `park` when given (the
        handler's `ctx.park`: the wait then holds no queued.max.requests slot, as Kafka's parked joins
        hold no place in its request queue, and a client that leaves meanwhile ends it). Raises
        KafkaError with the error code the handler should answer with when the coordinator cannot serve
        (storage failure, shutdown)."""
        if self._closed:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, "the broker is shutting down")
        if may_write:
            try:
                await self.ensure_offsets_topic()
            except KafkaError as exc:
                log.error("cannot create %s: %s", OFFSETS_TOPIC, exc)
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc
        waiter: _Waiter | None = None
        # a request waits for the lock without its slot, and is dropped if its client leaves meanwhile
        # (lock_wait.py): found by the fuzzer, requests of dead connections queued here held every slot
        async with holding(self._lock):
            outcome = op(self.broker.now_ms())
            failure = await self._persist_and_deliver(outcome)
            response = outcome.response
            if failure is not None:
                raise failure
            if isinstance(response, Parked):
                waiter = _Waiter()
                self._waiters[response.token] = waiter
                if self._closed:
                    waiter.complete(KafkaError(ErrorCode.NOT_COORDINATOR, "the broker is shutting down"))
        self._wake_timer()
        if waiter is None:
            return response  # type: ignore[return-value]
        assert isinstance(response, Parked)
        try:
            if park is None:
                await waiter.event.wait()
            else:
                await park(waiter.event, math.inf)
        finally:
            self._waiters.pop(response.token, None)
        if isinstance(waiter.value, KafkaError):
            raise waiter.value
        return waiter.value  # type: ignore[no-any-return]

    async def write_txn_marker(
        self, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> int | None:
        """Write a transaction marker into __consumer_offsets-`partition` and settle the producer's pending
        transactional offsets there (the transaction coordinator's marker writer calls this). Returns the
        offset at which the marker is committed (None: the partition is not here, nothing was written).
        Raises KafkaError when the marker cannot be written (the coordinator retries)."""
        required = None
        async with self._lock:
            now = self.broker.now_ms()
            partition_log = self.broker.partition_log(OFFSETS_TOPIC, partition)
            if partition_log is not None:
                required = append_txn_marker(
                    self.broker,
                    partition_log,
                    OFFSETS_TOPIC,
                    partition,
                    producer_id,
                    producer_epoch,
                    coordinator_epoch,
                    commit,
                    now,
                )
            if partition in self.core.owned_partitions:
                self._deliver(self.core.complete_txn(producer_id, commit, partition, now).completions)
        return required

    def shutdown(self) -> None:
        """Broker shutdown: answer every parked request NOT_COORDINATOR (clients find the coordinator
        again once a broker is back) and refuse new operations, so no connection waits out a rebalance."""
        self._closed = True
        error = KafkaError(ErrorCode.NOT_COORDINATOR, "the broker is shutting down")
        for waiter in list(self._waiters.values()):
            waiter.complete(error)

    async def _persist_and_deliver(self, outcome: Outcome[Any]) -> KafkaError | None:
        """Append the outcome's records, then deliver its completions. Called with the lock held.
        Returns the error to give the caller when the append failed (completions got it already)."""
        failed, required = await self._append(outcome)
        if failed:
            if all(code in _TOO_LARGE for code in failed.values()):
                # Kafka's coordinator answers a write too large for the log with UNKNOWN_SERVER_ERROR (a
                # retry would fail alike), e.g. a group whose member metadata adds up past message.max.bytes
                error = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"records too large for {OFFSETS_TOPIC}")
            else:
                error = KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"could not write to {OFFSETS_TOPIC}")
            return self._fail(outcome, set(failed), error, reload=set(failed))
        if required:
            # answered only once the ISR holds the records, for at most offsets.commit.timeout.ms
            unreplicated = await wait_for_coordinator_writes(
                self.broker,
                OFFSETS_TOPIC,
                required,
                self.broker.config["offsets.commit.timeout.ms"] / 1000,
                "group records",
                log,
            )
            if unreplicated:
                # Not in the ISR: a new leader may never have it (a commit answered as done here was
                # seen lost after a controlled shutdown moved the partition mid-commit). Kafka answers
                # NOT_COORDINATOR when the leadership moved; COORDINATOR_NOT_AVAILABLE otherwise here
                # (Kafka: REQUEST_TIMED_OUT for a commit, REBALANCE_IN_PROGRESS for a group write).
                moved = any(code == ErrorCode.NOT_LEADER_OR_FOLLOWER for code in unreplicated.values())
                code = ErrorCode.NOT_COORDINATOR if moved else ErrorCode.COORDINATOR_NOT_AVAILABLE
                error = KafkaError(code, f"{OFFSETS_TOPIC} records not replicated")
                return self._fail(outcome, set(unreplicated), error, reload=set(unreplicated))
        self._deliver(outcome.completions)
        flush = [
            p
            for p in {r.partition for r in outcome.records}
            if (pl := self.broker.partition_log(OFFSETS_TOPIC, p)) is not None
            and pl.flush_needed(self.broker.now_ms())
        ]
        for partition in flush:
            partition_log = self.broker.partition_log(OFFSETS_TOPIC, partition)
            try:
                await trio.to_thread.run_sync(partition_log.flush, self.broker.now_ms())
            except KafkaError as exc:
                log.error("flush of %s-%d failed: %s", OFFSETS_TOPIC, partition, exc)
        return None

    def _fail(
        self, outcome: Outcome[Any], partitions: set[int], error: KafkaError, reload: set[int]
    ) -> KafkaError:
        """The outcome's records are not (safely) in the log: its completions get `error`, and the
        partitions are unloaded, since the core's state ran ahead of the log."""
        for completion in outcome.completions:
            waiter = self._waiters.get(completion.token)
            if waiter is not None:
                waiter.complete(error)
        now = self.broker.now_ms()
        for partition in sorted(partitions):
            unloaded = self.core.unload_partition(partition, now)
            self._deliver(unloaded.completions)
        # Rebuild those partitions from what the log holds (the timer task does it, outside this
        # lock); until then their groups answer NOT_COORDINATOR and clients look again.
        self._to_reload |= reload
        self._wakeup.set()
        return error

    async def _persist_and_deliver_quietly(self, outcome: Outcome[Any]) -> None:
        error = await self._persist_and_deliver(outcome)
        if error is not None:
            log.error("timer outcome not persisted: %s", error)

    def _deliver(self, completions: list[Any]) -> None:
        for completion in completions:
            waiter = self._waiters.get(completion.token)
            if waiter is not None:
                waiter.complete(completion.response)

    async def _append(self, outcome: Outcome[Any]) -> tuple[dict[int, ErrorCode], dict[int, int]]:
        """Write the records, one batch per partition: (the partitions whose write failed and why, the
        offset each written partition is committed at).

        A batch of many records (an OffsetCommit of 1,000 partitions) is built and written in task steps
        of their own, after the core's: the loop is given back between them (fairness.py), shielded,
        since once the core has moved its records must be written; the lock is held throughout."""
        failed: dict[int, ErrorCode] = {}
        required: dict[int, int] = {}
        if not outcome.records:
            return failed, required
        by_batch: dict[tuple[int, int, int], list[tuple[bytes, bytes | None]]] = {}
        for record in outcome.records:
            by_batch.setdefault((record.partition, record.producer_id, record.producer_epoch), []).append(
                (record.key, record.value)
            )
        now = self.broker.now_ms()
        for (partition, producer_id, producer_epoch), records in by_batch.items():
            if partition in failed:
                continue
            many = len(records) > _RECORDS_IN_ONE_STEP
            if many:
                with trio.CancelScope(shield=True):
                    await trio.lowlevel.checkpoint()
            # TxnOffsetCommit records go in a transactional batch of the producer (no sequence), as Kafka
            # writes them; the producer's marker in this partition later settles them
            batch = bytearray(
                build_batch(
                    [(k, v, (), now) for k, v in records],
                    base_timestamp=now,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    is_transactional=producer_id >= 0,
                )
            )
            if many:
                with trio.CancelScope(shield=True):
                    await trio.lowlevel.checkpoint()
            partition_log = self.broker.partition_log(OFFSETS_TOPIC, partition)
            if partition_log is None:
                log.error("%s-%d does not exist; group state not persisted", OFFSETS_TOPIC, partition)
                failed[partition] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            try:
                appended = self.broker.replicas.append_as_leader(
                    OFFSETS_TOPIC,
                    partition,
                    partition_log,
                    batch,
                    now,
                    required_acks=-1,
                    check_producers=False,
                    from_coordinator=producer_id >= 0,
                )
            except (KafkaError, InvalidRecordBatch) as exc:
                log.error("append to %s-%d failed: %s", OFFSETS_TOPIC, partition, exc)
                failed[partition] = ErrorCode(exc.code)
                continue
            required[partition] = appended.required_offset
        return failed, required


# --- helpers for the group handlers ---------------------------------------------------------------


def _marker_commits(batch: RecordBatchView) -> bool | None:
    """True for a COMMIT marker batch, False for ABORT, None for any other control record."""
    try:
        for record in iter_records(batch):
            _version, marker_type = parse_control_record_key(record.key)
            return marker_type == COMMIT_MARKER if marker_type in (0, 1) else None
    except KafkaError:
        return None
    return None


def runtime_of(broker: BrokerState) -> GroupRuntime | None:
    """The broker's group runtime, or None when none runs (handlers answer COORDINATOR_NOT_AVAILABLE)."""
    return broker.groups


def client_host(peer: str) -> str:
    """A peer "host:port" as Kafka reports a member's host (InetAddress.toString(): "/host")."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return "/" + host.strip("[]")
