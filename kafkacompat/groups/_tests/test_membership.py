"""Join/sync/heartbeat/leave flows of the classic group state machine, driven by a fake clock."""

from __future__ import annotations

from kafkacompat.groups._tests.harness import Harness, subscription
from kafkacompat.groups.api import JoinGroupResponse, Parked, SyncGroupRequest, SyncGroupResponse
from kafkacompat.wire.errors import ErrorCode as E

G = "group-a"


def stable_group(h: Harness, n: int, delay_ms: int) -> list[str]:
    """Join ``n`` dynamic members, wait out the initial delay, sync; returns member ids (leader first)."""
    parked = [h.join_with_id(G, client_id=f"c{i}") for i in range(n)]
    assert all(isinstance(p, Parked) for p in parked)
    # Members after the first extend the initial delay once (KIP-134).
    h.advance(delay_ms)
    if n > 1:
        assert h.answer(parked[0]) is None
        h.advance(delay_ms)
    answers = [h.answer(p) for p in parked]
    assert all(a is not None and a.error_code == E.NONE for a in answers)
    leader = answers[0].leader
    generation = answers[0].generation_id
    members = [a.member_id for a in answers]
    followers = [m for m in members if m != leader]
    waits = [h.sync(G, m, generation) for m in followers]
    assert all(isinstance(w, Parked) and h.answer(w) is None for w in waits)
    leader_sync = h.sync(G, leader, generation, [(m, m.encode()) for m in members])
    assert isinstance(leader_sync, SyncGroupResponse) and leader_sync.assignment == leader.encode()
    for m, w in zip(followers, waits, strict=True):
        assert h.answer(w).assignment == m.encode()
    assert h.state(G) == "Stable"
    return [leader, *followers]


def test_single_member_full_flow() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    first = h.join(G)
    assert isinstance(first, JoinGroupResponse)
    assert first.error_code == E.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("client-")
    assert h.state(G) == "Empty"
    parked = h.join(G, first.member_id)
    assert isinstance(parked, Parked)
    assert h.state(G) == "PreparingRebalance"
    h.advance(2999)
    assert h.answer(parked) is None
    h.advance(1)
    joined = h.answer(parked)
    assert joined.error_code == E.NONE
    assert joined.generation_id == 1
    assert joined.leader == first.member_id == joined.member_id
    assert joined.protocol_type == "consumer" and joined.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, subscription("t"))]
    assert h.state(G) == "CompletingRebalance"
    assert h.heartbeat(G, first.member_id, 1) == E.NONE
    synced = h.sync(G, first.member_id, 1, [(first.member_id, b"assignment")])
    assert synced == SyncGroupResponse(E.NONE, b"assignment", "consumer", "range")
    assert h.state(G) == "Stable"
    for _ in range(5):
        h.advance(9000)
        assert h.heartbeat(G, first.member_id, 1) == E.NONE
    assert h.heartbeat(G, first.member_id, 0) == E.ILLEGAL_GENERATION
    assert h.heartbeat(G, "nobody", 1) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("other", "nobody", 1) == E.UNKNOWN_MEMBER_ID
    # A sync in Stable returns the current assignment again.
    assert h.sync(G, first.member_id, 1).assignment == b"assignment"


def test_three_members_and_a_follower_rejoining_with_same_metadata() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    leader, f1, f2 = stable_group(h, 3, 100)
    for m in (leader, f1, f2):
        assert h.heartbeat(G, m, 1) == E.NONE
    # A follower rejoining with unchanged metadata in Stable gets the current generation, no rebalance.
    again = h.join(G, f1)
    assert isinstance(again, JoinGroupResponse) and again.generation_id == 1 and again.members == []
    assert h.state(G) == "Stable"
    # The leader rejoining always rebalances.
    parked = h.join(G, leader)
    assert isinstance(parked, Parked) and h.state(G) == "PreparingRebalance"
    assert h.heartbeat(G, f1, 1) == E.REBALANCE_IN_PROGRESS
    assert h.sync(G, f1, 1) == SyncGroupResponse(E.REBALANCE_IN_PROGRESS)
    p1, p2 = h.join(G, f1), h.join(G, f2)
    for p in (parked, p1, p2):
        assert h.answer(p).generation_id == 2
    assert h.state(G) == "CompletingRebalance"
    # Only the leader gets the member list.
    assert len(h.answer(parked).members) == 3 and h.answer(p1).members == []


