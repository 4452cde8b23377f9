"""The membership layer: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the rebalance they drive.

Theory of operation
-------------------
Each group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable (and back to Preparing on
any membership change) as in Kafka's classic GroupCoordinator, with KIP-345 static membership, KIP-394
(JoinGroup v4+ first answers MEMBER_ID_REQUIRED with a pending member id), KIP-134 (a rebalance from
Empty waits ``initial_rebalance_delay_ms`` more for each member that arrives) and KIP-814 (a rejoining
static leader of an unchanged group may skip the assignment).

A JoinGroup during a rebalance parks; ``_complete_join`` answers every parked JoinGroup at once when
all known members have rejoined or the rebalance timeout fired, bumps the generation and moves to
CompletingRebalance. Followers' SyncGroups park until the leader's SyncGroup brings the assignment
(``_propagate_assignment``). Every group change that must survive a restart appends the group's
metadata record (``_emit_group``).

The timers are per-group deadlines in ``self._timers``: ("join", group) ends the join phase,
("sync", group) removes members that never sent SyncGroup, ("hb", group, member) expires a member's
session (or a pending member's, or bounds a new member's wait in JoinGroup). ``GroupCoordinatorCore``
dispatches them to the ``_on_*_timer`` methods here.
"""

from __future__ import annotations

from kafkacompat.groups import records as rec
from kafkacompat.groups.api import (
    CoordinatorRecord,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    Outcome,
    Parked,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafkacompat.groups.base import CoordinatorBase
from kafkacompat.groups.group import Group, Member
from kafkacompat.groups.state import GroupState
from kafkacompat.wire.errors import ErrorCode

__all__ = ["MembershipOps"]

E = ErrorCode
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


class MembershipOps(CoordinatorBase):
    """The group membership protocol and its rebalance state machine."""

    # ===============================================================================================
    # Records and timers.

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
