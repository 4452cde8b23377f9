"""A fake runtime around GroupCoordinatorCore for tests: a number for a clock, a list for a log.

``Harness`` plays the part runtime.py will play: it keeps every appended record, collects the answers
of parked requests by token, and asserts that no token is ever answered twice.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

from kafkacompat.groups.api import (
    CoordinatorRecord,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    Outcome,
    Parked,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafkacompat.groups.manager import GroupConfig, GroupCoordinatorCore
from kafkacompat.wire.errors import ErrorCode

NUM_PARTITIONS = 4


def subscription(*topics: str, version: int = 0) -> bytes:
    """A ConsumerProtocolSubscription v0 body assembled by hand: version, topics, null user data."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw
    return out + struct.pack(">i", -1)


class Harness:
    def __init__(self, **config: Any) -> None:
        config.setdefault("offsets_topic_num_partitions", NUM_PARTITIONS)
        counter = itertools.count(1)
        self.core = GroupCoordinatorCore(GroupConfig(**config), new_member_suffix=lambda: f"m{next(counter)}")
        self.now = 1_000_000
        self.core.load_empty_partitions(range(self.core.config.offsets_topic_num_partitions), self.now)
        self.log: list[CoordinatorRecord] = []
        self.answers: dict[int, Any] = {}

    def absorb(self, outcome: Outcome[Any]) -> Any:
        self.log.extend(outcome.records)
        for c in outcome.completions:
            assert c.token not in self.answers, f"token {c.token} answered twice"
            self.answers[c.token] = c.response
        return outcome.response

    def advance(self, ms: int) -> None:
        self.now += ms
        self.absorb(self.core.tick(self.now))

    def settle(self, parked: list[Any], step_ms: int, max_steps: int = 100) -> list[Any]:
        """Advance by ``step_ms`` until every one of ``parked`` has its answer; returns the answers."""
        for _ in range(max_steps):
            answers = [self.answer(p) for p in parked]
            if all(a is not None for a in answers):
                return answers
            self.advance(step_ms)
        raise AssertionError("parked requests never answered")

    def answer(self, response: Any) -> Any:
        """The answer of a request: immediate, or what its parked token got (None if still waiting)."""
        if isinstance(response, Parked):
            return self.answers.get(response.token)
        return response

    # --- operations ----------------------------------------------------------------------------------

    def join(
        self,
        group: str,
        member_id: str = "",
        *,
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        instance_id: str | None = None,
        client_id: str = "client",
        api_version: int = 9,
    ) -> JoinGroupResponse | Parked:
        req = JoinGroupRequest(
            group_id=group,
            member_id=member_id,
            protocol_type=protocol_type,
            protocols=protocols if protocols is not None else [("range", subscription("t"))],
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            group_instance_id=instance_id,
            client_id=client_id,
            client_host="/127.0.0.1",
            api_version=api_version,
        )
        return self.absorb(self.core.join_group(req, self.now))

    def join_with_id(self, group: str, **kw: Any) -> JoinGroupResponse | Parked:
        """The KIP-394 dance: join, get MEMBER_ID_REQUIRED, join again with the given id."""
        first = self.join(group, **kw)
        assert isinstance(first, JoinGroupResponse) and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        return self.join(group, first.member_id, **kw)

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: list[tuple[str, bytes]] | None = None,
        instance_id: str | None = None,
    ) -> SyncGroupResponse | Parked:
        req = SyncGroupRequest(group, generation, member_id, assignments or [], group_instance_id=instance_id)
        return self.absorb(self.core.sync_group(req, self.now))

    def heartbeat(
        self, group: str, member_id: str, generation: int, instance_id: str | None = None
    ) -> ErrorCode:
        return self.absorb(
            self.core.heartbeat(HeartbeatRequest(group, generation, member_id, instance_id), self.now)
        )

    def leave(self, group: str, *members: tuple[str, str | None]) -> Any:
        req = LeaveGroupRequest(group, [LeaveGroupMember(m, i) for m, i in members])
        return self.absorb(self.core.leave_group(req, self.now))

    def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        generation: int = -1,
        member_id: str = "",
        instance_id: str | None = None,
        metadata: str | None = None,
        retention_time_ms: int = -1,
    ) -> dict[tuple[str, int], ErrorCode]:
        req = OffsetCommitRequest(
            group,
            [OffsetCommitPartition(t, p, o, metadata=metadata) for (t, p), o in offsets.items()],
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            retention_time_ms=retention_time_ms,
        )
        return dict(self.absorb(self.core.offset_commit(req, self.now)))

    def fetch(
        self, group: str, partitions: list[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], int]:
        response = self.absorb(self.core.offset_fetch(group, partitions, self.now))
        assert response.error_code == ErrorCode.NONE
        return {(p.topic, p.partition): p.offset for p in response.partitions}

    def state(self, group: str) -> str:
        return self.absorb(self.core.describe_groups([group], self.now))[0].state
