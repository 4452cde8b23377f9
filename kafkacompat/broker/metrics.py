"""The Prometheus endpoint (`metrics.listener=http://host:port`, off by default) and the counts behind it.

Theory of operation
-------------------
Two halves, so that the request path pays almost nothing:

- `RequestMetrics` accumulates in plain ints, lists and dicts on the trio thread. The connection calls
  `start()` when it begins a request and `finish()` once the response is written (two calls per
  request, only when the endpoint is configured: with `metrics.listener` unset `BrokerState.
  request_metrics` is None and neither this module nor `prometheus_client` is ever imported, so start-up
  time and idle memory of the default broker do not change). `finish()` counts the request, the error
  codes of its response (Kafka's `errorCounts()`), five latency observations (bucket index by bisect)
  and, for Produce and Fetch, the bytes and records per topic, read off the request and response
  objects the connection already holds: no handler reports anything.
- `BrokerCollector` is a prometheus_client custom collector. At scrape time it turns those counts into
  metric families and computes every gauge from broker state: log size, start and end offsets and
  segment count per partition, consumer group offsets and lag (high watermark minus committed offset),
  connections per listener, buffered requests, fetch-session cache, partition counts. Nothing
  per-partition is ever updated on the hot path.

Serving: a trio task (`serve_metrics`) answers HTTP GETs with `generate_latest()`. Not prometheus_client's
own threaded server, because collection reads the logs, groups and connections, which only the trio
thread may touch (they change under a scrape running in another thread: "dict changed size during
iteration" at best). A scrape is a short synchronous stretch on the event loop, like any request. The
endpoint stops when broker shutdown begins.

Names follow Kafka's MBeans mapped the way Prometheus' JMX exporter does (`kafka_<domain>_<type>_<name>`,
lower case, words split by `_`), with Prometheus conventions: a Kafka `...PerSec` meter becomes a
`_total` counter (rate() gives the per-second figure), a `...TimeMs` histogram becomes a `_seconds`
histogram. Group lag uses kafka_exporter's names (`kafka_consumergroup_lag`), which dashboards expect.
`METRIC_NAMES` lists every family the endpoint exports (a test compares it with a real scrape).

Latency parts of a request, as Kafka splits its TotalTimeMs: queue = from the read that completed the
frame to the start of its decoding (frames pipelined behind another request of the same connection wait
here: this broker has no shared request queue, each connection works through its own frames in
order); remote = time parked waiting for data or a deadline (Kafka's purgatory); local = decoding
and the rest of the handler's time; send = writing the response. total = from arrival to response written.
"""

from __future__ import annotations

import bisect
import logging
import re
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.primitives import Struct

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.broker.server import Broker

__all__ = [
    "LATENCY_BUCKETS",
    "METRIC_NAMES",
    "BrokerCollector",
    "RequestMetrics",
    "RequestTimer",
    "parse_metrics_listener",
    "serve_metrics",
]

log = logging.getLogger("kafkacompat.metrics")

# upper bounds (seconds) of the latency histograms' buckets; +Inf is implied
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0,
)  # fmt: skip
# Kafka's RequestMetrics parts, in the order RequestTimer reports them
LATENCY_PARTS = ("total_time", "request_queue_time", "local_time", "remote_time", "response_send_time")

_BATCH_LENGTH = struct.Struct(">i")  # at offset 8 of a record batch
_RECORD_COUNT = struct.Struct(">i")  # at offset 57 of a v2 record batch
_BATCH_OVERHEAD = 12  # base offset + batch length fields, not counted in batch length

_LISTENER = re.compile(r"^http://(\[[^\]]*\]|[^:/\[\]]*):(\d+)/?$", re.IGNORECASE)


def parse_metrics_listener(value: str) -> tuple[str, int]:
    """`http://host:port` -> (host, port); host "" means every interface. ValueError otherwise."""
    match = _LISTENER.match(value.strip())
    if match is None:
        raise ValueError(f"{value!r} is not of the form http://host:port")
    host, port = match.group(1), int(match.group(2))
    if host.startswith("["):
        host = host[1:-1]
    if not 0 <= port <= 65535:
        raise ValueError(f"{value!r}: port out of range")
    return host, port


