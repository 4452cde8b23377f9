"""One runtime for every coordinator: loading on election, serialised writes, commit waits, parked replies.

Theory of operation
-------------------
A coordinator is a sans-io core (the `CoordinatorCore` contract, coordinator/api.py) over the
partitions of one compacted internal topic. `CoordinatorRuntime` is the trio edge every core runs on
(Kafka's CoordinatorRuntime); `GroupRuntime` and `TransactionRuntime` are thin subclasses that add
what is theirs (topic creation settings; the transaction coordinator's marker task).

Operations. `call(op, key=...)` runs `op(now_ms)` on the core and:

1. serialises it per partition: the partition of `key` (`core.partition_for`) is locked from the
   operation until its records are committed, so the next operation on that partition sees only state
   that is in the log; an operation without a key (listings, timers) locks every partition. A request
   waits for a lock without its queued.max.requests slot and is dropped if its client leaves
   (lock_wait.py);
2. appends the outcome's records through the `PartitionWriter` (coordinator_log.py), one batch per
   partition and producer, and waits until the ISR holds them (at once on a single node);
3. hands the committed outcome to `_committed` (the transaction coordinator queues its markers there),
   delivers its completions to requests parked earlier, and answers; a `Parked(token)` answer waits for
   its completion outside the lock (through the handler's `park`, which holds no request slot).

A failed append or replication means the core ran ahead of the log: the outcome's completions and the
caller get the error (UNKNOWN_SERVER_ERROR for records too large for the log, as Kafka's coordinators
answer; NOT_COORDINATOR when leadership moved; COORDINATOR_NOT_AVAILABLE otherwise), the partition is
unloaded at once and loaded again from its log by the timer task (if this broker still leads it).

Loading follows leadership. Single node: this broker leads every partition; if the topic exists they
are all marked loading at once (COORDINATOR_LOAD_IN_PROGRESS) and `run()` replays them, otherwise they
are served empty and the topic is created on the first operation that may write. Cluster: the replica
manager's leadership listener calls `leadership_changed`; a partition is replayed when this broker
becomes its leader (its leader epoch is the core's epoch for it) and unloaded when it stops. Each
leadership change bumps the partition's generation, so a load overtaken by a newer change is abandoned,
and a notice that no longer matches the replica manager's view is ignored (notices are tasks of their
own, in no set order).

Timers: the core's deadlines (`next_deadline`, broker-clock ms); the timer task sleeps until the next
one, or until an operation schedules an earlier one, and runs `tick` under every partition's lock.

Shutdown: parked requests answer NOT_COORDINATOR at once and new operations are refused, so draining
connections never wait out a rebalance.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import trio

from kafkacompat.broker.coordinator_log import PartitionWriter, replay_log
from kafkacompat.broker.lock_wait import holding
from kafkacompat.coordinator.api import Completion, CoordinatorCore, CoordinatorRecord, Outcome, Parked
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import InvalidRecordBatch, RecordBatchView

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState

__all__ = ["CoordinatorRuntime"]

CoreT = TypeVar("CoreT", bound=CoordinatorCore)

#: errors of a coordinator write that no retry can cure
_TOO_LARGE = frozenset(
    {ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE}
)
#: a batch of more records than this is built and written in task steps of its own (see _append)
_RECORDS_IN_ONE_STEP = 100
#: how much of a partition one load step reads, when the coordinator's load buffer option is unset
DEFAULT_LOAD_BUFFER = 5 * 1024 * 1024


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


class CoordinatorRuntime(Generic[CoreT]):
    """Drives one coordinator core over the partitions of its internal topic (module docstring)."""

    def __init__(
        self,
        broker: BrokerState,
        topic: str,
        *,
        configured_partitions: int,
        log: logging.Logger,
        load_buffer_option: str,
        what: str,
    ) -> None:
        self.broker = broker
        self.topic = topic
        self.log = log
        #: how its records are named in log lines ("group records")
        self.what = what
        self.writer = PartitionWriter(broker, topic)
        existing = broker.metadata.topic(topic)
        # an existing topic's real partition count decides partition_for, as in Kafka
        self.partitions = existing.partitions if existing is not None else configured_partitions
        self.core: CoreT = self._core_for(self.partitions)
        # one lock per partition, index = partition; only ever extended (see _resize)
        self._locks = [trio.Lock() for _ in range(self.partitions)]
        self._waiters: dict[int, _Waiter] = {}
        self._wakeup = trio.Event()
        self._sleeping_until: float = math.inf
        self._to_load: list[int] = []
        self._to_reload: set[int] = set()
        #: partition -> how often its leadership changed (a load of an older generation is moot)
        self._generation: dict[int, int] = {}
        #: partition -> the leader epoch it was loaded with (None on a single node)
        self._epochs: dict[int, int] = {}
        self._topic_ready = existing is not None
        self._closed = False
        self.follows_leadership = broker.cluster_mode
        now = broker.now_ms()
        if self.follows_leadership:
            broker.replicas.add_leadership_listener(topic, self.leadership_changed)
        elif existing is None:
            self.core.load_empty_partitions(range(self.partitions), now)
        else:
            for partition in range(self.partitions):
                self.core.begin_loading(partition)
            self._to_load = list(range(self.partitions))
        self.loaded = trio.Event()
        if not self._to_load:
            self.loaded.set()
        try:
            self.load_buffer = int(broker.config[load_buffer_option])
        except KeyError:
            self.load_buffer = DEFAULT_LOAD_BUFFER

    # --- what each coordinator says about its topic -------------------------------------------------

    def write_timeout(self) -> float:
        """How long an operation's records may take to reach the ISR before it fails (seconds)."""
        raise NotImplementedError

    def _core_for(self, partitions: int) -> CoreT:
        """A fresh core for a topic of `partitions` partitions."""
        raise NotImplementedError

    async def _create_topic(self) -> None:
        """Create the topic (one created meanwhile by another request is fine). Raises KafkaError."""
        raise NotImplementedError

    def _committed(self, outcome: Outcome[Any]) -> None:
        """`outcome`'s records are committed (called before its completions are delivered)."""

    def _unloaded(self, partition: int) -> None:
        """`partition` was unloaded: drop what was pending for it outside the core."""

    # --- the background task ------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the partitions marked loading at start-up, then fire timers until cancelled."""
        task_status.started()
        started = self.broker.now_ms()
        try:
            for partition in self._to_load:
                count = await self._load(partition, None, "load")
                if count:
                    self.log.info("loaded %d record(s) of %s-%d", count, self.topic, partition)
        finally:
            self.loaded.set()
        if self._to_load:
            self.log.info(
                "loaded %d partition(s) of %s in %d ms",
                len(self._to_load),
                self.topic,
                self.broker.now_ms() - started,
            )
        self._to_load = []
        self._wake_timer()
        await self._timer_loop()

    async def _timer_loop(self) -> None:
        while True:
            if self._to_reload:
                await self._reload()
            deadline = self.core.next_deadline()
            now = self.broker.now_ms()
            if deadline is not None and deadline <= now:
                async with self._serialised(None):
                    error = await self._persist(self.core.tick(self.broker.now_ms()))
                if error is not None:
                    self.log.error("timer outcome not persisted: %s", error)
                continue
            self._wakeup = trio.Event()
            self._sleeping_until = math.inf if deadline is None else deadline
            timeout = math.inf if deadline is None else (deadline - now) / 1000
            with trio.move_on_after(timeout):
                await self._wakeup.wait()
            self._sleeping_until = math.inf

    def _wake_timer(self) -> None:
        deadline = self.core.next_deadline()
        if deadline is not None and deadline < self._sleeping_until:
            self._wakeup.set()

    # --- loading ------------------------------------------------------------------------------------

    async def _load(self, partition: int, epoch: int | None, verb: str) -> int | None:
        """Replay `partition` into the core and serve it; returns the number of records replayed. None:
        its leadership changed meanwhile (the load is abandoned), or its log cannot be read (the
        partition is unloaded: its keys answer NOT_COORDINATOR)."""
        generation = self._generation.get(partition, 0)
        async with self._serialised(partition):
            if self._generation.get(partition, 0) != generation:
                return None
            if partition in self.core.owned_partitions:
                self._deliver(self.core.unload_partition(partition, self.broker.now_ms()).completions)
            self.core.begin_loading(partition, epoch)
        replayed = 0

        def replay_batch(batch: RecordBatchView, from_offset: int) -> None:
            nonlocal replayed
            replayed += self.core.replay_batch(partition, batch, from_offset)

        partition_log = self.writer.log_of(partition)
        failure: KafkaError | None = None
        if partition_log is not None:
            try:
                await replay_log(partition_log, self.load_buffer, self._lock_of(partition), replay_batch)
            except KafkaError as exc:
                failure = exc
        async with self._serialised(partition):
            if self._generation.get(partition, 0) != generation:
                if partition not in self.core.owned_partitions:
                    self.core.unload_partition(partition, self.broker.now_ms())  # what was replayed goes
                return None
            if failure is not None:
                self.log.error("could not %s %s-%d: %s", verb, self.topic, partition, failure)
                self._deliver(self.core.unload_partition(partition, self.broker.now_ms()).completions)
                self._unloaded(partition)
                return None
            error = await self._persist(self.core.finish_loading(partition, self.broker.now_ms()))
            if error is not None:
                self.log.error("the outcome of loading %s-%d not persisted: %s", self.topic, partition, error)
        return replayed

    async def _reload(self) -> None:
        """Load again the partitions whose write failed, so the core matches the log once more."""
        for partition in sorted(self._to_reload):
            self._to_reload.discard(partition)
            if not self.broker.replicas.is_leader(self.topic, partition):
                continue  # its new leader loads it; this broker does if it leads it again
            if await self._load(partition, self._epochs.get(partition), "reload") is not None:
                self.log.info("reloaded %s-%d after a failed write", self.topic, partition)

    async def leadership_changed(self, partition: int, leads: bool, epoch: int) -> None:
        """Cluster mode: this broker became (True) or stopped being (False) the leader of `partition`,
        with leader epoch `epoch` (the replica manager's leadership listener)."""
        if self.follows_leadership and leads != self.broker.replicas.is_leader(self.topic, partition):
            # notices run as tasks of their own, in no set order: this one was overtaken by a newer
            # notice, which decides
            return
        topic = self.broker.metadata.topic(self.topic)
        if topic is not None and topic.partitions != self.partitions and not self.core.owned_partitions:
            self._resize(topic.partitions)
        if partition >= self.partitions:
            return
        if not leads:
            self._generation[partition] = self._generation.get(partition, 0) + 1
            self._epochs.pop(partition, None)
            if partition in self.core.owned_partitions:
                async with self._serialised(partition):
                    self._deliver(self.core.unload_partition(partition, self.broker.now_ms()).completions)
                    self._unloaded(partition)
                self.log.info("unloaded %s-%d (no longer leader)", self.topic, partition)
            return
        known = self._epochs.get(partition)
        if partition in self.core.owned_partitions and known is not None and known >= epoch:
            return
        if partition in self.core.owned_partitions and partition not in self.core.loading_partitions:
            # still the leader, with a newer leader epoch
            self._epochs[partition] = epoch
            self.core.set_epoch(partition, epoch)
            return
        self._generation[partition] = self._generation.get(partition, 0) + 1
        self._epochs[partition] = epoch
        self._topic_ready = True
        count = await self._load(partition, epoch, "load")
        if count is not None:
            self.log.info(
                "loaded %d record(s) of %s-%d as its new leader (epoch %d)",
                count,
                self.topic,
                partition,
                epoch,
            )
            self._wake_timer()

    def _resize(self, partitions: int) -> None:
        """The topic has `partitions` partitions (created by someone else first, before anything was
        written): a core for that count, which is what `partition_for` must use."""
        self.partitions = partitions
        self.core = self._core_for(partitions)
        self._locks.extend(trio.Lock() for _ in range(len(self._locks), partitions))
        if not self.follows_leadership:
            self.core.load_empty_partitions(range(partitions), self.broker.now_ms())

    # --- operations ---------------------------------------------------------------------------------

    async def ensure_topic(self) -> None:
        """Create the topic if it does not exist yet (raises KafkaError(COORDINATOR_NOT_AVAILABLE))."""
        if self._topic_ready and self.broker.metadata.topic(self.topic) is not None:
            return
        if self.broker.metadata.topic(self.topic) is None:
            try:
                await self._create_topic()
            except KafkaError as exc:
                self.log.error("cannot create %s: %s", self.topic, exc)
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc
        topic = self.broker.metadata.topic(self.topic)
        if not self._topic_ready and topic is not None and topic.partitions != self.partitions:
            # Nothing was written yet (every writing operation passes here first): start over with
            # the topic's real partition count.
            async with self._serialised(None):
                self.log.warning(
                    "%s has %d partitions, not %d: the coordinator uses %d",
                    self.topic,
                    topic.partitions,
                    self.partitions,
                    topic.partitions,
                )
                self._resize(topic.partitions)
        self._topic_ready = True

    async def call(
        self,
        op: Callable[[int], Outcome[Any]],
        *,
        key: str | None = None,
        may_write: bool = True,
        park: Callable[[trio.Event, float], Awaitable[None]] | None = None,
    ) -> Any:
        """Run one core operation (`op(now_ms)`) on the partition of `key` (None: on all of them),
        persist its records, and return its response (module docstring).

        A parked request returns once its completion arrives; it waits through `park` when given (the
        handler's `ctx.park`). Raises KafkaError with the error code the handler should answer with
        when the coordinator cannot serve (storage failure, lost leadership, shutdown)."""
        if self._closed:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, "the broker is shutting down")
        if may_write:
            await self.ensure_topic()
        partition = None if key is None else self.core.partition_for(key)
        waiter: _Waiter | None = None
        async with self._serialised(partition):
            outcome = op(self.broker.now_ms())
            failure = await self._persist(outcome)
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
            return response
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
        return waiter.value

    async def write_marker(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        settle: Callable[[int], Outcome[Any]] | None = None,
    ) -> int | None:
        """A transaction marker into `partition` of this coordinator's topic, then `settle(now_ms)` on
        the core when it serves the partition. Returns the offset at which the marker is committed (None:
        the partition is not here, nothing was written). Raises KafkaError when it cannot be written."""
        async with self._serialised(partition):
            now = self.broker.now_ms()
            required = self.writer.append_marker(
                partition, producer_id, producer_epoch, coordinator_epoch, commit, now
            )
            if settle is not None and partition in self.core.owned_partitions:
                self._deliver(settle(now).completions)
        return required

    def shutdown(self) -> None:
        """Broker shutdown: answer every parked request NOT_COORDINATOR (clients find the coordinator
        again once a broker is back) and refuse new operations."""
        self._closed = True
        error = KafkaError(ErrorCode.NOT_COORDINATOR, "the broker is shutting down")
        for waiter in list(self._waiters.values()):
            waiter.complete(error)

    # --- serialisation ------------------------------------------------------------------------------

    def _lock_of(self, partition: int) -> trio.Lock:
        return self._locks[partition]

    @asynccontextmanager
    async def _serialised(self, partition: int | None) -> AsyncIterator[None]:
        """Hold `partition`'s lock (None, or a partition past the known count: every lock, taken in
        partition order so two such holders cannot deadlock)."""
        if partition is not None and partition < len(self._locks):
            async with holding(self._locks[partition]):
                yield
            return
        async with AsyncExitStack() as stack:
            for lock in list(self._locks):
                await stack.enter_async_context(holding(lock))
            yield

    # --- persistence --------------------------------------------------------------------------------

    async def _persist(self, outcome: Outcome[Any]) -> KafkaError | None:
        """Append the outcome's records and wait for the ISR, then hand it to `_committed` and deliver
        its completions. Called holding the locks of the outcome's partitions. Returns the error for the
        caller when the records did not make it (the completions got it already)."""
        failed, required = await self._append(outcome.records)
        if failed:
            if all(code in _TOO_LARGE for code in failed.values()):
                # Kafka's coordinators answer a write too large for the log with UNKNOWN_SERVER_ERROR (a
                # retry would fail alike): a group whose member metadata adds up past message.max.bytes
                error = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"records too large for {self.topic}")
            else:
                error = self._unavailable(failed, f"could not write to {self.topic}")
            return self._fail(outcome, set(failed), error)
        if required:
            unreplicated = await self.writer.wait_committed(
                required, self.write_timeout(), self.what, self.log
            )
            if unreplicated:
                # Not in the ISR: a new leader may never have it, so it must not be answered as done.
                return self._fail(
                    outcome, set(unreplicated), self._unavailable(unreplicated, f"{self.what} not replicated")
                )
        self._committed(outcome)
        self._deliver(outcome.completions)
        if required:
            await self.writer.flush_due(set(required), self.log)
        return None

    @staticmethod
    def _unavailable(failed: dict[int, ErrorCode], message: str) -> KafkaError:
        """NOT_COORDINATOR when the leadership moved (as Kafka answers), COORDINATOR_NOT_AVAILABLE else."""
        moved = ErrorCode.NOT_LEADER_OR_FOLLOWER in failed.values()
        return KafkaError(
            ErrorCode.NOT_COORDINATOR if moved else ErrorCode.COORDINATOR_NOT_AVAILABLE, message
        )

    def _fail(self, outcome: Outcome[Any], partitions: set[int], error: KafkaError) -> KafkaError:
        """The outcome's records are not (safely) in the log: its completions get `error`, and the
        partitions are unloaded, since the core's state ran ahead of the log; the timer task rebuilds
        them from the log (until then their keys answer NOT_COORDINATOR and clients look again)."""
        for completion in outcome.completions:
            waiter = self._waiters.get(completion.token)
            if waiter is not None:
                waiter.complete(error)
        now = self.broker.now_ms()
        for partition in sorted(partitions):
            self._deliver(self.core.unload_partition(partition, now).completions)
            self._unloaded(partition)
        self._to_reload |= partitions
        self._wakeup.set()
        return error

    def _deliver(self, completions: list[Completion]) -> None:
        for completion in completions:
            waiter = self._waiters.get(completion.token)
            if waiter is not None:
                waiter.complete(completion.response)

    async def _append(self, records: list[CoordinatorRecord]) -> tuple[dict[int, ErrorCode], dict[int, int]]:
        """Write the records, one batch per partition and producer: (the partitions whose write failed
        and why, the offset each written partition is committed at).

        A batch of many records (an OffsetCommit of 1,000 partitions) is written in a task step of its
        own: the loop is given back before it (fairness.py), shielded, since once the core has moved its
        records must be written."""
        failed: dict[int, ErrorCode] = {}
        required: dict[int, int] = {}
        if not records:
            return failed, required
        by_batch: dict[tuple[int, int, int], list[CoordinatorRecord]] = {}
        for record in records:
            by_batch.setdefault((record.partition, record.producer_id, record.producer_epoch), []).append(
                record
            )
        now = self.broker.now_ms()
        for (partition, _producer_id, _producer_epoch), batch in by_batch.items():
            if partition in failed:
                continue
            if len(batch) > _RECORDS_IN_ONE_STEP:
                with trio.CancelScope(shield=True):
                    await trio.lowlevel.checkpoint()
            try:
                required[partition] = self.writer.append(partition, batch, now)
            except (KafkaError, InvalidRecordBatch) as exc:
                self.log.error("append to %s-%d failed: %s", self.topic, partition, exc)
                failed[partition] = ErrorCode(exc.code)
                required.pop(partition, None)
        return failed, required
