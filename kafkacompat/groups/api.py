"""Plain request/response values of the group coordinator core, and its result type.

The broker handlers translate the generated wire objects to and from these dataclasses; the core never
sees wire objects, never sees API versions except where Kafka's behaviour depends on them (JoinGroup:
v0 has no rebalance timeout, v4+ requires a known member id, v9+ understands skip_assignment).

Conventions the handlers apply when building wire responses:
* ``None`` strings in a response are written as null where the version allows it, else as "".
* LeaveGroup v0-2 carry one member; the top-level error of those versions is ``error_code`` if it is
  not NONE, else the error of that single member.
* OffsetFetch v0-7 carry one group; v8+ may carry several (call ``offset_fetch`` once per group).
  Errors of v0/v1 responses (no top-level error field) go into every partition.
* Topics the cluster does not know (UNKNOWN_TOPIC_OR_PARTITION for OffsetCommit) and authorization are
  the handler's concern; the core only sees partitions it should act on.

Every operation returns an ``Outcome``:
* ``response``: the reply for this request, or ``Parked(token)`` when it must wait (JoinGroup and
  SyncGroup during a rebalance);
* ``records``: ``CoordinatorRecord``s to append to __consumer_offsets, in order, before any response or
  completion of the same outcome is sent (Kafka answers only once the write has succeeded);
* ``completions``: ``(token, response)`` pairs for requests parked earlier that are now answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from kafkacompat.coordinator.api import Completion, CoordinatorRecord, Outcome, Parked
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.groups.offset_ops import PreparedOffset

__all__ = [
    "Completion",
    "CoordinatorRecord",
    "DeleteGroupsResult",
    "DescribedGroup",
    "DescribedMember",
    "HeartbeatRequest",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "JoinGroupResponseMember",
    "LeaveGroupMember",
    "LeaveGroupMemberResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsResponse",
    "ListedGroup",
    "OffsetCommitPartition",
    "OffsetCommitRequest",
    "OffsetFetchPartition",
    "OffsetFetchResponse",
    "Outcome",
    "Parked",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TxnOffsetCommitRequest",
]

NONE = ErrorCode.NONE

T = TypeVar("T")


# --- JoinGroup ----------------------------------------------------------------------------------


@dataclass(slots=True)
class JoinGroupRequest:
    group_id: str
    member_id: str
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1
    group_instance_id: str | None = None
    reason: str | None = None
    client_id: str = ""
    # Kafka reports the host as InetAddress.toString(), e.g. "/127.0.0.1".
    client_host: str = ""
    api_version: int = 9


@dataclass(slots=True)
class JoinGroupResponseMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(slots=True)
class JoinGroupResponse:
    error_code: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list[JoinGroupResponseMember] = field(default_factory=list)


# --- SyncGroup ----------------------------------------------------------------------------------


@dataclass(slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    assignments: list[tuple[str, bytes]] = field(default_factory=list)
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(slots=True)
class SyncGroupResponse:
    error_code: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


# --- Heartbeat ----------------------------------------------------------------------------------


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


# The Heartbeat response is just an ErrorCode.


# --- LeaveGroup ---------------------------------------------------------------------------------


@dataclass(slots=True)
class LeaveGroupMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(slots=True)
class LeaveGroupRequest:
    group_id: str
    members: list[LeaveGroupMember]


@dataclass(slots=True)
class LeaveGroupMemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode


@dataclass(slots=True)
class LeaveGroupResponse:
    error_code: ErrorCode
    members: list[LeaveGroupMemberResponse] = field(default_factory=list)


# --- DescribeGroups / ListGroups / DeleteGroups -------------------------------------------------


@dataclass(slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class DescribedGroup:
    error_code: ErrorCode
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: list[DescribedMember] = field(default_factory=list)


@dataclass(slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(slots=True)
class ListGroupsResponse:
    error_code: ErrorCode
    groups: list[ListedGroup]


@dataclass(slots=True)
class DeleteGroupsResult:
    group_id: str
    error_code: ErrorCode


# --- Offsets ------------------------------------------------------------------------------------


@dataclass(slots=True)
class OffsetCommitPartition:
    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    leader_epoch: int = -1
    # OffsetCommit v1 only: an explicit commit timestamp; -1 means "now".
    commit_timestamp: int = -1
    # made ready outside the coordinator's lock (manager.prepare_offset_commit); None: the core does it
    prepared: PreparedOffset | None = None


@dataclass(slots=True)
class OffsetCommitRequest:
    group_id: str
    partitions: list[OffsetCommitPartition]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    # OffsetCommit v2-4 only: per-request retention; -1 means the broker's offsets.retention.minutes.
    retention_time_ms: int = -1


# The OffsetCommit response is a list of ((topic, partition), ErrorCode) in request order.


@dataclass(slots=True)
class TxnOffsetCommitRequest:
    """TxnOffsetCommit: offsets that become committed only when the producer's transaction commits."""

    group_id: str
    producer_id: int
    producer_epoch: int
    partitions: list[OffsetCommitPartition]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(slots=True)
class OffsetFetchPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error_code: ErrorCode = NONE


@dataclass(slots=True)
class OffsetFetchResponse:
    error_code: ErrorCode
    partitions: list[OffsetFetchPartition] = field(default_factory=list)


# The OffsetDelete response: (group ErrorCode, [((topic, partition), ErrorCode)]).
