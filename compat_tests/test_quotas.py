"""Client quotas with real clients: a throttled producer and consumer stay within their byte rates.

The rate tests run on a broker of their own (marked `secured_broker`: skipped with --bootstrap) with
Kafka's default quota window, 11 samples of 1 s. Under it a client held to its quota moves in periods
of about the window (a window's worth when the oldest sample expires, then throttled), as against
Kafka, so the rate is measured over whole periods: from the first period's start to the third's (about
23 s), from delivery reports (producer) or received messages (consumer), with confluent-kafka and
kafka-python, and must lie within 10% of the quota; the four measurements (each its own client id and
quota) run at the same time. A second broker with a short window (2 x 1 s)
serves the rest: quotas set and read with the `kafkacompat quotas` command and, when a JDK is there,
round-tripped by the Java Admin client. A third, with SASL users and the authorizer, checks that a
user's quota precedes a client id's for librdkafka producers, and `kafkacompat quotas
--command-config` against it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from compat_tests.clients import create_topic
from kafkacompat.local_brokers import InProcessBroker

pytestmark = pytest.mark.secured_broker

QUOTA = 200_000  # bytes per second
MESSAGE = b"q" * 1000
PATIENCE = 45.0  # seconds a rate test may run to see two whole periods of Kafka's default window
Events = list[tuple[float, int]]  # (when, bytes): a client's deliveries or receipts
RateRuns = dict[tuple[str, str], Future[Events]]  # (producer or consumer, client) -> its measurement


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(
        tmp_path_factory.mktemp("quota-broker") / "data",
        ["quota.window.num=2", "quota.window.size.seconds=1", "group.initial.rebalance.delay.ms=0"],
    ).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def quota_bootstrap(quota_broker: InProcessBroker) -> str:
    return quota_broker.bootstrap


@pytest.fixture(scope="module")
def kafka_window_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker with Kafka's default quota window (quota.window.num=11, quota.window.size.seconds=1)."""
    broker = InProcessBroker(
        tmp_path_factory.mktemp("kafka-window-broker") / "data", ["group.initial.rebalance.delay.ms=0"]
    ).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def quotas_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkacompat", "quotas", *args, "--bootstrap-server", bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )


def set_quota(bootstrap: str, entity: list[str], config: str) -> None:
    done = quotas_cli(bootstrap, "alter", *entity, "--add-config", config)
    assert done.returncode == 0, done.stderr


def test_cli_alters_and_describes_quotas(quota_bootstrap: str) -> None:
    set_quota(
        quota_bootstrap,
        ["--user", "alice", "--client-id", "app"],
        "producer_byte_rate=1024,request_percentage=50",
    )
    set_quota(quota_bootstrap, ["--client-defaults"], "consumer_byte_rate=4096")
    described = quotas_cli(quota_bootstrap, "describe", "--user", "alice", "--client-id", "app")
    assert described.returncode == 0, described.stderr
    assert described.stdout.strip() == (
        "Quota configs for user-principal 'alice', client-id 'app' are"
        " producer_byte_rate=1024.0, request_percentage=50.0"
    )
    listed = quotas_cli(quota_bootstrap, "describe").stdout
    assert "Quota configs for the default client-id are consumer_byte_rate=4096.0" in listed
    removed = quotas_cli(
        quota_bootstrap, "alter", "--client-defaults", "--delete-config", "consumer_byte_rate"
    )
    assert removed.returncode == 0, removed.stderr
    assert "default client-id" not in quotas_cli(quota_bootstrap, "describe").stdout
    refused = quotas_cli(quota_bootstrap, "alter", "--client-id", "x", "--add-config", "no_such_quota=1")
    assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr
    refused = quotas_cli(
        quota_bootstrap, "alter", "--client-id", "x", "--add-config", "producer_byte_rate=1.5"
    )
    assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr


