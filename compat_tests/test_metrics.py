"""The Prometheus endpoint (`metrics.listener`) read while real clients work against the broker.

Each test starts its own broker with the endpoint on a free port (the suite's shared broker, or one
given with --bootstrap, has none), produces and consumes with confluent-kafka and kafka-python, scrapes
with urllib and parses with prometheus_client's own text parser, then checks the numbers against what
the clients did.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import create_topic
from compat_tests.conftest import COMPAT_OVERRIDES
from kafkacompat.local_brokers import InProcessBroker

pytestmark = pytest.mark.restarts_broker

prometheus_parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client not installed")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def metrics_broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(
        tmp_path / "data", [*COMPAT_OVERRIDES, "metrics.listener=http://127.0.0.1:0"]
    ).start()
    try:
        yield broker
    finally:
        broker.stop()


def scrape(broker: InProcessBroker) -> Samples:
    url = broker.metrics_url
    assert url is not None and url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode("utf-8")
    samples: Samples = {}
    for family in prometheus_parser.text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of every sample of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def test_traffic_log_and_group_lag_match_what_the_clients_did(metrics_broker: InProcessBroker) -> None:
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    bootstrap = metrics_broker.bootstrap
    topic = "metrics-traffic"
    create_topic(bootstrap, topic, 2)
    records = 300
    sent_bytes = 0
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(records):
        key, payload = f"k{i}".encode(), f"value-{i:05d}".encode() * 3
        sent_bytes += len(key) + len(payload)
        producer.produce(topic, key=key, value=payload, partition=i % 2)
    assert producer.flush(15) == 0

    samples = scrape(metrics_broker)
    assert value(samples, "kafka_server_brokertopicmetrics_messages_in_total", topic=topic) == records
    assert value(samples, "kafka_server_brokertopicmetrics_bytes_in_total", topic=topic) >= sent_bytes
    for partition in (0, 1):
        labels = {"topic": topic, "partition": str(partition)}
        assert value(samples, "kafka_log_log_end_offset", **labels) == records // 2
        assert value(samples, "kafka_log_log_start_offset", **labels) == 0
        assert value(samples, "kafka_log_log_size_bytes", **labels) > 0
        assert value(samples, "kafka_log_log_num_log_segments", **labels) == 1
    produce_requests = total(samples, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert produce_requests >= 1
    # every request is timed once in each latency histogram, and answered with at least one error code
    assert value(samples, "kafka_network_requestmetrics_total_time_seconds_count", request="Produce") == (
        produce_requests
    )
    assert (
        total(samples, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE")
        >= produce_requests
    )
    for part in ("request_queue_time", "local_time", "remote_time", "response_send_time"):
        name = f"kafka_network_requestmetrics_{part}_seconds_count"
        assert value(samples, name, request="Produce") == produce_requests
    assert value(
        samples, "kafka_network_requestmetrics_total_time_seconds_bucket", request="Produce", le="+Inf"
    ) == (produce_requests)

    # a group reads everything and commits only part of it: the lag is what is left uncommitted
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id="metrics-readers",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        consumer.assign(partitions)
        received: list[Any] = []
        deadline = time.monotonic() + 20
        while len(received) < records and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                received.extend(batch)
        assert len(received) == records
        committed = {partitions[0]: 100, partitions[1]: 30}
        consumer.commit({tp: OffsetAndMetadata(offset, "", -1) for tp, offset in committed.items()})
        received_bytes = sum(len(r.key) + len(r.value) for r in received)

        samples = scrape(metrics_broker)
        for tp, offset in committed.items():
            labels = {"consumergroup": "metrics-readers", "topic": topic, "partition": str(tp.partition)}
            assert value(samples, "kafka_consumergroup_current_offset", **labels) == offset
            assert value(samples, "kafka_consumergroup_lag", **labels) == records // 2 - offset
        assert (
            value(samples, "kafka_server_brokertopicmetrics_bytes_out_total", topic=topic) >= received_bytes
        )
        assert total(samples, "kafka_network_requestmetrics_requests_total", request="FetchConsumer") >= 1
        assert total(samples, "kafka_network_requestmetrics_requests_total", request="OffsetCommit") == 1
        # kafka-python keeps an incremental fetch session (KIP-227) while it consumes
        assert value(samples, "kafka_server_fetchsessioncache_incremental_fetch_sessions") >= 1
        assert value(samples, "kafka_server_fetchsessioncache_incremental_fetch_partitions_cached") >= 1
        assert value(samples, "kafka_server_socketservermetrics_connection_count", listener="PLAINTEXT") >= 1
    finally:
        consumer.close()


def test_request_and_error_counts_are_exact(metrics_broker: InProcessBroker) -> None:
    """Our own client sends a known number of requests while nothing else talks to the broker."""
    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class

    before = scrape(metrics_broker)
    produce = request_class(0)
    with KafkaClient(metrics_broker.bootstrap) as client:
        for _ in range(4):
            client.metadata([])
        request = produce(
            acks=1,
            timeout_ms=1000,
            topic_data=[
                produce.TopicProduceData(
                    name="no-such-topic",
                    partition_data=[produce.PartitionProduceData(index=0, records=b"")],
                )
            ],
        )
        response = client.send(0, request)
        assert response.responses[0].partition_responses[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    after = scrape(metrics_broker)

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert delta("kafka_network_requestmetrics_requests_total", request="Metadata") == 4
    assert delta("kafka_network_requestmetrics_requests_total", request="ApiVersions") == 1
    assert delta("kafka_network_requestmetrics_requests_total", request="Produce") == 1
    assert (
        delta(
            "kafka_network_requestmetrics_errors_total", request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION"
        )
        == 1
    )
    assert delta("kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") == 0
    assert delta("kafka_network_requestmetrics_errors_total", request="ApiVersions", error="NONE") == 1
    assert delta("kafka_server_brokertopicmetrics_messages_in_total") == 0
    assert value(after, "kafka_controller_kafkacontroller_active_controller_count") == 1
    assert value(after, "kafka_server_replicamanager_under_replicated_partitions") == 0
    assert value(after, "kafka_controller_kafkacontroller_offline_partitions_count") == 0
    assert value(after, "process_resident_memory_bytes") > 0
    assert value(after, "process_cpu_seconds_total") > 0


def test_a_parked_fetch_is_remote_time(metrics_broker: InProcessBroker) -> None:
    """A consumer fetch that waits for data (max_wait) spends that wait in the remote-time histogram."""
    from kafka import KafkaConsumer, TopicPartition

    topic = "metrics-parked"
    create_topic(metrics_broker.bootstrap, topic)
    consumer = KafkaConsumer(bootstrap_servers=metrics_broker.bootstrap, fetch_max_wait_ms=300)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
    finally:
        consumer.close()
    samples = scrape(metrics_broker)
    fetches = value(
        samples, "kafka_network_requestmetrics_remote_time_seconds_count", request="FetchConsumer"
    )
    remote = value(samples, "kafka_network_requestmetrics_remote_time_seconds_sum", request="FetchConsumer")
    # every fetch of the empty partition waited its 300 ms (minus the one that may have been cut short)
    assert fetches >= 2
    assert remote >= 0.25 * (fetches - 1)
    under_a_second = value(
        samples, "kafka_network_requestmetrics_local_time_seconds_bucket", request="FetchConsumer", le="1.0"
    )
    assert under_a_second == fetches  # the wait is not local time


def test_only_the_metrics_path_is_served(metrics_broker: InProcessBroker) -> None:
    host, port = metrics_broker.broker.metrics_address
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(f"http://{host}:{port}/other", timeout=10)
    assert error.value.code == 404
    with urllib.request.urlopen(f"http://{host}:{port}/", timeout=10) as response:
        assert b"kafka_log_log_end_offset" in response.read()


def test_the_default_broker_does_not_load_prometheus_client(tmp_path: Path) -> None:
    """metrics.listener unset: no endpoint, and prometheus_client is never imported (start-up, RSS)."""
    script = (
        "import sys\n"
        "from kafkacompat.local_brokers import InProcessBroker\n"
        f"broker = InProcessBroker({str(tmp_path / 'data')!r}).start()\n"
        "from kafkacompat.client import KafkaClient\n"
        "with KafkaClient(broker.bootstrap) as client:\n"
        "    client.metadata(None)\n"
        "print(broker.broker.metrics_address, broker.broker.state.request_metrics,"
        " 'prometheus_client' in sys.modules, 'kafkacompat.broker.metrics' in sys.modules)\n"
        "broker.stop()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.split() == ["None", "None", "False", "False"]


def test_requests_pipelined_behind_a_parked_fetch_are_the_request_queue(
    metrics_broker: InProcessBroker,
) -> None:
    """A fetch waiting for data holds its connection; requests sent behind it wait: RequestQueueSize."""
    import socket
    import struct

    from kafkacompat.wire.header import RequestHeader, encode_request_header
    from kafkacompat.wire.messages import encode_request, request_class

    topic = "metrics-queue"
    create_topic(metrics_broker.bootstrap, topic)
    fetch, metadata = request_class(1), request_class(3)

    def frame(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
        header = encode_request_header(RequestHeader(api_key, version, correlation_id, "pipeliner"))
        payload = header + encode_request(api_key, version, body)
        return struct.pack(">i", len(payload)) + payload

    parked_fetch = fetch(
        replica_id=-1, max_wait_ms=2000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[fetch.FetchTopic(topic=topic, partitions=[
            fetch.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
        ])],
    )  # fmt: skip
    frames = frame(1, 12, 1, parked_fetch) + b"".join(
        frame(3, 12, 2 + i, metadata(topics=[], allow_auto_topic_creation=False)) for i in range(3)
    )
    host, port = metrics_broker.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frames)
        time.sleep(0.5)
        samples = scrape(metrics_broker)
        assert value(samples, "kafka_network_requestchannel_request_queue_size") == 3
        sock.settimeout(10)
        answered = 0
        buffer = b""
        while answered < 4:
            chunk = sock.recv(65536)
            assert chunk, "the broker closed the connection"
            buffer += chunk
            while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack_from(">i", buffer)[0]:
                buffer = buffer[4 + struct.unpack_from(">i", buffer)[0] :]
                answered += 1
    samples = scrape(metrics_broker)
    assert value(samples, "kafka_network_requestchannel_request_queue_size") == 0
    # the three Metadata requests queued behind the fetch for most of its 2 s wait
    queued = value(samples, "kafka_network_requestmetrics_request_queue_time_seconds_sum", request="Metadata")
    assert queued >= 3 * 1.0


# --- the example Grafana dashboard (docs/grafana-dashboard.json) ------------------------------------

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana-dashboard.json"
_PROMQL_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[[^\]]*\]|[A-Za-z_:][A-Za-z0-9_:]*|\d+(?:\.\d+)?|!=|=~|!~|\S')
_PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
# labels Prometheus attaches at scrape time, not the endpoint
_TARGET_LABELS = {"instance", "job"}


def promql_selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names it is filtered or grouped by) for every metric an expression reads."""
    tokens = _PROMQL_TOKEN.findall(expr)
    metrics: list[tuple[str, set[str]]] = []
    grouping: set[str] = set()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        if token in ("by", "without") and following == "(":
            i += 2
            while tokens[i] != ")":
                if tokens[i] != ",":
                    grouping.add(tokens[i])
                i += 1
        elif (
            re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", token)
            and following not in ("(", "by", "without")
            and token not in _PROMQL_KEYWORDS
        ):
            labels: set[str] = set()
            if following == "{":
                i += 2
                while tokens[i] != "}":
                    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tokens[i]) and tokens[i + 1] in (
                        "=",
                        "!=",
                        "=~",
                        "!~",
                    ):
                        labels.add(tokens[i])
                    i += 1
            metrics.append((token, labels))
        i += 1
    return [(name, labels | grouping) for name, labels in metrics]


