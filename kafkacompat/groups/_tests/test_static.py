"""Static membership (KIP-345): rejoin without rebalance, fencing of the old member id."""

from __future__ import annotations

from kafkacompat.groups._tests.harness import Harness, subscription
from kafkacompat.groups.api import JoinGroupResponse, Parked, SyncGroupResponse
from kafkacompat.groups.records import GroupMetadataKey, decode_group_metadata_value, decode_key
from kafkacompat.wire.errors import ErrorCode as E

G = "static-group"
PROTOCOLS = [("range", subscription("t")), ("roundrobin", subscription("t"))]


def stable_static_group(h: Harness) -> dict[str, str]:
    """Instances i1 and i2 in a Stable group; returns instance id -> member id."""
    parked = [h.join(G, instance_id=i, client_id=i, protocols=PROTOCOLS) for i in ("i1", "i2")]
    # Static members get their member id at once: no MEMBER_ID_REQUIRED round trip.
    assert all(isinstance(p, Parked) for p in parked)
    answers = h.settle(parked, 100)
    ids = {i: a.member_id for i, a in zip(("i1", "i2"), answers, strict=True)}
    leader = answers[0].leader
    follower = next(m for m in ids.values() if m != leader)
    wait = h.sync(G, follower, 1)
    h.sync(G, leader, 1, [(m, f"assign-{i}".encode()) for i, m in ids.items()])
    assert h.answer(wait).error_code == E.NONE
    assert h.state(G) == "Stable"
    return ids


def last_group_record(h: Harness, group: str):
    for r in reversed(h.log):
        if r.value is not None and decode_key(r.key) == GroupMetadataKey(group):
            return decode_group_metadata_value(r.value)
    raise AssertionError("no group record")


def test_rejoin_with_same_metadata_replaces_member_id_without_rebalance() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    ids = stable_static_group(h)
    old = ids["i2"]
    leader = h.core.groups[G].leader_id
    assert old != leader
    records_before = len(h.log)
    rejoined = h.join(G, instance_id="i2", client_id="i2", protocols=PROTOCOLS)
    assert isinstance(rejoined, JoinGroupResponse)
    assert rejoined.error_code == E.NONE and rejoined.generation_id == 1
    assert rejoined.member_id != old and rejoined.leader == leader and not rejoined.skip_assignment
    assert h.state(G) == "Stable"
    # The new member id is persisted right away.
    assert len(h.log) == records_before + 1
    assert rejoined.member_id in {m.member_id for m in last_group_record(h, G).members}
    # The old member id is fenced everywhere.
    assert h.heartbeat(G, old, 1, "i2") == E.FENCED_INSTANCE_ID
    assert h.sync(G, old, 1, instance_id="i2") == SyncGroupResponse(E.FENCED_INSTANCE_ID)
    assert h.commit(G, {("t", 0): 1}, 1, old, "i2") == {("t", 0): E.FENCED_INSTANCE_ID}
    assert h.leave(G, (old, "i2")).members[0].error_code == E.FENCED_INSTANCE_ID
    assert h.join(G, old, instance_id="i2", protocols=PROTOCOLS).error_code == E.FENCED_INSTANCE_ID
    # The new id works and keeps the assignment.
    assert h.heartbeat(G, rejoined.member_id, 1, "i2") == E.NONE
    assert h.sync(G, rejoined.member_id, 1, instance_id="i2").assignment == b"assign-i2"
    assert h.state(G) == "Stable"


def test_static_leader_rejoin_skip_assignment_from_v9() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    ids = stable_static_group(h)
    leader_instance = next(i for i, m in ids.items() if m == h.core.groups[G].leader_id)
    old_leader = ids[leader_instance]
    v9 = h.join(G, instance_id=leader_instance, protocols=PROTOCOLS, api_version=9)
    assert v9.skip_assignment and v9.leader == v9.member_id != old_leader
    assert {m.group_instance_id for m in v9.members} == {"i1", "i2"}
    # An older client is told the previous leader id, so it does not run an assignment.
    v8 = h.join(G, instance_id=leader_instance, protocols=PROTOCOLS, api_version=8)
    assert not v8.skip_assignment and v8.members == [] and v8.leader == v9.member_id != v8.member_id
    assert h.state(G) == "Stable"


def test_static_rejoin_changing_the_selected_protocol_rebalances() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    ids = stable_static_group(h)
    parked = h.join(G, instance_id="i2", protocols=[("roundrobin", b"rr")])
    assert isinstance(parked, Parked) and h.state(G) == "PreparingRebalance"
    assert h.heartbeat(G, ids["i2"], 1, "i2") == E.FENCED_INSTANCE_ID
    p1 = h.join(G, ids["i1"], instance_id="i1", protocols=PROTOCOLS)
    a1, a2 = h.answer(p1), h.answer(parked)
    assert a1.generation_id == a2.generation_id == 2 and a1.protocol_name == "roundrobin"


def test_static_rejoin_fences_a_parked_request_of_the_old_id() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    ids = stable_static_group(h)
    leader = h.core.groups[G].leader_id
    follower_instance = next(i for i, m in ids.items() if m != leader)
    old = ids[follower_instance]
    h.join(G, leader, instance_id=next(i for i, m in ids.items() if m == leader), protocols=PROTOCOLS)
    waiting = h.join(G, old, instance_id=follower_instance, protocols=PROTOCOLS)
    assert h.answer(waiting).generation_id == 2  # the last member rejoined: answered at once
    assert h.state(G) == "CompletingRebalance"
    parked_sync = h.sync(G, old, 2, instance_id=follower_instance)
    assert isinstance(parked_sync, Parked)
    restarted = h.join(G, instance_id=follower_instance, protocols=PROTOCOLS)
    assert h.answer(parked_sync) == SyncGroupResponse(E.FENCED_INSTANCE_ID)
    # In CompletingRebalance a static rejoin forces a new rebalance.
    assert isinstance(restarted, Parked) and h.state(G) == "PreparingRebalance"


def test_leave_by_instance_id_and_session_expiry_of_static_member() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    ids = stable_static_group(h)
    resp = h.leave(G, ("", "i2"), ("", "unknown-instance"))
    assert [(m.group_instance_id, m.error_code) for m in resp.members] == [
        ("i2", E.NONE),
        ("unknown-instance", E.UNKNOWN_MEMBER_ID),
    ]
    assert ids["i2"] not in h.core.groups[G].members and h.state(G) == "PreparingRebalance"
    # i1 never rejoins or heartbeats: being static it survives the rebalance timeout, not its session.
    h.advance(10_000)
    assert h.state(G) == "Empty"
    assert not h.core.groups[G].members
