"""Client quotas with real clients: a throttled producer and consumer stay within their byte rates.

The module starts its own broker (marked `secured_broker`: skipped with --bootstrap) with a quota
window of 2 samples of 1 s: Kafka's default window (11 x 1 s) first lets a burst of ten seconds' worth
through, which a test of a few seconds could not tell from a broken quota. The rate is measured on the
client over the run after a warm-up of 2 s (the initial burst), from delivery reports (producer) or
received messages (consumer), and must lie within 10% of the quota. Quotas are set and read with the
`kafkacompat quotas` command; the Java Admin client round-trips them too when a JDK is there. A second
broker, with SASL users and the authorizer, checks that a user's quota precedes a client id's for
librdkafka producers, and `kafkacompat quotas --command-config` against it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.clients import create_topic
from kafkacompat.testing import InProcessBroker

pytestmark = pytest.mark.secured_broker

QUOTA = 200_000  # bytes per second
MESSAGE = b"q" * 1000
WARM_UP, RUN = 2.0, 9.0


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


def rate_after_warm_up(events: list[tuple[float, int]], start: float) -> float:
    """Bytes per second after the warm-up: the least-squares slope of the bytes received so far over time.

    The quota's sampled window makes the flow come in steps (a burst, then a throttle); the slope over
    the whole run does not depend on where in a step the run happens to end, as a plain ratio does.
    """
    late = [(at, size) for at, size in events if at >= start + WARM_UP]
    assert len(late) > 10, f"too few events after the warm-up: {len(late)}"
    points, total = [], 0
    for at, size in late:
        total += size
        points.append((at, total))
    mean_t = sum(at for at, _ in points) / len(points)
    mean_b = sum(b for _, b in points) / len(points)
    covariance = sum((at - mean_t) * (b - mean_b) for at, b in points)
    variance = sum((at - mean_t) ** 2 for at, _ in points)
    return covariance / variance


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


def test_throttled_producer_stays_within_its_byte_rate(quota_bootstrap: str) -> None:
    from confluent_kafka import Producer

    topic = "quota-produce"
    create_topic(quota_bootstrap, topic)
    set_quota(quota_bootstrap, ["--client-id", "throttled-producer"], f"producer_byte_rate={QUOTA}")
    throttles: list[int] = []
    producer = Producer(
        {
            "bootstrap.servers": quota_bootstrap,
            "client.id": "throttled-producer",
            "linger.ms": 5,
            "batch.size": 16384,
            "acks": 1,
            "stats_cb": lambda _: None,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    delivered: list[tuple[float, int]] = []

    failures: list[object] = []

    def on_delivery(error: object, message: object) -> None:
        if error is None:
            delivered.append((time.monotonic(), len(MESSAGE)))
        elif not purging:
            failures.append(error)

    purging = False
    start = time.monotonic()
    while time.monotonic() - start < RUN:
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
    rate = rate_after_warm_up([event for event in delivered if event[0] < start + RUN], start)
    print(f"producer: {rate:.0f} B/s against a quota of {QUOTA}")
    assert rate == pytest.approx(QUOTA, rel=0.1), f"produced {rate:.0f} B/s against a quota of {QUOTA}"
    assert throttles and max(throttles) > 0  # librdkafka saw throttle_time_ms in the responses


def test_throttled_consumer_stays_within_its_byte_rate(quota_bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer

    topic = "quota-fetch"
    create_topic(quota_bootstrap, topic)
    producer = Producer(
        {
            "bootstrap.servers": quota_bootstrap,
            "client.id": "unthrottled",
            "linger.ms": 20,
            "batch.size": 16384,
        }
    )
    for _ in range(int(QUOTA * (RUN + 3) / len(MESSAGE))):
        while True:
            try:
                producer.produce(topic, MESSAGE)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0
    del producer
    set_quota(quota_bootstrap, ["--client-id", "throttled-consumer"], f"consumer_byte_rate={QUOTA}")
    consumer = Consumer(
        {
            "bootstrap.servers": quota_bootstrap,
            "client.id": "throttled-consumer",
            "group.id": "quota-consumers",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 65536,
            "message.max.bytes": 65536,
            "max.partition.fetch.bytes": 65536,
        }
    )
    consumer.subscribe([topic])
    received: list[tuple[float, int]] = []
    try:
        while not received:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                received.append((time.monotonic(), len(message.value())))
        start = received[0][0]
        while time.monotonic() - start < RUN:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                received.append((time.monotonic(), len(message.value())))
    finally:
        consumer.close()
    rate = rate_after_warm_up(received, start)
    print(f"consumer: {rate:.0f} B/s against a quota of {QUOTA}")
    assert rate == pytest.approx(QUOTA, rel=0.1), f"consumed {rate:.0f} B/s against a quota of {QUOTA}"


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