class RequestTimer:
    """The timestamps of one request in progress; its `park` stands in for the connection's park."""

    __slots__ = ("_park", "handled", "parked", "received", "started")

    def __init__(self, received: float, park: Callable[[trio.Event, float], Awaitable[None]]) -> None:
        now = time.perf_counter()
        self.received = received or now
        self.started = now
        self.handled = now
        self.parked = 0.0
        self._park = park

    async def park(self, event: trio.Event, deadline: float) -> None:
        began = time.perf_counter()
        try:
            await self._park(event, deadline)
        finally:
            self.parked += time.perf_counter() - began

    def done_handling(self) -> None:
        self.handled = time.perf_counter()


class _Latencies:
    """Bucket counts and sums of the five latency parts (LATENCY_PARTS order) of one request type."""

    __slots__ = ("counts", "sums")

    def __init__(self) -> None:
        self.counts = [[0] * (len(LATENCY_BUCKETS) + 1) for _ in LATENCY_PARTS]
        self.sums = [0.0] * len(LATENCY_PARTS)


_bucket = bisect.bisect_left  # index of the first bucket whose upper bound is >= the value


class RequestMetrics:
    """Request, error, latency and per-topic traffic counts since start-up. Owned by the trio thread;
    written by connections (`start`/`finish`), read by `BrokerCollector` at scrape time."""

    def __init__(self, metadata: Any) -> None:
        self._metadata = metadata  # LocalMetadata: topic ids of Fetch v13+ back to names
        self.requests: dict[tuple[str, int], int] = {}  # (request name, version) -> count
        self.errors: dict[tuple[str, int], int] = {}  # (request name, error code) -> count
        self.latencies: dict[str, _Latencies] = {}
        self.bytes_in: dict[str, int] = {}
        self.messages_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self._names: dict[int, str] = {}

    def start(self, received: float, park: Callable[[trio.Event, float], Awaitable[None]]) -> RequestTimer:
        return RequestTimer(received, park)

    def finish(self, timer: RequestTimer, ctx: RequestContext, request: Any, response: Any) -> None:
        # the hot path of every request while the endpoint is on: locals, no helper objects
        sent = time.perf_counter()
        api_key = ctx.api_key
        if api_key == ApiKey.FETCH:
            name = _fetch_name(request)
        else:
            name = self._names.get(api_key) or self._name_of(api_key)
        key = (name, ctx.api_version)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        latencies = self.latencies.get(name)
        if latencies is None:
            latencies = self.latencies[name] = _Latencies()
        counts, sums = latencies.counts, latencies.sums
        received, started, handled, remote = timer.received, timer.started, timer.handled, timer.parked
        local = handled - started - remote
        if local < 0.0:
            local = 0.0
        total, queue, send = sent - received, started - received, sent - handled
        counts[0][_bucket(LATENCY_BUCKETS, total)] += 1
        counts[1][_bucket(LATENCY_BUCKETS, queue)] += 1
        counts[2][_bucket(LATENCY_BUCKETS, local)] += 1
        counts[3][_bucket(LATENCY_BUCKETS, remote)] += 1
        counts[4][_bucket(LATENCY_BUCKETS, send)] += 1
        sums[0] += total
        sums[1] += queue
        sums[2] += local
        sums[3] += remote
        sums[4] += send
        if api_key == ApiKey.PRODUCE:
            self._count_produce(name, request, response)
        elif response is None:
            return
        elif api_key == ApiKey.FETCH:
            self._count_fetch(name, ctx.api_version, response)
        else:
            errors = self.errors
            for code in _error_codes(response):
                error_key = (name, code)
                errors[error_key] = errors.get(error_key, 0) + 1

    def _name_of(self, api_key: int) -> str:
        from kafkacompat.wire.messages import API_SPECS

        spec = API_SPECS.get(api_key)
        name = self._names[api_key] = spec.name if spec is not None else str(api_key)
        return name

    def _count_produce(self, name: str, request: Any, response: Any) -> None:
        # acks=0 gets no response; the handler closes the connection instead of returning None when a
        # partition failed, so None here means every partition was appended.
        failed: set[tuple[str, int]] | None = None
        if response is not None:
            errors = self.errors
            for topic in response.responses:
                for p in topic.partition_responses:
                    code = p.error_code
                    error_key = (name, code)
                    errors[error_key] = errors.get(error_key, 0) + 1
                    if code:
                        if failed is None:
                            failed = set()
                        failed.add((topic.name, p.index))
        bytes_in, messages_in = self.bytes_in, self.messages_in
        for topic in request.topic_data:
            topic_name = topic.name
            for data in topic.partition_data:
                records = data.records
                if records is None or (failed and (topic_name, data.index) in failed):
                    continue
                size = len(records)
                bytes_in[topic_name] = bytes_in.get(topic_name, 0) + size
                messages_in[topic_name] = messages_in.get(topic_name, 0) + _record_count(records, size)

    def _count_fetch(self, name: str, version: int, response: Any) -> None:
        errors = self.errors
        error_key = (name, response.error_code)
        errors[error_key] = errors.get(error_key, 0) + 1
        for topic in response.responses:
            size = 0
            for p in topic.partitions:
                error_key = (name, p.error_code)
                errors[error_key] = errors.get(error_key, 0) + 1
                records = p.records
                if records:  # b"" or a file slice (whose truth is its size)
                    size += records.size if hasattr(records, "size") else len(records)
            if not size:
                continue
            if version >= 13:
                info = self._metadata.topic_by_id(topic.topic_id)
                if info is None:
                    continue
                topic_name = info.name
            else:
                topic_name = topic.topic
            self.bytes_out[topic_name] = self.bytes_out.get(topic_name, 0) + size