def test_missing_assignment_is_an_empty_blob() -> None:
    h = Harness(initial_rebalance_delay_ms=10)
    ja, jb = h.settle([h.join_with_id(G, client_id="a"), h.join_with_id(G, client_id="b")], 10)
    lead = ja.leader
    other = jb.member_id if ja.member_id == lead else ja.member_id
    wait = h.sync(G, other, 1)
    mine = h.sync(G, lead, 1, [(lead, b"mine"), ("not-a-member", b"ignored")])
    assert mine == SyncGroupResponse(E.NONE, b"mine", "consumer", "range")
    assert h.answer(wait) == SyncGroupResponse(E.NONE, b"", "consumer", "range")


def test_zero_initial_delay_completes_the_first_join_at_once() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    joined = h.join_with_id(G)
    assert isinstance(joined, JoinGroupResponse) and joined.generation_id == 1


def test_member_id_required_only_from_v4_and_pending_expiry() -> None:
    h = Harness(initial_rebalance_delay_ms=10)
    old = h.join(G, api_version=3)
    assert isinstance(old, Parked)
    h.advance(10)
    assert h.answer(old).error_code == E.NONE
    pending = h.join("g2", session_timeout_ms=6000)
    assert pending.error_code == E.MEMBER_ID_REQUIRED
    assert h.core.groups["g2"].pending_members
    h.advance(6000)
    assert not h.core.groups["g2"].pending_members
    # The forgotten pending id is now unknown.
    assert h.join("g2", pending.member_id).error_code == E.UNKNOWN_MEMBER_ID


def test_pending_member_holds_the_rebalance_until_it_joins() -> None:
    h = Harness(initial_rebalance_delay_ms=50)
    leader, follower = stable_group(h, 2, 50)
    pending = h.join(G, client_id="late")
    assert pending.error_code == E.MEMBER_ID_REQUIRED
    assert h.state(G) == "Stable"
    p_leader = h.join(G, leader)
    p_follower = h.join(G, follower)
    # Everyone known has rejoined, but the pending member has not: the rebalance waits.
    assert h.answer(p_leader) is None
    p_new = h.join(G, pending.member_id, client_id="late")
    for p in (p_leader, p_follower, p_new):
        assert h.answer(p).generation_id == 2
    assert len(h.core.groups[G].members) == 3


def test_initial_delay_extends_while_members_keep_joining() -> None:
    # rebalance timeout 10s, delay 3s: extensions of 3s while members join, capped by the timeout.
    h = Harness(initial_rebalance_delay_ms=3000)
    first = h.join_with_id(G, rebalance_timeout_ms=10_000)
    h.advance(2000)
    second = h.join_with_id(G, rebalance_timeout_ms=10_000)
    h.advance(1000)  # 3000: the first delay ends, a member was added, so it extends by 3000
    assert h.answer(first) is None
    h.advance(2999)
    assert h.answer(first) is None
    h.advance(1)  # 6000: no member added since, the join completes
    assert h.answer(first).generation_id == 1 and h.answer(second).generation_id == 1

    # A steady stream of joiners is cut off by the rebalance timeout (remaining reaches 0).
    h2 = Harness(initial_rebalance_delay_ms=3000)
    parked = [h2.join_with_id("g", rebalance_timeout_ms=7000)]
    start = h2.now
    while h2.answer(parked[0]) is None:
        h2.advance(1000)
        if h2.answer(parked[0]) is None:
            parked.append(h2.join_with_id("g", rebalance_timeout_ms=7000))
    # delays: 3000 (remaining 4000) + 3000 (remaining 1000) + 1000 (remaining 0) = 7000
    assert h2.now - start == 7000
    assert all(h2.answer(p).generation_id == 1 for p in parked)


def test_initial_delay_applies_again_when_an_empty_group_reforms() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    (a,) = h.settle([h.join_with_id(G)], 3000)
    h.leave(G, (a.member_id, None))
    assert h.state(G) == "Empty" and h.core.groups[G].generation_id == 2
    first = h.join_with_id(G)
    h.advance(1000)
    second = h.join_with_id(G)
    h.advance(2000)  # the delay ends with a member added meanwhile: it is extended
    assert h.answer(first) is None
    h.advance(3000)
    assert h.answer(first).generation_id == h.answer(second).generation_id == 3


