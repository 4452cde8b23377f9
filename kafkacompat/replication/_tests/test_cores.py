"""The sans-io replication cores: partition state (ISR, HW, min.insync.replicas), controller decisions
(assignment, elections, broker loss), follower truncation. Time is a plain integer (a fake clock)."""

from __future__ import annotations

import random

import pytest

from kafkacompat.replication.controller import (
    BrokerMetadata,
    assign_replicas,
    elect_for_controlled_shutdown,
    elect_offline_leader,
    elect_preferred_leader,
    on_brokers_lost,
    preferred_leader_moves,
    rack_alternated_brokers,
)
from kafkacompat.replication.fetcher import FetchPhase, FollowerFetchState
from kafkacompat.replication.partition_state import LeaderAndIsr, PartitionState, Role
from kafkacompat.wire.errors import ErrorCode, KafkaError

LAG_MS = 30_000


def leader_state(now: int = 0, leo: int = 0) -> PartitionState:
    state = PartitionState("t", 0, local_broker=1)
    state.become_leader(LeaderAndIsr(1, 5, (1, 2, 3), 1, 0), (1, 2, 3), leo, now)
    return state


# --- partition state ---------------------------------------------------------------------------------


def test_roles_follow_the_leader_field() -> None:
    state = PartitionState("t", 0, local_broker=2)
    assert state.role is Role.NONE
    assert state.become_follower(LeaderAndIsr(1, 0, (1, 2), 1, 0), (1, 2))
    assert state.role is Role.FOLLOWER
    assert not state.become_follower(LeaderAndIsr(1, 0, (1, 2), 1, 1), (1, 2))  # same leader and epoch
    assert state.become_leader(LeaderAndIsr(2, 1, (2,), 1, 2), (1, 2), 10, 0)
    assert state.role is Role.LEADER and state.leader_epoch_start_offset == 10


def test_an_older_leader_epoch_is_fenced() -> None:
    state = leader_state()
    with pytest.raises(KafkaError) as info:
        state.become_follower(LeaderAndIsr(2, 4, (2, 3), 1, 0), (1, 2, 3))
    assert info.value.code is ErrorCode.FENCED_LEADER_EPOCH
    assert state.is_leader and state.leader_epoch == 5


def test_client_leader_epoch_check() -> None:
    state = leader_state()
    state.check_leader_epoch(-1)
    state.check_leader_epoch(5)
    with pytest.raises(KafkaError) as older:
        state.check_leader_epoch(4)
    with pytest.raises(KafkaError) as newer:
        state.check_leader_epoch(6)
    assert older.value.code is ErrorCode.FENCED_LEADER_EPOCH
    assert newer.value.code is ErrorCode.UNKNOWN_LEADER_EPOCH


def test_high_watermark_is_the_minimum_leo_of_the_isr() -> None:
    state = leader_state()
    assert not state.maybe_advance_high_watermark(10)  # followers have not fetched yet
    state.record_follower_fetch(2, 10, 10, now_ms=1)
    assert not state.maybe_advance_high_watermark(10)  # replica 3 is in the ISR at -1
    state.record_follower_fetch(3, 7, 10, now_ms=1)
    assert state.maybe_advance_high_watermark(10) and state.high_watermark == 7
    state.record_follower_fetch(3, 10, 10, now_ms=2)
    assert state.maybe_advance_high_watermark(10) and state.high_watermark == 10
    state.record_follower_fetch(3, 4, 10, now_ms=3)  # a stale fetch never moves the HW back
    assert not state.maybe_advance_high_watermark(10) and state.high_watermark == 10


def test_isr_shrinks_after_the_lag_time_and_expands_when_caught_up() -> None:
    state = leader_state()
    state.record_follower_fetch(2, 0, 0, now_ms=1000)
    state.record_follower_fetch(3, 0, 0, now_ms=1000)
    # replica 2 keeps fetching from the end; replica 3 stops at 0 while the leader grows to 50
    for now in range(2000, 40_000, 1000):
        state.record_follower_fetch(2, 50, 50, now_ms=now)
    assert state.out_of_sync_replicas(now_ms=LAG_MS + 1000, lag_ms=LAG_MS) == set()
    assert state.out_of_sync_replicas(now_ms=LAG_MS + 1001, lag_ms=LAG_MS) == {3}
    proposal = state.propose_isr((1, 2))
    assert proposal.isr == (1, 2) and proposal.leader_epoch == 5 and proposal.zk_version == 0
    state.commit_isr((1, 2), zk_version=1)
    assert state.isr == (1, 2) and state.pending_isr is None
    assert state.maybe_advance_high_watermark(50) and state.high_watermark == 50
    assert not state.should_expand_isr(3)
    state.record_follower_fetch(3, 50, 50, now_ms=41_000)
    assert state.should_expand_isr(3)
    state.propose_isr((1, 2, 3))
    assert state.maximal_isr == (1, 2, 3) and not state.should_expand_isr(3)
    state.abort_isr_change()
    assert state.isr == (1, 2) and state.maximal_isr == (1, 2)


