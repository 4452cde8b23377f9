"""One classic consumer group: its members, generation, selected protocol and leader.

Theory of operation
-------------------
``Group`` and ``Member`` are plain state owned by ``GroupCoordinatorCore`` (manager.py); only the core
mutates them, always from one thread/task, so there is no locking. The rules that decide *when* a
group rebalances live in the core; this module holds the bookkeeping Kafka's GroupMetadata does:
adding/removing/updating members, static member ids, the pending (MEMBER_ID_REQUIRED) and
pending-sync member sets, protocol selection by votes, the JoinGroup member list for the leader and
the DescribeGroups summary.

Parked requests are remembered by token: ``Member.join_token`` / ``Member.sync_token`` are set while a
JoinGroup / SyncGroup of that member waits. A member "awaits join" exactly when it has a join token.

Protocol metadata and assignments are opaque bytes, passed through untouched. Only when the protocol
type is "consumer" does the group peek into a member's subscription (``parse_subscribed_topics``) to
learn its topics, which OffsetDelete and offset expiry need; a subscription that does not parse makes
the group's topics unknown, which both treat conservatively (as subscribed / never expiring).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kafkacompat.groups.state import VALID_PREVIOUS_STATES, GroupState

__all__ = ["CONSUMER_PROTOCOL_TYPE", "Group", "Member", "parse_subscribed_topics"]

CONSUMER_PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def parse_subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """Topic names from a ConsumerProtocolSubscription (any version); None if it does not parse.

    Layout (all versions start alike): int16 version, int32 topic count, that many int16-length UTF-8
    strings; later fields (user data, owned partitions, generation, rack) are not needed.
    """
    try:
        if len(metadata) < 6:
            return None
        (version,) = _I16.unpack_from(metadata, 0)
        (count,) = _I32.unpack_from(metadata, 2)
        if version < 0 or count < 0 or count * 2 > len(metadata) - 6:
            return None
        pos = 6
        topics = set()
        for _ in range(count):
            (n,) = _I16.unpack_from(metadata, pos)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(metadata[pos : pos + n].decode("utf-8"))
            pos += n
        return frozenset(topics)
    except (struct.error, UnicodeDecodeError):
        return None


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # In the member's order of preference; metadata bytes untouched.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_token: int | None = None
    sync_token: int | None = None
    # A member added by a JoinGroup that has not yet completed a rebalance.
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_token is not None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return len(protocols) == len(self.protocols) and all(
            a[0] == b[0] and bytes(a[1]) == bytes(b[1])
            for a, b in zip(protocols, self.protocols, strict=True)
        )

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError("member supports none of the candidate protocols")


@dataclass(slots=True, eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    # Insertion-ordered, as Kafka's member map iterates (the first member becomes leader).
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group instance id -> member id
    # Member ids handed out with MEMBER_ID_REQUIRED, not yet joined; their session timeout.
    pending_members: dict[str, int] = field(default_factory=dict)
    pending_sync_members: set[str] = field(default_factory=set)
    # Set when a member joins during the initial delayed join so that the delay extends.
    new_member_added: bool = False
    # (delay, remaining) of the running InitialDelayedJoin, or None for a plain rebalance timeout.
    initial_join: tuple[int, int] | None = None
    subscribed_topics: frozenset[str] | None = None

    # --- state -----------------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition(self, state: GroupState, now_ms: int) -> None:
        assert self.state in VALID_PREVIOUS_STATES[state], f"{self.state} -> {state}"
        self.previous_state = self.state
        self.state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # --- members ---------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        return member

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        # Keep the member's position? Kafka's map puts it last; iteration order only picks leaders.
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        self.pending_sync_members.discard(old_member_id)
        return member

    # --- protocols -------------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        candidates = {name for name, _ in first.protocols}
        for m in members:
            candidates &= {name for name, _ in m.protocols}
        return candidates

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocols)
        candidates = self.candidate_protocols()
        return self.protocol_type == protocol_type and any(name in candidates for name, _ in protocols)

    def select_protocol(self) -> str:
        """The protocol all members support that most members prefer (ties: the first member's pick)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        return next(name for name, n in votes.items() if n == best)

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None or not self.members:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscribed_topics(m.metadata_for(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        # Unknown subscriptions count as subscribed: never delete offsets a member may be using.
        return self.subscribed_topics is None or topic in self.subscribed_topics
