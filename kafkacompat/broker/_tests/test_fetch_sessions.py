"""FetchSessionCache (KIP-227) without a broker: creation, epochs, incremental filtering, eviction."""

from __future__ import annotations

import random

from kafkacompat.broker.fetch_sessions import EVICTION_IDLE_MS, FetchSessionCache, PartitionRequest
from kafkacompat.wire.errors import ErrorCode


def req(topic: str, partition: int, offset: int = 0) -> PartitionRequest:
    return PartitionRequest(topic, partition, offset, 1000)


def report(context, cached, hw: int, records: bool = False, error: int = 0) -> bool:  # type: ignore[no-untyped-def]
    return context.report(
        cached, high_watermark=hw, last_stable_offset=hw, log_start_offset=0, has_records=records, error=error
    )


def test_sessionless_and_new_session() -> None:
    cache = FetchSessionCache(10, random.Random(1))
    plain = cache.open(0, -1, [req("t", 0)], [], now_ms=0)
    assert (plain.session_id, plain.incremental, len(cache)) == (0, False, 0)
    full = cache.open(0, 0, [req("t", 0), req("t", 1)], [], now_ms=0)
    assert full.session_id != 0 and not full.incremental and len(cache) == 1
    assert [c.key for c in full.partitions] == [("t", 0), ("t", 1)]


def test_incremental_updates_forgets_and_filters() -> None:
    cache = FetchSessionCache(10)
    full = cache.open(0, 0, [req("t", 0), req("t", 1)], [], now_ms=0)
    for cached in full.partitions:
        assert report(full, cached, hw=5)
    inc = cache.open(full.session_id, 1, [req("t", 2, 7)], [("t", 0)], now_ms=1)
    assert inc.incremental and [c.key for c in inc.partitions] == [("t", 1), ("t", 2)]
    one, two = inc.partitions
    assert not report(inc, one, hw=5)  # unchanged
    assert report(inc, two, hw=0)  # new partition: first report differs from the unknown (-1)
    nxt = cache.open(full.session_id, 2, [], [], now_ms=2)
    assert report(nxt, nxt.partitions[0], hw=6)  # high watermark moved
    assert report(nxt, nxt.partitions[1], hw=0, records=True)
    assert report(nxt, nxt.partitions[1], hw=0, error=ErrorCode.OFFSET_OUT_OF_RANGE)


def test_session_errors_and_close() -> None:
    cache = FetchSessionCache(10)
    full = cache.open(0, 0, [req("t", 0)], [], now_ms=0)
    assert cache.open(full.session_id, 5, [], [], now_ms=0).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.open(full.session_id + 1, 1, [], [], now_ms=0).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.open(full.session_id, 1, [], [], now_ms=0).error == ErrorCode.NONE
    closed = cache.open(full.session_id, -1, [req("t", 0)], [], now_ms=0)
    assert closed.session_id == 0 and len(cache) == 0


def test_capacity_and_eviction() -> None:
    cache = FetchSessionCache(1)
    first = cache.open(0, 0, [req("t", 0)], [], now_ms=0)
    refused = cache.open(0, 0, [req("t", 0)], [], now_ms=10)
    assert refused.session_id == 0 and cache.get(first.session_id) is not None
    later = cache.open(0, 0, [req("t", 0)], [], now_ms=EVICTION_IDLE_MS + 1)
    assert later.session_id != 0 and cache.get(first.session_id) is None
    assert FetchSessionCache(0).open(0, 0, [req("t", 0)], [], now_ms=0).session_id == 0


def test_a_deleted_topic_is_forgotten_in_every_session_by_name_and_by_id() -> None:
    cache = FetchSessionCache(10)
    by_name = cache.open(0, 0, [req("gone", 0), req("kept", 0), req("gone", 1)], [], now_ms=0)
    by_id = cache.open(0, 0, [req("id-of-gone", 0), req("id-of-kept", 0)], [], now_ms=0)
    untouched = cache.open(0, 0, [req("kept", 1)], [], now_ms=0)
    cache.remove_topic("gone", "id-of-gone")
    assert list(cache.get(by_name.session_id).partitions) == [("kept", 0)]
    assert list(cache.get(by_id.session_id).partitions) == [("id-of-kept", 0)]
    assert list(cache.get(untouched.session_id).partitions) == [("kept", 1)]


def test_a_followers_session_evicts_a_consumers_when_the_cache_is_full() -> None:
    cache = FetchSessionCache(2, random.Random(2))
    small = cache.open(0, 0, [req("t", 0)], [], now_ms=0)
    big = cache.open(0, 0, [req("t", 0), req("t", 1)], [], now_ms=0)
    assert cache.open(0, 0, [req("t", 0)] * 1, [], now_ms=10).session_id == 0  # a consumer: refused
    follower = cache.open(0, 0, [req("t", 0)], [], now_ms=10, privileged=True)
    assert follower.session_id != 0 and cache.get(small.session_id) is None  # the smallest consumer goes
    assert cache.get(big.session_id) is not None
    # a follower's new session never evicts a recent follower session, and a consumer's never does
    other = cache.open(0, 0, [req("t", 0), req("t", 1), req("t", 2)], [], now_ms=20, privileged=True)
    assert other.session_id != 0 and cache.get(big.session_id) is None
    assert cache.open(0, 0, [req("u", 0)] * 5, [], now_ms=30, privileged=True).session_id == 0
    assert cache.open(0, 0, [req("u", 0)] * 5, [], now_ms=30).session_id == 0
    assert cache.get(follower.session_id).privileged


def test_an_old_follower_session_gives_way_to_a_bigger_one() -> None:
    cache = FetchSessionCache(1)
    old = cache.open(0, 0, [req("t", 0)], [], now_ms=0, privileged=True)
    # kept in use (incremental fetches), so never stale, but created long ago
    for epoch in range(1, 4):
        cache.open(old.session_id, epoch, [], [], now_ms=epoch * EVICTION_IDLE_MS // 2)
    now = 2 * EVICTION_IDLE_MS
    assert cache.open(0, 0, [req("u", 0)], [], now_ms=now, privileged=True).session_id == 0  # same size
    bigger = cache.open(0, 0, [req("u", 0), req("u", 1)], [], now_ms=now, privileged=True)
    assert bigger.session_id != 0 and cache.get(old.session_id) is None


def test_a_partition_answered_with_an_error_is_answered_again_once_it_is_gone() -> None:
    cache = FetchSessionCache(10)
    full = cache.open(0, 0, [req("t", 0)], [], now_ms=0)
    assert report(full, full.partitions[0], hw=5)
    inc = cache.open(full.session_id, 1, [], [], now_ms=0)
    assert report(inc, inc.partitions[0], hw=5, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    inc = cache.open(full.session_id, 2, [], [], now_ms=0)
    assert report(inc, inc.partitions[0], hw=5)  # the error went away: named again with its offsets
    inc = cache.open(full.session_id, 3, [], [], now_ms=0)
    assert not report(inc, inc.partitions[0], hw=5)
