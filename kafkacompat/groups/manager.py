"""The classic group coordinator as a synchronous, event-sourced state machine (no I/O, no clock).

Theory of operation
-------------------
``GroupCoordinatorCore`` owns every group and committed offset of the __consumer_offsets partitions
this broker coordinates. Each public operation takes its request value (api.py) and ``now_ms`` and
returns an ``Outcome``: the response or ``Parked(token)``, the records to append, and completions of
earlier parked requests. Timers (initial join delay, rebalance timeout, pending-sync timeout, session
and new-member expiry, offset expiry) are deadlines in ``Timers``; they fire when an operation or
``tick(now_ms)`` is called with a time at or past them, so tests drive time by passing numbers.
Behaviour follows Kafka's classic GroupCoordinator (KIP-345 static membership, KIP-394 member id
required, KIP-134 initial delay, KIP-211 offset expiry, KIP-814 skip assignment).

Departures from Kafka, on purpose:
* Kafka changes state only after its write to __consumer_offsets succeeded. Here state changes at
  once and the records come back with the outcome; the runtime appends them before it sends any
  response or completion of that outcome. An append failure on a single node is a storage failure
  the runtime treats as fatal for the coordinator (it unloads the partitions).
* A parked JoinGroup/SyncGroup that Kafka would silently drop (the same member sent a newer one, or the
  member was removed while it waited) is answered here (REBALANCE_IN_PROGRESS / UNKNOWN_MEMBER_ID), so
  that no parked request is ever left without an answer.

How the trio runtime (broker/group_runtime.py) drives it
--------------------------------------------------------
* Start-up: for each owned partition ``begin_loading(p)``; ``replay(key, value)`` every record of that
  __consumer_offsets partition in offset order; then ``finish_loading(p, now_ms)``. While a partition
  loads, its groups answer COORDINATOR_LOAD_IN_PROGRESS (Heartbeat answers NONE and SyncGroup
  REBALANCE_IN_PROGRESS, as Kafka does). A fresh cluster calls ``load_empty_partitions(range(n), now)``.
* Requests: one operation at a time (a lock or a single task). With the outcome: append
  ``records`` (grouped by ``record.partition``) to __consumer_offsets; then send ``response`` unless it
  is ``Parked`` (then keep the token -> reply channel); then deliver each completion.
* Timers: sleep until ``next_deadline()`` (or until woken by a new operation, which may set an
  earlier deadline), call ``tick(now_ms)`` and handle its outcome the same way.
* ``partition_for(group_id)`` answers FindCoordinator (single node: this broker for every group).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkacompat.groups import records as rec
from kafkacompat.groups.api import (
    Completion,
    CoordinatorRecord,
    DeleteGroupsResult,
    DescribedGroup,
    DescribedMember,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchPartition,
    OffsetFetchResponse,
    Outcome,
    Parked,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
)
from kafkacompat.groups.group import CONSUMER_PROTOCOL_TYPE, Group, Member
from kafkacompat.groups.offsets import CommittedOffset, OffsetStore, TopicPartition
from kafkacompat.groups.state import GroupState
from kafkacompat.groups.timers import Timers
from kafkacompat.wire.errors import DecodeError, ErrorCode

__all__ = ["GroupConfig", "GroupCoordinatorCore"]

E = ErrorCode
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

_CLEANUP_KEY = ("cleanup",)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Broker configs of the group coordinator (Kafka's names in ``from_properties``)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offsets_topic_num_partitions: int = 50
    offset_metadata_max_bytes: int = 4096
    # Kafka's fixed timeout for a new member's JoinGroup (not a config there either).
    new_member_join_timeout_ms: int = 300_000

    _NAMES = {
        "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
        "group.min.session.timeout.ms": "min_session_timeout_ms",
        "group.max.session.timeout.ms": "max_session_timeout_ms",
        "group.max.size": "max_size",
        "offsets.retention.minutes": "offsets_retention_minutes",
        "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
        "offsets.topic.num.partitions": "offsets_topic_num_partitions",
        "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    }

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> GroupConfig:
        return cls(**{attr: int(props[name]) for name, attr in cls._NAMES.items() if name in props})

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000


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


class GroupCoordinatorCore:
    """All classic groups and offsets of the owned __consumer_offsets partitions.

    Owns its ``Group``/``Member`` objects, the ``OffsetStore`` and the timers; nothing else may mutate
    them. Not thread-safe: the runtime calls it from one task at a time.
    """

    def __init__(
        self, config: GroupConfig | None = None, *, new_member_suffix: Callable[[], str] | None = None
    ):
        self.config = config or GroupConfig()
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore()
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        self.skipped_records = 0
        # ("cleanup",), ("join", group id), ("sync", group id) or ("hb", group id, member id)
        self._timers: Timers[tuple[str, ...]] = Timers()
        self._tokens = itertools.count(1)
        self._new_member_suffix = new_member_suffix or (lambda: str(uuid.uuid4()))
        self._staged_groups: dict[str, rec.GroupMetadataValue | None] = {}
        # TxnOffsetCommit: producer id -> group -> offsets that become committed when the producer's
        # transaction commits (its COMMIT marker lands in the group's partition) and vanish on abort
        self.pending_txn_offsets: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self._records: list[CoordinatorRecord] = []
        self._completions: list[Completion] = []

    # ===============================================================================================
    # Ownership, loading and replay.

    def partition_for(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.config.offsets_topic_num_partitions)

    def begin_loading(self, partition: int) -> None:
        """Start loading a __consumer_offsets partition: its groups answer COORDINATOR_LOAD_IN_PROGRESS."""
        self.owned_partitions.add(partition)
        self.loading_partitions.add(partition)

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

    # ===============================================================================================
    # Timers.

    def next_deadline(self) -> int | None:
        """The earliest time at which ``tick`` has something to do (None: nothing scheduled)."""
        return self._timers.next_deadline()

    def tick(self, now_ms: int) -> Outcome[None]:
        """Fire every timer due at ``now_ms``."""
        self._begin(now_ms)
        return self._finish(None, now_ms)

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

    def _schedule_heartbeat(
        self, group: Group, member: Member, now_ms: int, timeout_ms: int | None = None
    ) -> None:
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self._timers.schedule(("hb", group.group_id, member.member_id), now_ms + timeout)

    def _on_heartbeat_timer(self, group: Group, member_id: str, now_ms: int) -> None:
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._try_complete_join(group, now_ms)
            return
        member = group.members.get(member_id)
        if member is None:
            return
        # Members waiting in a rebalance have satisfied their heartbeat, unless they are new.
        if member.is_new or not (member.awaiting_join or member.awaiting_sync):
            self._remove_member_and_update_group(group, member, now_ms)

    def _on_join_timer(self, group: Group, now_ms: int) -> None:
        if not group.is_(PREPARING):
            return
        if group.initial_join is not None:
            delay, remaining = group.initial_join
            if group.new_member_added and remaining != 0:
                group.new_member_added = False
                next_delay = min(self.config.initial_rebalance_delay_ms, remaining)
                group.initial_join = (next_delay, max(remaining - delay, 0))
                self._timers.schedule(("join", group.group_id), now_ms + next_delay)
                return
        self._complete_join(group, now_ms)

    def _on_sync_timer(self, group: Group, now_ms: int) -> None:
        if group.state not in (COMPLETING, STABLE) or not group.pending_sync_members:
            return
        for member_id in list(group.pending_sync_members):
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member_quietly(group, member)
        group.pending_sync_members.clear()
        self._prepare_rebalance(group, now_ms)

    # ===============================================================================================
    # Outcome plumbing.

    def _begin(self, now_ms: int) -> None:
        self._records = []
        self._completions = []
        self._fire_due(now_ms)

    def _finish(self, response: Any, now_ms: int) -> Outcome[Any]:
        self._fire_due(now_ms)
        if isinstance(response, Parked):
            for i, c in enumerate(self._completions):
                if c.token == response.token:
                    response = c.response
                    del self._completions[i]
                    break
        out: Outcome[Any] = Outcome(response, self._records, self._completions)
        self._records = []
        self._completions = []
        return out

    def _park_join(self, member: Member) -> Parked:
        if member.join_token is not None:
            self._answer_join(member, JoinGroupResponse(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_token = next(self._tokens)
        return Parked(member.join_token)

    def _park_sync(self, member: Member) -> Parked:
        if member.sync_token is not None:
            self._answer_sync(member, SyncGroupResponse(E.REBALANCE_IN_PROGRESS))
        member.sync_token = next(self._tokens)
        return Parked(member.sync_token)

    def _answer_join(self, member: Member, response: JoinGroupResponse) -> None:
        if member.join_token is not None:
            self._completions.append(Completion(member.join_token, response))
            member.join_token = None

    def _answer_sync(self, member: Member, response: SyncGroupResponse) -> None:
        if member.sync_token is not None:
            self._completions.append(Completion(member.sync_token, response))
            member.sync_token = None

    def _emit_group(self, group: Group) -> None:
        protocol = group.protocol_name
        value = rec.GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id if group.members else None,
            current_state_timestamp=group.state_timestamp_ms if group.state_timestamp_ms is not None else -1,
            members=[
                rec.MemberMetadataRecord(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata_for(protocol),
                    assignment=m.assignment,
                )
                for m in group.members.values()
            ],
        )
        self._records.append(
            CoordinatorRecord(
                self.partition_for(group.group_id),
                rec.encode_group_metadata_key(group.group_id),
                rec.encode_group_metadata_value(value),
            )
        )

    def _emit_offset_tombstone(self, group_id: str, tp: TopicPartition) -> None:
        # Commits emit the records prepare_offset_commit made; only a removal writes one here.
        self._records.append(
            CoordinatorRecord(
                self.partition_for(group_id), rec.encode_offset_commit_key(group_id, tp[0], tp[1]), None
            )
        )

    def _validate(self, group_id: str, allow_empty: bool) -> ErrorCode | None:
        if group_id is None or (not group_id and not allow_empty):
            return E.INVALID_GROUP_ID
        partition = self.partition_for(group_id)
        if partition in self.loading_partitions:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned_partitions:
            return E.NOT_COORDINATOR
        return None

    # ===============================================================================================
    # Membership changes shared by several operations.

    def _remove_member_quietly(self, group: Group, member: Member) -> None:
        self._answer_join(member, JoinGroupResponse(E.UNKNOWN_MEMBER_ID, ""))
        self._answer_sync(member, SyncGroupResponse(E.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self._timers.cancel(("hb", group.group_id, member.member_id))

    def _remove_member_and_update_group(self, group: Group, member: Member, now_ms: int) -> None:
        self._remove_member_quietly(group, member)
        if group.state in (STABLE, COMPLETING):
            self._maybe_prepare_rebalance(group, now_ms)
        elif group.is_(PREPARING):
            self._try_complete_join(group, now_ms)

    def _remove_pending_member(self, group: Group, member_id: str, now_ms: int) -> None:
        group.pending_members.pop(member_id, None)
        self._timers.cancel(("hb", group.group_id, member_id))
        self._try_complete_join(group, now_ms)

    def _maybe_prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms)

    def _prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.is_(COMPLETING):
            for m in group.members.values():
                m.assignment = b""
            self._propagate_assignment(group, E.REBALANCE_IN_PROGRESS, now_ms)
        self._timers.cancel(("sync", group.group_id))
        group.pending_sync_members.clear()
        if group.is_(EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            group.initial_join = (delay, max(group.rebalance_timeout_ms() - delay, 0))
            self._timers.schedule(("join", group.group_id), now_ms + delay)
        else:
            group.initial_join = None
            self._timers.schedule(("join", group.group_id), now_ms + group.rebalance_timeout_ms())
        group.transition(PREPARING, now_ms)
        self._try_complete_join(group, now_ms)

    def _try_complete_join(self, group: Group, now_ms: int) -> None:
        if group.is_(PREPARING) and group.initial_join is None and group.has_all_members_joined():
            self._timers.cancel(("join", group.group_id))
            self._complete_join(group, now_ms)

    def _complete_join(self, group: Group, now_ms: int) -> None:
        group.initial_join = None
        self._timers.cancel(("join", group.group_id))
        for member in list(group.members.values()):
            if not member.awaiting_join and member.group_instance_id is None:
                self._remove_member_quietly(group, member)
        if group.members and not self._elect_joined_leader(group):
            # Only static members that have not rejoined are left: wait for them (or their session
            # timeouts) for another rebalance timeout.
            self._timers.schedule(("join", group.group_id), now_ms + group.rebalance_timeout_ms())
            return
        group.generation_id += 1
        group.pending_sync_members.clear()
        if not group.members:
            group.protocol_name = None
            group.subscribed_topics = None
            group.transition(EMPTY, now_ms)
            self._emit_group(group)
            return
        group.protocol_name = group.select_protocol()
        group.subscribed_topics = group.compute_subscribed_topics()
        group.transition(COMPLETING, now_ms)
        for member in group.members.values():
            self._answer_join(member, self._join_response(group, member, include_members=True))
            self._schedule_heartbeat(group, member, now_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._timers.schedule(("sync", group.group_id), now_ms + group.rebalance_timeout_ms())

    def _elect_joined_leader(self, group: Group) -> bool:
        leader = group.members.get(group.leader_id) if group.leader_id is not None else None
        if leader is not None and leader.awaiting_join:
            return True
        for member_id, member in group.members.items():
            if member.awaiting_join:
                group.leader_id = member_id
                return True
        return False

    def _join_response(self, group: Group, member: Member, include_members: bool) -> JoinGroupResponse:
        is_leader = group.is_leader(member.member_id)
        return JoinGroupResponse(
            error_code=E.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=self._member_list(group) if include_members and is_leader else [],
        )

    def _member_list(self, group: Group) -> list[JoinGroupResponseMember]:
        return [
            JoinGroupResponseMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
            for m in group.members.values()
        ]

    def _propagate_assignment(self, group: Group, error: ErrorCode, now_ms: int) -> None:
        ok = error == E.NONE
        for member in group.members.values():
            if member.sync_token is not None:
                self._answer_sync(
                    member,
                    SyncGroupResponse(
                        error,
                        member.assignment,
                        group.protocol_type if ok else None,
                        group.protocol_name if ok else None,
                    ),
                )
                self._schedule_heartbeat(group, member, now_ms)

    def _drop_group(self, group: Group) -> None:
        gid = group.group_id
        for key in (("join", gid), ("sync", gid)):
            self._timers.cancel(key)
        for member_id in list(group.members) + list(group.pending_members):
            self._timers.cancel(("hb", gid, member_id))
        self.groups.pop(gid, None)

    def _create_group(self, group_id: str) -> Group:
        group = Group(group_id)
        self.groups[group_id] = group
        return group

    # ===============================================================================================
    # JoinGroup.

    def join_group(self, req: JoinGroupRequest, now_ms: int) -> Outcome[JoinGroupResponse]:
        self._begin(now_ms)
        return self._finish(self._join(req, now_ms), now_ms)

    def _join(self, req: JoinGroupRequest, now_ms: int) -> JoinGroupResponse | Parked:
        error = self._validate(req.group_id, allow_empty=False)
        if error is not None:
            return JoinGroupResponse(error, req.member_id)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return JoinGroupResponse(E.INVALID_SESSION_TIMEOUT, req.member_id)
        # JoinGroup v0 has no rebalance timeout: the session timeout serves for both.
        rebalance_timeout = req.session_timeout_ms if req.api_version == 0 else req.rebalance_timeout_ms
        is_unknown = req.member_id == ""
        group = self.groups.get(req.group_id)
        if group is None:
            if not is_unknown:
                return JoinGroupResponse(E.UNKNOWN_MEMBER_ID, req.member_id)
            group = self._create_group(req.group_id)
        if not self._accept_joining_member(group, req.member_id):
            member = group.members.get(req.member_id)
            if member is not None:
                self._remove_member_quietly(group, member)
            group.pending_members.pop(req.member_id, None)
            response: JoinGroupResponse | Parked = JoinGroupResponse(E.GROUP_MAX_SIZE_REACHED, "")
        elif is_unknown:
            response = self._join_new_member(group, req, rebalance_timeout, now_ms)
        else:
            response = self._join_known_member(group, req, rebalance_timeout, now_ms)
        self._try_complete_join(group, now_ms)
        return response

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        limit = self.config.max_size
        if group.state in (EMPTY, DEAD):
            return True
        if group.is_(PREPARING):
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or group.num_awaiting_join() < limit
        return member_id in group.members or len(group.members) < limit

    def _join_new_member(
        self, group: Group, req: JoinGroupRequest, rebalance_timeout: int, now_ms: int
    ) -> JoinGroupResponse | Parked:
        if group.is_(DEAD):
            return JoinGroupResponse(E.COORDINATOR_NOT_AVAILABLE, req.member_id)
        if not group.supports_protocols(req.protocol_type, req.protocols):
            return JoinGroupResponse(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        new_member_id = f"{req.client_id}-{self._new_member_suffix()}"
        if req.group_instance_id is not None:
            old_member_id = group.static_members.get(req.group_instance_id)
            if old_member_id is None:
                return self._add_member_and_rebalance(group, req, new_member_id, rebalance_timeout, now_ms)
            return self._replace_static_member(
                group, req, old_member_id, new_member_id, rebalance_timeout, now_ms
            )
        if req.api_version >= 4:
            group.pending_members[new_member_id] = req.session_timeout_ms
            self._timers.schedule(("hb", group.group_id, new_member_id), now_ms + req.session_timeout_ms)
            return JoinGroupResponse(E.MEMBER_ID_REQUIRED, new_member_id)
        return self._add_member_and_rebalance(group, req, new_member_id, rebalance_timeout, now_ms)

    def _join_known_member(
        self, group: Group, req: JoinGroupRequest, rebalance_timeout: int, now_ms: int
    ) -> JoinGroupResponse | Parked:
        member_id = req.member_id
        if group.is_(DEAD):
            return JoinGroupResponse(E.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(req.protocol_type, req.protocols):
            return JoinGroupResponse(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if group.is_pending(member_id):
            if req.group_instance_id is not None and req.group_instance_id in group.static_members:
                return JoinGroupResponse(E.FENCED_INSTANCE_ID, member_id)
            return self._add_member_and_rebalance(group, req, member_id, rebalance_timeout, now_ms)
        if group.is_static_member_fenced(req.group_instance_id, member_id):
            return JoinGroupResponse(E.FENCED_INSTANCE_ID, member_id)
        instance_unknown = (
            req.group_instance_id is not None and req.group_instance_id not in group.static_members
        )
        member = group.members.get(member_id)
        if member is None or instance_unknown:
            return JoinGroupResponse(E.UNKNOWN_MEMBER_ID, member_id)
        if group.is_(PREPARING):
            return self._update_member_and_rebalance(group, member, req, rebalance_timeout, now_ms)
        if group.is_(COMPLETING):
            if member.matches(req.protocols):
                # The member lost our JoinGroup answer: answer again for the current generation.
                return self._join_response(group, member, include_members=True)
            return self._update_member_and_rebalance(group, member, req, rebalance_timeout, now_ms)
        if group.is_(STABLE):
            # A leader's JoinGroup always rebalances: that is how it signals changes the member
            # metadata does not show (e.g. new partitions of subscribed topics).
            if group.is_leader(member_id) or not member.matches(req.protocols):
                return self._update_member_and_rebalance(group, member, req, rebalance_timeout, now_ms)
            return self._join_response(group, member, include_members=False)
        return JoinGroupResponse(E.UNKNOWN_MEMBER_ID, member_id)

    def _add_member_and_rebalance(
        self, group: Group, req: JoinGroupRequest, member_id: str, rebalance_timeout: int, now_ms: int
    ) -> Parked:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=rebalance_timeout,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=[(name, bytes(metadata)) for name, metadata in req.protocols],
            is_new=True,
        )
        # A rebalance that started from Empty waits a little longer for every member that arrives.
        if group.is_(PREPARING) and group.previous_state is EMPTY:
            group.new_member_added = True
        group.add(member)
        parked = self._park_join(member)
        # A new member cannot heartbeat before it has joined; bound how long its JoinGroup may wait.
        self._schedule_heartbeat(group, member, now_ms, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, now_ms)
        return parked

    def _update_member_and_rebalance(
        self, group: Group, member: Member, req: JoinGroupRequest, rebalance_timeout: int, now_ms: int
    ) -> Parked:
        member.protocols = [(name, bytes(metadata)) for name, metadata in req.protocols]
        member.rebalance_timeout_ms = rebalance_timeout
        member.session_timeout_ms = req.session_timeout_ms
        parked = self._park_join(member)
        self._maybe_prepare_rebalance(group, now_ms)
        return parked

    def _replace_static_member(
        self,
        group: Group,
        req: JoinGroupRequest,
        old_member_id: str,
        new_member_id: str,
        rebalance_timeout: int,
        now_ms: int,
    ) -> Parked:
        assert req.group_instance_id is not None
        previous_leader = group.leader_id
        old = group.members[old_member_id]
        # Whoever still waits under the old member id is fenced now.
        self._answer_join(old, JoinGroupResponse(E.FENCED_INSTANCE_ID, old_member_id))
        self._answer_sync(old, SyncGroupResponse(E.FENCED_INSTANCE_ID))
        self._timers.cancel(("hb", group.group_id, old_member_id))
        member = group.replace_static_member(req.group_instance_id, old_member_id, new_member_id)
        self._schedule_heartbeat(group, member, now_ms)
        member.protocols = [(name, bytes(metadata)) for name, metadata in req.protocols]
        member.rebalance_timeout_ms = rebalance_timeout
        member.session_timeout_ms = req.session_timeout_ms
        parked = self._park_join(member)
        if group.is_(STABLE):
            if group.protocol_name == group.select_protocol():
                # Same protocol: keep the generation and assignment, just persist the new member id.
                # (The metadata may still name other topics; a reload would see them, so look now.)
                group.subscribed_topics = group.compute_subscribed_topics()
                self._emit_group(group)
                is_leader = group.is_leader(new_member_id)
                supports_skip = req.api_version >= 9
                self._answer_join(
                    member,
                    JoinGroupResponse(
                        error_code=E.NONE,
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        # Older clients must not think they lead (they would assign for nothing): give
                        # them the previous leader id, which no longer matches theirs.
                        leader=(group.leader_id if supports_skip else previous_leader) or "",
                        skip_assignment=is_leader and supports_skip,
                        members=self._member_list(group) if is_leader and supports_skip else [],
                    ),
                )
            else:
                self._maybe_prepare_rebalance(group, now_ms)
        elif group.is_(COMPLETING):
            self._prepare_rebalance(group, now_ms)
        return parked

    # ===============================================================================================
    # SyncGroup.

    def sync_group(self, req: SyncGroupRequest, now_ms: int) -> Outcome[SyncGroupResponse]:
        self._begin(now_ms)
        return self._finish(self._sync(req, now_ms), now_ms)

    def _sync(self, req: SyncGroupRequest, now_ms: int) -> SyncGroupResponse | Parked:
        error = self._validate(req.group_id, allow_empty=False)
        if error is E.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance state is lost while loading; make the member rejoin without rediscovery.
            return SyncGroupResponse(E.REBALANCE_IN_PROGRESS)
        if error is not None:
            return SyncGroupResponse(error)
        group = self.groups.get(req.group_id)
        if group is None:
            return SyncGroupResponse(E.UNKNOWN_MEMBER_ID)
        if group.is_(DEAD):
            return SyncGroupResponse(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(req.group_instance_id, req.member_id):
            return SyncGroupResponse(E.FENCED_INSTANCE_ID)
        member = group.members.get(req.member_id)
        if member is None:
            return SyncGroupResponse(E.UNKNOWN_MEMBER_ID)
        if req.generation_id != group.generation_id:
            return SyncGroupResponse(E.ILLEGAL_GENERATION)
        if req.protocol_type is not None and req.protocol_type != group.protocol_type:
            return SyncGroupResponse(E.INCONSISTENT_GROUP_PROTOCOL)
        if req.protocol_name is not None and req.protocol_name != group.protocol_name:
            return SyncGroupResponse(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(EMPTY):
            return SyncGroupResponse(E.UNKNOWN_MEMBER_ID)
        if group.is_(PREPARING):
            return SyncGroupResponse(E.REBALANCE_IN_PROGRESS)
        self._received_sync(group, req.member_id)
        if group.is_(STABLE):
            self._schedule_heartbeat(group, member, now_ms)
            return SyncGroupResponse(E.NONE, member.assignment, group.protocol_type, group.protocol_name)
        # CompletingRebalance: followers wait for the leader's assignment.
        parked = self._park_sync(member)
        if group.is_leader(req.member_id):
            assignments = dict(req.assignments)
            for m in group.members.values():
                # A member the leader left out gets an empty assignment, which is valid.
                m.assignment = bytes(assignments.get(m.member_id, b""))
            group.transition(STABLE, now_ms)
            self._emit_group(group)
            self._propagate_assignment(group, E.NONE, now_ms)
        return parked

    def _received_sync(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._timers.cancel(("sync", group.group_id))

    # ===============================================================================================
    # Heartbeat.

    def heartbeat(self, req: HeartbeatRequest, now_ms: int) -> Outcome[ErrorCode]:
        self._begin(now_ms)
        return self._finish(self._heartbeat(req, now_ms), now_ms)

    def _heartbeat(self, req: HeartbeatRequest, now_ms: int) -> ErrorCode:
        error = self._validate(req.group_id, allow_empty=False)
        if error is E.COORDINATOR_LOAD_IN_PROGRESS:
            return E.NONE  # the group is still loading: answer blindly, as Kafka does
        if error is not None:
            return error
        group = self.groups.get(req.group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.is_(DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(req.group_instance_id, req.member_id):
            return E.FENCED_INSTANCE_ID
        member = group.members.get(req.member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if req.generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if group.is_(EMPTY):
            return E.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat(group, member, now_ms)
        return E.REBALANCE_IN_PROGRESS if group.is_(PREPARING) else E.NONE

    # ===============================================================================================
    # LeaveGroup.

    def leave_group(self, req: LeaveGroupRequest, now_ms: int) -> Outcome[LeaveGroupResponse]:
        self._begin(now_ms)
        return self._finish(self._leave(req, now_ms), now_ms)

    def _leave(self, req: LeaveGroupRequest, now_ms: int) -> LeaveGroupResponse:
        error = self._validate(req.group_id, allow_empty=False)
        if error is not None:
            return LeaveGroupResponse(error)
        group = self.groups.get(req.group_id)
        if group is None:
            return LeaveGroupResponse(
                E.NONE,
                [
                    LeaveGroupMemberResponse(m.member_id, m.group_instance_id, E.UNKNOWN_MEMBER_ID)
                    for m in req.members
                ],
            )
        if group.is_(DEAD):
            return LeaveGroupResponse(E.COORDINATOR_NOT_AVAILABLE)
        results = []
        for leaving in req.members:
            member_id, instance_id = leaving.member_id, leaving.group_instance_id
            if member_id == "":
                # Administrative removal by group instance id.
                current = group.static_members.get(instance_id) if instance_id is not None else None
                if current is not None:
                    self._remove_member_and_update_group(group, group.members[current], now_ms)
                    code = E.NONE
                else:
                    code = E.UNKNOWN_MEMBER_ID
            elif group.is_pending(member_id):
                self._remove_pending_member(group, member_id, now_ms)
                code = E.NONE
            elif group.is_static_member_fenced(instance_id, member_id):
                code = E.FENCED_INSTANCE_ID
            elif member_id in group.members:
                self._remove_member_and_update_group(group, group.members[member_id], now_ms)
                code = E.NONE
            else:
                code = E.UNKNOWN_MEMBER_ID
            results.append(LeaveGroupMemberResponse(member_id, instance_id, code))
        return LeaveGroupResponse(E.NONE, results)

    # ===============================================================================================
    # DescribeGroups, ListGroups, DeleteGroups.

    def describe_groups(self, group_ids: list[str], now_ms: int) -> Outcome[list[DescribedGroup]]:
        self._begin(now_ms)
        return self._finish([self._describe(gid) for gid in group_ids], now_ms)

    def _describe(self, group_id: str) -> DescribedGroup:
        error = self._validate(group_id, allow_empty=True)
        if error is not None:
            return DescribedGroup(error, group_id, "", "", "")
        group = self.groups.get(group_id)
        if group is None:
            return DescribedGroup(E.NONE, group_id, DEAD.value, "", "")
        stable = group.is_(STABLE)
        members = [
            DescribedMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata_for(group.protocol_name) if stable else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return DescribedGroup(
            E.NONE,
            group_id,
            group.state.value,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            members,
        )

    def list_groups(
        self, now_ms: int, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
    ) -> Outcome[ListGroupsResponse]:
        """Groups of the loaded partitions; filters match case-insensitively, empty means all. Every
        group here is of type "classic"."""
        self._begin(now_ms)
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        listed = []
        if not types or "classic" in types:
            for gid, group in self.groups.items():
                if self.partition_for(gid) in self.loading_partitions:
                    continue
                if states and group.state.value.lower() not in states:
                    continue
                listed.append(ListedGroup(gid, group.protocol_type or "", group.state.value))
        error = E.COORDINATOR_LOAD_IN_PROGRESS if self.loading_partitions else E.NONE
        return self._finish(ListGroupsResponse(error, listed), now_ms)

    def delete_groups(self, group_ids: list[str], now_ms: int) -> Outcome[list[DeleteGroupsResult]]:
        self._begin(now_ms)
        results = []
        for gid in group_ids:
            error = self._validate(gid, allow_empty=True)
            if error is None:
                group = self.groups.get(gid)
                if group is None or group.is_(DEAD):
                    error = E.GROUP_ID_NOT_FOUND
                elif not group.is_(EMPTY):
                    error = E.NON_EMPTY_GROUP
                else:
                    group.transition(DEAD, now_ms)
                    self._delete_offsets_and_maybe_group(group, self.offsets.delete_group(gid), True, now_ms)
                    error = E.NONE
            results.append(DeleteGroupsResult(gid, error))
        return self._finish(results, now_ms)

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

    # ===============================================================================================
    # Offsets.

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
