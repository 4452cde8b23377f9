"""The contract between a coordinator's sans-io core and the one runtime that drives every core.

Theory of operation
-------------------
A coordinator (the classic group coordinator, the transaction coordinator, later the KIP-848 consumer
group and share group coordinators) keeps its state in the partitions of one compacted internal topic
and is event-sourced: its state is what replaying those partitions' records produces. The core is
synchronous, takes time as a parameter and never does I/O; every operation returns an `Outcome`:

* ``response``: the answer, or ``Parked(token)`` when the request must wait (a JoinGroup during a
  rebalance); its answer comes later as a ``Completion`` of another outcome;
* ``records``: the records the operation's state change consists of, appended to the topic before any
  response or completion of that outcome is sent (so nothing is answered that a new leader would not
  replay);
* ``completions``: answers to requests parked earlier.

The runtime (`kafkacompat/broker/coordinator_runtime.py`) follows the topic's leadership: when this
broker becomes a partition's leader it calls ``begin_loading(p, epoch)``, ``replay_batch`` for every
batch of the partition in offset order, then ``finish_loading(p, now_ms)``; when it stops leading,
``unload_partition(p, now_ms)`` (whose completions answer the partition's parked requests). Timers are
deadlines the core exposes through ``next_deadline()``; the runtime calls ``tick(now_ms)`` at them. A
core names the partition a key lives in with ``partition_for(key)``, which the runtime uses to serialise
operations per partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from kafkacompat.wire.records import RecordBatchView

__all__ = ["Completion", "CoordinatorCore", "CoordinatorRecord", "Outcome", "Parked"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Parked:
    """The request waits; its answer comes later as a ``Completion`` with this token."""

    token: int


@dataclass(frozen=True, slots=True)
class Completion:
    token: int
    response: object


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One record of the coordinator's topic, in partition ``partition``: ``value`` None is a tombstone."""

    partition: int
    key: bytes
    value: bytes | None
    # a transactional offset commit (TxnOffsetCommit): written in a transactional batch of this producer
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(slots=True)
class Outcome(Generic[T]):
    response: T | Parked | None = None
    records: list[CoordinatorRecord] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)


class CoordinatorCore(Protocol):
    """What the runtime needs of a core (see the module docstring)."""

    @property
    def owned_partitions(self) -> set[int]:
        """The partitions this core serves or is loading."""
        ...

    @property
    def loading_partitions(self) -> set[int]:
        """The owned partitions being replayed."""
        ...

    def partition_for(self, key: str) -> int: ...

    def begin_loading(self, partition: int, epoch: int | None = None) -> None:
        """`partition` is this core's from now on (its requests answer COORDINATOR_LOAD_IN_PROGRESS
        until ``finish_loading``); `epoch` is the partition's leader epoch (None: keep the known one)."""
        ...

    def replay_batch(self, partition: int, batch: RecordBatchView, from_offset: int) -> int:
        """Apply the records of `batch` at or past `from_offset`; returns how many were applied."""
        ...

    def finish_loading(self, partition: int, now_ms: int) -> Outcome[None]: ...

    def load_empty_partitions(self, partitions: Iterable[int], now_ms: int) -> None:
        """Serve `partitions` with nothing to replay (their topic does not exist yet)."""
        ...

    def unload_partition(self, partition: int, now_ms: int) -> Outcome[None]:
        """Forget `partition`'s state; the completions answer its parked requests (NOT_COORDINATOR)."""
        ...

    def set_epoch(self, partition: int, epoch: int) -> None:
        """A loaded partition's leader epoch moved on (this broker still leads it)."""
        ...

    def next_deadline(self) -> int | None: ...

    def tick(self, now_ms: int) -> Outcome[None]: ...
