"""The sans-io decisions behind the controller's requests and the session fence (a fake clock), and
the request builders round-tripped through the generated codecs in every version."""

from __future__ import annotations

import uuid

import pytest

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.broker_requests import (
    ALTER_PARTITION,
    EPOCH_DURING_DELETE,
    LEADER_AND_ISR,
    NO_EPOCH,
    STOP_REPLICA,
    UPDATE_METADATA,
    IsrProposal,
    PartitionInfo,
    SessionFence,
    alter_partition_decision,
    alter_partition_request,
    check_controller_request,
    leader_and_isr_partition,
    leader_and_isr_request,
    stop_replica_partition,
    stop_replica_request,
    update_metadata_request,
)
from kafkacompat.replication.partition_state import LeaderAndIsr, PartitionState, Role
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.messages import API_SPECS, decode_request, encode_request

TIMEOUT = 6000


def test_controller_request_checks_broker_epoch_before_controller_epoch() -> None:
    assert check_controller_request(3, 3, 100, 100) == ErrorCode.NONE
    assert check_controller_request(4, 3, -1, 100) == ErrorCode.NONE  # no broker epoch given
    assert check_controller_request(3, 3, 99, 100) == ErrorCode.STALE_BROKER_EPOCH
    assert check_controller_request(2, 3, 99, 100) == ErrorCode.STALE_BROKER_EPOCH
    assert check_controller_request(2, 3, 100, 100) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert check_controller_request(3, 3, 101, 100) == ErrorCode.NONE  # a newer registration


def test_leader_and_isr_partition_epochs() -> None:
    assert leader_and_isr_partition(5, 4, (1, 2), 2) == ErrorCode.NONE
    assert leader_and_isr_partition(0, -1, (1, 2), 2) == ErrorCode.NONE  # a new partition
    assert leader_and_isr_partition(5, 4, (1, 3), 2) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert leader_and_isr_partition(3, 4, (1, 2), 2) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert leader_and_isr_partition(4, 4, (1, 2), 2) == ErrorCode.FENCED_LEADER_EPOCH


def test_stop_replica_partition_epochs() -> None:
    assert stop_replica_partition(EPOCH_DURING_DELETE, 7) == ErrorCode.NONE
    assert stop_replica_partition(NO_EPOCH, 7) == ErrorCode.NONE
    assert stop_replica_partition(8, 7) == ErrorCode.NONE
    assert stop_replica_partition(6, 7) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert stop_replica_partition(7, 7) == ErrorCode.FENCED_LEADER_EPOCH


CURRENT = LeaderAndIsr(1, 5, (1, 2, 3), 2, 10)
LIVE = {1: 100, 2: 200, 3: 300}


def proposal(isr: tuple[int, ...], *, epoch: int = 5, version: int = 10, **epochs: int) -> IsrProposal:
    return IsrProposal(1, epoch, isr, {int(k[1:]): v for k, v in epochs.items()}, version)


def test_alter_partition_accepts_a_shrink_and_an_expansion() -> None:
    error, state = alter_partition_decision(proposal((1, 2)), CURRENT, LIVE)
    assert error == ErrorCode.NONE and state == LeaderAndIsr(1, 5, (1, 2), 2, 10)
    error, state = alter_partition_decision(proposal((1, 2, 3), b3=300), CURRENT.with_isr((1, 2)), LIVE)
    assert error == ErrorCode.NONE and state is not None and state.isr == (1, 2, 3)


def test_alter_partition_answers_the_current_state_again() -> None:
    error, state = alter_partition_decision(proposal((1, 2, 3), version=9), CURRENT, LIVE)
    assert error == ErrorCode.NONE and state is CURRENT


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        (proposal((1, 2), epoch=4), ErrorCode.FENCED_LEADER_EPOCH),
        (proposal((1, 2), epoch=6), ErrorCode.NOT_CONTROLLER),
        (proposal((1, 2), version=11), ErrorCode.NOT_CONTROLLER),
        (proposal((1, 2), version=9), ErrorCode.INVALID_UPDATE_VERSION),
        (proposal((1, 2, 4)), ErrorCode.INELIGIBLE_REPLICA),  # not live
        (proposal((1, 2, 3), b3=299), ErrorCode.INELIGIBLE_REPLICA),  # registered again since
        (IsrProposal(2, 5, (1, 2), {}, 10), ErrorCode.INVALID_REQUEST),  # not the leader
    ],
)
def test_alter_partition_refusals(candidate: IsrProposal, expected: ErrorCode) -> None:
    current = CURRENT.with_isr((1, 2)) if 3 in candidate.isr or 4 in candidate.isr else CURRENT
    assert alter_partition_decision(candidate, current, LIVE) == (expected, None)


def test_alter_partition_refuses_a_shutting_down_broker_and_unknown_partitions() -> None:
    grow = proposal((1, 2, 3))
    assert alter_partition_decision(grow, CURRENT.with_isr((1, 2)), LIVE, {3}) == (
        ErrorCode.INELIGIBLE_REPLICA,
        None,
    )
    assert alter_partition_decision(grow, None, LIVE) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)


# --- the session fence, on a fake clock -------------------------------------------------------------


def test_lost_session_fences_until_registered_again() -> None:
    fence = SessionFence(TIMEOUT)
    fence.on_tick(0)
    assert not fence.fenced(0)
    fence.on_state("LOST", 50)
    assert fence.fenced(60)
    fence.on_state("CONNECTED", 500)  # a new session, not yet registered
    fence.on_tick(500)
    assert fence.fenced(500)
    fence.rejoined()
    assert not fence.fenced(600)