def burst_starts(events: list[tuple[float, int]], quota: float) -> list[float]:
    """When the client starts sending faster than its quota after holding back: the period boundaries.

    With Kafka's sampled rate over `quota.window.num` x `quota.window.size.seconds` (11 x 1 s by default)
    a client held to its quota moves in periods of about the window: when the oldest sample expires it
    may send about a window's worth at once, then is throttled until the next one expires (Kafka's
    brokers shape traffic the same way). A period starts at the first event after which a quarter of a
    second carries more than a quarter second's quota; the next one starts at least 5 s later.
    """
    starts: list[float] = []
    ordered = sorted(events)
    for index, (at, _) in enumerate(ordered):
        if starts and at < starts[-1] + 5.0:
            continue
        ahead, following = 0, index
        while following < len(ordered) and ordered[following][0] < at + 0.25:
            ahead += ordered[following][1]
            following += 1
        if ahead > quota * 0.25:
            starts.append(at)
    return starts


def describe_events(events: list[tuple[float, int]]) -> str:
    """What a failed measurement saw: how many events and bytes, over which span, and its densest
    quarter second (a period's burst carries over a quarter of the quota in one)."""
    if not events:
        return "no events"
    ordered = sorted(events)
    densest, ahead, window_start = 0, 0, 0
    for at, size in ordered:
        ahead += size
        while ordered[window_start][0] < at - 0.25:
            ahead -= ordered[window_start][1]
            window_start += 1
        densest = max(densest, ahead)
    total = sum(size for _, size in ordered)
    span = ordered[-1][0] - ordered[0][0]
    return f"{len(ordered)} events, {total} bytes over {span:.1f} s, densest 0.25 s: {densest} bytes"


def rate_over_whole_periods(events: list[tuple[float, int]], quota: float) -> float:
    """Bytes per second from the first period's start to the last's (so over whole periods only)."""
    starts = burst_starts(events, quota)
    assert len(starts) >= 3, f"fewer than two whole periods: starts at {starts}; {describe_events(events)}"
    first, last = starts[0], starts[-1]
    carried = sum(size for at, size in events if first <= at < last)
    return carried / (last - first)


def enough_periods(events: list[tuple[float, int]], quota: float, now: float) -> bool:
    starts = burst_starts(events, quota)
    return len(starts) >= 3 and now > starts[-1] + 1.0


class PeriodWatch:
    """Whether `events` hold two whole periods yet, looked at twice a second: burst_starts scans every
    event, and a client loop asking after each message would take the CPU (and the GIL) from the broker
    and the other measurements."""

    def __init__(self, events: list[tuple[float, int]]) -> None:
        self.events = events
        self.next_look = 0.0
        self.done = False

    def enough(self) -> bool:
        now = time.monotonic()
        if not self.done and now >= self.next_look:
            self.next_look = now + 0.5
            self.done = enough_periods(self.events, QUOTA, now)
        return self.done


def produce_with_confluent(bootstrap: str, topic: str, client_id: str, deadline: float) -> list:
    from confluent_kafka import Producer

    throttles: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "batch.size": 16384, "acks": 1, "stats_cb": lambda _: None,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})  # fmt: skip
    delivered: list[tuple[float, int]] = []
    failures: list[object] = []
    purging = False

    def on_delivery(error: object, message: object) -> None:
        if error is None:
            delivered.append((time.monotonic(), len(MESSAGE)))
        elif not purging:
            failures.append(error)

    watch = PeriodWatch(delivered)
    while time.monotonic() < deadline and not watch.enough():
        try:
            producer.produce(topic, MESSAGE, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
            continue
        if len(producer) > 2000:  # keep the queue short: what counts is what the broker accepted
            producer.poll(0.01)
        producer.poll(0)
    purging = True  # what is still queued is left out: the measurement is over
    producer.purge()
    producer.flush(10)
    del producer  # its connections end with the test, not when the broker stops
    assert not failures
    assert throttles and max(throttles) > 0  # librdkafka saw throttle_time_ms in the responses
    return delivered


def produce_with_kafka_python(bootstrap: str, topic: str, client_id: str, deadline: float) -> list:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5,
                             batch_size=16384, acks=1)  # fmt: skip
    delivered: list[tuple[float, int]] = []
    sent = 0
    watch = PeriodWatch(delivered)
    try:
        while time.monotonic() < deadline and not watch.enough():
            if sent - len(delivered) > 2000:
                time.sleep(0.01)
                continue
            future = producer.send(topic, MESSAGE)
            future.add_callback(lambda _meta: delivered.append((time.monotonic(), len(MESSAGE))))
            sent += 1
    finally:
        from kafka.errors import KafkaTimeoutError

        try:
            producer.close(timeout=0)
        except KafkaTimeoutError:  # records still queued behind the throttle are dropped
            pass
    return list(delivered)


