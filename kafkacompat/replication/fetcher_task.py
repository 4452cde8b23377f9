"""One follower fetcher per source broker: truncate by leader epoch, then Fetch with our replica id.

Theory of operation: a `FetcherTask` owns the `FollowerFetchState` of every partition this broker
follows on one leader. Its loop sends, on one connection to the leader's inter-broker listener,
OffsetForLeaderEpoch for partitions that must truncate (`fetcher.py` decides where; the log is
truncated here, on the trio thread) and Fetch (replica id = this broker, `replica.fetch.*` sizes and
wait) for the others, appending what comes back with `append_as_follower` and taking the leader's high
watermark (capped at our log end). Fetches run in an incremental fetch session (KIP-227,
`fetch_session.FollowerFetchSession`, Kafka's FetchSessionHandler): the first request names every
partition and creates the session on the leader; later ones name only partitions added or whose fetch
offset, log start offset or leader epoch moved, and forget those left out; the leader answers only
partitions with something new, so an idle follower's round trip names no partition at all. A session
error in the answer, or any failed request, makes the next request full again. The connection is an
async `InterBrokerConnection` (`inter_broker_client.py`) on the trio loop, each request bounded by
`replica.socket.timeout.ms`, so every log change happens on the trio thread between two requests. A
failed request (connection error, timeout, unreadable answer) closes the connection, backs off
`replica.fetch.backoff.ms` and reconnects; the cluster runtime re-homes partitions when leadership
moves. Fetched records that fail validation
(`log/validator.py` walks every record of every batch) are never appended: as Kafka's
AbstractFetcherThread does for corrupt or invalid records, that partition alone is held back for
`replica.fetch.backoff.ms` and fetched again from the same offset, with one error logged per offset.
Partitions the topic's `follower.replication.throttled.replicas` names on this broker are left out of a
round while this broker is not in their ISR and its `follower.replication.throttled.rate` is reached,
and the bytes fetched for them are counted against it (replication/throttle.py).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from kafkacompat.log.leader_epoch import UNDEFINED_EPOCH
from kafkacompat.log.record_validator import InvalidRecords
from kafkacompat.replication.fetch_session import FollowerFetchSession, PartitionFetch, TopicPartition
from kafkacompat.replication.fetcher import FetchPhase, FollowerFetchState
from kafkacompat.replication.throttle import throttled_partition
from kafkacompat.wire._generated.fetch_request import FetchRequest
from kafkacompat.wire._generated.fetch_response import FetchResponse
from kafkacompat.wire._generated.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest
from kafkacompat.wire._generated.offset_for_leader_epoch_response import OffsetForLeaderEpochResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.replication.cluster.shared import ClusterState
    from kafkacompat.replication.inter_broker_client import InterBrokerConnection

__all__ = ["FetcherTask"]

log = logging.getLogger("kafkacompat.fetcher")

FETCH = ApiKey.FETCH
OFFSET_FOR_LEADER_EPOCH = ApiKey.OFFSET_FOR_LEADER_EPOCH
FETCH_VERSION = 12  # topic names, replica id in the top-level field
EPOCH_VERSION = 4


def _invalid_records(exc: KafkaError) -> bool:
    """Whether an append failed for the fetched bytes themselves (Kafka's CorruptRecordException and
    InvalidRecordException), as opposed to this log's state."""
    return isinstance(exc, InvalidRecords) or exc.code in (
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.INVALID_RECORD,
    )