def test_suspension_fences_only_past_the_session_timeout() -> None:
    fence = SessionFence(TIMEOUT)
    fence.on_state("SUSPENDED", 1000)
    assert not fence.fenced(1000 + TIMEOUT)
    assert fence.fenced(1001 + TIMEOUT)
    fence.on_state("SUSPENDED", 2000 + TIMEOUT)  # a second notice does not restart the clock
    assert fence.fenced(2000 + TIMEOUT)
    fence.on_state("CONNECTED", 3000 + TIMEOUT)  # the same session came back
    assert not fence.fenced(3000 + TIMEOUT)


def test_a_pause_of_the_process_fences_until_the_registration_is_confirmed() -> None:
    fence = SessionFence(TIMEOUT)
    assert not fence.on_tick(0)
    assert not fence.on_tick(100)
    # the request path may run before the tick after a SIGCONT: the gap alone fences
    assert fence.fenced(200 + TIMEOUT)
    assert fence.on_tick(200 + TIMEOUT)
    assert fence.fenced(300 + TIMEOUT)
    fence.registration_confirmed()
    assert not fence.fenced(300 + TIMEOUT)


def test_a_resigned_leader_takes_only_a_newer_epoch() -> None:
    state = PartitionState("t", 0, local_broker=1)
    state.become_leader(LeaderAndIsr(1, 5, (1, 2), 1, 3), (1, 2), 0, 0)
    state.resign()
    assert state.role is Role.NONE and state.leader_epoch == 5
    assert leader_and_isr_partition(5, state.leader_epoch, (1, 2), 1) == ErrorCode.FENCED_LEADER_EPOCH
    assert state.become_leader(LeaderAndIsr(1, 6, (1, 2), 2, 4), (1, 2), 10, 100)
    assert state.is_leader


# --- request builders through the generated codecs --------------------------------------------------

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
INFO = PartitionInfo("t", TOPIC_ID, 0, LeaderAndIsr(1, 5, (1, 2), 3, 7), (1, 2, 3), offline=(3,))
BROKER = zd.BrokerRegistration(1, {"PLAINTEXT": ("127.0.0.1", 9092)}, {"PLAINTEXT": "PLAINTEXT"}, "r1")


def _all_versions(api_key: int, request: object) -> list[object]:
    spec = API_SPECS[api_key]
    return [
        decode_request(api_key, v, memoryview(encode_request(api_key, v, request)))
        for v in range(spec.min_version, spec.max_version + 1)
    ]


def test_leader_and_isr_request_in_every_version() -> None:
    request = leader_and_isr_request(2, 3, 150, [INFO], [BROKER], "PLAINTEXT")
    decoded = _all_versions(LEADER_AND_ISR, request)
    for version, message in enumerate(decoded):
        states = (
            message.ungrouped_partition_states
            if version < 2
            else [p for t in message.topic_states for p in t.partition_states]
        )
        assert [(s.leader, s.leader_epoch, s.isr, s.partition_epoch, s.replicas) for s in states] == [
            (1, 5, [1, 2], 7, [1, 2, 3])
        ]
        assert message.controller_epoch == 3 and message.live_leaders[0].port == 9092
    assert decoded[-1].broker_epoch == 150 and decoded[-1].topic_states[0].topic_id == TOPIC_ID


def test_update_metadata_and_stop_replica_requests_in_every_version() -> None:
    for version, message in enumerate(
        _all_versions(UPDATE_METADATA, update_metadata_request(2, 3, 150, [INFO], [BROKER]))
    ):
        assert message.live_brokers[0].id == 1
        states = (
            message.ungrouped_partition_states
            if version < 5
            else [p for t in message.topic_states for p in t.partition_states]
        )
        assert [(s.leader, s.zk_version) for s in states] == [(1, 7)]
    stop = stop_replica_request(2, 3, 150, [("t", 0, EPOCH_DURING_DELETE, True)])
    for version, message in enumerate(_all_versions(STOP_REPLICA, stop)):
        if version >= 3:
            [state] = [p for t in message.topic_states for p in t.partition_states]
            assert (state.leader_epoch, state.delete_partition) == (EPOCH_DURING_DELETE, True)
        else:
            assert message.delete_partitions


def test_alter_partition_request_carries_isr_broker_epochs() -> None:
    request = alter_partition_request(
        1, 100, "t", TOPIC_ID, 0, LeaderAndIsr(1, 5, (1, 2), 3, 7), {1: 100, 2: 200}
    )
    decoded = _all_versions(ALTER_PARTITION, request)
    assert decoded[0].topics[0].topic_name == "t" and decoded[0].topics[0].partitions[0].new_isr == [1, 2]
    last = decoded[-1].topics[0]
    assert last.topic_id == TOPIC_ID
    assert [(b.broker_id, b.broker_epoch) for b in last.partitions[0].new_isr_with_epochs] == [
        (1, 100),
        (2, 200),
    ]
    assert last.partitions[0].partition_epoch == 7


def test_fetcher_ids_follow_kafkas_hash() -> None:
    from kafkacompat.replication.fetcher import _java_string_hash, fetcher_id

    assert _java_string_hash("hello") == 99162322  # Java's "hello".hashCode()
    assert _java_string_hash("polygenelubricants") == -(2**31)  # hashes to Integer.MIN_VALUE
    assert fetcher_id("polygenelubricants", 0, 7) == 0  # 31 * MIN_VALUE wraps to MIN_VALUE: abs is 0
    assert fetcher_id("hello", 0, 1) == 0
    # 31 * 99162322 + 5 overflows int32 to -1220934309, whose absolute value picks the fetcher
    assert fetcher_id("hello", 5, 4) == 1220934309 % 4
    # consecutive partitions of one topic alternate between two fetchers
    ids = [fetcher_id("t", p, 2) for p in range(4)]
    assert ids in ([0, 1, 0, 1], [1, 0, 1, 0])