def _fetch_name(request: Any) -> str:
    """Kafka splits Fetch into FetchConsumer and FetchFollower in its request metrics."""
    replica_id = request.replica_id
    state = getattr(request, "replica_state", None)
    if state is not None and state.replica_id >= 0:
        replica_id = state.replica_id
    return "FetchFollower" if replica_id >= 0 else "FetchConsumer"


def _record_count(records: Any, size: int) -> int:
    """Records in a run of v2 record batches (the count field of each batch header)."""
    count = 0
    position = 0
    while position + 61 <= size:
        (length,) = _BATCH_LENGTH.unpack_from(records, position + 8)
        (in_batch,) = _RECORD_COUNT.unpack_from(records, position + 57)
        if in_batch > 0:
            count += in_batch
        if length <= 0:
            break
        position += _BATCH_OVERHEAD + length
    return count


# response class -> (names of error-code slots, names of the other slots)
_PLANS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}
_SKIPPED_SLOTS = frozenset({"unknown_tags", "records", "error_message"})


def _error_codes(obj: Any) -> Iterator[int]:
    """Every `error_code` in a response, top level and nested, as Kafka's `errorCounts()` counts them."""
    cls = type(obj)
    plan = _PLANS.get(cls)
    if plan is None:
        slots = [s for c in cls.__mro__ for s in getattr(c, "__slots__", ())]
        codes = tuple(s for s in slots if s == "error_code")
        others = tuple(s for s in slots if s != "error_code" and s not in _SKIPPED_SLOTS)
        plan = _PLANS[cls] = (codes, others)
    codes, others = plan
    for slot in codes:
        yield getattr(obj, slot)
    for slot in others:
        value = getattr(obj, slot, None)
        if type(value) is list:
            for item in value:
                if isinstance(item, Struct):
                    yield from _error_codes(item)
        elif isinstance(value, Struct):
            yield from _error_codes(value)


# --- scrape time -------------------------------------------------------------------------------------

