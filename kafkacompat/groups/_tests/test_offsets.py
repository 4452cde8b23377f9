"""OffsetCommit / OffsetFetch / OffsetDelete rules and offset expiry."""

from __future__ import annotations

import pytest

from kafkacompat.groups._tests.harness import Harness, subscription
from kafkacompat.groups.api import OffsetCommitPartition, OffsetCommitRequest, Parked
from kafkacompat.groups.group import parse_subscribed_topics
from kafkacompat.groups.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
    decode_offset_commit_value,
)
from kafkacompat.wire.errors import ErrorCode as E

G = "offsets-group"


def one_member_group(h: Harness, topics: tuple[str, ...] = ("t",), protocol_type: str = "consumer") -> str:
    protocols = [("range", subscription(*topics))]
    (j,) = h.settle([h.join_with_id(G, protocols=protocols, protocol_type=protocol_type)], 100)
    h.sync(G, j.member_id, 1, [])
    assert h.state(G) == "Stable"
    return j.member_id


def tombstoned(h: Harness) -> list[object]:
    return [decode_key(r.key) for r in h.log if r.value is None]


def test_standalone_commit_and_fetch() -> None:
    h = Harness()
    assert h.commit("simple", {("t", 0): 10, ("t", 1): 20}, metadata="meta") == {
        ("t", 0): E.NONE,
        ("t", 1): E.NONE,
    }
    assert h.fetch("simple") == {("t", 0): 10, ("t", 1): 20}
    assert h.fetch("simple", [("t", 1), ("t", 7), ("u", 0)]) == {("t", 1): 20, ("t", 7): -1, ("u", 0): -1}
    fetched = h.absorb(h.core.offset_fetch("simple", [("t", 0), ("t", 9)], h.now))
    assert [(p.metadata, p.leader_epoch) for p in fetched.partitions] == [("meta", -1), ("", -1)]
    assert h.state("simple") == "Empty"
    # The record written is Kafka's OffsetCommit key/value.
    key = decode_key(h.log[-1].key)
    assert key == OffsetCommitKey("simple", "t", 1)
    value = decode_offset_commit_value(h.log[-1].value)
    assert (value.offset, value.metadata, value.commit_timestamp) == (20, "meta", h.now)
    # Empty group id is allowed for offset commits (backwards compatibility).
    assert h.commit("", {("t", 0): 1}) == {("t", 0): E.NONE}
    assert h.fetch("") == {("t", 0): 1}
    # A generation for a group that does not exist: a stale member.
    assert h.commit("gone", {("t", 0): 1}, generation=3, member_id="m") == {("t", 0): E.ILLEGAL_GENERATION}
    assert h.fetch("never") == {}


def test_member_commit_rules() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    member = one_member_group(h)
    ok = {("t", 0): E.NONE}
    assert h.commit(G, {("t", 0): 5}, 1, member) == ok
    assert h.commit(G, {("t", 0): 5}, 0, member) == {("t", 0): E.ILLEGAL_GENERATION}
    assert h.commit(G, {("t", 0): 5}, 1, "stranger") == {("t", 0): E.UNKNOWN_MEMBER_ID}
    # A standalone commit while the group has members is refused.
    assert h.commit(G, {("t", 0): 5}) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    # During PreparingRebalance commits of the current generation are still accepted...
    newcomer = h.join_with_id(G)
    assert isinstance(newcomer, Parked) and h.state(G) == "PreparingRebalance"
    assert h.commit(G, {("t", 0): 6}, 1, member) == ok
    # ...but not in CompletingRebalance.
    h.join(G, member)
    assert h.state(G) == "CompletingRebalance"
    assert h.commit(G, {("t", 0): 7}, 2, member) == {("t", 0): E.REBALANCE_IN_PROGRESS}
    big = "x" * 4097
    req = OffsetCommitRequest(
        G,
        [OffsetCommitPartition("t", 0, 8, metadata=big), OffsetCommitPartition("t", 1, 9, leader_epoch=4)],
        generation_id=2,
        member_id=member,
    )
    other = h.answer(newcomer).member_id
    waiting = h.sync(G, other, 2)
    h.sync(G, member, 2, [])
    assert h.answer(waiting).error_code == E.NONE
    result = h.absorb(h.core.offset_commit(req, h.now))
    assert result == [(("t", 0), E.OFFSET_METADATA_TOO_LARGE), (("t", 1), E.NONE)]
    fetched = h.absorb(h.core.offset_fetch(G, [("t", 1)], h.now)).partitions[0]
    assert (fetched.offset, fetched.leader_epoch) == (9, 4)


def test_commit_keeps_a_member_alive() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    member = one_member_group(h)
    for _ in range(4):
        h.advance(6000)
        assert h.commit(G, {("t", 0): 1}, 1, member) == {("t", 0): E.NONE}
    assert member in h.core.groups[G].members


