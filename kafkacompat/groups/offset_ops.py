"""The offsets layer: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete and offset expiry.

Theory of operation
-------------------
Committed offsets live in the ``OffsetStore`` keyed by group and partition. A commit has two halves:
``prepare_offset_commit`` (pure, needs no group state) checks the metadata size and encodes the
offset's record, and ``_store_prepared`` stores what was prepared and appends the records. The broker
runs the first half per partition outside the coordinator's lock, so a large commit does not hold the
event loop in one step; a partition it did not prepare is prepared here.

A transactional commit (TxnOffsetCommit) stores into ``pending_txn_offsets`` instead, keyed by producer
id, and writes its records in the producer's transactional batch. ``complete_txn`` (or
``replay_txn_marker`` during loading) moves them into the store when the producer's COMMIT marker lands
in the group's partition and drops them on ABORT; until then OffsetFetch with ``require_stable`` answers
UNSTABLE_OFFSET_COMMIT for those partitions.

Removing an offset (OffsetDelete, DeleteGroups, expiry by ``offsets_retention_ms``) writes its
tombstone; an Empty group left without offsets dies, with a tombstone for its metadata
(``_delete_offsets_and_maybe_group``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kafkacompat.groups import records as rec
from kafkacompat.groups.api import (
    CoordinatorRecord,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchPartition,
    OffsetFetchResponse,
    Outcome,
    TxnOffsetCommitRequest,
)
from kafkacompat.groups.config import GroupConfig
from kafkacompat.groups.group import CONSUMER_PROTOCOL_TYPE, Group
from kafkacompat.groups.membership import MembershipOps
from kafkacompat.groups.offsets import CommittedOffset, TopicPartition
from kafkacompat.groups.state import GroupState
from kafkacompat.wire.errors import ErrorCode

__all__ = ["OffsetOps", "PreparedOffset", "prepare_offset_commit"]

E = ErrorCode
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


def _java_long(value: int) -> int:
    """`value` wrapped to a signed 64-bit integer, as Java's long addition wraps (a huge retention time)."""
    return ((value + (1 << 63)) % (1 << 64)) - (1 << 63)


def _java_length(s: str) -> int:
    return len(s.encode("utf-16-le", "surrogatepass")) // 2  # lone surrogates: escaped non-UTF-8 bytes


@dataclass(slots=True, frozen=True)
class PreparedOffset:
    """One partition of an OffsetCommit made ready without the group's state: the offset to store with
    its record's key and value, or (`committed` None) the partition's error."""

    error: ErrorCode
    committed: CommittedOffset | None = None
    key: bytes = b""
    value: bytes = b""


def _offset_commit_value(committed: CommittedOffset) -> bytes:
    """The __consumer_offsets value record of one committed offset."""
    return rec.encode_offset_commit_value(
        rec.OffsetCommitValue(
            offset=committed.offset,
            metadata=committed.metadata,
            commit_timestamp=committed.commit_timestamp,
            leader_epoch=committed.leader_epoch,
            expire_timestamp=committed.expire_timestamp,
        )
    )


def prepare_offset_commit(
    config: GroupConfig, group_id: str, p: OffsetCommitPartition, retention_time_ms: int, now_ms: int
) -> PreparedOffset:
    """The per-partition part of an OffsetCommit (pure): the metadata size check, the offset and its
    encoded record. The broker calls it outside the coordinator's lock, one partition at a time with
    the event loop given back between them (a commit of 1,000 partitions held it 7-30 ms in one step);
    the core then only stores what was prepared, so one request's offsets still land together."""
    metadata = p.metadata if p.metadata is not None else ""
    if _java_length(metadata) > config.offset_metadata_max_bytes:
        return PreparedOffset(E.OFFSET_METADATA_TOO_LARGE)
    committed = CommittedOffset(
        offset=p.offset,
        metadata=metadata,
        commit_timestamp=now_ms if p.commit_timestamp == -1 else p.commit_timestamp,
        leader_epoch=p.leader_epoch,
        expire_timestamp=-1 if retention_time_ms == -1 else _java_long(now_ms + retention_time_ms),
    )
    value = _offset_commit_value(committed)
    return PreparedOffset(
        E.NONE, committed, rec.encode_offset_commit_key(group_id, p.topic, p.partition), value
    )