def test_a_follower_fetching_what_was_the_end_counts_as_caught_up() -> None:
    state = leader_state()
    state.record_follower_fetch(2, 0, 100, now_ms=1000)  # behind: not caught up at 1000
    state.record_follower_fetch(2, 100, 150, now_ms=2000)  # fetched all the leader had at 1000
    assert state.followers[2].last_caught_up_ms == 1000
    assert state.out_of_sync_replicas(now_ms=1000 + LAG_MS + 1, lag_ms=LAG_MS) >= {2}


def test_expansion_needs_the_start_of_the_leader_epoch() -> None:
    state = PartitionState("t", 0, local_broker=1)
    state.become_leader(LeaderAndIsr(1, 3, (1,), 1, 0), (1, 2), 20, 0)
    state.record_follower_fetch(2, 0, 20, now_ms=1)
    state.maybe_advance_high_watermark(20)
    assert state.high_watermark == 20 and not state.should_expand_isr(2)
    state.record_follower_fetch(2, 20, 20, now_ms=2)
    assert state.should_expand_isr(2)


def test_min_insync_replicas() -> None:
    state = leader_state()
    state.check_enough_replicas_for_append(-1, 3)
    state.commit_isr((1,), zk_version=1)
    state.check_enough_replicas_for_append(1, 2)  # acks=1 does not care
    with pytest.raises(KafkaError) as info:
        state.check_enough_replicas_for_append(-1, 2)
    assert info.value.code is ErrorCode.NOT_ENOUGH_REPLICAS


def test_parked_produce_completes_when_the_isr_has_the_data() -> None:
    state = leader_state()
    assert state.replicas_reached(10, 2) == (False, ErrorCode.NONE)
    state.record_follower_fetch(2, 10, 10, 1)
    state.record_follower_fetch(3, 10, 10, 1)
    state.maybe_advance_high_watermark(10)
    assert state.replicas_reached(10, 2) == (True, ErrorCode.NONE)
    state.commit_isr((1,), zk_version=1)
    assert state.replicas_reached(10, 2) == (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    state.become_follower(LeaderAndIsr(2, 6, (2, 3), 1, 2), (1, 2, 3))
    assert state.replicas_reached(10, 2) == (False, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    with pytest.raises(KafkaError):
        state.check_enough_replicas_for_append(-1, 1)


def test_a_non_replica_cannot_fetch_as_follower() -> None:
    state = leader_state()
    with pytest.raises(KafkaError) as info:
        state.record_follower_fetch(9, 0, 0, 1)
    assert info.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER


# --- controller decisions ----------------------------------------------------------------------------


def test_rack_unaware_assignment_matches_kafka() -> None:
    brokers = [BrokerMetadata(i) for i in range(5)]
    assert assign_replicas(brokers, 10, 3, start_index=0, start_partition=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }  # fmt: skip


def test_rack_aware_assignment_matches_kafka() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    brokers = [BrokerMetadata(b, r) for b, r in racks.items()]
    assert rack_alternated_brokers(brokers) == [0, 3, 1, 5, 4, 2]
    assert assign_replicas(brokers, 7, 3, start_index=0, start_partition=0) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2],
    }  # fmt: skip


def test_random_rack_aware_assignment_spreads_every_partition_over_racks() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    brokers = [BrokerMetadata(b, r) for b, r in racks.items()]
    assignment = assign_replicas(brokers, 30, 3, rng=random.Random(7))
    assert sorted(assignment) == list(range(30))
    for replicas in assignment.values():
        assert len(set(replicas)) == 3 and len({racks[b] for b in replicas}) == 3
    leaders = [replicas[0] for replicas in assignment.values()]
    assert all(leaders.count(b) == 5 for b in racks)


def test_assignment_errors() -> None:
    with pytest.raises(KafkaError) as too_many:
        assign_replicas([BrokerMetadata(1)], 1, 2)
    assert too_many.value.code is ErrorCode.INVALID_REPLICATION_FACTOR
    with pytest.raises(KafkaError) as zero:
        assign_replicas([BrokerMetadata(1)], 1, 0)
    assert zero.value.code is ErrorCode.INVALID_REPLICATION_FACTOR
    with pytest.raises(KafkaError) as mixed:
        assign_replicas([BrokerMetadata(1, "a"), BrokerMetadata(2)], 1, 1)
    assert "rack" in str(mixed.value)


def test_elections() -> None:
    assert elect_offline_leader([1, 2, 3], [2, 3], {2, 3}, unclean=False) == (2, (2, 3))
    assert elect_offline_leader([1, 2, 3], [1], {2, 3}, unclean=False) == (-1, (1,))
    assert elect_offline_leader([1, 2, 3], [1], {2, 3}, unclean=True) == (2, (2,))
    assert elect_preferred_leader([1, 2, 3], [1, 2], {1, 2}) == 1
    assert elect_preferred_leader([1, 2, 3], [2, 3], {1, 2, 3}) == -1
    assert elect_for_controlled_shutdown([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}) == (2, (2, 3))