def consume_with_confluent(bootstrap: str, topic: str, client_id: str, deadline: float) -> list:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": client_id,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "fetch.max.bytes": 65536, "message.max.bytes": 65536,
                         "max.partition.fetch.bytes": 65536})  # fmt: skip
    consumer.subscribe([topic])
    received: list[tuple[float, int]] = []
    watch = PeriodWatch(received)
    try:
        while time.monotonic() < deadline and not watch.enough():
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                received.append((time.monotonic(), len(message.value())))
    finally:
        consumer.close()
    return received


def consume_with_kafka_python(bootstrap: str, topic: str, client_id: str, deadline: float) -> list:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, client_id=client_id, group_id=client_id,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             fetch_max_bytes=65536, max_partition_fetch_bytes=65536)  # fmt: skip
    received: list[tuple[float, int]] = []
    watch = PeriodWatch(received)
    try:
        while time.monotonic() < deadline and not watch.enough():
            for records in consumer.poll(timeout_ms=200).values():
                received.extend((time.monotonic(), len(record.value)) for record in records)
    finally:
        consumer.close()
    return received


PRODUCERS = {"confluent-kafka": produce_with_confluent, "kafka-python": produce_with_kafka_python}
CONSUMERS = {"confluent-kafka": consume_with_confluent, "kafka-python": consume_with_kafka_python}


def measure_producer(bootstrap: str, client: str) -> Events:
    """Kafka's default window (11 x 1 s): two whole periods of traffic, about 23 s."""
    topic, client_id = f"quota-produce-{client}", f"throttled-producer-{client}"
    create_topic(bootstrap, topic)
    set_quota(bootstrap, ["--client-id", client_id], f"producer_byte_rate={QUOTA}")
    return PRODUCERS[client](bootstrap, topic, client_id, time.monotonic() + PATIENCE)


def measure_consumer(bootstrap: str, client: str) -> Events:
    """Kafka's default window (11 x 1 s): two whole periods of traffic; throttled fetches are answered
    empty (KafkaApis), so the bytes counted are the bytes the consumer got."""
    from confluent_kafka import Producer

    topic, client_id = f"quota-fetch-{client}", f"throttled-consumer-{client}"
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"unthrottled-{client}",
                         "linger.ms": 20, "batch.size": 16384})  # fmt: skip
    for _ in range(int(QUOTA * (PATIENCE + 12) / len(MESSAGE))):  # more than the run can read
        while True:
            try:
                producer.produce(topic, MESSAGE)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0
    producer.close()
    set_quota(bootstrap, ["--client-id", client_id], f"consumer_byte_rate={QUOTA}")
    return CONSUMERS[client](bootstrap, topic, client_id, time.monotonic() + PATIENCE)


@pytest.fixture(scope="module")
def rate_runs(kafka_window_bootstrap: str) -> Iterator[RateRuns]:
    """The four rate measurements, started together on first use: each takes two whole periods of
    Kafka's window (about 23 s), and each has its own client id, quota and topic (a quota is per
    client id, so one client's throttling does not touch another's). Each test asserts on its own."""
    runs = [("producer", client) for client in sorted(PRODUCERS)] + [
        ("consumer", client) for client in sorted(CONSUMERS)
    ]
    measure = {"producer": measure_producer, "consumer": measure_consumer}
    with ThreadPoolExecutor(len(runs), thread_name_prefix="quota-rate") as pool:
        yield {(role, c): pool.submit(measure[role], kafka_window_bootstrap, c) for role, c in runs}


def assert_at_quota(events: Events, what: str) -> None:
    rate = rate_over_whole_periods(events, QUOTA)
    print(f"{what}: {rate:.0f} B/s against a quota of {QUOTA}")
    assert rate == pytest.approx(QUOTA, rel=0.1), f"{what}: {rate:.0f} B/s against a quota of {QUOTA}"


