"""What the group and transaction runtimes do alike with their internal topics' logs.

Theory of operation
-------------------
Both coordinators (group_runtime.py over `__consumer_offsets`, txn_runtime.py over
`__transaction_state`) keep their state in a compacted internal topic that they create on first use,
rebuild their sans-io core by replaying that topic's log at start-up, and write COMMIT/ABORT control
batches as the partition's leader (through the broker's replica manager, as every leader write). Those
three steps are the same for both and live here; what a record means, how a failure is answered and
which lock guards which core stay with each runtime.

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

from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import RecordBatchView, build_control_batch, iter_batches

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.log.partition_log import PartitionLog

__all__ = [
    "LoadStalled",
    "append_txn_marker",
    "create_compacted_internal_topic",
    "replay_log",
    "wait_for_coordinator_writes",
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


async def wait_for_coordinator_writes(
    broker: BrokerState,
    topic: str,
    required: dict[int, int],
    timeout_seconds: float,
    what: str,
    log: logging.Logger,
) -> dict[int, ErrorCode]:
    """Wait, for at most `timeout_seconds`, until the ISR holds each partition's coordinator records up
    to its offset in `required` (Kafka's coordinators append with acks=all). Returns the partitions that
    did not get there, with why (logged to the coordinator's `log` as `what` not replicated): their
    operation must not be answered as done."""
    deadline = trio.current_time() + timeout_seconds
    failed = await broker.replicas.wait_for_commits(
        {(topic, partition): offset for partition, offset in sorted(required.items())}, deadline
    )
    for (_, partition), error in failed.items():
        log.warning("%s-%d: %s not replicated: %s", topic, partition, what, error.name)
    return {partition: error for (_, partition), error in failed.items()}


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
