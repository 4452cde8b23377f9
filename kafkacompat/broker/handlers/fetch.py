"""Fetch (key 1), versions 4-17.

Behaviour: consumer fetches, and in cluster mode follower fetches (a replica id >= 0: the leader records the
follower's progress, high watermark and ISR, see replication/replica_manager.py; on a single node a replica id
is served like a consumer). Only a partition's leader answers with data, to consumers and followers alike (no
KIP-392 fetching from followers: preferred_read_replica is always -1).
Each partition returns whole batches from the one holding its fetch offset, up to its partition max
bytes and what is left of the request's max bytes (itself capped by `fetch.max.bytes`); the first batch
of the first non-empty partition is returned even when larger (KIP-74). Consumers read to the high
watermark (read_uncommitted) or the last stable offset (read_committed: below the first offset of the
oldest open transaction); followers read to the log end. Record data is a log FileSlice that the
connection sends with sendfile; a partition without data gets an empty, non-null record set. Errors per
partition: UNKNOWN_TOPIC_OR_PARTITION (v4-12) / UNKNOWN_TOPIC_ID (v13+, topics named by id),
NOT_LEADER_OR_FOLLOWER (cluster mode: a partition this broker does not lead; v12+ answers name the
current leader and epoch, v16+ its endpoint too, KIP-951), OFFSET_OUT_OF_RANGE (offset below the log
start or above the log end), UNKNOWN_LEADER_EPOCH / FENCED_LEADER_EPOCH for a current leader epoch above
/ below the partition's (always 0 on a single node), KAFKA_STORAGE_ERROR. v7+ incremental fetch sessions
(KIP-227, see fetch_sessions.py) with FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH as
top-level errors.
If fewer than `min_bytes` are available and no partition has an error, the fetch parks until a produce
to one of its partitions wakes it (PartitionWatchers), `max_wait_ms` passes or the broker shuts down;
it never polls.
Aborted transactions: null for read_uncommitted; for read_committed the entries of the partition's
`.txnindex` files (producer id, first offset) overlapping the returned range, from which the client
drops aborted records itself (control batches are returned too: clients skip them, as with Kafka).
With an authorizer, partitions of topics the principal may not READ get TOPIC_AUTHORIZATION_FAILED; in
cluster mode a follower's fetch (a replica id) needs CLUSTER_ACTION on the cluster instead, as in Kafka.
A partition the topic's `leader.replication.throttled.replicas` names on this broker carries no data
for a follower outside the ISR while this broker's `leader.replication.throttled.rate` is reached
(replication/throttle.py).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.broker.authorization import Op, Resource, allowed, cluster_allowed
from kafkacompat.broker.fairness import Turn, in_shares
from kafkacompat.broker.fetch_sessions import CachedPartition, FetchContext, PartitionRequest
from kafkacompat.replication.throttle import throttled_partition
from kafkacompat.wire._generated.fetch_response import AbortedTransaction, FetchResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.primitives import elements

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.wire._generated.fetch_request import FetchRequest

log = logging.getLogger("kafkacompat.broker.fetch")

API_KEY = ApiKey.FETCH
MIN_VERSION = 4
MAX_VERSION = 17

READ_COMMITTED = 1
#: fetches naming more partitions than this open their session in shares (fairness.in_shares)
SESSION_OPEN_IN_SHARES = 500
EMPTY_RECORDS = b""

TopicResponse = FetchResponse.FetchableTopicResponse
PartitionData = FetchResponse.PartitionData


class HeldSlice:
    """A log file slice on this response's own duplicate of the segment's fd.

    The log may close a segment's fd before the response is written (topic deletion closes at once),
    and the number could then name another file; a duplicate keeps the very same file open until the
    connection has sent the slice and calls `release()`.
    """

    __slots__ = ("fd", "position", "size")

    def __init__(self, file_slice: Any) -> None:
        self.fd = os.dup(file_slice.fd)
        self.position = file_slice.position
        self.size = file_slice.size

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _hold(read: PartitionRead) -> tuple[Any, int]:
    """The records to send for one partition and its error code. Out of file descriptors (EMFILE) the
    partition answers KAFKA_STORAGE_ERROR and the rest of the response still goes out: an exception here
    would leak the descriptors already held for the partitions before it."""
    if not read.size:
        return EMPTY_RECORDS, read.error
    try:
        return HeldSlice(read.records), read.error
    except OSError as exc:
        log.warning("fetch of %s-%d: cannot hold its segment open: %s", read.name, read.cached.partition, exc)
        return EMPTY_RECORDS, ErrorCode.KAFKA_STORAGE_ERROR


@dataclass(slots=True)
class PartitionRead:
    """What one read of one partition produced."""

    cached: CachedPartition
    name: str | None
    error: int = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1  # at the read: `_moved_since_read` compares it (a follower reads to it)
    records: Any = EMPTY_RECORDS
    size: int = 0
    aborted: list[Any] | None = None


async def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    broker = ctx.broker
    version = ctx.api_version
    uses_ids = version >= 13
    replica_id = _replica_id(request, version) if broker.replicas.serves_followers else -1
    follower = replica_id >= 0
    partitions = sum(len(topic.partitions) for topic in request.topics)
    if partitions + len(request.forgotten_topics_data) <= SESSION_OPEN_IN_SHARES:
        context = _open_session(broker, request, uses_ids, follower)
    else:  # thousands of partitions were one step of 3-4 ms: opened in shares (fetch_sessions.py)
        context = await in_shares(lambda: _open_session(broker, request, uses_ids, follower))
    if context.error != ErrorCode.NONE:
        return FetchResponse(error_code=context.error, session_id=0, responses=[])
    max_bytes = min(request.max_bytes, broker.config["fetch.max.bytes"])
    read_committed = request.isolation_level == READ_COMMITTED
    deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000
    may_read = None
    if broker.authorizer is not None and replica_id >= 0:
        # a follower's fetch, as Kafka's: CLUSTER_ACTION on the cluster, else every partition is refused
        # (a client posing as a replica must not move the high watermark or the ISR)
        follower_allowed = cluster_allowed(ctx, Op.CLUSTER_ACTION)

        def may_read(topic: str) -> bool:
            return follower_allowed

    elif broker.authorizer is not None:

        def may_read(topic: str) -> bool:
            return allowed(ctx, Op.READ, Resource.TOPIC, topic)

    while True:
        reads = await _read_all(broker, context, uses_ids, max_bytes, read_committed, may_read, replica_id)
        total = sum(r.size for r in reads)
        if (
            total >= request.min_bytes
            or request.max_wait_ms <= 0
            or not reads
            or any(r.error != ErrorCode.NONE for r in reads)
            or trio.current_time() >= deadline
            or broker.closing
        ):
            break
        _release(reads)  # read again after the wait
        if _moved_since_read(broker, reads):
            continue  # appended to after its read, while the read gave the loop back: nobody was parked
        keys = [(r.name, r.cached.partition) for r in reads if r.name is not None]
        with broker.watchers.watch(keys) as event:
            await ctx.park(event, deadline)
    response = await _response(context, reads, uses_ids, read_committed)
    if version >= 12:
        _leader_hints(ctx, response, uses_ids)
    return response


def _open_session(
    broker: BrokerState, request: FetchRequest, uses_ids: bool, follower: bool = False
) -> FetchContext:
    """The request's fetch session context; its loops give the loop back inside `in_shares`. A
    follower's session is privileged in the cache (fetch_sessions.py) and holds every partition the
    follower fetches: `_read_all` reads each one, named in this request or not, and records the
    follower's fetch from the offset the session holds for it (its ISR and high watermark accounting)."""
    requested = []
    topics = request.topics
    for index in elements(len(topics)):
        topic = topics[index]
        name = topic.topic_id if uses_ids else topic.topic
        for p in topic.partitions:
            requested.append(
                PartitionRequest(
                    topic=name,
                    partition=p.partition,
                    fetch_offset=p.fetch_offset,
                    max_bytes=p.partition_max_bytes,
                    current_leader_epoch=p.current_leader_epoch,
                )
            )
    forgotten = [
        (topic.topic_id if uses_ids else topic.topic, index)
        for topic in request.forgotten_topics_data
        for index in topic.partitions
    ]
    return broker.fetch_sessions.open(
        request.session_id, request.session_epoch, requested, forgotten, broker.now_ms(), privileged=follower
    )


