"""Committed offsets of every group, and which of them have expired.

Theory of operation
-------------------
``OffsetStore`` is a map group -> (topic, partition) -> ``CommittedOffset``, owned by
``GroupCoordinatorCore``; the core decides whether a commit is allowed (generation and member checks
live there, next to the group state they read) and then calls ``put``. Each change corresponds to one
OffsetCommit record or tombstone in __consumer_offsets; ``replay`` in the core calls the same methods.

Expiry follows Kafka (KIP-211): an offset committed with an explicit retention (OffsetCommit v2-4,
written as OffsetCommitValue v1) expires at its own expire timestamp; otherwise
* a group with a protocol type that is Empty: every offset, ``offsets.retention.minutes`` after the
  group became Empty (or after the commit, if that time is unknown);
* a "consumer" group that is Stable and knows its subscriptions: offsets of topics nobody subscribes
  to, ``retention`` after their commit;
* a group with no protocol type (standalone/simple commits only): each offset, ``retention`` after
  its commit;
* otherwise nothing expires.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kafkacompat.groups.group import Group
from kafkacompat.groups.state import GroupState

__all__ = ["CommittedOffset", "OffsetStore", "TopicPartition"]

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    # -1: none (the broker-wide retention applies).
    expire_timestamp: int = -1


class OffsetStore:
    """All committed offsets; owned by GroupCoordinatorCore."""

    def __init__(self) -> None:
        self._by_group: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    def get(self, group_id: str, tp: TopicPartition) -> CommittedOffset | None:
        offsets = self._by_group.get(group_id)
        return None if offsets is None else offsets.get(tp)

    def all(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return self._by_group.get(group_id, {})

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._by_group.get(group_id))

    def groups(self) -> Iterable[str]:
        return list(self._by_group)

    def put(self, group_id: str, tp: TopicPartition, committed: CommittedOffset) -> None:
        self._by_group.setdefault(group_id, {})[tp] = committed

    def delete(self, group_id: str, tp: TopicPartition) -> bool:
        offsets = self._by_group.get(group_id)
        if offsets is None or tp not in offsets:
            return False
        del offsets[tp]
        if not offsets:
            del self._by_group[group_id]
        return True

    def delete_group(self, group_id: str) -> list[TopicPartition]:
        return list(self._by_group.pop(group_id, {}))

    def snapshot(self) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """A deep copy, for comparisons in tests."""
        return {
            g: {
                tp: CommittedOffset(**{s: getattr(c, s) for s in CommittedOffset.__slots__})
                for tp, c in o.items()
            }
            for g, o in self._by_group.items()
        }

    def expired(self, group: Group, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """The offsets of ``group`` that have expired at ``now_ms`` (not yet removed)."""
        offsets = self._by_group.get(group.group_id)
        if not offsets:
            return []

        def select(base: str, skip_topics: frozenset[str] = frozenset()) -> list[TopicPartition]:
            out = []
            for tp, c in offsets.items():
                if tp[0] in skip_topics:
                    continue
                if c.expire_timestamp != -1:
                    if now_ms >= c.expire_timestamp:
                        out.append(tp)
                    continue
                if base == "state" and group.state_timestamp_ms is not None:
                    start = group.state_timestamp_ms
                else:
                    start = c.commit_timestamp
                if now_ms - start >= retention_ms:
                    out.append(tp)
            return out

        if group.protocol_type is not None and group.is_(GroupState.EMPTY):
            return select("state")
        if (
            group.protocol_type == "consumer"
            and group.subscribed_topics is not None
            and group.is_(GroupState.STABLE)
        ):
            return select("commit", group.subscribed_topics)
        if group.protocol_type is None:
            return select("commit")
        return []
