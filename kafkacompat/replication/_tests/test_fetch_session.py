"""The follower's fetch session (KIP-227) without a broker: full, incremental, errors and restarts, and
against the leader's FetchSessionCache."""

from __future__ import annotations

import random

from kafkacompat.broker.fetch_sessions import FetchSessionCache, PartitionRequest
from kafkacompat.replication.fetch_session import (
    INT32_MAX,
    FollowerFetchSession,
    PartitionFetch,
)
from kafkacompat.wire.errors import ErrorCode

A = ("t", 0)
B = ("t", 1)
C = ("u", 0)


def fetch(offset: int, epoch: int = 3, log_start: int = 0) -> PartitionFetch:
    return PartitionFetch(
        fetch_offset=offset, log_start_offset=log_start, current_leader_epoch=epoch, max_bytes=100
    )


def started(session_id: int = 42) -> FollowerFetchSession:
    """A session the leader created for {A: 5, B: 7}."""
    session = FollowerFetchSession()
    request = session.build({A: fetch(5), B: fetch(7)})
    assert session.handle_response(request, ErrorCode.NONE, session_id, [A, B])
    return session


def test_the_first_request_is_full_and_creates_the_session() -> None:
    session = FollowerFetchSession()
    request = session.build({A: fetch(5), B: fetch(7)})
    assert (request.session_id, request.epoch, request.full) == (0, 0, True)
    assert request.to_send == {A: fetch(5), B: fetch(7)} and request.forgotten == []
    assert session.handle_response(request, ErrorCode.NONE, 42, [B, A])
    assert (session.session_id, session.epoch) == (42, 1)


def test_an_idle_incremental_request_names_nothing_and_the_epoch_moves_on() -> None:
    session = started()
    for epoch in (1, 2, 3):
        request = session.build({A: fetch(5), B: fetch(7)})
        assert (request.session_id, request.epoch, request.full) == (42, epoch, False)
        assert request.to_send == {} and request.forgotten == []
        assert session.handle_response(request, ErrorCode.NONE, 42, [])  # nothing new: nothing named
    assert session.epoch == 4


def test_only_changed_added_and_removed_partitions_are_sent() -> None:
    session = started()
    request = session.build({A: fetch(9), B: fetch(7, log_start=2)})
    assert request.to_send == {A: fetch(9), B: fetch(7, log_start=2)}
    assert session.handle_response(request, ErrorCode.NONE, 42, [A])
    request = session.build({A: fetch(9, epoch=4), C: fetch(0)})  # B left out: forgotten
    assert request.to_send == {A: fetch(9, epoch=4), C: fetch(0)} and request.forgotten == [B]
    assert session.handle_response(request, ErrorCode.NONE, 42, [C])
    request = session.build({A: fetch(9, epoch=4), B: fetch(7), C: fetch(0)})  # B back: added again
    assert request.to_send == {B: fetch(7)} and request.forgotten == []


