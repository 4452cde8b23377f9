"""The follower's side of an incremental fetch session (KIP-227), sans-io.

Theory of operation
-------------------
A follower's fetcher sends the same partitions to the same leader round after round; most rounds
nothing changed. With a fetch session the leader remembers the partitions (and each one's fetch offset)
under a session id, so a request names only what changed and an answer names only partitions with
something new. This is the follower's half, Kafka's `FetchSessionHandler`; the leader's half is the
broker's fetch-session cache (`broker/fetch_sessions.py`), the same one consumers use.

`FollowerFetchSession` holds the session id, the epoch the next request carries, and the partitions the
leader holds for the session, each with the values it last sent (`PartitionFetch`). Each round the
caller passes every partition it wants fetched now, with their current values, to `build()`:

- no session yet, or the last one failed (epoch 0): a full request naming every wanted partition. Id 0
  asks for a new session; a non-zero id with epoch 0 also closes the old one on the leader.
- a live session (epoch >= 1): an incremental request naming only the partitions added since the last
  request or whose fetch offset, log start offset, leader epoch or max bytes changed, and forgetting
  (`forgotten_topics_data`) those no longer wanted: truncating, held back after invalid records, or
  throttled, as Kafka's follower leaves such partitions out of its fetch.

`build()` takes the wanted set as the session's new content right away (Kafka does too): any failure
afterwards makes the next request full, which sends everything again.

The answer goes to `handle_response()` with its top-level error, session id and the partitions it names;
it returns whether the answer's partition data may be used:

- FETCH_SESSION_ID_NOT_FOUND: the leader lost the session (restart, eviction): next request full, id 0.
- any other top-level error (INVALID_FETCH_SESSION_EPOCH, ...): next request full with the old id and
  epoch 0, closing the old session while creating a new one.
- an answer to a full request: it must name exactly the session's partitions (else the next request is
  full again). Session id 0 means the leader keeps no session for us (its cache is full): the next
  request is full too. Otherwise the session starts with epoch 1.
- an answer to an incremental request: it may name only session partitions (else close and start
  over). A partition it does not name has nothing new: same high watermark and log start offset, no
  records, no error. Session id 0 means the leader closed the session: the next request is full.
  Otherwise the epoch moves on (after 2**31 - 1 back to 1, as Kafka's `nextEpoch`).

`handle_error()` is for a request that got no answer (connection reset, timeout, unreadable answer):
the next request is full with the old id and epoch 0. Nothing here knows about sockets or time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kafkacompat.wire.errors import ErrorCode

__all__ = ["FollowerFetchSession", "PartitionFetch", "SessionRequest"]

NO_SESSION = 0
INITIAL_EPOCH = 0
INT32_MAX = 2_147_483_647

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """What a fetch request says about one partition."""

    fetch_offset: int
    log_start_offset: int
    current_leader_epoch: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """The session fields and partitions of one fetch request."""

    session_id: int
    epoch: int
    #: partitions to name in the request (every wanted one in a full request), in the caller's order
    to_send: dict[TopicPartition, PartitionFetch]
    #: partitions to name in forgotten_topics_data (always empty in a full request)
    forgotten: list[TopicPartition] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


class FollowerFetchSession:
    """One fetcher's session with one leader (see module docstring)."""

    def __init__(self) -> None:
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        #: the session's partitions as the leader holds them after the last request built
        self.partitions: dict[TopicPartition, PartitionFetch] = {}

    def build(self, wanted: dict[TopicPartition, PartitionFetch]) -> SessionRequest:
        """The next request for `wanted` (every partition to fetch now, with its current values)."""
        previous = self.partitions
        self.partitions = dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return SessionRequest(self.session_id, INITIAL_EPOCH, dict(wanted))
        to_send = {key: data for key, data in wanted.items() if previous.get(key) != data}
        forgotten = [key for key in previous if key not in wanted]
        return SessionRequest(self.session_id, self.epoch, to_send, forgotten)

    def handle_response(
        self, request: SessionRequest, error: int, session_id: int, partitions: Iterable[TopicPartition]
    ) -> bool:
        """Take the answer to `request`; True if its partition data may be used."""
        if error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
            self._restart(NO_SESSION)
            return False
        if error != ErrorCode.NONE:
            self._restart(self.session_id)
            return False
        named = set(partitions)
        if request.full:
            if named != set(self.partitions):
                self._restart(NO_SESSION)  # missing or extra partitions: not a usable full answer
                return False
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH if session_id == NO_SESSION else 1
            return True
        if not named.issubset(self.partitions):
            self._restart(self.session_id)
            return False
        if session_id == NO_SESSION:
            self._restart(NO_SESSION)  # the leader closed the session; this answer still counts
            return True
        self.epoch = _next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request got no answer: start over with a full request that closes the old session."""
        self._restart(self.session_id)

    def _restart(self, session_id: int) -> None:
        self.session_id = session_id
        self.epoch = INITIAL_EPOCH
