"""How coordinators use their internal topics' logs: create, replay, write as leader, wait for the ISR.

Theory of operation
-------------------
Every coordinator (coordinator_runtime.py) keeps its state in a compacted internal topic that it
creates on first use and rebuilds its sans-io core by replaying that topic's partitions.

`PartitionWriter` is a coordinator's only way to write (Kafka's coordinator PartitionWriter): a batch of
the core's records, or a COMMIT/ABORT control batch, appended as the partition's leader through the
broker's replica manager with acks=all, as every leader write (offsets, indexes, the high watermark,
fetchers woken); `wait_committed` then waits until the ISR holds them (at once on a single node), since
a coordinator answers nothing a new leader would not replay.

`replay_log` reads a partition from its log start to its current end, `load_buffer` bytes per read,
and hands each batch that reaches past the read's start offset to the runtime's `replay_batch` under
the runtime's lock, yielding to other tasks between reads. A read that makes no progress raises
`LoadStalled` (a KafkaError, CORRUPT_MESSAGE), so a damaged log cannot spin the loader forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from kafkacompat.coordinator.api import CoordinatorRecord
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import RecordBatchView, build_batch, build_control_batch, iter_batches

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kafkacompat.broker.state import BrokerState
    from kafkacompat.log.partition_log import PartitionLog

__all__ = [
    "LoadStalled",
    "PartitionWriter",
    "append_txn_marker",
    "create_compacted_internal_topic",
    "replay_log",
]


class LoadStalled(KafkaError):
    """A read of a coordinator log returned no batch past `offset` (a damaged or truncated log)."""

    def __init__(self, offset: int) -> None:
        super().__init__(ErrorCode.CORRUPT_MESSAGE, f"no progress reading at offset {offset}")
        self.offset = offset


async def replay_log(
    partition_log: PartitionLog,
    load_buffer: int,
    lock: trio.Lock,
    replay_batch: Callable[[RecordBatchView, int], None],
) -> None:
    """Call `replay_batch(batch, from_offset)` for every batch of the log up to its current end, under
    `lock`; records below `from_offset` were handed over with an earlier batch. Raises LoadStalled."""
    offset = partition_log.log_start_offset
    end = partition_log.log_end_offset
    while offset < end:
        result = partition_log.read(offset, load_buffer, end, True)
        if not result.slices:
            break
        data = b"".join(s.read_bytes() for s in result.slices)
        next_offset = offset
        async with lock:
            for batch in iter_batches(data, allow_partial_tail=True):
                next_offset = batch.last_offset + 1
                if batch.last_offset < offset:
                    continue
                replay_batch(batch, offset)
        if next_offset <= offset:
            raise LoadStalled(offset)
        offset = next_offset
        await trio.lowlevel.checkpoint()


def append_txn_marker(
    broker: BrokerState,
    partition_log: PartitionLog,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    now: int,
) -> int:
    """Append one COMMIT/ABORT control batch as `topic`-`partition`'s leader, with acks=all (NOT_LEADER_OR_
    FOLLOWER elsewhere, NOT_ENOUGH_REPLICAS below min.insync.replicas); its fetchers are woken (the last
    stable offset moved: read_committed fetches may go on). Returns the offset at which it is committed,
    for the caller's `wait_for_commits`."""
    marker = bytearray(
        build_control_batch(
            commit=commit,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp=now,
        )
    )
    appended = broker.replicas.append_as_leader(
        topic, partition, partition_log, marker, now, required_acks=-1, from_coordinator=True
    )
    return appended.required_offset


async def create_compacted_internal_topic(
    broker: BrokerState,
    name: str,
    partitions: int,
    segment_bytes: int,
    *,
    replication_factor: int = 1,
    extra_configs: dict[str, str] | None = None,
) -> None:
    """Create a coordinator's compacted internal topic; one that exists already (created meanwhile by
    another request) is fine. Other failures raise the KafkaError of `create_topic`."""
    try:
        await broker.create_topic(
            name,
            partitions,
            {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes), **(extra_configs or {})},
            internal=True,
            replication_factor=replication_factor,
        )
    except KafkaError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise


class PartitionWriter:
    """A coordinator's writes to the partitions of its topic `topic` (see the module docstring)."""

    def __init__(self, broker: BrokerState, topic: str) -> None:
        self.broker = broker
        self.topic = topic

    def log_of(self, partition: int) -> PartitionLog | None:
        return self.broker.partition_log(self.topic, partition)

    def append(self, partition: int, records: Sequence[CoordinatorRecord], now_ms: int) -> int:
        """Append `records` (all of one producer) to `partition` as one batch; returns the offset at
        which it is committed. A TxnOffsetCommit's records (producer id >= 0) go in a transactional
        batch of that producer, without a sequence, as Kafka writes them. Raises KafkaError
        (NOT_LEADER_OR_FOLLOWER when the partition is not here, the log's error otherwise) or
        InvalidRecordBatch."""
        partition_log = self.log_of(partition)
        if partition_log is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.topic}-{partition} is not here")
        producer_id = records[0].producer_id
        batch = bytearray(
            build_batch(
                [(r.key, r.value, (), now_ms) for r in records],
                base_timestamp=now_ms,
                producer_id=producer_id,
                producer_epoch=records[0].producer_epoch,
                is_transactional=producer_id >= 0,
            )
        )
        appended = self.broker.replicas.append_as_leader(
            self.topic,
            partition,
            partition_log,
            batch,
            now_ms,
            required_acks=-1,
            check_producers=False,
            from_coordinator=producer_id >= 0,
        )
        return appended.required_offset

    def append_marker(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> int | None:
        """A COMMIT/ABORT control batch into `partition` (see `append_txn_marker`); None when the
        partition is not here (nothing written)."""
        partition_log = self.log_of(partition)
        if partition_log is None:
            return None
        return append_txn_marker(
            self.broker,
            partition_log,
            self.topic,
            partition,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            now_ms,
        )

    async def wait_committed(
        self, required: dict[int, int], timeout_seconds: float, what: str, log: logging.Logger
    ) -> dict[int, ErrorCode]:
        """Wait, for at most `timeout_seconds`, until the ISR holds each partition's records up to its
        offset in `required` (Kafka's coordinators append with acks=all). Returns the partitions that did
        not get there, with why (logged to the coordinator's `log` as `what` not replicated): their
        operation must not be answered as done."""
        deadline = trio.current_time() + timeout_seconds
        failed = await self.broker.replicas.wait_for_commits(
            {(self.topic, partition): offset for partition, offset in sorted(required.items())}, deadline
        )
        for (_, partition), error in failed.items():
            log.warning("%s-%d: %s not replicated: %s", self.topic, partition, what, error.name)
        return {partition: error for (_, partition), error in failed.items()}

    async def flush_due(self, partitions: set[int], log: logging.Logger) -> None:
        """fsync the logs of `partitions` whose flush interval (flush.messages / flush.ms) has come."""
        now = self.broker.now_ms()
        for partition in sorted(partitions):
            partition_log = self.log_of(partition)
            if partition_log is None or not partition_log.flush_needed(now):
                continue
            try:
                await trio.to_thread.run_sync(partition_log.flush, self.broker.now_ms())
            except KafkaError as exc:
                log.error("flush of %s-%d failed: %s", self.topic, partition, exc)