def test_member_leaving_triggers_rebalance_and_batched_leave() -> None:
    h = Harness(initial_rebalance_delay_ms=10)
    leader, f1, f2 = stable_group(h, 3, 10)
    resp = h.leave(G, (f1, None), ("ghost", None))
    assert resp.error_code == E.NONE
    assert [(m.member_id, m.error_code) for m in resp.members] == [
        (f1, E.NONE),
        ("ghost", E.UNKNOWN_MEMBER_ID),
    ]
    assert h.state(G) == "PreparingRebalance"
    p1, p2 = h.join(G, leader), h.join(G, f2)
    assert h.answer(p1).generation_id == 2 and {m.member_id for m in h.answer(p1).members} == {leader, f2}
    assert h.answer(p2).leader == leader
    # Leave of the last members: the group ends empty in a new generation.
    h.sync(G, leader, 2, [])
    resp = h.leave(G, (leader, None), (f2, None))
    assert all(m.error_code == E.NONE for m in resp.members)
    assert h.state(G) == "Empty"
    assert h.core.groups[G].generation_id == 3
    assert h.leave("nope", ("x", None)).members[0].error_code == E.UNKNOWN_MEMBER_ID
    assert h.leave("", ("x", None)).error_code == E.INVALID_GROUP_ID


def test_session_timeout_evicts_and_rebalances() -> None:
    h = Harness(initial_rebalance_delay_ms=10)
    leader, follower = stable_group(h, 2, 10)
    h.advance(5000)
    assert h.heartbeat(G, leader, 1) == E.NONE
    h.advance(4999)
    assert h.heartbeat(G, leader, 1) == E.NONE
    assert follower in h.core.groups[G].members
    h.advance(1)
    # The follower has been silent for its whole 10s session: it is gone and the group rebalances.
    assert follower not in h.core.groups[G].members
    assert h.heartbeat(G, leader, 1) == E.REBALANCE_IN_PROGRESS
    parked = h.join(G, leader)
    joined = h.answer(parked)
    assert joined.generation_id == 2 and [m.member_id for m in joined.members] == [leader]
    assert h.heartbeat(G, follower, 1) == E.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_removes_members_that_do_not_rejoin() -> None:
    h = Harness(initial_rebalance_delay_ms=10)
    _leader, f1, f2 = stable_group(h, 3, 10)
    p_f1 = h.join(G, f1, protocols=[("range", subscription("t", "u"))])  # changed metadata: rebalance
    assert isinstance(p_f1, Parked)
    # f2 keeps heartbeating but never rejoins; the leader is silent.
    for _ in range(6):
        h.advance(5000)
        if h.answer(p_f1) is None:
            assert h.heartbeat(G, f2, 1) == E.REBALANCE_IN_PROGRESS
    joined = h.answer(p_f1)
    assert joined is not None and joined.generation_id == 2
    assert joined.leader == f1 and [m.member_id for m in joined.members] == [f1]
    assert set(h.core.groups[G].members) == {f1}


def test_pending_sync_timeout_removes_members_that_never_sync() -> None:
    h = Harness(initial_rebalance_delay_ms=10)
    ja, jb = h.settle([h.join_with_id(G, client_id="a"), h.join_with_id(G, client_id="b")], 10)
    lead = ja.leader
    other = jb.member_id if ja.member_id == lead else ja.member_id
    assert isinstance(h.sync(G, lead, 1, [(lead, b"x")]), SyncGroupResponse)
    # The follower never syncs (it heartbeats though): after the rebalance timeout it is removed.
    for _ in range(7):
        h.advance(5000)
        h.heartbeat(G, lead, 1)
        h.heartbeat(G, other, 1)
    assert other not in h.core.groups[G].members


def test_static_member_that_does_not_rejoin_stays_in_the_group() -> None:
    h = Harness(initial_rebalance_delay_ms=10)
    (s,) = h.settle(
        [h.join("gs", instance_id="i1", session_timeout_ms=60_000, rebalance_timeout_ms=1000)], 10
    )
    h.sync("gs", s.member_id, 1, [])
    new = h.join("gs", instance_id="i2", session_timeout_ms=60_000, rebalance_timeout_ms=1000)
    (j,) = h.settle([new], 100)
    # i1 did not rejoin within the rebalance timeout but, being static, is kept (and assigned to).
    assert j.generation_id == 2 and j.leader == j.member_id
    assert {m.group_instance_id for m in j.members} == {"i1", "i2"}