@pytest.mark.parametrize("client", sorted(PRODUCERS))
def test_throttled_producer_stays_within_its_byte_rate(rate_runs: RateRuns, client: str) -> None:
    assert_at_quota(rate_runs["producer", client].result(PATIENCE + 60), f"{client} producer")


@pytest.mark.parametrize("client", sorted(CONSUMERS))
def test_throttled_consumer_stays_within_its_byte_rate(rate_runs: RateRuns, client: str) -> None:
    assert_at_quota(rate_runs["consumer", client].result(PATIENCE + 90), f"{client} consumer")


def metadata_round(bootstrap: str, clients: int) -> float:
    """Seconds for `clients` new confluent-kafka admin clients, one after the other, to get metadata."""
    from confluent_kafka.admin import AdminClient

    began = time.monotonic()
    for _ in range(clients):
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=60)
    return time.monotonic() - began


def test_ip_connection_creation_rate(quota_bootstrap: str) -> None:
    """KIP-612 ip quotas set with `kafkacompat quotas --ip` (kafka-configs --entity-type ips): new
    connections from 127.0.0.1 over 3 a second are closed unanswered once their throttle time passes,
    and librdkafka clients, reconnecting, get through at about that rate."""
    set_quota(quota_bootstrap, ["--ip", "10.1.2.3"], "connection_creation_rate=7")
    described = quotas_cli(quota_bootstrap, "describe", "--ip", "10.1.2.3")
    assert described.stdout.strip() == "Quota configs for ip '10.1.2.3' are connection_creation_rate=7.0"
    refused = quotas_cli(quota_bootstrap, "alter", "--ip", "not-an-address", "--add-config",
                         "connection_creation_rate=1")  # fmt: skip
    assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr
    refused = quotas_cli(quota_bootstrap, "alter", "--ip", "10.1.2.3", "--add-config", "producer_byte_rate=1")
    assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr
    clients = 10  # each makes two connections: the bootstrap one and the broker's own
    unlimited = metadata_round(quota_bootstrap, clients)
    set_quota(quota_bootstrap, ["--ip", "127.0.0.1"], "connection_creation_rate=3")
    try:
        limited = metadata_round(quota_bootstrap, clients)
    finally:
        time.sleep(2.5)  # the window forgets the burst, so that this removal gets its connection
        removed = quotas_cli(quota_bootstrap, "alter", "--ip", "127.0.0.1", "--delete-config",
                             "connection_creation_rate")  # fmt: skip
        assert removed.returncode == 0, removed.stderr
        quotas_cli(quota_bootstrap, "alter", "--ip", "10.1.2.3", "--delete-config",
                   "connection_creation_rate")  # fmt: skip
    print(f"{clients} clients: {unlimited:.1f} s unlimited, {limited:.1f} s at 3 connections/s")
    # about 17 connections beyond the allowance: 8.1 s measured once, 3.8 s in a loaded CI run (how
    # much of the burst the sampled window lets through varies), against 0.2-0.3 s unlimited. The
    # delay the limit adds is asserted, not a multiple of the unlimited round: a slow moment of the VM
    # once made that round 1.8 s, and four times it more than the limited round's 4.5 s.
    assert limited - unlimited >= 2.0, (unlimited, limited)


def test_quotas_persist_in_the_log_dir(quota_broker: InProcessBroker) -> None:
    set_quota(quota_broker.bootstrap, ["--user", "persisted", "--client-defaults"], "producer_byte_rate=2048")
    document = json.loads((Path(quota_broker.data_dir) / "client-quotas.json").read_text())
    assert {"entity": {"user": ["name", "persisted"], "client-id": "<default>"},
            "values": {"producer_byte_rate": 2048}} in document["quotas"]  # fmt: skip