def test_offset_delete() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    assert h.absorb(h.core.offset_delete("none", [("t", 0)], h.now)) == (E.GROUP_ID_NOT_FOUND, [])
    assert h.absorb(h.core.offset_delete("", [("t", 0)], h.now)) == (E.INVALID_GROUP_ID, [])
    member = one_member_group(h, topics=("t",))
    h.commit(G, {("t", 0): 1, ("u", 0): 2}, 1, member)
    error, parts = h.absorb(h.core.offset_delete(G, [("t", 0), ("u", 0), ("v", 0)], h.now))
    assert error == E.NONE
    assert parts == [(("t", 0), E.GROUP_SUBSCRIBED_TO_TOPIC), (("u", 0), E.NONE), (("v", 0), E.NONE)]
    assert h.fetch(G) == {("t", 0): 1}
    assert tombstoned(h) == [OffsetCommitKey(G, "u", 0)]
    # Once the group is empty everything can go, and with its last offset the group itself.
    h.leave(G, (member, None))
    assert h.state(G) == "Empty"
    error, parts = h.absorb(h.core.offset_delete(G, [("t", 0)], h.now))
    assert (error, parts) == (E.NONE, [(("t", 0), E.NONE)])
    assert G not in h.core.groups
    assert tombstoned(h)[-2:] == [OffsetCommitKey(G, "t", 0), GroupMetadataKey(G)]


def test_offset_delete_needs_known_subscriptions() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    # Unparseable consumer subscription: every topic counts as subscribed.
    (j,) = h.settle([h.join_with_id(G, protocols=[("range", b"\x00")])], 100)
    h.sync(G, j.member_id, 1, [])
    _, parts = h.absorb(h.core.offset_delete(G, [("x", 0)], h.now))
    assert parts == [(("x", 0), E.GROUP_SUBSCRIBED_TO_TOPIC)]
    # A non-consumer protocol type with members: NON_EMPTY_GROUP.
    (j,) = h.settle([h.join_with_id("connect-g", protocol_type="connect", protocols=[("v1", b"")])], 100)
    assert h.absorb(h.core.offset_delete("connect-g", [("x", 0)], h.now)) == (E.NON_EMPTY_GROUP, [])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_subscription_parsing_matches_kafka_python() -> None:
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    for version in (0, 1, 2, 3):
        kw = {"topics": ["a", "bb", "ünï"], "user_data": b"ud"}
        if version >= 1:
            kw["owned_partitions"] = []
        if version >= 2:
            kw["generation_id"] = 5
        if version >= 3:
            kw["rack_id"] = "r"
        raw = ConsumerProtocolSubscription(version=version, **kw).encode(version=version)
        assert parse_subscribed_topics(raw) == {"a", "bb", "ünï"}
    assert parse_subscribed_topics(b"") is None
    assert parse_subscribed_topics(b"\x00\x00\x7f\xff\xff\xff") is None
    assert parse_subscribed_topics(b"\x00\x00\x00\x00\x00\x01\x00\x05ab") is None
    assert parse_subscribed_topics(b"\xff\xff\x00\x00\x00\x00") is None


def test_expiry_of_standalone_offsets() -> None:
    h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000)
    h.commit("simple", {("t", 0): 1})
    h.advance(30_000)
    h.commit("simple", {("t", 1): 2})
    h.advance(30_000)
    assert h.fetch("simple") == {("t", 1): 2}
    assert tombstoned(h) == [OffsetCommitKey("simple", "t", 0)]
    h.advance(30_000)
    assert h.fetch("simple") == {}
    # Generation 0: the group only held offsets, so no group tombstone is written.
    assert tombstoned(h) == [OffsetCommitKey("simple", "t", 0), OffsetCommitKey("simple", "t", 1)]
    assert "simple" not in h.core.groups


def test_expiry_counts_from_when_a_consumer_group_became_empty() -> None:
    h = Harness(
        initial_rebalance_delay_ms=100, offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000
    )
    member = one_member_group(h, topics=("t",))
    h.commit(G, {("t", 0): 1, ("other", 0): 2}, 1, member)
    for _ in range(12):
        h.advance(5000)
        h.heartbeat(G, member, 1)
    # Stable: only the topic nobody subscribes to has expired.
    assert h.fetch(G) == {("t", 0): 1}
    h.leave(G, (member, None))
    assert h.state(G) == "Empty"
    h.advance(59_000)
    assert h.fetch(G) == {("t", 0): 1}
    h.advance(1000)
    assert h.fetch(G) == {}
    assert G not in h.core.groups
    assert tombstoned(h)[-1] == GroupMetadataKey(G)


def test_explicit_retention_of_old_commit_versions() -> None:
    h = Harness(offsets_retention_check_interval_ms=1000)
    h.commit("old", {("t", 0): 1}, retention_time_ms=5000)
    value = decode_offset_commit_value(h.log[-1].value)
    assert value.expire_timestamp == h.now + 5000
    assert h.log[-1].value[:2] == b"\x00\x01"  # written as OffsetCommitValue v1, as Kafka does
    h.advance(5000)
    assert h.fetch("old") == {}


def test_commit_v1_explicit_timestamp_and_null_metadata() -> None:
    h = Harness()
    req = OffsetCommitRequest("v1", [OffsetCommitPartition("t", 0, 3, metadata=None, commit_timestamp=1234)])
    assert h.absorb(h.core.offset_commit(req, h.now)) == [(("t", 0), E.NONE)]
    value = decode_offset_commit_value(h.log[-1].value)
    assert (value.commit_timestamp, value.metadata, value.leader_epoch) == (1234, "", -1)
