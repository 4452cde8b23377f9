"""Replay of __consumer_offsets rebuilds the live state; random operation sequences keep invariants."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.groups._tests.harness import Harness, subscription
from kafkacompat.groups.api import JoinGroupResponse, Parked
from kafkacompat.groups.manager import GroupCoordinatorCore
from kafkacompat.groups.state import GroupState
from kafkacompat.wire.errors import ErrorCode as E

GROUPS = ["g0", "g1", "g2"]


def persistent_view(core: GroupCoordinatorCore, group_id: str) -> dict[str, Any]:
    g = core.groups[group_id]
    return {
        "state": g.state,
        "generation": g.generation_id,
        "protocol_type": g.protocol_type,
        "protocol": g.protocol_name,
        "leader": g.leader_id if g.members else None,
        "static": dict(g.static_members),
        "subscribed": g.subscribed_topics,
        "members": [
            (
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                m.metadata_for(g.protocol_name),
                m.assignment,
            )
            for m in sorted(g.members.values(), key=lambda m: m.member_id)
        ],
    }


def replayed(h: Harness) -> GroupCoordinatorCore:
    core = GroupCoordinatorCore(h.core.config)
    partitions = range(h.core.config.offsets_topic_num_partitions)
    for p in partitions:
        core.begin_loading(p)
    for r in h.log:
        core.replay(r.key, r.value)
    for p in partitions:
        core.finish_loading(p, h.now)
    assert core.skipped_records == 0
    return core


def assert_replay_matches(h: Harness) -> None:
    core = replayed(h)
    assert core.offsets.snapshot() == h.core.offsets.snapshot()
    assert set(core.groups) <= set(h.core.groups)
    for gid, g in h.core.groups.items():
        # A Stable or Empty group has written everything about itself (other states are mid-rebalance,
        # and a first generation that never synced has written nothing); offsets always bring a group.
        settled = g.state in (GroupState.STABLE, GroupState.EMPTY) and g.generation_id > 0
        if settled or h.core.offsets.has_offsets(gid):
            assert gid in core.groups, gid
        if g.state in (GroupState.STABLE, GroupState.EMPTY) and gid in core.groups:
            replayed_view, live_view = persistent_view(core, gid), persistent_view(h.core, gid)
            assert replayed_view == live_view, (gid, replayed_view, live_view)


def test_replay_rebuilds_groups_and_offsets() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    (a,) = h.settle([h.join_with_id("g", protocols=[("range", subscription("t", "u"))])], 100)
    h.sync("g", a.member_id, 1, [(a.member_id, b"A")])
    h.commit("g", {("t", 0): 5, ("u", 3): 7}, 1, a.member_id, metadata="m")
    h.commit("simple", {("x", 0): 1})
    (s,) = h.settle([h.join("static", instance_id="i", client_id="sc")], 100)
    h.sync("static", s.member_id, 1, [(s.member_id, b"S")])
    h.join("static", instance_id="i", client_id="sc")  # static rejoin: record with the new member id
    (e,) = h.settle([h.join_with_id("gone")], 100)
    h.leave("gone", (e.member_id, None))
    h.commit("deleted", {("x", 0): 1})
    h.absorb(h.core.delete_groups(["deleted"], h.now))
    assert_replay_matches(h)
    core = replayed(h)
    assert core.groups["g"].state is GroupState.STABLE and core.groups["static"].state is GroupState.STABLE
    assert core.groups["gone"].state is GroupState.EMPTY and core.groups["gone"].generation_id == 2
    assert "deleted" not in core.groups
    # The reloaded group serves its members: heartbeats work, a sync returns the stored assignment.
    h2 = Harness(initial_rebalance_delay_ms=100)
    h2.core, h2.now = core, h.now
    assert h2.heartbeat("g", a.member_id, 1) == E.NONE
    assert h2.sync("g", a.member_id, 1).assignment == b"A"
    # Loaded members are expected to heartbeat within their session.
    h2.advance(9_999)
    assert h2.state("g") == "Stable"
    h2.advance(1)
    assert h2.state("g") == "Empty" and h2.core.groups["g"].generation_id == 2


def test_replay_ignores_foreign_and_garbage_records() -> None:
    core = GroupCoordinatorCore()
    core.begin_loading(0)
    core.replay(b"\x00\x03\x00\x01g", b"\x00\x00")  # KIP-848 record type: not ours
    core.replay(b"\x00", None)
    core.replay(b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00", b"\x00\x09")
    core.finish_loading(0, 0)
    assert core.skipped_records == 3 and not core.groups


# --- random operation sequences ----------------------------------------------------------------------

ops = st.one_of(
    st.tuples(
        st.just("join"),
        st.integers(0, 2),
        st.integers(0, 6),
        st.sampled_from([None, "i0", "i1"]),
        st.sampled_from(
            [
                [("range", subscription("t"))],
                [("range", subscription("t", "u")), ("rr", b"x")],
                [("rr", b"y")],
            ]
        ),
    ),
    st.tuples(st.just("sync"), st.integers(0, 2), st.integers(0, 6), st.booleans()),
    st.tuples(st.just("heartbeat"), st.integers(0, 2), st.integers(0, 6)),
    st.tuples(st.just("leave"), st.integers(0, 2), st.integers(0, 6), st.booleans()),
    st.tuples(st.just("commit"), st.integers(0, 2), st.integers(-1, 6), st.sampled_from(["t", "u", "v"])),
    st.tuples(st.just("offset_delete"), st.integers(0, 2), st.sampled_from(["t", "u", "v"])),
    st.tuples(st.just("delete"), st.integers(0, 2)),
    # Macros that let whole rebalances happen often enough to matter.
    st.tuples(st.just("rejoin_all"), st.integers(0, 2)),
    st.tuples(st.just("sync_all"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("advance"), st.sampled_from([0, 1, 50, 50, 1000, 4000, 4000, 11_000, 70_000])),
    st.tuples(st.just("heartbeat_all"), st.integers(0, 2)),
    # The broker restarts: a new core replays the log; requests in flight are lost with their connections.
    st.tuples(st.just("restart")),
)


class Model:
    """Drives the harness with random operations, remembering the member ids it was given."""

    def __init__(self) -> None:
        self.h = Harness(
            initial_rebalance_delay_ms=50,
            offsets_retention_minutes=1,
            offsets_retention_check_interval_ms=5000,
        )
        self.ids: dict[str, list[str]] = {g: [] for g in GROUPS}
        self.parked: set[int] = set()
        self.generations: dict[str, int] = {}

    def member(self, g: str, i: int) -> str:
        """Indexes 5 and 6 mean the empty member id; 0-2 pick current members, 3-4 any id ever seen."""
        if i >= 5:
            return ""
        group = self.h.core.groups.get(g)
        current = [*group.members, *group.pending_members] if group else []
        known = current if current and i < 3 else self.ids[g]
        return known[i % len(known)] if known else ""

    def note(self, g: str, response: Any) -> None:
        if isinstance(response, Parked):
            self.parked.add(response.token)
        elif isinstance(response, JoinGroupResponse) and response.member_id:
            if response.member_id not in self.ids[g]:
                self.ids[g].append(response.member_id)

    def run(self, op: tuple[Any, ...]) -> None:
        h = self.h
        kind = op[0]
        if kind == "advance":
            h.advance(op[1])
        elif kind == "restart":
            assert_replay_matches(h)
            h.core = replayed(h)
            h.answers.clear()
            self.parked.clear()
            # A generation that never reached the log is forgotten, as in Kafka.
            self.generations.clear()
        else:
            g = GROUPS[op[1]]
            if kind == "join":
                _, _, i, instance, protocols = op
                member = self.member(g, i) if i < 6 else ""
                self.note(
                    g, h.join(g, member, instance_id=instance, protocols=protocols, session_timeout_ms=10_000)
                )
            elif kind == "sync":
                _, _, i, stale = op
                group = h.core.groups.get(g)
                gen = group.generation_id - (1 if stale else 0) if group else 0
                members = list(group.members) if group else []
                self.note(g, h.sync(g, self.member(g, i), gen, [(m, m.encode()) for m in members[:2]]))
            elif kind == "heartbeat":
                group = h.core.groups.get(g)
                h.heartbeat(g, self.member(g, op[2]), group.generation_id if group else 0)
            elif kind == "leave":
                instance = "i0" if op[3] else None
                h.leave(g, ("" if instance else self.member(g, op[2]), instance))
            elif kind == "commit":
                group = h.core.groups.get(g)
                if op[2] < 0:
                    h.commit(g, {(op[3], 0): h.now})
                else:
                    gen = group.generation_id if group else 1
                    h.commit(g, {(op[3], 0): h.now}, gen, self.member(g, op[2]))
            elif kind == "offset_delete":
                h.absorb(h.core.offset_delete(g, [(op[2], 0)], h.now))
            elif kind == "delete":
                h.absorb(h.core.delete_groups([g], h.now))
            elif kind == "heartbeat_all":
                group = h.core.groups.get(g)
                for mid in list(group.members) if group else []:
                    h.heartbeat(g, mid, group.generation_id)
            elif kind == "rejoin_all":
                group = h.core.groups.get(g)
                for mid in [*group.members, *group.pending_members] if group else []:
                    m = group.members.get(mid)
                    instance = m.group_instance_id if m else None
                    protocols = m.protocols if m else [("range", subscription("t"))]
                    self.note(g, h.join(g, mid, instance_id=instance, protocols=protocols))
            elif kind == "sync_all":
                group = h.core.groups.get(g)
                if group is not None:
                    order = sorted(group.members, key=lambda mid: (mid == group.leader_id) != op[2])
                    for mid in order:
                        if mid in group.members:
                            assignment = [(m, m.encode()) for m in group.members]
                            self.note(g, h.sync(g, mid, group.generation_id, assignment))
        self.check()

    def check(self) -> None:
        core = self.h.core
        for gid in list(self.generations):
            if gid not in core.groups:
                del self.generations[gid]
        for gid, g in core.groups.items():
            # Generations only grow while a group lives.
            assert g.generation_id >= self.generations.get(gid, 0)
            self.generations[gid] = g.generation_id
            # A member id is a member or pending, never both; a member waits for one thing at most.
            assert not set(g.members) & set(g.pending_members)
            for m in g.members.values():
                assert m.join_token is None or m.sync_token is None
                if m.group_instance_id is not None:
                    assert g.static_members[m.group_instance_id] == m.member_id
            assert all(g.members[mid].group_instance_id == i for i, mid in g.static_members.items())
            assert g.pending_sync_members <= set(g.members)
            if g.state is GroupState.EMPTY:
                assert not g.members and g.protocol_name is None
            if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                assert g.leader_id in g.members and g.protocol_name is not None
                assert all(m.join_token is None for m in g.members.values())
            if g.state is not GroupState.COMPLETING_REBALANCE:
                assert all(m.sync_token is None for m in g.members.values())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=20, max_size=80))
def test_random_operations_keep_invariants_and_replay(sequence: list[tuple[Any, ...]]) -> None:
    model = Model()
    for op in sequence:
        model.run(op)
    assert_replay_matches(model.h)
    # Time passes with nobody talking: every parked request gets its answer and every group empties.
    for _ in range(4):
        model.h.advance(400_000)
    assert model.parked <= set(model.h.answers)
    assert all(not g.members and not g.pending_members for g in model.h.core.groups.values())
    assert_replay_matches(model.h)