def test_java_admin_round_trips_client_quotas(quota_bootstrap: str) -> None:
    from compat_tests.java_probe import probe_command, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    result = subprocess.run(
        [*probe_command(), "client-quotas", quota_bootstrap, "java-user", "java-app"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"java probe failed:\n{result.stdout[-2000:]}{result.stderr[-4000:]}"
    lines = result.stdout.splitlines()
    assert (
        "strict client-id=java-app user=java-user producer_byte_rate:1048576.0 request_percentage:50.0"
        in lines
    )
    assert "clients client-id=<default> consumer_byte_rate:2097152.0" in lines
    assert (
        "clients client-id=java-app user=java-user producer_byte_rate:1048576.0 request_percentage:50.0"
        in lines
    )
    assert "removed client-id=java-app user=java-user producer_byte_rate:1048576.0" in lines
    assert "unknown-key InvalidRequestException" in lines
    described = quotas_cli(quota_bootstrap, "describe", "--user", "java-user", "--client-id", "java-app")
    assert described.returncode == 0 and described.stdout == ""  # the probe removed all it set


# --- a secured broker: SASL users, the authorizer, `kafkacompat quotas --command-config` -----------------

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)


@pytest.fixture(scope="module")
def sasl_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    overrides = [
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN",
        f"sasl.jaas.config={JAAS}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
        "allow.everyone.if.no.acl.found=true",
        "quota.window.num=2",
        "quota.window.size.seconds=1",
    ]
    broker = InProcessBroker(tmp_path_factory.mktemp("sasl-quota-broker") / "data", overrides).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def secured_cli(
    bootstrap: str, tmp_path: Path, user: str, command: str, *args: str
) -> subprocess.CompletedProcess[str]:
    properties = tmp_path / f"{user}.properties"
    properties.write_text(
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username={user}\nsasl.password={user}-secret\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "kafkacompat", command, *args, "--bootstrap-server", bootstrap,
         "--command-config", str(properties)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def produce_for(bootstrap: str, user: str, topic: str, seconds: float) -> tuple[int, list[int]]:
    """(bytes delivered, throttle times reported) of a librdkafka producer of client id "shared-app"."""
    from confluent_kafka import Producer

    throttles: list[int] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": f"{user}-secret",
            "client.id": "shared-app",
            "batch.size": 16384,
            "linger.ms": 5,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    delivered = [0]

    def on_delivery(error: object, message: object) -> None:
        if error is None:
            delivered[0] += len(MESSAGE)

    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            producer.produce(topic, MESSAGE, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
            continue
        if len(producer) > 2000:
            producer.poll(0.01)
        producer.poll(0)
    producer.purge()
    producer.flush(10)
    del producer
    return delivered[0], throttles


def test_user_quota_precedes_client_id_quota_and_cli_is_authorized(
    sasl_bootstrap: str, tmp_path: Path
) -> None:
    topic = "quota-users"
    acl = secured_cli(sasl_bootstrap, tmp_path, "admin", "acls", "add", "--cluster", "--allow-principal",
                      "User:admin", "--operation", "All")  # fmt: skip
    assert acl.returncode == 0, acl.stderr
    refused = secured_cli(sasl_bootstrap, tmp_path, "alice", "quotas", "alter", "--user", "alice",
                          "--add-config", "producer_byte_rate=1000000000")  # fmt: skip
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    for entity, rate in ((["--client-id", "shared-app"], 20_000), (["--user", "alice"], 1_000_000_000)):
        done = secured_cli(sasl_bootstrap, tmp_path, "admin", "quotas", "alter", *entity,
                           "--add-config", f"producer_byte_rate={rate}")  # fmt: skip
        assert done.returncode == 0, done.stderr
    described = secured_cli(sasl_bootstrap, tmp_path, "admin", "quotas", "describe")
    assert "Quota configs for user-principal 'alice' are producer_byte_rate=1000000000.0" in described.stdout
    assert "Quota configs for client-id 'shared-app' are producer_byte_rate=20000.0" in described.stdout
    created = secured_cli(sasl_bootstrap, tmp_path, "admin", "topics", "create", "--topic", topic)
    assert created.returncode == 0, created.stderr
    alice_bytes, alice_throttles = produce_for(sasl_bootstrap, "alice", topic, 2.5)
    bob_bytes, bob_throttles = produce_for(sasl_bootstrap, "bob", topic, 2.5)
    # alice: /users/alice (1 GB/s) precedes /clients/shared-app; bob has no user quota: 20 KB/s
    # (alice needs no particular speed, only to go well past what 20 KB/s would let through)
    assert alice_bytes > 400_000 and not [t for t in alice_throttles if t > 0]
    assert bob_bytes < 20_000 * (2.5 + 2) * 1.5 and [t for t in bob_throttles if t > 0]