def _moved_since_read(broker: BrokerState, reads: list[PartitionRead]) -> bool:
    """Whether a partition read has moved since (new records, high watermark or stable offset, or gone).

    `_read_all` gives the loop back between partitions, so an append to one already read can land
    before the fetch parks; its `notify` then found nobody watching, and parking would wait the whole
    max_wait with the records in the log. Checked in the same step as the park's registration."""
    for read in reads:
        if read.name is None or read.error != ErrorCode.NONE:
            continue
        partition_log = broker.partition_log(read.name, read.cached.partition)
        if (
            partition_log is None
            or partition_log.high_watermark != read.high_watermark
            or partition_log.last_stable_offset != read.last_stable_offset
            or partition_log.log_end_offset != read.log_end_offset
        ):
            return True
    return False


def _leader_hints(ctx: RequestContext, response: FetchResponse, uses_ids: bool) -> None:
    """KIP-951 (v12+ current_leader, v16+ node_endpoints) for partitions this broker does not lead."""
    broker = ctx.broker
    leaders: set[int] = set()
    for topic in response.responses:
        moved = [
            partition
            for partition in topic.partitions
            if partition.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)
        ]
        if not moved:
            continue  # the usual case (and always on a single node, which leads everything at epoch 0)
        info = broker.metadata.topic_by_id(topic.topic_id) if uses_ids else broker.metadata.topic(topic.topic)
        if info is None:
            continue
        for partition in moved:
            leader, epoch, *_ = broker.replicas.partition_metadata(info.name, partition.partition_index)
            partition.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)
            if leader >= 0:
                leaders.add(leader)
    if leaders and ctx.api_version >= 16:
        response.node_endpoints = [
            FetchResponse.NodeEndpoint(node_id=node, host=host, port=port, rack=rack)
            for node, host, port, rack in broker.replicas.broker_endpoints(ctx.connection.listener_name)
            if node in leaders
        ]