def test_new_member_join_request_expires_after_five_minutes() -> None:
    h = Harness(initial_rebalance_delay_ms=10)
    (a,) = h.settle([h.join_with_id(G, rebalance_timeout_ms=600_000)], 10)
    h.sync(G, a.member_id, 1, [])
    b = h.join_with_id(G, rebalance_timeout_ms=600_000)
    # The old member heartbeats but never rejoins, so the rebalance would wait 10 minutes.
    for _ in range(59):
        h.advance(5000)
        assert h.heartbeat(G, a.member_id, 1) == E.REBALANCE_IN_PROGRESS
    assert h.answer(b) is None
    h.advance(5000)
    assert h.answer(b) == JoinGroupResponse(E.UNKNOWN_MEMBER_ID, "")


def test_protocol_selection_by_votes_and_inconsistent_protocol() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    a = h.join_with_id(G, protocols=[("roundrobin", b"A"), ("range", b"a")])
    b = h.join_with_id(G, protocols=[("range", b"b"), ("roundrobin", b"B"), ("sticky", b"s")])
    c = h.join_with_id(G, protocols=[("range", b"c"), ("roundrobin", b"C")])
    assert h.join(G, protocols=[("sticky", b"")]).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(G, protocol_type="connect").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    answers = h.settle([a, b, c], 100)
    assert {x.protocol_name for x in answers} == {"range"}  # 2 votes to 1
    leader = next(x for x in answers if x.members)
    assert sorted(m.metadata for m in leader.members) == [b"a", b"b", b"c"]
    # An empty group accepts any non-empty protocol type and list; an empty list is inconsistent.
    assert h.join("g3", protocols=[]).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.join("g3", protocol_type="").error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_validation_errors() -> None:
    h = Harness(min_session_timeout_ms=6000, max_session_timeout_ms=60_000, max_size=2)
    assert h.join("").error_code == E.INVALID_GROUP_ID
    assert h.join(G, session_timeout_ms=5999).error_code == E.INVALID_SESSION_TIMEOUT
    assert h.join(G, session_timeout_ms=60_001).error_code == E.INVALID_SESSION_TIMEOUT
    assert h.join(G, "made-up").error_code == E.UNKNOWN_MEMBER_ID
    assert h.sync("", "m", 1) == SyncGroupResponse(E.INVALID_GROUP_ID)
    assert h.sync("x", "m", 1) == SyncGroupResponse(E.UNKNOWN_MEMBER_ID)
    assert h.heartbeat("", "m", 1) == E.INVALID_GROUP_ID
    # group.max.size
    a = h.join_with_id(G, client_id="a")
    b = h.join_with_id(G, client_id="b")
    assert isinstance(a, Parked) and isinstance(b, Parked)
    assert h.join(G, client_id="c") == JoinGroupResponse(E.GROUP_MAX_SIZE_REACHED, "")


def test_coordinator_load_in_progress_and_not_coordinator() -> None:
    h = Harness()
    p = h.core.partition_for(G)
    h.absorb(h.core.unload_partition(p, h.now))
    assert h.join(G).error_code == E.NOT_COORDINATOR
    h.core.begin_loading(p)
    assert h.join(G).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.heartbeat(G, "m", 1) == E.NONE  # answered blindly while loading
    assert h.sync(G, "m", 1) == SyncGroupResponse(E.REBALANCE_IN_PROGRESS)
    assert h.absorb(h.core.list_groups(h.now)).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    h.absorb(h.core.finish_loading(p, h.now))
    assert h.join(G).error_code == E.MEMBER_ID_REQUIRED


def test_unload_answers_parked_requests() -> None:
    h = Harness(initial_rebalance_delay_ms=1000)
    parked = h.join_with_id(G)
    h.absorb(h.core.unload_partition(h.core.partition_for(G), h.now))
    assert h.answer(parked).error_code == E.NOT_COORDINATOR
    assert G not in h.core.groups