class FetcherTask:
    """Fetches every partition this broker follows on `leader` (see module docstring)."""

    def __init__(self, cluster: ClusterState, leader: int) -> None:
        self.cluster = cluster
        self.leader = leader
        self.partitions: dict[tuple[str, int], FollowerFetchState] = {}
        self.stopped = False
        self._wake = trio.Event()
        self._connection: InterBrokerConnection | None = None
        # partitions whose fetched records were invalid: retry time, and the offset already logged
        self._delayed: dict[tuple[str, int], float] = {}
        self._invalid_logged: dict[tuple[str, int], int] = {}
        self.session = FollowerFetchSession()

    def add(self, key: tuple[str, int], leader_epoch: int) -> None:
        self.partitions[key] = FollowerFetchState(key[0], key[1], self.leader, leader_epoch)
        self._wake.set()

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)
        self._delayed.pop(key, None)
        self._invalid_logged.pop(key, None)

    def stop(self) -> None:
        self.stopped = True
        self._wake.set()

    async def run(self) -> None:
        config = self.cluster.broker.config
        backoff = config["replica.fetch.backoff.ms"] / 1000
        try:
            while not self.stopped:
                if not self.partitions:
                    self._wake = trio.Event()
                    with trio.move_on_after(1):
                        await self._wake.wait()
                    continue
                try:
                    await self._round()
                except Exception as exc:
                    log.info("fetcher from broker %d: %r; backing off", self.leader, exc)
                    self._disconnect()
                    await trio.sleep(backoff)
        finally:
            self._disconnect()

    def _disconnect(self) -> None:
        self.session.handle_error()  # the next request is full and closes the old session
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def _connect(self) -> InterBrokerConnection:
        if self._connection is None:
            timeout = self.cluster.broker.config["replica.socket.timeout.ms"] / 1000
            self._connection = await self.cluster.connect_inter_broker(
                self.leader, f"fetcher-{self.leader}", timeout
            )
        return self._connection

    async def _round(self) -> None:
        connection = await self._connect()
        truncating = [s for s in self.partitions.values() if s.phase is FetchPhase.TRUNCATING]
        if truncating:
            await self._truncate(connection, truncating)
        fetching = [s for s in self.partitions.values() if s.phase is FetchPhase.FETCHING]
        if fetching:
            await self._fetch(connection, fetching)
        elif not truncating:
            await trio.sleep(0.05)

    async def _truncate(self, connection: InterBrokerConnection, states: list[FollowerFetchState]) -> None:
        broker = self.cluster.broker
        cls = OffsetForLeaderEpochRequest
        by_topic: dict[str, list[OffsetForLeaderEpochRequest.OffsetForLeaderPartition]] = {}
        asked: dict[tuple[str, int], int] = {}
        for state in states:
            partition_log = broker.logs.get_log(state.topic, state.partition)
            if partition_log is None:
                continue
            latest = partition_log.leader_epochs.latest_epoch
            asked[(state.topic, state.partition)] = latest
            by_topic.setdefault(state.topic, []).append(
                cls.OffsetForLeaderPartition(
                    partition=state.partition,
                    current_leader_epoch=state.current_leader_epoch,
                    leader_epoch=latest,
                )
            )
        request = cls(
            replica_id=self.cluster.node_id,
            topics=[cls.OffsetForLeaderTopic(topic=t, partitions=p) for t, p in by_topic.items()],
        )
        response: OffsetForLeaderEpochResponse = await connection.send(
            OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, request
        )
        now = broker.now_ms()
        for topic in response.topics:
            for answer in topic.partitions:
                key = (topic.topic, answer.partition)
                follower = self.partitions.get(key)
                partition_log = broker.logs.get_log(*key)
                if follower is None or partition_log is None or key not in asked:
                    continue
                if answer.error_code != ErrorCode.NONE:
                    continue  # not yet leader there, or a newer epoch: the next round asks again
                if asked[key] == UNDEFINED_EPOCH:
                    local = None
                else:
                    local = partition_log.end_offset_for_epoch(answer.leader_epoch)
                decision = follower.on_epoch_end_offset(
                    answer.leader_epoch,
                    answer.end_offset,
                    local,
                    partition_log.log_end_offset,
                    partition_log.high_watermark,
                )
                if decision.truncate_to < partition_log.log_end_offset:
                    log.info(
                        "%s-%d: truncating to %d (leader epoch boundary)",
                        key[0],
                        key[1],
                        decision.truncate_to,
                    )
                    partition_log.truncate_to(decision.truncate_to, now)
                follower.fetch_offset = partition_log.log_end_offset

    def _wanted(
        self, states: list[FollowerFetchState]
    ) -> tuple[dict[TopicPartition, PartitionFetch], set[TopicPartition]]:
        """Every partition to fetch now with its request values, and those counted against the
        follower throttle. Partitions held back (invalid records, throttle) are left out."""
        broker = self.cluster.broker
        max_bytes = broker.config["replica.fetch.max.bytes"]
        throttle_lists: dict[str, list[str]] = {}  # follower.replication.throttled.replicas, once per topic
        throttled: set[TopicPartition] = set()
        wanted: dict[TopicPartition, PartitionFetch] = {}
        now_s = time.monotonic()
        for state in states:
            key = (state.topic, state.partition)
            partition_log = broker.logs.get_log(*key)
            if partition_log is None:
                continue
            if self._delayed.get(key, 0.0) > now_s:
                continue  # its last fetch held invalid records: retried after replica.fetch.backoff.ms
            replicas = throttle_lists.get(state.topic)
            if replicas is None:
                replicas = throttle_lists[state.topic] = self._throttled_replicas(state.topic)
            if replicas and throttled_partition(replicas, state.partition, self.cluster.node_id):
                throttled.add(key)
                if self._held_back(state, now_s):
                    continue  # follower.replication.throttled.rate reached (Kafka's shouldFollowerThrottle)
            wanted[key] = PartitionFetch(
                fetch_offset=partition_log.log_end_offset,
                log_start_offset=partition_log.log_start_offset,
                current_leader_epoch=state.current_leader_epoch,
                max_bytes=max_bytes,
            )
        return wanted, throttled

    async def _fetch(self, connection: InterBrokerConnection, states: list[FollowerFetchState]) -> None:
        broker = self.cluster.broker
        config = broker.config
        wanted, throttled = self._wanted(states)
        if not wanted:
            await trio.sleep(config["replica.fetch.backoff.ms"] / 1000)  # everything is held back
            return
        plan = self.session.build(wanted)
        cls = FetchRequest
        by_topic: dict[str, list[FetchRequest.FetchPartition]] = {}
        for (name, index), sent in plan.to_send.items():
            by_topic.setdefault(name, []).append(
                cls.FetchPartition(
                    partition=index,
                    current_leader_epoch=sent.current_leader_epoch,
                    fetch_offset=sent.fetch_offset,
                    last_fetched_epoch=-1,
                    log_start_offset=sent.log_start_offset,
                    partition_max_bytes=sent.max_bytes,
                )
            )
        forgotten: dict[str, list[int]] = {}
        for name, index in plan.forgotten:
            forgotten.setdefault(name, []).append(index)
        request = cls(
            replica_id=self.cluster.node_id,
            max_wait_ms=config["replica.fetch.wait.max.ms"],
            min_bytes=config["replica.fetch.min.bytes"],
            max_bytes=config["replica.fetch.response.max.bytes"],
            isolation_level=0,
            session_id=plan.session_id,
            session_epoch=plan.epoch,
            topics=[cls.FetchTopic(topic=t, partitions=p) for t, p in by_topic.items()],
            forgotten_topics_data=[cls.ForgottenTopic(topic=t, partitions=p) for t, p in forgotten.items()],
            rack_id="",
        )
        response: FetchResponse = await connection.send(FETCH, FETCH_VERSION, request)
        named = [
            (topic.topic, data.partition_index) for topic in response.responses for data in topic.partitions
        ]
        if not self.session.handle_response(plan, response.error_code, response.session_id, named):
            if response.error_code != ErrorCode.NONE:
                log.info(
                    "fetch session %d with broker %d: %s; starting a new one",
                    plan.session_id,
                    self.leader,
                    ErrorCode(response.error_code).name,
                )
            return
        now = broker.now_ms()
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                follower = self.partitions.get(key)
                partition_log = broker.logs.get_log(*key)
                if follower is None or partition_log is None:
                    continue
                if data.error_code != ErrorCode.NONE:
                    follower.on_fetch_error(ErrorCode(data.error_code))
                    continue
                records = data.records
                if key in throttled and records is not None:
                    broker.follower_throttle.record(len(records), time.monotonic())
                if records is not None and len(records):
                    try:
                        partition_log.append_as_follower(records, now)
                    except KafkaError as exc:
                        if _invalid_records(exc):
                            self._hold_back_invalid(key, partition_log.log_end_offset, exc)
                            continue
                        log.warning(
                            "%s-%d: follower append failed: %s; truncating again", key[0], key[1], exc
                        )
                        follower.phase = FetchPhase.TRUNCATING
                        continue
                    follower.on_fetched(partition_log.log_end_offset)
                    self._delayed.pop(key, None)
                partition_log.update_high_watermark(min(data.high_watermark, partition_log.log_end_offset))
                local = self.cluster.partitions.get(key)
                if local is not None:
                    local.high_watermark = partition_log.high_watermark
                broker.watchers.notify(*key)

    def _hold_back_invalid(self, key: tuple[str, int], offset: int, exc: KafkaError) -> None:
        """Kafka's follower on CorruptRecordException/InvalidRecordException: nothing is appended, the
        partition is fetched again from the same offset after `replica.fetch.backoff.ms` and the others
        go on. The fault is logged once per partition and offset, not on every retry."""
        self._delayed[key] = time.monotonic() + self.cluster.broker.config["replica.fetch.backoff.ms"] / 1000
        if self._invalid_logged.get(key) != offset:
            self._invalid_logged[key] = offset
            log.error(
                "%s-%d: found invalid records during fetch at offset %d from broker %d, not appended: %s",
                key[0],
                key[1],
                offset,
                self.leader,
                exc,
            )

    def _throttled_replicas(self, topic: str) -> list[str]:
        """The topic's follower.replication.throttled.replicas, [] when none (throttle.py reads it)."""
        broker = self.cluster.broker
        info = broker.metadata.topic(topic)
        if info is None:
            return []
        return list(broker.topic_log_config(info).get("follower.replication.throttled.replicas") or [])

    def _held_back(self, state: FollowerFetchState, now: float) -> bool:
        broker = self.cluster.broker
        local = self.cluster.partitions.get((state.topic, state.partition))
        in_sync = local is not None and self.cluster.node_id in local.isr
        rate = broker.config["follower.replication.throttled.rate"]
        return broker.follower_throttle.holds_back(rate, in_sync, now)