def test_promql_selectors_reads_names_matchers_and_grouping() -> None:
    expr = 'histogram_quantile(0.99, sum by (le) (rate(x_bucket{instance=~"$i", request="Produce"}[5m]))) / y'
    assert promql_selectors(expr) == [("x_bucket", {"instance", "request", "le"}), ("y", {"le"})]


def test_every_dashboard_panel_reads_metrics_the_endpoint_exports(metrics_broker: InProcessBroker) -> None:
    from confluent_kafka import Consumer, Producer

    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"

    # traffic that makes every family carry samples: produce, a group that consumes and commits
    bootstrap = metrics_broker.bootstrap
    create_topic(bootstrap, "dashboard-topic")
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce("dashboard-topic", value=b"v%d" % i)
    assert producer.flush(15) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "dashboard-group", "auto.offset.reset": "earliest",
         "enable.auto.commit": False}
    )  # fmt: skip
    try:
        consumer.subscribe(["dashboard-topic"])
        got = 0
        deadline = time.monotonic() + 20
        while got < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got += 1
        assert got == 10
        consumer.commit(asynchronous=False)
        samples = scrape(metrics_broker)
    finally:
        consumer.close()
    # librdkafka fetches by topic id (Fetch v13+); the bytes out still count for the topic's name
    fetch_versions = [
        int(dict(labels)["version"])
        for (name, labels) in samples
        if name == "kafka_network_requestmetrics_requests_total" and ("request", "FetchConsumer") in labels
    ]
    assert max(fetch_versions) >= 13
    assert value(samples, "kafka_server_brokertopicmetrics_bytes_out_total", topic="dashboard-topic") >= 20
    # METRIC_NAMES (the endpoint's own list) is exactly what a scrape with traffic holds
    from kafkacompat.broker.metrics import METRIC_NAMES

    url = metrics_broker.metrics_url
    assert url is not None
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode("utf-8")
    families = {family.name for family in prometheus_parser.text_string_to_metric_families(text)}
    assert families == set(METRIC_NAMES)
    labels_of: dict[str, set[str]] = {}
    for name, labels in samples:
        labels_of.setdefault(name, set()).update(label for label, _ in labels)

    ids = set()
    expressions = [variables["instance"]["definition"].replace("label_values(", "").split(",")[0]]
    for panel in dashboard["panels"]:
        assert panel["id"] not in ids
        ids.add(panel["id"])
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"], panel["title"]
        expressions += [target["expr"] for target in panel["targets"]]
    checked = set()
    for expr in expressions:
        selectors = promql_selectors(expr)
        assert selectors, expr
        for name, labels in selectors:
            assert name in labels_of, f"{name} (in {expr!r}) is not exported"
            missing = labels - _TARGET_LABELS - labels_of[name]
            assert not missing, f"{name} has no label {missing} (in {expr!r})"
            checked.add(name)
    # the dashboard covers each area of the endpoint
    for prefix in ("kafka_server_brokertopicmetrics", "kafka_network_requestmetrics", "kafka_log_log",
                   "kafka_consumergroup_lag", "kafka_controller", "process_"):  # fmt: skip
        assert any(name.startswith(prefix) for name in checked), prefix


def test_a_deleted_topic_loses_its_meters(metrics_broker: InProcessBroker) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    bootstrap = metrics_broker.bootstrap
    create_topic(bootstrap, "metrics-doomed")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("metrics-doomed", b"v")
    assert producer.flush(15) == 0
    assert (
        value(
            scrape(metrics_broker),
            "kafka_server_brokertopicmetrics_messages_in_total",
            topic="metrics-doomed",
        )
        == 1
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics(["metrics-doomed"])["metrics-doomed"].result(15)
    samples = scrape(metrics_broker)
    assert not [key for key in samples if ("topic", "metrics-doomed") in key[1]]