def test_describe_list_delete() -> None:
    h = Harness(initial_rebalance_delay_ms=10)
    leader, follower = stable_group(h, 2, 10)
    described = h.absorb(h.core.describe_groups([G, "missing"], h.now))
    assert described[0].state == "Stable" and described[0].protocol_data == "range"
    assert {m.member_id: m.assignment for m in described[0].members} == {
        leader: leader.encode(),
        follower: follower.encode(),
    }
    assert all(
        m.metadata == subscription("t") and m.client_host == "/127.0.0.1" for m in described[0].members
    )
    assert (described[1].state, described[1].error_code) == ("Dead", E.NONE)
    h.commit("simple", {("t", 0): 5})
    listed = h.absorb(h.core.list_groups(h.now))
    assert {(g.group_id, g.protocol_type, g.state) for g in listed.groups} == {
        (G, "consumer", "Stable"),
        ("simple", "", "Empty"),
    }
    assert [g.group_id for g in h.absorb(h.core.list_groups(h.now, ["empty"])).groups] == ["simple"]
    assert h.absorb(h.core.list_groups(h.now, types_filter=["consumer"])).groups == []
    assert len(h.absorb(h.core.list_groups(h.now, types_filter=["Classic"])).groups) == 2
    deleted = h.absorb(h.core.delete_groups([G, "simple", "missing"], h.now))
    assert [(d.group_id, d.error_code) for d in deleted] == [
        (G, E.NON_EMPTY_GROUP),
        ("simple", E.NONE),
        ("missing", E.GROUP_ID_NOT_FOUND),
    ]
    assert "simple" not in h.core.groups and h.fetch("simple", [("t", 0)]) == {("t", 0): -1}
    # In a rebalance, members are described without metadata or assignment.
    h.join(G, leader)
    d = h.absorb(h.core.describe_groups([G], h.now))[0]
    assert d.state == "PreparingRebalance" and d.protocol_data == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)


def test_duplicate_join_from_the_same_member_answers_the_older_request() -> None:
    h = Harness(initial_rebalance_delay_ms=1000)
    first = h.join_with_id(G)
    member_id = h.core.groups[G].leader_id
    second = h.join(G, member_id)
    assert h.answer(first).error_code == E.REBALANCE_IN_PROGRESS
    h.advance(1000)
    assert h.answer(second).error_code == E.NONE


def test_sync_checks_protocol_and_a_leave_cancels_waiting_syncs() -> None:
    h = Harness(initial_rebalance_delay_ms=10)
    ja, jb, jc = h.settle([h.join_with_id(G, client_id=c) for c in "abc"], 10)
    lead = ja.leader
    followers = [j.member_id for j in (ja, jb, jc) if j.member_id != lead]
    bad_type = SyncGroupRequest(G, 1, followers[0], [], protocol_type="connect")
    assert h.absorb(h.core.sync_group(bad_type, h.now)) == SyncGroupResponse(E.INCONSISTENT_GROUP_PROTOCOL)
    bad_name = SyncGroupRequest(G, 1, followers[0], [], protocol_type="consumer", protocol_name="roundrobin")
    assert h.absorb(h.core.sync_group(bad_name, h.now)) == SyncGroupResponse(E.INCONSISTENT_GROUP_PROTOCOL)
    assert h.sync(G, followers[0], 0) == SyncGroupResponse(E.ILLEGAL_GENERATION)
    waiting = h.sync(G, followers[0], 1)
    assert isinstance(waiting, Parked)
    h.leave(G, (followers[1], None))
    # The rebalance the leave starts answers the waiting sync, so the member rejoins.
    assert h.answer(waiting) == SyncGroupResponse(E.REBALANCE_IN_PROGRESS)
    assert h.state(G) == "PreparingRebalance"


def test_join_v0_uses_session_timeout_as_rebalance_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=10)
    parked = h.join(G, session_timeout_ms=7000, rebalance_timeout_ms=-1, api_version=0)
    assert isinstance(parked, Parked)
    (member,) = h.core.groups[G].members.values()
    assert member.rebalance_timeout_ms == 7000
    # The initial delay is extended up to the rebalance timeout at most.
    assert h.settle([parked], 10)[0].generation_id == 1


def test_next_deadline_tells_the_runtime_when_to_tick() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    parked = h.join_with_id(G)
    deadline = h.core.next_deadline()
    assert deadline == h.now + 3000
    h.absorb(h.core.tick(deadline - 1))
    assert h.answer(parked) is None
    h.absorb(h.core.tick(deadline))
    assert h.answer(parked).generation_id == 1