def test_broker_loss_moves_leaders_and_shrinks_isrs() -> None:
    partitions = {
        ("t", 0): ([1, 2, 3], LeaderAndIsr(1, 4, (1, 2, 3), 1, 7)),
        ("t", 1): ([2, 3, 1], LeaderAndIsr(2, 0, (2, 3, 1), 1, 3)),
        ("t", 2): ([3, 1, 2], LeaderAndIsr(3, 0, (3, 2), 1, 3)),
        ("u", 0): ([1], LeaderAndIsr(1, 2, (1,), 1, 0)),
    }
    changes = on_brokers_lost(partitions, {1}, {2, 3}, controller_epoch=2)
    assert changes[("t", 0)] == LeaderAndIsr(2, 5, (2, 3), 2, 7)
    assert changes[("t", 1)] == LeaderAndIsr(2, 1, (2, 3), 2, 3)
    assert ("t", 2) not in changes
    assert changes[("u", 0)] == LeaderAndIsr(-1, 3, (1,), 2, 0)  # offline; the last ISR member is kept
    # when broker 1 comes back, the offline partition gets it as leader again
    back = on_brokers_lost({("u", 0): ([1], changes[("u", 0)])}, set(), {1, 2, 3}, controller_epoch=2)
    assert back[("u", 0)] == LeaderAndIsr(1, 4, (1,), 2, 0)


def test_unclean_election_per_topic() -> None:
    partitions = {
        ("clean", 0): ([1, 2], LeaderAndIsr(1, 0, (1,), 1, 0)),
        ("dirty", 0): ([1, 2], LeaderAndIsr(1, 0, (1,), 1, 0)),
    }
    changes = on_brokers_lost(partitions, {1}, {2}, 1, unclean={"dirty": True})
    assert changes[("clean", 0)].leader == -1
    assert changes[("dirty", 0)] == LeaderAndIsr(2, 1, (2,), 1, 0)


# --- follower truncation -----------------------------------------------------------------------------


def test_truncation_to_the_leaders_epoch_boundary() -> None:
    fetch = FollowerFetchState("t", 0, leader=1, current_leader_epoch=5)
    # we asked for our latest epoch 3; the leader has it too but it ended at 100 there; ours ends at 120
    decision = fetch.on_epoch_end_offset(3, 100, (3, 120), local_log_end_offset=120, local_high_watermark=90)
    assert (decision.truncate_to, decision.complete) == (100, True)
    assert fetch.phase is FetchPhase.FETCHING and fetch.fetch_offset == 100


def test_truncation_in_rounds_when_the_leader_never_had_our_epoch() -> None:
    fetch = FollowerFetchState("t", 0, leader=1, current_leader_epoch=5)
    # we asked for epoch 4; the leader's latest epoch at or below 4 is 2, ending at 80; our epoch 2 ended
    # at 70 (our epoch 3 started there): truncate to 70 and ask again
    decision = fetch.on_epoch_end_offset(2, 80, (1, 70), local_log_end_offset=150, local_high_watermark=60)
    assert (decision.truncate_to, decision.complete) == (70, False)
    assert fetch.phase is FetchPhase.TRUNCATING
    decision = fetch.on_epoch_end_offset(1, 70, (1, 70), local_log_end_offset=70, local_high_watermark=60)
    assert (decision.truncate_to, decision.complete) == (70, True)


def test_truncation_without_epochs() -> None:
    fetch = FollowerFetchState("t", 0, leader=1, current_leader_epoch=0)
    assert fetch.on_epoch_end_offset(-1, -1, None, 50, 40).truncate_to == 40
    fetch.new_leader(2, 1)
    assert fetch.phase is FetchPhase.TRUNCATING
    assert fetch.on_epoch_end_offset(0, 30, None, 50, 40).truncate_to == 30
    fetch.on_fetched(45)
    assert fetch.fetch_offset == 45
    assert fetch.on_fetch_error(ErrorCode.FENCED_LEADER_EPOCH) and fetch.phase is FetchPhase.TRUNCATING
    assert not fetch.on_fetch_error(ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_auto_rebalance_moves_leaders_back_past_the_imbalance_threshold() -> None:
    partitions = {
        ("t", 0): ([1, 2], LeaderAndIsr(2, 3, (1, 2), 1, 0)),  # 1 preferred, in the ISR: movable
        ("t", 1): ([1, 2], LeaderAndIsr(1, 0, (1, 2), 1, 0)),
        ("t", 2): ([1, 2], LeaderAndIsr(2, 3, (2,), 1, 0)),  # 1 not in the ISR: stays
        ("t", 3): ([2, 1], LeaderAndIsr(2, 0, (1, 2), 1, 0)),
    }
    assert preferred_leader_moves(partitions, {1, 2}, 10) == [("t", 0)]
    assert preferred_leader_moves(partitions, {1, 2}, 70) == []  # 2 of 3 not led: 66% <= 70%
    assert preferred_leader_moves(partitions, {2}, 10) == []  # the preferred broker is down