def _leader_throttled(broker: BrokerState, topic: Any, partition: int) -> bool:
    """Whether the topic's leader.replication.throttled.replicas names this partition on this broker."""
    replicas = broker.topic_log_config(topic).get("leader.replication.throttled.replicas")
    return bool(replicas) and throttled_partition(replicas, partition, broker.node_id)


def _leader_holds_back(broker: BrokerState, topic: str, partition: int, replica_id: int) -> bool:
    """A throttled follower outside the ISR gets no data while the leader's replication rate is over
    leader.replication.throttled.rate (Kafka's ReplicaManager.shouldLeaderThrottle)."""
    in_sync = broker.replicas.in_sync(topic, partition, replica_id)
    rate = broker.config["leader.replication.throttled.rate"]
    return broker.leader_throttle.holds_back(rate, in_sync, time.monotonic())


def _replica_id(request: FetchRequest, version: int) -> int:
    """The fetching follower's broker id (v15+ carry it in ReplicaState), -1 for a consumer."""
    if version >= 15:
        state = getattr(request, "replica_state", None)
        return state.replica_id if state is not None else -1
    return request.replica_id


async def _read_all(
    broker: BrokerState,
    context: FetchContext,
    uses_ids: bool,
    max_bytes: int,
    read_committed: bool,
    may_read: Callable[[str], bool] | None = None,
    replica_id: int = -1,
) -> list[PartitionRead]:
    """`may_read(topic)`: the READ authorization check (None: no authorizer), made before existence.

    The loop is given back between partitions (a `fairness.Turn`: a fetch of 1,000 partitions held it
    14-23 ms in one step), never inside one: each partition's topic lookup, offsets, read and the
    duplicate of its segment's fd (`_hold`) are taken in one step, so a topic or segment deleted
    meanwhile is either seen as gone (UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID, as Kafka answers
    for a partition deleted before its read) or read from the file its held duplicate keeps open. The
    caller releases the reads (`_release`) it does not answer with."""
    remaining = max_bytes
    reads: list[PartitionRead] = []
    metadata = broker.metadata
    turn = Turn()
    try:
        for cached in context.partitions:
            await turn.spend()
            topic = metadata.topic_by_id(cached.topic) if uses_ids else metadata.topic(cached.topic)
            read = PartitionRead(cached=cached, name=topic.name if topic is not None else None)
            reads.append(read)
            try:
                checked = topic.name if topic is not None else None if uses_ids else cached.topic
                if may_read is not None and checked is not None and not may_read(checked):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if topic is None:
                    raise KafkaError(
                        ErrorCode.UNKNOWN_TOPIC_ID if uses_ids else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                if not 0 <= cached.partition < topic.partitions:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                broker.check_leader(topic.name, cached.partition)
                broker.check_leader_epoch(topic.name, cached.partition, cached.current_leader_epoch)
                partition_log = broker.partition_log(topic.name, cached.partition)
                if partition_log is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                throttled = False
                if replica_id >= 0:
                    # a follower: its fetch offset is its log end (progress, HW, ISR); it reads to our log end
                    broker.replicas.follower_fetched(
                        topic.name, cached.partition, replica_id, cached.fetch_offset, partition_log
                    )
                    throttled = _leader_throttled(broker, topic, cached.partition)
                high_watermark = partition_log.high_watermark
                last_stable_offset = partition_log.last_stable_offset
                read.high_watermark = high_watermark
                read.last_stable_offset = last_stable_offset
                read.log_start_offset = partition_log.log_start_offset
                read.log_end_offset = partition_log.log_end_offset
                limit = min(cached.max_bytes, remaining)
                if limit <= 0 and remaining < max_bytes:
                    continue  # the request's byte budget is spent; later partitions report offsets only
                if throttled and _leader_holds_back(broker, topic.name, cached.partition, replica_id):
                    continue  # leader.replication.throttled.rate reached: offsets only, as Kafka's leader
                result = partition_log.read(
                    cached.fetch_offset,
                    max(limit, 0),
                    upper_bound_offset=(
                        partition_log.log_end_offset
                        if replica_id >= 0
                        else last_stable_offset
                        if read_committed
                        else high_watermark
                    ),
                    min_one_batch=remaining == max_bytes,
                )
                if result.slices:
                    # one segment per read (the log's rule, as in Kafka), hence one slice, held at once
                    read.records = result.slices[0]
                    read.size = read.records.size
                    read.records, read.error = _hold(read)
                    if read.error != ErrorCode.NONE:
                        read.size = 0
                        continue
                    remaining -= read.size
                    if throttled:
                        broker.leader_throttle.record(read.size, time.monotonic())
                    if read_committed:
                        read.aborted = [
                            AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                            for a in partition_log.aborted_transactions(
                                cached.fetch_offset, min(last_stable_offset, result.upper_offset)
                            )
                        ]
            except KafkaError as exc:
                read.error = exc.code
    except BaseException:
        _release(reads)  # a cancellation in the turn, or an unexpected error: nothing held leaks
        raise
    return reads


async def _response(
    context: FetchContext, reads: list[PartitionRead], uses_ids: bool, read_committed: bool
) -> FetchResponse:
    responses: list[Any] = []
    current_key: Any = object()
    current: Any = None
    dropped = []
    turn = Turn()  # 4,000 partitions took 5 ms to answer: other clients run in between (fairness.py)
    for read in reads:
        await turn.spend()
        include = context.report(
            read.cached,
            high_watermark=read.high_watermark,
            last_stable_offset=read.last_stable_offset,
            log_start_offset=read.log_start_offset,
            has_records=read.size > 0,
            error=read.error,
        )
        if not include:
            dropped.append(read)
            continue
        key = read.cached.topic
        if key != current_key:
            current_key = key
            if uses_ids:
                current = TopicResponse(topic_id=key, partitions=[])
            else:
                current = TopicResponse(topic=key, partitions=[])
            responses.append(current)
        current.partitions.append(
            PartitionData(
                partition_index=read.cached.partition,
                error_code=read.error,
                high_watermark=read.high_watermark,
                last_stable_offset=read.last_stable_offset,
                log_start_offset=read.log_start_offset,
                aborted_transactions=(read.aborted or []) if read_committed else None,
                preferred_read_replica=-1,
                records=read.records,
            )
        )
    _release(dropped)
    return FetchResponse(error_code=ErrorCode.NONE, session_id=context.session_id, responses=responses)


def _release(reads: list[PartitionRead]) -> None:
    """Close the held duplicates of reads that will not be answered with."""
    for read in reads:
        if isinstance(read.records, HeldSlice):
            read.records.release()
            read.records = EMPTY_RECORDS
