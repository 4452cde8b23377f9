"""Follower fetch state of one partition: truncate by leader epoch, then fetch.

Theory of operation
-------------------
A follower must never keep records the leader does not have. When a broker becomes follower (a new
leader or a new leader epoch) its partition enters `TRUNCATING`: the fetcher task asks the leader
OffsetForLeaderEpoch for the follower's latest epoch and feeds the answer to `on_epoch_end_offset`,
which returns where to truncate, following Kafka's `AbstractFetcherThread` rules:

- the leader does not know the epoch (UNDEFINED end offset): keep what is there up to the high
  watermark (older leaders without epochs; here: a leader that has no data yet),
- the leader answers for the same epoch: truncate to min(leader end offset, follower's end of that
  epoch, follower's log end); truncation is complete,
- the leader answers with an older epoch than asked: the follower truncates to its own end of that
  older epoch and asks again (another round) — the logs diverged inside a later epoch,
- the follower has no epoch at or below the leader's answer: truncate to min(leader end, log end).

After truncation the partition is `FETCHING` from its log end offset; `on_fetched(next_offset)`
advances it. A fetch error of the fenced/unknown-epoch kind sends it back to `TRUNCATING` (Kafka does
the same on FENCED_LEADER_EPOCH after a leader change it has not heard of yet is resolved).

`fetcher_id(topic, partition, num_fetchers)` spreads the partitions of one leader over
`num.replica.fetchers` fetcher tasks with Kafka's hash (`31 * topic.hashCode() + partition`, Java's
String hash over UTF-16 code units, in 32-bit arithmetic), so a partition lands on the same fetcher
index as on a Kafka broker.

Pure: the epoch cache and log are read by the caller, who passes the values in.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kafkacompat.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from kafkacompat.wire.errors import ErrorCode

__all__ = ["FetchPhase", "FollowerFetchState", "TruncationDecision"]


class FetchPhase(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"


@dataclass(frozen=True, slots=True)
class TruncationDecision:
    truncate_to: int
    #: False: truncate, then send OffsetForLeaderEpoch again (the logs diverged in an older epoch)
    complete: bool


@dataclass(slots=True)
class FollowerFetchState:
    """One partition a follower fetches from its leader."""

    topic: str
    partition: int
    leader: int
    current_leader_epoch: int
    phase: FetchPhase = FetchPhase.TRUNCATING
    fetch_offset: int = 0

    def new_leader(self, leader: int, leader_epoch: int) -> None:
        self.leader = leader
        self.current_leader_epoch = leader_epoch
        self.phase = FetchPhase.TRUNCATING

    def on_epoch_end_offset(
        self,
        leader_answer_epoch: int,
        leader_answer_end_offset: int,
        local_end_for_answer_epoch: tuple[int, int] | None,
        local_log_end_offset: int,
        local_high_watermark: int,
    ) -> TruncationDecision:
        """Where to truncate, given the leader's OffsetForLeaderEpoch answer for our latest epoch.

        `local_end_for_answer_epoch` is our own (epoch, end offset) for the epoch the leader answered
        with (our `end_offset_for(leader_answer_epoch)`), None when we have no such epoch.
        """
        if leader_answer_end_offset == UNDEFINED_EPOCH_OFFSET or leader_answer_epoch == UNDEFINED_EPOCH:
            decision = TruncationDecision(min(local_high_watermark, local_log_end_offset), True)
        elif local_end_for_answer_epoch is None or local_end_for_answer_epoch[0] == UNDEFINED_EPOCH:
            decision = TruncationDecision(min(leader_answer_end_offset, local_log_end_offset), True)
        else:
            local_epoch, local_end = local_end_for_answer_epoch
            if local_epoch != leader_answer_epoch:
                decision = TruncationDecision(min(local_end, local_log_end_offset), False)
            else:
                decision = TruncationDecision(
                    min(leader_answer_end_offset, local_end, local_log_end_offset), True
                )
        if decision.complete:
            self.phase = FetchPhase.FETCHING
            self.fetch_offset = decision.truncate_to
        return decision

    def on_fetched(self, next_offset: int) -> None:
        if next_offset > self.fetch_offset:
            self.fetch_offset = next_offset

    def on_fetch_error(self, error: ErrorCode) -> bool:
        """True if the partition must truncate again before fetching (the leader's epoch moved)."""
        if error in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.OFFSET_OUT_OF_RANGE):
            self.phase = FetchPhase.TRUNCATING
            return True
        return False


def _java_string_hash(text: str) -> int:
    value = 0
    data = text.encode("utf-16-be")
    for index in range(0, len(data), 2):
        value = (31 * value + int.from_bytes(data[index : index + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """The fetcher index of a partition among `num_fetchers` (Kafka's AbstractFetcherManager)."""
    mixed = (31 * _java_string_hash(topic) + partition) & 0xFFFFFFFF
    if mixed >= 1 << 31:
        mixed -= 1 << 32
    positive = 0 if mixed == -(1 << 31) else abs(mixed)  # Kafka's Utils.abs
    return positive % max(num_fetchers, 1)
