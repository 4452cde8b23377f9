"""The bottom layer of the group coordinator core: its state and how an operation builds its outcome.

Theory of operation
-------------------
``CoordinatorBase.__init__`` declares every piece of state the core owns (groups, the ``OffsetStore``,
partition ownership, the timers, parked-request tokens, the records staged by replay, pending
transactional offsets), so that one place lists what the layers above share. Each public operation
brackets its work with ``_begin(now_ms)`` and ``_finish(response, now_ms)``: ``_begin`` clears the
record and completion buffers and fires due timers; the work appends records (``self._records``) and
completions (``_answer_join`` / ``_answer_sync``) as it goes; ``_finish`` fires timers due again and
packs everything into one ``Outcome``. A request parked by ``_park_join`` / ``_park_sync`` holds a token
until some later operation answers it; if the same operation already answered it, ``_finish`` turns the
``Parked`` back into that direct answer.

Firing a timer means calling into every layer (rebalance timers, offset expiry), so ``_fire_due`` is
declared here and defined by ``GroupCoordinatorCore`` at the top.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from typing import Any

from kafkacompat.groups import records as rec
from kafkacompat.groups.api import (
    Completion,
    CoordinatorRecord,
    JoinGroupResponse,
    Outcome,
    Parked,
    SyncGroupResponse,
)
from kafkacompat.groups.config import GroupConfig
from kafkacompat.groups.group import Group, Member
from kafkacompat.groups.offsets import CommittedOffset, OffsetStore, TopicPartition
from kafkacompat.groups.timers import Timers
from kafkacompat.wire.errors import ErrorCode

__all__ = ["CoordinatorBase"]

E = ErrorCode


class CoordinatorBase:
    """State shared by every layer of ``GroupCoordinatorCore`` and the outcome plumbing."""

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

    def partition_for(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.config.offsets_topic_num_partitions)

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

    def _validate(self, group_id: str, allow_empty: bool) -> ErrorCode | None:
        if group_id is None or (not group_id and not allow_empty):
            return E.INVALID_GROUP_ID
        partition = self.partition_for(group_id)
        if partition in self.loading_partitions:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned_partitions:
            return E.NOT_COORDINATOR
        return None

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

    def _fire_due(self, now_ms: int) -> None:
        """Fire every timer due at ``now_ms`` (defined by ``GroupCoordinatorCore``)."""
        raise NotImplementedError