class OffsetOps(MembershipOps):
    """Committed offsets of the groups, transactional ones included."""

    def offset_commit(
        self, req: OffsetCommitRequest, now_ms: int
    ) -> Outcome[list[tuple[TopicPartition, ErrorCode]]]:
        self._begin(now_ms)
        return self._finish(self._commit(req, now_ms), now_ms)

    def _commit(self, req: OffsetCommitRequest, now_ms: int) -> list[tuple[TopicPartition, ErrorCode]]:
        def all_fail(code: ErrorCode) -> list[tuple[TopicPartition, ErrorCode]]:
            return [((p.topic, p.partition), code) for p in req.partitions]

        error = self._validate(req.group_id, allow_empty=True)
        if error is not None:
            return all_fail(error)
        group = self.groups.get(req.group_id)
        if group is None:
            if req.generation_id >= 0:
                # A member of a generation of a group that no longer exists.
                return all_fail(E.ILLEGAL_GENERATION)
            # Not using group management: the group exists only to hold offsets.
            group = self._create_group(req.group_id)
        error = self._validate_offset_commit(group, req)
        if error is not None:
            return all_fail(error)
        if group.is_(COMPLETING):
            return all_fail(E.REBALANCE_IN_PROGRESS)
        if group.state in (STABLE, PREPARING):
            # During PreparingRebalance commits are still accepted; the heartbeat tells of the rebalance.
            self._schedule_heartbeat(group, group.members[req.member_id], now_ms)

        def store(tp: TopicPartition, committed: CommittedOffset) -> None:
            self.offsets.put(group.group_id, tp, committed)

        return self._store_prepared(group.group_id, req.partitions, req.retention_time_ms, now_ms, store)

    def txn_offset_commit(
        self, req: TxnOffsetCommitRequest, now_ms: int
    ) -> Outcome[list[tuple[TopicPartition, ErrorCode]]]:
        """Stage offsets of a transaction: written now (in the producer's transactional batch), visible to
        OffsetFetch only once ``complete_txn`` sees the commit marker."""
        self._begin(now_ms)
        return self._finish(self._txn_commit(req, now_ms), now_ms)

    def _txn_commit(self, req: TxnOffsetCommitRequest, now_ms: int) -> list[tuple[TopicPartition, ErrorCode]]:
        def all_fail(code: ErrorCode) -> list[tuple[TopicPartition, ErrorCode]]:
            return [((p.topic, p.partition), code) for p in req.partitions]

        error = self._validate(req.group_id, allow_empty=False)
        if error is not None:
            return all_fail(error)
        group = self.groups.get(req.group_id)
        if group is None:
            group = self._create_group(req.group_id)
        # Kafka's checks for transactional commits: laxer than OffsetCommit's (no member info is fine)
        if group.is_(DEAD):
            return all_fail(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(req.group_instance_id, req.member_id):
            return all_fail(E.FENCED_INSTANCE_ID)
        if req.member_id and req.member_id not in group.members:
            return all_fail(E.UNKNOWN_MEMBER_ID)
        if req.generation_id >= 0 and req.generation_id != group.generation_id:
            return all_fail(E.ILLEGAL_GENERATION)
        pending = self.pending_txn_offsets.setdefault(req.producer_id, {}).setdefault(group.group_id, {})
        # a transactional offset never expires on its own (retention -1)
        return self._store_prepared(
            group.group_id,
            req.partitions,
            -1,
            now_ms,
            pending.__setitem__,
            req.producer_id,
            req.producer_epoch,
        )

    def _store_prepared(
        self,
        group_id: str,
        partitions: list[OffsetCommitPartition],
        retention_time_ms: int,
        now_ms: int,
        store: Callable[[TopicPartition, CommittedOffset], None],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> list[tuple[TopicPartition, ErrorCode]]:
        """The end of OffsetCommit and TxnOffsetCommit: each partition's prepared offset (prepared here if
        the broker did not) goes to ``store`` and its record to the log, in the producer's batch when
        transactional; a refused one only answers its error."""
        results = []
        records_partition = self.partition_for(group_id)
        for p in partitions:
            tp = (p.topic, p.partition)
            prepared = p.prepared
            if prepared is None:
                prepared = prepare_offset_commit(self.config, group_id, p, retention_time_ms, now_ms)
            if prepared.committed is None:
                results.append((tp, prepared.error))
                continue
            store(tp, prepared.committed)
            self._records.append(
                CoordinatorRecord(
                    records_partition, prepared.key, prepared.value, producer_id, producer_epoch
                )
            )
            results.append((tp, E.NONE))
        return results

    def complete_txn(self, producer_id: int, commit: bool, partition: int, now_ms: int) -> Outcome[None]:
        """A transaction marker of ``producer_id`` landed in __consumer_offsets partition ``partition``:
        its pending offsets of the groups there become committed (commit) or are dropped (abort)."""
        self._begin(now_ms)
        self.replay_txn_marker(producer_id, commit, partition)
        return self._finish(None, now_ms)

    def replay_txn_marker(self, producer_id: int, commit: bool, partition: int) -> None:
        by_group = self.pending_txn_offsets.get(producer_id)
        if not by_group:
            return
        for gid in [g for g in by_group if self.partition_for(g) == partition]:
            offsets = by_group.pop(gid)
            if not commit:
                continue
            if gid not in self.groups and partition not in self.loading_partitions:
                self._create_group(gid)
            for tp, committed in offsets.items():
                self.offsets.put(gid, tp, committed)
        if not by_group:
            del self.pending_txn_offsets[producer_id]

    def _has_pending_txn_offset(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in by_group.get(group_id, ()) for by_group in self.pending_txn_offsets.values())

    def _validate_offset_commit(self, group: Group, req: OffsetCommitRequest) -> ErrorCode | None:
        if group.is_(DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if req.generation_id >= 0 or req.member_id != "" or req.group_instance_id is not None:
            if group.is_static_member_fenced(req.group_instance_id, req.member_id):
                return E.FENCED_INSTANCE_ID
            if req.member_id not in group.members:
                return E.UNKNOWN_MEMBER_ID
            if req.generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
            return None
        if not group.is_(EMPTY):
            # Only members may commit for a group that has members.
            return E.UNKNOWN_MEMBER_ID
        return None

    def offset_fetch(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        now_ms: int,
        require_stable: bool = False,
    ) -> Outcome[OffsetFetchResponse]:
        """Committed offsets of ``partitions`` (None: every committed partition of the group).

        ``require_stable``: a partition with a pending transactional offset (TxnOffsetCommit whose
        transaction has not completed) answers UNSTABLE_OFFSET_COMMIT, as Kafka does."""
        self._begin(now_ms)
        error = self._validate(group_id, allow_empty=True)
        if error is not None:
            failed = [OffsetFetchPartition(t, p, -1, -1, "", error) for t, p in partitions or ()]
            return self._finish(OffsetFetchResponse(error, failed), now_ms)
        stored = self.offsets.all(group_id)
        wanted = sorted(stored) if partitions is None else partitions
        out = []
        for tp in wanted:
            c = stored.get(tp)
            if require_stable and self._has_pending_txn_offset(group_id, tp):
                out.append(OffsetFetchPartition(tp[0], tp[1], -1, -1, "", E.UNSTABLE_OFFSET_COMMIT))
            elif c is None:
                out.append(OffsetFetchPartition(tp[0], tp[1], -1, -1, ""))
            else:
                out.append(OffsetFetchPartition(tp[0], tp[1], c.offset, c.leader_epoch, c.metadata))
        return self._finish(OffsetFetchResponse(E.NONE, out), now_ms)

    def offset_delete(
        self, group_id: str, partitions: list[TopicPartition], now_ms: int
    ) -> Outcome[tuple[ErrorCode, list[tuple[TopicPartition, ErrorCode]]]]:
        self._begin(now_ms)
        return self._finish(self._offset_delete(group_id, partitions, now_ms), now_ms)

    def _offset_delete(
        self, group_id: str, partitions: list[TopicPartition], now_ms: int
    ) -> tuple[ErrorCode, list[tuple[TopicPartition, ErrorCode]]]:
        error = self._validate(group_id, allow_empty=False)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return E.GROUP_ID_NOT_FOUND, []
        if group.is_(EMPTY):
            subscribed: set[TopicPartition] = set()
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = {tp for tp in partitions if group.is_subscribed_to_topic(tp[0])}
        else:
            return E.NON_EMPTY_GROUP, []
        results = []
        removed = []
        for tp in partitions:
            if tp in subscribed:
                results.append((tp, E.GROUP_SUBSCRIBED_TO_TOPIC))
                continue
            if self.offsets.delete(group_id, tp):
                removed.append(tp)
            results.append((tp, E.NONE))
        self._delete_offsets_and_maybe_group(group, removed, False, now_ms)
        return E.NONE, results

    def _expire_offsets(self, now_ms: int) -> None:
        retention = self.config.offsets_retention_ms
        for gid, group in list(self.groups.items()):
            if self.partition_for(gid) in self.loading_partitions:
                continue
            expired = self.offsets.expired(group, now_ms, retention)
            for tp in expired:
                self.offsets.delete(gid, tp)
            self._delete_offsets_and_maybe_group(group, expired, False, now_ms)

    # ===============================================================================================
    # Removal: offset tombstones, and the Empty group that loses its last offset.

    def _emit_offset_tombstone(self, group_id: str, tp: TopicPartition) -> None:
        # Commits emit the records prepare_offset_commit made; only a removal writes one here.
        self._records.append(
            CoordinatorRecord(
                self.partition_for(group_id), rec.encode_offset_commit_key(group_id, tp[0], tp[1]), None
            )
        )

    def _delete_offsets_and_maybe_group(
        self, group: Group, removed: list[TopicPartition], deleted: bool, now_ms: int
    ) -> None:
        """Tombstone ``removed`` offsets (already gone from the store); an Empty group with no offsets
        left dies, with a tombstone for its metadata unless it never had a generation."""
        for tp in removed:
            self._emit_offset_tombstone(group.group_id, tp)
        if not deleted and group.is_(EMPTY) and not self.offsets.has_offsets(group.group_id):
            group.transition(DEAD, now_ms)
            deleted = True
        if deleted:
            if group.generation_id > 0:
                self._records.append(
                    CoordinatorRecord(
                        self.partition_for(group.group_id),
                        rec.encode_group_metadata_key(group.group_id),
                        None,
                    )
                )
            self._drop_group(group)