METRIC_NAMES: dict[str, str] = {
    # name (as exposed, without _total/_bucket suffixes) -> Kafka's MBean it stands for
    "kafka_server_brokertopicmetrics_bytes_in": "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec",
    "kafka_server_brokertopicmetrics_bytes_out": "kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec",
    "kafka_server_brokertopicmetrics_messages_in": (
        "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec"
    ),
    "kafka_network_requestmetrics_requests": "kafka.network:type=RequestMetrics,name=RequestsPerSec",
    "kafka_network_requestmetrics_errors": "kafka.network:type=RequestMetrics,name=ErrorsPerSec",
    "kafka_network_requestmetrics_total_time_seconds": "kafka.network:type=RequestMetrics,name=TotalTimeMs",
    "kafka_network_requestmetrics_request_queue_time_seconds": (
        "kafka.network:type=RequestMetrics,name=RequestQueueTimeMs"
    ),
    "kafka_network_requestmetrics_local_time_seconds": "kafka.network:type=RequestMetrics,name=LocalTimeMs",
    "kafka_network_requestmetrics_remote_time_seconds": "kafka.network:type=RequestMetrics,name=RemoteTimeMs",
    "kafka_network_requestmetrics_response_send_time_seconds": (
        "kafka.network:type=RequestMetrics,name=ResponseSendTimeMs"
    ),
    "kafka_network_requestchannel_request_queue_size": (
        "kafka.network:type=RequestChannel,name=RequestQueueSize"
    ),
    "kafka_server_socketservermetrics_connection_count": (
        "kafka.server:type=socket-server-metrics,listener=*,name=connection-count"
    ),
    "kafka_log_log_size_bytes": "kafka.log:type=Log,name=Size",
    "kafka_log_log_start_offset": "kafka.log:type=Log,name=LogStartOffset",
    "kafka_log_log_end_offset": "kafka.log:type=Log,name=LogEndOffset",
    "kafka_log_log_num_log_segments": "kafka.log:type=Log,name=NumLogSegments",
    "kafka_cluster_partition_high_watermark": "(the high watermark of each partition)",
    "kafka_server_replicamanager_partition_count": "kafka.server:type=ReplicaManager,name=PartitionCount",
    "kafka_server_replicamanager_leader_count": "kafka.server:type=ReplicaManager,name=LeaderCount",
    "kafka_server_replicamanager_under_replicated_partitions": (
        "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions"
    ),
    "kafka_controller_kafkacontroller_offline_partitions_count": (
        "kafka.controller:type=KafkaController,name=OfflinePartitionsCount"
    ),
    "kafka_controller_kafkacontroller_active_controller_count": (
        "kafka.controller:type=KafkaController,name=ActiveControllerCount"
    ),
    "kafka_consumergroup_current_offset": "(kafka_exporter) committed offset per group and partition",
    "kafka_consumergroup_lag": "(kafka_exporter) high watermark minus committed offset",
    "kafka_consumergroup_members": "(kafka_exporter) members per group",
    "kafka_server_fetchsessioncache_incremental_fetch_sessions": (
        "kafka.server:type=FetchSessionCache,name=NumIncrementalFetchSessions"
    ),
    "kafka_server_fetchsessioncache_incremental_fetch_partitions_cached": (
        "kafka.server:type=FetchSessionCache,name=NumIncrementalFetchPartitionsCached"
    ),
    "kafkacompat_build_info": "kafka.server:type=app-info,name=version (as a label)",
    "process_resident_memory_bytes": "(prometheus_client) resident set size",
    "process_cpu_seconds": "(prometheus_client) user + system CPU time",
    "process_open_fds": "(prometheus_client) open file descriptors",
    "process_start_time_seconds": "(prometheus_client) start time since the epoch",
    "process_virtual_memory_bytes": "(prometheus_client) virtual memory size",
    "process_max_fds": "(prometheus_client) limit of open file descriptors",
}


