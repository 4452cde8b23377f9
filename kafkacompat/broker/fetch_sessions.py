"""Incremental fetch sessions (KIP-227), sans-io.

Theory of operation: a fetch request names a session id and epoch.
- id 0, epoch -1: a plain full fetch; no session.
- epoch 0 (any id): a full fetch that (re)creates a session: an id is allocated (if a cache slot is
  free) and every partition of the request is remembered with its fetch offset and max bytes. A non-zero
  id with epoch 0 first drops that old session.
- id X, epoch -1: close session X; answered as a plain full fetch.
- id X, epoch N > 0: an incremental fetch. X must exist (else FETCH_SESSION_ID_NOT_FOUND) and N must be
  the epoch the session expects (else INVALID_FETCH_SESSION_EPOCH). The request's partitions are added
  to or updated in the session, its forgotten partitions are removed, every session partition is read,
  and the response carries only partitions with something new: records, an error, or a high watermark,
  last stable offset or log start offset different from what this session last reported.
The broker never advances a session's fetch offsets itself; the client sends new offsets when they move.
A partition an incremental request does not name keeps the fetch offset the session holds for it, and
is read (and, for a follower, counted as fetched from that offset) like the named ones.

Followers' sessions (a replica id >= 0) live in the same cache and are privileged, as in Kafka's
FetchSessionCache. When every slot is taken, a new session may evict:
- the least recently used session, if it has been idle over EVICTION_IDLE_MS (any new session);
- a follower's new session also: the smallest consumer session (fewest partitions, then lowest id), or
  a follower session created over EVICTION_IDLE_MS ago with fewer partitions than the new one.
A consumer's new session never evicts a session still in use.
A partition answered with an error is remembered with high watermark -1, so that it is answered again
once the error is gone.

`FetchSessionCache.open()` turns a request's session fields into a `FetchContext`; the fetch handler
reads `context.partitions`, then asks `context.report(partition, ...)` for each result whether to put it
in the response (which also records what was reported). Time is passed in, so tests need no clock.

Owned by `BrokerState`; only the fetch handler calls it, one request at a time per connection; all
calls happen on the trio thread, so no locking is needed. A request of many partitions may be opened in
shares (the handler runs `open` inside `fairness.in_shares`; its loops over the request go through
`wire.primitives.elements`, which gives the loop back between partitions there): other requests run
meanwhile, so an incremental open takes its epoch before its loop, and a second request of the same
epoch is refused as Kafka refuses it.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.primitives import elements

__all__ = ["CachedPartition", "FetchContext", "FetchSession", "FetchSessionCache", "PartitionRequest"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
EVICTION_IDLE_MS = 120_000
INT32_MAX = 2_147_483_647

# a partition's identity inside a session: (topic name or topic id, partition index)
PartitionKey = tuple[Any, int]


@dataclass(slots=True)
class PartitionRequest:
    """One partition as a fetch request names it."""

    topic: Any  # str name (v4-12) or uuid.UUID id (v13+)
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1


@dataclass(slots=True)
class CachedPartition:
    """A partition in a session: what the client asked for and what we last reported."""

    topic: Any
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.partition)


@dataclass(slots=True)
class FetchSession:
    session_id: int
    next_epoch: int
    partitions: OrderedDict[PartitionKey, CachedPartition] = field(default_factory=OrderedDict)
    last_used_ms: int = 0
    #: a follower's session (Kafka's privileged sessions)
    privileged: bool = False
    created_ms: int = 0


@dataclass(slots=True)
class FetchContext:
    """What one fetch request reads and how its answer is filtered."""

    session_id: int  # to put in the response
    partitions: list[CachedPartition]
    incremental: bool
    error: ErrorCode = ErrorCode.NONE

    def report(
        self,
        cached: CachedPartition,
        *,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        has_records: bool,
        error: int,
    ) -> bool:
        """Record what is reported for `cached`; True if the partition belongs in the response."""
        changed = (
            cached.high_watermark != high_watermark
            or cached.last_stable_offset != last_stable_offset
            or cached.log_start_offset != log_start_offset
        )
        # after an error the next answer names the partition again (Kafka's CachedPartition)
        cached.high_watermark = high_watermark if error == ErrorCode.NONE else -1
        cached.last_stable_offset = last_stable_offset
        cached.log_start_offset = log_start_offset
        if not self.incremental:
            return True
        return changed or has_records or error != ErrorCode.NONE


class FetchSessionCache:
    """Live fetch sessions (at most `max.incremental.fetch.session.cache.slots`), oldest use first."""

    def __init__(self, max_sessions: int, rng: random.Random | None = None) -> None:
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._rng = rng or random.Random()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def open(
        self,
        session_id: int,
        epoch: int,
        requested: list[PartitionRequest],
        forgotten: list[PartitionKey],
        now_ms: int,
        *,
        privileged: bool = False,
    ) -> FetchContext:
        """`privileged`: the request is a follower's (a replica id), see the module docstring."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION:
                self._sessions.pop(session_id, None)
            partitions = _dedupe(requested)
            if epoch == FINAL_EPOCH:
                return FetchContext(NO_SESSION, list(partitions.values()), incremental=False)
            session = self._create(partitions, now_ms, privileged)
            new_id = session.session_id if session is not None else NO_SESSION
            return FetchContext(new_id, list(partitions.values()), incremental=False)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(NO_SESSION, [], incremental=True, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.next_epoch:
            return FetchContext(NO_SESSION, [], incremental=True, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        session.next_epoch = 1 if session.next_epoch >= INT32_MAX else session.next_epoch + 1
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session_id)
        for index in elements(len(forgotten)):
            session.partitions.pop(forgotten[index], None)
        for index in elements(len(requested)):
            item = requested[index]
            key = (item.topic, item.partition)
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = _cache(item)
            else:
                cached.fetch_offset = item.fetch_offset
                cached.max_bytes = item.max_bytes
                cached.current_leader_epoch = item.current_leader_epoch
        return FetchContext(session_id, list(session.partitions.values()), incremental=True)

    def forget_reported(self, session_id: int) -> None:
        """Forget what a session last reported (its response was not delivered: a throttled fetch), so
        that its next incremental response lists every partition."""
        session = self._sessions.get(session_id)
        if session is not None:
            for cached in session.partitions.values():
                cached.high_watermark = cached.last_stable_offset = cached.log_start_offset = -1

    def remove_topic(self, name: str, topic_id: Any) -> None:
        """Forget a deleted topic in every session, keyed by its name or its id (fetch v13+): one walk
        over the sessions for both (up to max.incremental.fetch.session.cache.slots of them)."""
        keys = {name, topic_id}
        for session in self._sessions.values():
            gone = [key for key in session.partitions if key[0] in keys]
            for key in gone:
                del session.partitions[key]

    def _create(
        self, partitions: OrderedDict[PartitionKey, CachedPartition], now_ms: int, privileged: bool
    ) -> FetchSession | None:
        if self.max_sessions <= 0:
            return None
        if len(self._sessions) >= self.max_sessions:
            victim = self._evictable(len(partitions), now_ms, privileged)
            if victim is None:
                return None
            del self._sessions[victim]
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self._sessions:
            session_id = self._rng.randint(1, INT32_MAX)
        session = FetchSession(
            session_id,
            next_epoch=1,
            partitions=partitions,
            last_used_ms=now_ms,
            privileged=privileged,
            created_ms=now_ms,
        )
        self._sessions[session_id] = session
        return session

    def _evictable(self, size: int, now_ms: int, privileged: bool) -> int | None:
        """The session a new one of `size` partitions may take the slot of, if any (module docstring;
        Kafka's FetchSessionCache.tryEvict)."""
        oldest_id, oldest = next(iter(self._sessions.items()))
        if now_ms - oldest.last_used_ms >= EVICTION_IDLE_MS:
            return oldest_id
        if not privileged:
            return None
        # the least valuable session a follower's may evict: consumers' first, then by size and id
        candidates = [
            (session.privileged, len(session.partitions), session.session_id)
            for session in self._sessions.values()
            if not session.privileged or now_ms - session.created_ms > EVICTION_IDLE_MS
        ]
        if not candidates:
            return None
        least = min(candidates)
        if least[0] and least[1] >= size:
            return None  # a follower session at least as big as the new one stays
        return least[2]


def _cache(item: PartitionRequest) -> CachedPartition:
    return CachedPartition(
        topic=item.topic,
        partition=item.partition,
        fetch_offset=item.fetch_offset,
        max_bytes=item.max_bytes,
        current_leader_epoch=item.current_leader_epoch,
    )


def _dedupe(requested: list[PartitionRequest]) -> OrderedDict[PartitionKey, CachedPartition]:
    partitions: OrderedDict[PartitionKey, CachedPartition] = OrderedDict()
    for index in elements(len(requested)):
        item = requested[index]
        partitions[(item.topic, item.partition)] = _cache(item)
    return partitions
