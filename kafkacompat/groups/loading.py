"""The loading layer: how __consumer_offsets records become groups and offsets, and how a partition is
given up.

Theory of operation
-------------------
While a partition loads (``begin_loading``), its groups answer COORDINATOR_LOAD_IN_PROGRESS.
``replay`` applies each record of the partition in offset order: an offset record
goes straight into the ``OffsetStore`` (or, from a transactional batch, into ``pending_txn_offsets``
until its marker); a group metadata record only replaces the group's staged value, since a later record
of the same group overrides an earlier one. ``finish_loading`` then builds each group once from its last
staged value (Stable with its members, or Empty), starts its members' session timers, and starts
serving. ``unload_partition`` answers every parked request of the partition's groups with
NOT_COORDINATOR and forgets the partition's groups, offsets and staged and pending state.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafkacompat.groups import records as rec
from kafkacompat.groups.api import JoinGroupResponse, Outcome, SyncGroupResponse
from kafkacompat.groups.group import Group, Member
from kafkacompat.groups.membership import MembershipOps
from kafkacompat.groups.offsets import CommittedOffset
from kafkacompat.groups.state import GroupState
from kafkacompat.wire.errors import DecodeError, ErrorCode

__all__ = ["LoadingOps"]

E = ErrorCode
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


class LoadingOps(MembershipOps):
    """Ownership of __consumer_offsets partitions: loading, replay and unloading."""

    def begin_loading(self, partition: int, epoch: int | None = None) -> None:
        """Start loading a __consumer_offsets partition: its groups answer COORDINATOR_LOAD_IN_PROGRESS.
        (The classic protocol's records do not depend on the partition's leader epoch.)"""
        self.owned_partitions.add(partition)
        self.loading_partitions.add(partition)

    def set_epoch(self, partition: int, epoch: int) -> None:
        """Nothing of a classic group depends on its partition's leader epoch."""

    def replay(
        self, key: bytes | memoryview, value: bytes | memoryview | None, producer_id: int = -1
    ) -> None:
        """Apply one __consumer_offsets record (value None: tombstone). Undecodable or foreign records are
        counted in ``skipped_records`` and ignored. ``producer_id`` >= 0: the record came in a
        transactional batch (TxnOffsetCommit) and stays pending until that producer's marker."""
        try:
            k = rec.decode_key(key)
            if isinstance(k, rec.OffsetCommitKey):
                tp = (k.topic, k.partition)
                if producer_id >= 0 and value is not None:
                    v = rec.decode_offset_commit_value(value)
                    self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(k.group, {})[tp] = (
                        CommittedOffset(
                            v.offset, v.metadata, v.commit_timestamp, v.leader_epoch, v.expire_timestamp
                        )
                    )
                elif value is None:
                    self.offsets.delete(k.group, tp)
                else:
                    v = rec.decode_offset_commit_value(value)
                    self.offsets.put(
                        k.group,
                        tp,
                        CommittedOffset(
                            v.offset, v.metadata, v.commit_timestamp, v.leader_epoch, v.expire_timestamp
                        ),
                    )
            elif isinstance(k, rec.GroupMetadataKey):
                self._staged_groups[k.group] = (
                    None if value is None else rec.decode_group_metadata_value(value)
                )
            else:
                self.skipped_records += 1
        except DecodeError:
            self.skipped_records += 1

    def finish_loading(self, partition: int, now_ms: int) -> Outcome[None]:
        """Materialize the groups replayed for ``partition`` (Empty or Stable) and start serving them."""
        self._begin(now_ms)
        self.loading_partitions.discard(partition)
        gids = {g for g in self._staged_groups if self.partition_for(g) == partition}
        gids |= {g for g in self.offsets.groups() if self.partition_for(g) == partition}
        for gid in sorted(gids):
            value = self._staged_groups.pop(gid, None)
            if value is None and not self.offsets.has_offsets(gid):
                continue
            group = self._group_from_record(gid, value)
            self.groups[gid] = group
            for member in group.members.values():
                self._schedule_heartbeat(group, member, now_ms)
            if len(group.members) > self.config.max_size:
                self._prepare_rebalance(group, now_ms)
        return self._finish(None, now_ms)

    def load_empty_partitions(self, partitions: Iterable[int], now_ms: int) -> None:
        """Own partitions whose __consumer_offsets log is empty (a fresh cluster, or tests)."""
        for p in partitions:
            self.begin_loading(p)
            self.finish_loading(p, now_ms)

    def unload_partition(self, partition: int, now_ms: int) -> Outcome[None]:
        """Stop coordinating ``partition``: parked requests of its groups get NOT_COORDINATOR."""
        self._begin(now_ms)
        for gid in [g for g in self.groups if self.partition_for(g) == partition]:
            group = self.groups[gid]
            for member in group.members.values():
                self._answer_join(member, JoinGroupResponse(E.NOT_COORDINATOR, member.member_id))
                self._answer_sync(member, SyncGroupResponse(E.NOT_COORDINATOR))
            group.transition(DEAD, now_ms)
            self._drop_group(group)
        for gid in [g for g in self.offsets.groups() if self.partition_for(g) == partition]:
            self.offsets.delete_group(gid)
        for gid in [g for g in self._staged_groups if self.partition_for(g) == partition]:
            del self._staged_groups[gid]
        for by_group in self.pending_txn_offsets.values():
            for gid in [g for g in by_group if self.partition_for(g) == partition]:
                del by_group[gid]
        self.owned_partitions.discard(partition)
        self.loading_partitions.discard(partition)
        return self._finish(None, now_ms)

    def _group_from_record(self, gid: str, value: rec.GroupMetadataValue | None) -> Group:
        group = Group(gid)
        if value is None:
            return group
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.state_timestamp_ms = (
            value.current_state_timestamp if value.current_state_timestamp >= 0 else None
        )
        for m in value.members:
            member = Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol or "", m.subscription)],
                assignment=m.assignment,
            )
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        if group.members:
            group.state = STABLE
            group.leader_id = value.leader if value.leader in group.members else next(iter(group.members))
        group.subscribed_topics = group.compute_subscribed_topics()
        return group