class BrokerCollector:
    """A prometheus_client collector reading one running broker (its RequestMetrics and its state)."""

    def __init__(self, broker: Broker, request_metrics: RequestMetrics) -> None:
        self.broker = broker
        self.request_metrics = request_metrics

    def describe(self) -> list[Any]:
        return []  # names are only known at collection; no registration-time duplicate checks needed

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        from kafkacompat import __version__

        info = GaugeMetricFamily(
            "kafkacompat_build_info", "The broker's software version (always 1)", labels=["version"]
        )
        info.add_metric([__version__], 1)
        yield info
        yield from self._requests()
        yield from self._topics()
        yield from self._network()
        yield from self._logs()
        yield from self._groups()
        yield from self._fetch_sessions()

    def _requests(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        from kafkacompat.wire.errors import ErrorCode

        stats = self.request_metrics
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests handled, by request type and version (Kafka's RequestsPerSec)",
            labels=["request", "version"],
        )
        for (name, version), count in sorted(stats.requests.items()):
            requests.add_metric([name, str(version)], count)
        yield requests
        errors = CounterMetricFamily(
            "kafka_network_requestmetrics_errors",
            "Error codes in responses, NONE included, by request type (Kafka's ErrorsPerSec)",
            labels=["request", "error"],
        )
        for (name, code), count in sorted(stats.errors.items()):
            try:
                error = ErrorCode(code).name
            except ValueError:
                error = str(code)
            errors.add_metric([name, error], count)
        yield errors
        for part, kafka_name in enumerate(LATENCY_PARTS):
            family = HistogramMetricFamily(
                f"kafka_network_requestmetrics_{kafka_name}_seconds",
                f"Request {kafka_name.replace('_', ' ')} in seconds (Kafka's {_camel(kafka_name)}Ms)",
                labels=["request"],
            )
            for name, latencies in sorted(stats.latencies.items()):
                cumulative = 0
                buckets = []
                counts = latencies.counts[part]
                for bound, count in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
                    cumulative += count
                    buckets.append((_bound(bound), cumulative))
                family.add_metric([name], buckets, latencies.sums[part])
            yield family

    def _topics(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        stats = self.request_metrics
        metadata = self.broker.state.metadata
        for table in (stats.bytes_in, stats.bytes_out, stats.messages_in):
            # a deleted topic's meters go with it, as Kafka removes its BrokerTopicMetrics
            for gone in [topic for topic in table if topic not in metadata]:
                del table[gone]
        for metric, table, text in (
            ("bytes_in", stats.bytes_in, "Record bytes appended by producers (Kafka's BytesInPerSec)"),
            ("bytes_out", stats.bytes_out, "Record bytes sent to fetchers (Kafka's BytesOutPerSec)"),
            ("messages_in", stats.messages_in, "Records appended by producers (Kafka's MessagesInPerSec)"),
        ):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{metric}", text, labels=["topic"])
            for topic, value in sorted(table.items()):
                family.add_metric([topic], value)
            yield family

    def _network(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        broker = self.broker
        per_listener = {listener.name: 0 for listener in broker.bound}
        waiting = 0
        for connection in list(broker._connections):
            name = connection.info.listener_name
            per_listener[name] = per_listener.get(name, 0) + 1
            frames = getattr(connection, "_frames", None)  # the connection's FrameBuffer
            if frames is not None:
                waiting += frames.complete_frames()
        connections = GaugeMetricFamily(
            "kafka_server_socketservermetrics_connection_count",
            "Open client connections per listener",
            labels=["listener"],
        )
        for name, count in sorted(per_listener.items()):
            connections.add_metric([name], count)
        yield connections
        yield GaugeMetricFamily(
            "kafka_network_requestchannel_request_queue_size",
            "Complete requests received and waiting behind the request in progress on their connection",
            value=waiting,
        )

    def _logs(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        state = self.broker.state
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size_bytes", "Bytes of a partition's segments", labels=labels)
        start = GaugeMetricFamily("kafka_log_log_start_offset", "First offset of a partition", labels=labels)
        end = GaugeMetricFamily("kafka_log_log_end_offset", "Offset the next record gets", labels=labels)
        segments = GaugeMetricFamily(
            "kafka_log_log_num_log_segments", "Segments of a partition", labels=labels
        )
        high = GaugeMetricFamily(
            "kafka_cluster_partition_high_watermark", "High watermark of a partition", labels=labels
        )
        count = 0
        for (topic, partition), partition_log in sorted(state.logs.logs.items()):
            key = [topic, str(partition)]
            count += 1
            try:
                size.add_metric(key, partition_log.size_in_bytes)
                start.add_metric(key, partition_log.log_start_offset)
                end.add_metric(key, partition_log.log_end_offset)
                segments.add_metric(key, len(partition_log.segments))
                high.add_metric(key, partition_log.high_watermark)
            except (OSError, IndexError):
                continue  # closed or being deleted meanwhile
        offline = len(state.logs.offline_partitions)
        yield from (size, start, end, segments, high)
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_partition_count", "Partitions on this broker", value=count + offline
        )
        # the replica manager's figures (a single node leads every log it has)
        health = state.replicas.health(count, offline)
        leaders, under_replicated, offline_partitions, active_controller = health
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_leader_count", "Partitions this broker leads", value=leaders
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set",
            value=under_replicated,
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_offline_partitions_count",
            "Partitions without a live leader (reported by the active controller; on a single node, logs "
            "offline after a storage error)",
            value=offline_partitions,
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_active_controller_count",
            "1 on the active controller (a single node is its own controller)",
            value=active_controller,
        )

    def _groups(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        from kafkacompat.wire.errors import KafkaError

        state = self.broker.state
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "Committed offset of a group on a partition", labels=labels
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag", "High watermark minus the group's committed offset", labels=labels
        )
        members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of a group", labels=["consumergroup"]
        )
        runtime = state.groups
        core = getattr(runtime, "core", None)
        if core is not None:
            for group_id in sorted(core.offsets.groups()):
                for (topic, partition), committed in sorted(core.offsets.all(group_id).items()):
                    key = [group_id, topic, str(partition)]
                    current.add_metric(key, committed.offset)
                    try:
                        partition_log = state.logs.get_log(topic, partition)
                    except KafkaError:
                        continue
                    if partition_log is not None:
                        lag.add_metric(key, max(partition_log.high_watermark - committed.offset, 0))
            for group_id, group in sorted(core.groups.items()):
                members.add_metric([group_id], len(group.members))
        yield from (current, lag, members)

    def _fetch_sessions(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        sessions = self.broker.state.fetch_sessions
        cached = sum(len(session.partitions) for session in list(sessions._sessions.values()))
        yield GaugeMetricFamily(
            "kafka_server_fetchsessioncache_incremental_fetch_sessions",
            "Incremental fetch sessions in the cache",
            value=len(sessions),
        )
        yield GaugeMetricFamily(
            "kafka_server_fetchsessioncache_incremental_fetch_partitions_cached",
            "Partitions held by the cached fetch sessions",
            value=cached,
        )


def _camel(snake: str) -> str:
    return "".join(word.capitalize() for word in snake.split("_"))


def _bound(value: float) -> str:
    from prometheus_client.utils import floatToGoString

    return floatToGoString(value)


# --- the HTTP endpoint -------------------------------------------------------------------------------

_MAX_REQUEST_HEAD = 16 * 1024
_READ_TIMEOUT = 10.0


def build_registry(broker: Broker, request_metrics: RequestMetrics) -> Any:
    from prometheus_client import CollectorRegistry, ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    registry.register(BrokerCollector(broker, request_metrics))
    return registry


async def serve_metrics(
    broker: Broker,
    stop: trio.Event,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Bind `metrics.listener`, install the request counters, answer scrapes until `stop` is set."""
    from kafkacompat.config import ConfigError

    host, port = parse_metrics_listener(broker.config["metrics.listener"])
    request_metrics = RequestMetrics(broker.state.metadata)
    try:
        registry = build_registry(broker, request_metrics)
    except ImportError as exc:
        raise ConfigError(
            f"metrics.listener is set but prometheus_client cannot be imported ({exc}): "
            "pip install prometheus-client"
        ) from exc
    listeners = await trio.open_tcp_listeners(port, host=host or None)
    bound = listeners[0].socket.getsockname()
    address = (host or bound[0], bound[1])
    broker.state.request_metrics = request_metrics
    log.info("metrics endpoint on http://%s:%d/metrics", *address)
    task_status.started(address)

    async def answer(stream: trio.SocketStream) -> None:
        try:
            await _answer(stream, registry)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        except Exception:
            log.exception("metrics scrape failed")
        finally:
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, answer, listeners)
        await stop.wait()
        nursery.cancel_scope.cancel()


async def _answer(stream: trio.SocketStream, registry: Any) -> None:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    head = b""
    with trio.move_on_after(_READ_TIMEOUT):
        while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) < _MAX_REQUEST_HEAD:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            head += chunk
    request_line = head.split(b"\n", 1)[0].decode("latin-1").strip().split()
    if len(request_line) < 2:
        await _respond(stream, 400, "text/plain", b"bad request\n")
        return
    method, target = request_line[0], request_line[1]
    path = target.split("?", 1)[0]
    if method not in ("GET", "HEAD"):
        await _respond(stream, 405, "text/plain", b"only GET\n")
        return
    if path not in ("/metrics", "/"):
        await _respond(stream, 404, "text/plain", b"not found: try /metrics\n")
        return
    try:
        body = generate_latest(registry)
    except Exception as exc:  # a collector bug must not cost the scraper its answer
        log.exception("metrics collection failed")
        await _respond(stream, 500, "text/plain", f"collection failed: {exc}\n".encode())
        return
    await _respond(stream, 200, CONTENT_TYPE_LATEST, b"" if method == "HEAD" else body, len(body))


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}


async def _respond(
    stream: trio.SocketStream, status: int, content_type: str, body: bytes, length: int | None = None
) -> None:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n"
    )
    await stream.send_all(head.encode("latin-1") + body)
