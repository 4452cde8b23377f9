"""The admin layer: DescribeGroups, ListGroups and DeleteGroups.

Theory of operation
-------------------
These read the groups as they stand and change nothing, except DeleteGroups: an Empty group dies with
its offsets, through the same removal path as OffsetDelete and expiry (``_delete_offsets_and_maybe_group``
of the offsets layer, hence the base class). A group of a loading partition answers
COORDINATOR_LOAD_IN_PROGRESS, and ListGroups leaves such groups out and says so in its error code.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafkacompat.groups.api import (
    DeleteGroupsResult,
    DescribedGroup,
    DescribedMember,
    ListedGroup,
    ListGroupsResponse,
    Outcome,
)
from kafkacompat.groups.offset_ops import OffsetOps
from kafkacompat.groups.state import GroupState
from kafkacompat.wire.errors import ErrorCode

__all__ = ["AdminOps"]

E = ErrorCode
EMPTY = GroupState.EMPTY
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


class AdminOps(OffsetOps):
    """The administrative group operations."""

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
