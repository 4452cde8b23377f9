"""The classic group coordinator as a synchronous, event-sourced state machine (no I/O, no clock).

Theory of operation
-------------------
``GroupCoordinatorCore`` owns every group and committed offset of the __consumer_offsets partitions
this broker coordinates. Each public operation takes its request value (api.py) and ``now_ms`` and
returns an ``Outcome``: the response or ``Parked(token)``, the records to append, and completions of
earlier parked requests. State changes at once and the records come back with the outcome (Kafka waits
for its write); the runtime appends them before it sends any response or completion of that outcome.
Every parked request is answered exactly once, including the ones Kafka would drop (a newer JoinGroup
or SyncGroup of the same member, a member removed while it waited). Timers are deadlines that fire
when an operation or ``tick(now_ms)`` runs at or past them, so tests drive time by passing numbers.

The runtime (broker/coordinator_runtime.py) drives it through the coordinator contract
(coordinator/api.py). To load partition ``p`` it calls ``begin_loading(p)``, ``replay_batch`` for each
batch of ``p`` in offset order (records to ``replay``, transaction markers to ``replay_txn_marker``), then
``finish_loading(p, now_ms)`` (``load_empty_partitions`` for a fresh cluster). It sleeps until
``next_deadline()`` or a new operation, then calls ``tick(now_ms)``.

The class is a stack of layers, one module each, every layer a subclass of the ones it calls:

* ``base.CoordinatorBase``: the shared state and the outcome plumbing (``_begin`` / ``_finish``, parking).
* ``membership.MembershipOps``: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the rebalance.
* ``loading.LoadingOps`` (on membership): replay of __consumer_offsets, loading and unloading.
* ``offset_ops.OffsetOps`` (on membership): offset commit (transactional too), fetch, delete, expiry.
* ``admin.AdminOps`` (on offsets): DescribeGroups, ListGroups, DeleteGroups.
* ``GroupCoordinatorCore`` (here): joins them and dispatches the timers, the only code that calls
  into every layer.

Subclassing rather than composition: every operation reads and changes the same groups, timers and
record buffer, and the rebalance steps are called from every layer; as separate objects they would
pass all of it around or reach into each other. As layers they share ``self`` and each calls only the
layers under it, which mypy checks without stubs (``_fire_due`` is the one declared in the base).
"""

from __future__ import annotations

from kafkacompat.groups.admin import AdminOps
from kafkacompat.groups.api import Outcome
from kafkacompat.groups.config import GroupConfig
from kafkacompat.groups.loading import LoadingOps
from kafkacompat.groups.offset_ops import PreparedOffset, prepare_offset_commit
from kafkacompat.wire.errors import KafkaError
from kafkacompat.wire.records import COMMIT_MARKER, RecordBatchView, iter_records, parse_control_record_key

__all__ = ["GroupConfig", "GroupCoordinatorCore", "PreparedOffset", "prepare_offset_commit"]

_CLEANUP_KEY = ("cleanup",)


class GroupCoordinatorCore(LoadingOps, AdminOps):
    """All classic groups and offsets of the owned __consumer_offsets partitions.

    Owns its ``Group``/``Member`` objects, the ``OffsetStore`` and the timers; nothing else may mutate
    them. Not thread-safe: the runtime calls it from one task at a time.
    """

    def next_deadline(self) -> int | None:
        """The earliest time at which ``tick`` has something to do (None: nothing scheduled)."""
        return self._timers.next_deadline()

    def tick(self, now_ms: int) -> Outcome[None]:
        """Fire every timer due at ``now_ms``."""
        self._begin(now_ms)
        return self._finish(None, now_ms)

    def replay_batch(self, partition: int, batch: RecordBatchView, from_offset: int) -> int:
        """Apply one batch of ``partition`` (records before ``from_offset`` were applied already): a
        transaction marker settles the producer's pending TxnOffsetCommit offsets in this partition, a
        data batch's records are replayed (pending when the batch is transactional). Returns the number
        of records replayed."""
        if batch.is_control:
            commit = _marker_commits(batch)
            if commit is not None and batch.producer_id >= 0:
                self.replay_txn_marker(batch.producer_id, commit, partition)
            return 0
        producer_id = batch.producer_id if batch.is_transactional else -1
        replayed = 0
        for record in iter_records(batch):
            if record.offset < from_offset or record.key is None:
                continue
            self.replay(record.key, record.value, producer_id)
            replayed += 1
        return replayed

    def _fire_due(self, now_ms: int) -> None:
        if self._timers.deadline(_CLEANUP_KEY) is None:
            self._timers.schedule(_CLEANUP_KEY, now_ms + self.config.offsets_retention_check_interval_ms)
        while (key := self._timers.pop_due(now_ms)) is not None:
            kind = key[0]
            if kind == "cleanup":
                self._expire_offsets(now_ms)
                self._timers.schedule(_CLEANUP_KEY, now_ms + self.config.offsets_retention_check_interval_ms)
                continue
            group = self.groups.get(key[1])
            if group is None:
                continue
            if kind == "join":
                self._on_join_timer(group, now_ms)
            elif kind == "sync":
                self._on_sync_timer(group, now_ms)
            elif kind == "hb":
                self._on_heartbeat_timer(group, key[2], now_ms)


def _marker_commits(batch: RecordBatchView) -> bool | None:
    """True for a COMMIT marker batch, False for ABORT, None for any other control record."""
    try:
        for record in iter_records(batch):
            _version, marker_type = parse_control_record_key(record.key)
            return marker_type == COMMIT_MARKER if marker_type in (0, 1) else None
    except KafkaError:
        return None
    return None