def test_session_id_not_found_starts_a_new_session_from_zero() -> None:
    session = started()
    request = session.build({A: fetch(5), B: fetch(7)})
    assert not session.handle_response(request, ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
    request = session.build({A: fetch(5), B: fetch(7)})
    assert (request.session_id, request.epoch) == (0, 0) and request.to_send == {A: fetch(5), B: fetch(7)}


def test_an_invalid_epoch_closes_the_old_session_with_a_full_request() -> None:
    session = started()
    request = session.build({A: fetch(5), B: fetch(7)})
    assert not session.handle_response(request, ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
    request = session.build({A: fetch(5), B: fetch(7)})
    assert (request.session_id, request.epoch, request.full) == (42, 0, True)
    assert request.to_send == {A: fetch(5), B: fetch(7)}
    assert session.handle_response(request, ErrorCode.NONE, 43, [A, B])
    assert (session.session_id, session.epoch) == (43, 1)


def test_a_failed_request_makes_the_next_one_full() -> None:
    session = started()
    request = session.build({A: fetch(6), B: fetch(7)})
    assert request.to_send == {A: fetch(6)}
    session.handle_error()  # connection reset, timeout: no answer
    request = session.build({A: fetch(6), B: fetch(7)})
    assert (request.session_id, request.epoch) == (42, 0)
    assert request.to_send == {A: fetch(6), B: fetch(7)}


def test_a_leader_without_a_free_slot_gets_full_requests() -> None:
    session = FollowerFetchSession()
    request = session.build({A: fetch(5)})
    assert session.handle_response(request, ErrorCode.NONE, 0, [A])  # data usable, no session
    request = session.build({A: fetch(5)})
    assert (request.session_id, request.epoch) == (0, 0) and request.to_send == {A: fetch(5)}


def test_unusable_answers_are_refused_and_restart_the_session() -> None:
    session = FollowerFetchSession()
    request = session.build({A: fetch(5), B: fetch(7)})
    assert not session.handle_response(request, ErrorCode.NONE, 42, [A])  # a full answer missing B
    assert (session.session_id, session.epoch) == (0, 0)
    session = started()
    request = session.build({A: fetch(5), B: fetch(7)})
    assert not session.handle_response(request, ErrorCode.NONE, 42, [C])  # not in the session
    assert (session.session_id, session.epoch) == (42, 0)


def test_a_session_closed_by_the_leader_restarts_but_its_answer_counts() -> None:
    session = started()
    request = session.build({A: fetch(5), B: fetch(7)})
    assert session.handle_response(request, ErrorCode.NONE, 0, [A])
    assert (session.session_id, session.epoch) == (0, 0)


def test_the_epoch_wraps_to_one() -> None:
    session = started()
    session.epoch = INT32_MAX
    request = session.build({A: fetch(5), B: fetch(7)})
    assert request.epoch == INT32_MAX
    assert session.handle_response(request, ErrorCode.NONE, 42, [])
    assert session.epoch == 1


def test_against_the_leaders_cache() -> None:
    """Follower and leader halves together: the leader's session keeps every partition's fetch offset,
    including those an incremental request leaves out, and answers only what moved."""
    cache = FetchSessionCache(10, random.Random(3))
    session = FollowerFetchSession()
    log_end = {A: 5, B: 7}
    leader_hw = {A: 5, B: 7}

    def round_trip() -> dict[tuple[str, int], int]:
        wanted = {key: fetch(offset) for key, offset in log_end.items()}
        request = session.build(wanted)
        context = cache.open(
            request.session_id,
            request.epoch,
            [
                PartitionRequest(t, p, d.fetch_offset, d.max_bytes, d.current_leader_epoch)
                for (t, p), d in request.to_send.items()
            ],
            list(request.forgotten),
            now_ms=0,
            privileged=True,
        )
        answered = {
            cached.key: cached.fetch_offset
            for cached in context.partitions
            if context.report(
                cached,
                high_watermark=leader_hw[cached.key],
                last_stable_offset=leader_hw[cached.key],
                log_start_offset=0,
                has_records=False,
                error=context.error,
            )
        }
        assert session.handle_response(request, context.error, context.session_id, answered)
        # every session partition is read, with the offset the leader holds for it
        return {cached.key: cached.fetch_offset for cached in context.partitions}

    assert round_trip() == {A: 5, B: 7}
    assert round_trip() == {A: 5, B: 7}
    log_end[A] = 6
    assert round_trip() == {A: 6, B: 7}
    assert session.epoch == 3
    del log_end[B]
    assert round_trip() == {A: 6}
    cache.open(session.session_id, -1, [], [], now_ms=0)  # the leader lost it
    wanted = {A: fetch(6)}
    request = session.build(wanted)
    context = cache.open(request.session_id, request.epoch, [], [], now_ms=0)
    assert context.error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert not session.handle_response(request, context.error, 0, [])
    assert round_trip() == {A: 6} and session.epoch == 1
