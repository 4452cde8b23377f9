"""What Spark users do with `format("kafka")`, each against a live kafkacompat broker.

Like test_kafka_integration.py these need the connector (found automatically by spark_it.session) and
skip with a one-line reason without it. Expectations follow the "Structured Streaming + Kafka
Integration Guide":

- a checkpointed query stopped and started again resumes where its last committed batch ended: nothing
  is lost; the Kafka sink writes at least once, so only a batch cut short by the stop may be written
  twice, and an idempotent consumer of the output (keyed by a unique id) sees each input exactly once;
- `subscribePattern` discovers topics created while the query runs and reads them from the earliest
  offset;
- `maxOffsetsPerTrigger` caps every micro-batch (also under `Trigger.AvailableNow`, which then runs as
  many batches as it needs and stops); a second AvailableNow run reads only what arrived since;
- `minPartitions` splits a batch read into at least that many Spark partitions, the rows unchanged;
- `includeHeaders` adds the headers column to streaming reads; the sink writes `key`, `headers`, and
  routes each row by its `topic` (and `partition`) column when no `topic` option is given;
- `failOnDataLoss` after retention removed offsets the query still needed: true fails the query, false
  goes on from the log start;
- a query survives the broker restarting (orderly or after SIGKILL) under it, and the rows produced
  around the restart all arrive;
- `kafka.isolation.level=read_committed` reads committed transactions only and stops at an open one;
- the source and the sink work over a SASL_SSL listener (PLAIN over TLS) given the `kafka.security.*`,
  `kafka.sasl.*` and `kafka.ssl.*` options, and a wrong password fails the read.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkacompat.local_brokers import BrokerProcess, InProcessBroker
from spark_it._tests.kafka_helpers import Produced, create_topic, produce, read_topic
from spark_it.kafka_options import sink_options, source_options

# Record timestamps of the produced rows: an hour ago, well inside the default retention.ms (7 days)
T0 = int(time.time() * 1000) - 3_600_000
WAIT = 90.0  # generous: two cores shared with other test runs


@pytest.fixture
def bootstrap(kafka_spark: Any, kafkacompat_broker: InProcessBroker) -> str:
    """The broker's address, only once the connector is known to be there."""
    return kafkacompat_broker.bootstrap


def wait_for(what: str, ready: Callable[[], bool], query: Any = None, timeout: float = WAIT) -> None:
    """Poll until `ready()`; fail early with the query's own exception if it died."""
    deadline = time.monotonic() + timeout
    while not ready():
        if query is not None and not query.isActive:
            raise AssertionError(f"query stopped while waiting for {what}: {query.exception()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def idle(query: Any) -> bool:
    """No micro-batch running and nothing new to read: a stop now cuts no batch short."""
    status = query.status
    return not status["isTriggerActive"] and not status["isDataAvailable"]


def ids(records: list[Any]) -> list[str]:
    return [r.key.decode() for r in records]


def test_kafka_to_kafka_stopped_and_restarted_loses_and_duplicates_nothing(
    kafka_spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    source, sink = "orders", "orders-enriched"
    create_topic(bootstrap, source, 3)
    create_topic(bootstrap, sink, 2)
    checkpoint = str(tmp_path / "checkpoint")

    def order(i: int) -> Produced:
        return Produced(i % 3, f"id-{i:04d}".encode(), f"order {i}".encode(), T0 + i)

    def start() -> Any:
        options = source_options(bootstrap, streaming=True, subscribe=source, starting_offsets="earliest")
        stream = kafka_spark.readStream.format("kafka").options(**options).load()
        enriched = stream.selectExpr(
            "key", "concat(upper(CAST(value AS STRING)), ' @', partition, '/', offset) AS value"
        )
        return (
            enriched.writeStream.format("kafka")
            .options(**sink_options(bootstrap, sink))
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="300 milliseconds")
            .start()
        )

    def output() -> list[Any]:
        return read_topic(bootstrap, sink, [0, 1])

    def check_values(records: list[Any]) -> None:
        for record in records:
            i = int(record.key.decode().removeprefix("id-"))
            assert record.value.decode().startswith(f"ORDER {i} @{i % 3}/")

    # 1. A first batch of input, all processed, then a clean stop while the query is idle.
    produce(bootstrap, source, [order(i) for i in range(90)])
    query = start()
    wait_for("the first 90 rows", lambda: len(output()) >= 90, query)
    wait_for("the query to go idle", lambda: idle(query), query)
    query.stop()
    assert query.exception() is None

    # 2. Input while nothing runs; the restarted query resumes from its checkpoint.
    produce(bootstrap, source, [order(i) for i in range(90, 150)])
    query = start()
    wait_for("rows 90..149", lambda: len(output()) >= 150, query)
    wait_for("the query to go idle", lambda: idle(query), query)
    first_two = output()
    assert sorted(ids(first_two)) == [f"id-{i:04d}" for i in range(150)]  # clean stops: exactly once
    check_values(first_two)

    # 3. Stop in the middle of a stream of input, then start again.
    feeding = threading.Thread(
        target=lambda: [
            produce(bootstrap, source, [order(i) for i in range(s, s + 10)]) for s in range(150, 300, 10)
        ]
    )
    feeding.start()
    wait_for("some of rows 150..299", lambda: len(output()) > 170, query)
    query.stop()
    assert query.exception() is None
    feeding.join(WAIT)
    query = start()
    wait_for("rows 150..299", lambda: len({*ids(output())}) >= 300, query)
    wait_for("the query to go idle", lambda: idle(query), query)
    query.stop()

    written = output()
    check_values(written)
    counts = Counter(ids(written))
    assert sorted(counts) == [f"id-{i:04d}" for i in range(300)]  # nothing lost
    # At least once: only rows of the batch the stop interrupted may repeat, and each id once in phase 1-2.
    repeated = {key for key, n in counts.items() if n > 1}
    assert all(int(key.removeprefix("id-")) >= 150 for key in repeated), sorted(repeated)
    assert all(n <= 2 for n in counts.values())
    # The idempotent reader's view: per id, every copy is the same record.
    by_id: dict[str, set[bytes]] = {}
    for record in written:
        by_id.setdefault(record.key.decode(), set()).add(record.value)
    assert all(len(values) == 1 for values in by_id.values())


def test_subscribe_pattern_picks_up_a_topic_created_while_running(kafka_spark: Any, bootstrap: str) -> None:
    create_topic(bootstrap, "metrics-eu", 2)
    create_topic(bootstrap, "other-eu", 1)
    produce(bootstrap, "metrics-eu", [Produced(i % 2, None, f"eu-{i}".encode(), T0 + i) for i in range(20)])
    produce(bootstrap, "other-eu", [Produced(0, None, b"not matched", T0)])
    options = source_options(
        bootstrap, streaming=True, subscribe_pattern=r"metrics-.*", starting_offsets="earliest"
    )
    stream = kafka_spark.readStream.format("kafka").options(**options).load()
    query = (
        stream.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("memory")
        .queryName("pattern_rows")
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:

        def rows() -> list[tuple[str, str]]:
            return sorted((r["topic"], r["value"]) for r in kafka_spark.table("pattern_rows").collect())

        wait_for("metrics-eu's rows", lambda: len(rows()) >= 20, query)
        # Created after the query started: found by the next trigger's topic listing, read from offset 0
        # (also the records produced before Spark first saw the topic).
        create_topic(bootstrap, "metrics-us", 3)
        produce(
            bootstrap, "metrics-us", [Produced(i % 3, None, f"us-{i}".encode(), T0 + i) for i in range(30)]
        )
        wait_for("metrics-us's rows", lambda: len(rows()) >= 50, query)
        produce(bootstrap, "metrics-us", [Produced(0, None, b"us-late", T0 + 99)])
        wait_for("the late row", lambda: len(rows()) >= 51, query)
        assert rows() == sorted(
            [("metrics-eu", f"eu-{i}") for i in range(20)]
            + [("metrics-us", f"us-{i}") for i in range(30)]
            + [("metrics-us", "us-late")]
        )
    finally:
        query.stop()
    assert query.exception() is None


def test_max_offsets_per_trigger_under_available_now(
    kafka_spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    topic = "clicks"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [Produced(i % 2, None, f"c{i}".encode(), T0 + i) for i in range(300)])
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run_available_now() -> list[int]:
        options = source_options(
            bootstrap,
            streaming=True,
            subscribe=topic,
            starting_offsets="earliest",
            max_offsets_per_trigger=70,
        )
        stream = kafka_spark.readStream.format("kafka").options(**options).load()
        query = (
            stream.selectExpr("CAST(value AS STRING) AS value")
            .writeStream.format("json")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(WAIT), "AvailableNow did not stop on its own"
        assert query.exception() is None
        return [p.numInputRows for p in query.recentProgress if p.numInputRows]

    batches = run_available_now()
    assert sum(batches) == 300
    assert all(n <= 70 for n in batches), batches
    assert len(batches) >= 5  # 300 offsets, at most 70 a batch

    # Arrived after the first run: the second run reads these 100 and nothing it already read.
    produce(bootstrap, topic, [Produced(i % 2, None, f"c{i}".encode(), T0 + i) for i in range(300, 400)])
    batches = run_available_now()
    assert sum(batches) == 100 and all(n <= 70 for n in batches) and len(batches) >= 2
    values = sorted(r["value"] for r in kafka_spark.read.json(out).collect())
    assert values == sorted(f"c{i}" for i in range(400))


def test_min_partitions_splits_a_batch_read(kafka_spark: Any, bootstrap: str) -> None:
    topic = "wide-read"
    create_topic(bootstrap, topic, 2)
    produce(
        bootstrap, topic, [Produced(i % 2, None, f"w{i}".encode(), T0 + i) for i in range(400)], batch_size=50
    )
    options = source_options(bootstrap, streaming=False, subscribe=topic)
    # (a DataFrameReader is mutable: one per read)
    plain = kafka_spark.read.format("kafka").options(**options).load()
    assert plain.rdd.getNumPartitions() == 2  # one Spark partition per Kafka partition
    frame = kafka_spark.read.format("kafka").options(**options).option("minPartitions", "8").load()
    assert frame.rdd.getNumPartitions() >= 8
    rows = sorted((r["partition"], r["offset"], bytes(r["value"])) for r in frame.collect())
    assert rows == sorted((i % 2, i // 2, f"w{i}".encode()) for i in range(400))


def test_sink_keys_headers_and_topic_column_then_streamed_back_with_headers(
    kafka_spark: Any, bootstrap: str
) -> None:
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

    create_topic(bootstrap, "routed-a", 2)
    create_topic(bootstrap, "routed-b", 1)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("key", StringType()),
            StructField("value", BinaryType()),
            StructField("headers", ArrayType(header)),
        ]
    )
    rows = [
        (
            "routed-a" if i % 3 else "routed-b",
            (i % 2) if i % 3 else 0,
            None if i % 7 == 0 else f"k{i}",
            f"v{i}".encode(),
            [("trace", f"t{i}".encode()), ("n", None)] if i % 4 else [],
        )
        for i in range(60)
    ]
    frame = kafka_spark.createDataFrame(rows, schema)
    frame.write.format("kafka").options(**sink_options(bootstrap, None)).save()

    def expected(topic: str, partition: int) -> list[tuple[bytes | None, bytes, tuple[Any, ...]]]:
        return [
            (key and key.encode(), value, tuple(headers))
            for t, p, key, value, headers in rows
            if t == topic and p == partition
        ]

    for topic, partition in (("routed-a", 0), ("routed-a", 1), ("routed-b", 0)):
        got = [(r.key, r.value, r.headers) for r in read_topic(bootstrap, topic, [partition])]
        assert got == expected(topic, partition), (topic, partition)

    # A stream over both topics with includeHeaders gives the same headers back.
    options = source_options(
        bootstrap,
        streaming=True,
        subscribe="routed-a,routed-b",
        starting_offsets="earliest",
        include_headers=True,
    )
    stream = kafka_spark.readStream.format("kafka").options(**options).load()
    query = stream.writeStream.format("memory").queryName("routed_back").trigger(availableNow=True).start()
    assert query.awaitTermination(WAIT) and query.exception() is None

    def by_value(row: tuple[Any, ...]) -> bytes:
        return bytes(row[3])

    back = sorted(
        [
            (
                r["topic"],
                r["partition"],
                r["key"] and bytes(r["key"]).decode(),
                bytes(r["value"]),
                [(h["key"], h["value"] and bytes(h["value"])) for h in (r["headers"] or [])],
            )
            for r in kafka_spark.table("routed_back").collect()
        ],
        key=by_value,
    )
    assert back == sorted(((t, p, k, v, list(h)) for t, p, k, v, h in rows), key=by_value)


@pytest.fixture
def retention_broker(kafka_spark: Any, tmp_path: Path) -> Iterator[InProcessBroker]:
    """A broker that checks retention every 200 ms (a stock broker waits five minutes)."""
    broker = InProcessBroker(tmp_path / "retention-data", ["log.retention.check.interval.ms=200"]).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.mark.restarts_broker
@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_after_retention(
    kafka_spark: Any, retention_broker: InProcessBroker, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from pyspark.errors import StreamingQueryException

    bootstrap = retention_broker.bootstrap
    topic = f"retained-{str(fail_on_data_loss).lower()}"
    configs = {"retention.bytes": "3000", "segment.bytes": "1024", "file.delete.delay.ms": "0"}
    create_topic(bootstrap, topic, 1, configs)

    def records(first: int, last: int) -> list[Produced]:
        return [Produced(0, None, b"r%03d " % i + b"x" * 100, T0 + i) for i in range(first, last)]

    out, checkpoint = tmp_path / "out", str(tmp_path / "checkpoint")

    def start() -> Any:
        options = source_options(
            bootstrap,
            streaming=True,
            subscribe=topic,
            starting_offsets="earliest",
            fail_on_data_loss=fail_on_data_loss,
        )
        stream = kafka_spark.readStream.format("kafka").options(**options).load()
        return (
            stream.selectExpr("offset")
            .writeStream.format("json")
            .option("path", str(out))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )

    def offsets_written() -> list[int]:
        from spark_it._tests.helpers import read_json_sink

        return sorted(r["offset"] for r in read_json_sink(out))

    produce(bootstrap, topic, records(0, 10), batch_size=1)  # ~1.7 KB: under retention.bytes
    query = start()
    assert query.awaitTermination(WAIT) and query.exception() is None
    assert offsets_written() == list(range(10))

    produce(bootstrap, topic, records(10, 70), batch_size=1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-it-watermarks"})
    try:
        # Retention must remove offset 10, the first one the query has not read, and then rest (the
        # log start unchanged over a second: several retention checks).
        low, settled_at = 0, -1
        deadline = time.monotonic() + WAIT
        while low <= 10 or time.monotonic() - settled_at < 1.0:
            assert time.monotonic() < deadline, f"retention left the log start at {low}"
            time.sleep(0.2)
            now_low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)
            if now_low != low:
                low, settled_at = now_low, time.monotonic()
    finally:
        consumer.close()

    query = start()
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException, match=r"failOnDataLoss|KAFKA_DATA_LOSS"):
            query.awaitTermination(WAIT)
        assert offsets_written() == list(range(10))
    else:
        assert query.awaitTermination(WAIT) and query.exception() is None
        assert offsets_written() == [*range(10), *range(low, 70)]


@pytest.mark.restarts_broker
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_query_survives_a_broker_restart(
    kafka_spark: Any, kafkacompat_broker_process: BrokerProcess, tmp_path: Path, how: str
) -> None:
    """The broker (a child process) stopped in order, or killed, and started again on the same port
    and data while a Kafka-to-Kafka query runs: the query's consumers, admin client and producer
    reconnect, and every row produced before and after arrives."""
    broker = kafkacompat_broker_process
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "events", 2)
    create_topic(bootstrap, "events-out", 1)

    def events(first: int, last: int) -> list[Produced]:
        return [Produced(i % 2, f"e{i}".encode(), f"event {i}".encode(), T0 + i) for i in range(first, last)]

    options = source_options(bootstrap, streaming=True, subscribe="events", starting_offsets="earliest")
    stream = kafka_spark.readStream.format("kafka").options(**options).load()
    query = (
        stream.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
        .writeStream.format("kafka")
        .options(**sink_options(bootstrap, "events-out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:

        def out_keys() -> set[bytes]:
            return {r.key for r in read_topic(bootstrap, "events-out", [0])}

        produce(bootstrap, "events", events(0, 50))
        wait_for("the rows before the restart", lambda: len(out_keys()) >= 50, query)
        if how == "SIGTERM":
            broker.restart()  # same port and data directory
        else:
            broker.kill()  # a crash: no shutdown work; acknowledged records are in the page cache
            broker.start()
        assert broker.bootstrap == bootstrap
        produce(bootstrap, "events", events(50, 100))
        wait_for("the rows after the restart", lambda: len(out_keys()) >= 100, query)
        assert query.isActive and query.exception() is None
        written = read_topic(bootstrap, "events-out", [0])
        assert {r.key for r in written} == {f"e{i}".encode() for i in range(100)}
        assert all(r.value == f"EVENT {r.key.decode()[1:]}".encode() for r in written)
    finally:
        query.stop()


def test_read_committed_skips_aborted_and_open_transactions(kafka_spark: Any, bootstrap: str) -> None:
    """`kafka.isolation.level=read_committed`: a committed transaction's records, not an aborted one's,
    and nothing past an open transaction (the last stable offset); read_uncommitted sees them all."""
    import uuid

    from confluent_kafka import Producer

    topic = "txn-input"
    create_topic(bootstrap, topic, 2)

    def transaction(producer: Any, values: list[str], commit: bool | None) -> None:
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(topic, value.encode(), partition=i % 2, timestamp=T0 + i)
        # Written to the log first (librdkafka's abort would purge records still queued in the client).
        assert producer.flush(30) == 0
        if commit is True:
            producer.commit_transaction(30)
        elif commit is False:
            producer.abort_transaction(30)

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"spark-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    transaction(producer, [f"ok-a{i}" for i in range(10)], commit=True)
    transaction(producer, [f"aborted-{i}" for i in range(10)], commit=False)
    transaction(producer, [f"ok-b{i}" for i in range(10)], commit=True)
    transaction(producer, [f"open-{i}" for i in range(6)], commit=None)

    def values(isolation: str, streaming: bool = False) -> list[str]:
        options = source_options(
            bootstrap,
            streaming=streaming,
            subscribe=topic,
            kafka_params={"isolation.level": isolation},
            **({"starting_offsets": "earliest"} if streaming else {}),
        )
        if not streaming:
            frame = kafka_spark.read.format("kafka").options(**options).load()
            return sorted(bytes(r["value"]).decode() for r in frame.collect())
        name = f"txn_{isolation}"
        stream = kafka_spark.readStream.format("kafka").options(**options).load()
        query = stream.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
        assert query.awaitTermination(WAIT) and query.exception() is None
        return sorted(bytes(r["value"]).decode() for r in kafka_spark.table(name).collect())

    committed = sorted([f"ok-a{i}" for i in range(10)] + [f"ok-b{i}" for i in range(10)])
    assert values("read_committed") == committed
    assert values("read_committed", streaming=True) == committed
    everything = committed + [f"aborted-{i}" for i in range(10)] + [f"open-{i}" for i in range(6)]
    assert values("read_uncommitted") == sorted(everything)

    producer.commit_transaction(30)  # the open transaction ends: its records become readable
    del producer  # (closes it before the fixture stops the broker)
    assert values("read_committed") == sorted(committed + [f"open-{i}" for i in range(6)])


@pytest.fixture
def sasl_ssl_broker(kafka_spark: Any, tmp_path: Path) -> Iterator[tuple[InProcessBroker, dict[str, Path]]]:
    """A broker with a PLAINTEXT and a SASL_SSL (PLAIN) listener, certificates from kafkacompat dev-certs."""
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command for test certificates")
    from kafkacompat.commands.dev_certs import make_dev_certs

    certs = make_dev_certs(tmp_path / "certs", client_cn="spark-client")
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_spark="spark-secret";'
    overrides = [
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs['broker-keystore.pem']}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs['ca.pem']}",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}",
    ]
    broker = InProcessBroker(tmp_path / "secured-data", overrides).start()
    try:
        yield broker, certs
    finally:
        broker.stop()


@pytest.mark.restarts_broker
def test_sink_and_stream_over_sasl_ssl(
    kafka_spark: Any, sasl_ssl_broker: tuple[InProcessBroker, dict[str, Path]], tmp_path: Path
) -> None:
    broker, certs = sasl_ssl_broker
    plaintext = f"127.0.0.1:{broker.ports['PLAINTEXT']}"
    secured = f"127.0.0.1:{broker.ports['SASL_SSL']}"
    create_topic(plaintext, "secure-in", 2)
    create_topic(plaintext, "secure-out", 1)
    client = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="spark" password="spark-secret";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs["ca.pem"]),
    }
    rows = [(f"k{i}", f"secret {i}") for i in range(40)]
    frame = kafka_spark.createDataFrame(rows, "key string, value string")
    frame.write.format("kafka").options(**sink_options(secured, "secure-in", kafka_params=client)).save()
    assert sorted((r.key, r.value) for r in read_topic(plaintext, "secure-in", [0, 1])) == sorted(
        (k.encode(), v.encode()) for k, v in rows
    )

    options = source_options(
        secured, streaming=True, subscribe="secure-in", starting_offsets="earliest", kafka_params=client
    )
    stream = kafka_spark.readStream.format("kafka").options(**options).load()
    query = (
        stream.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
        .writeStream.format("kafka")
        .options(**sink_options(secured, "secure-out", kafka_params=client))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(WAIT) and query.exception() is None
    assert sorted((r.key, r.value) for r in read_topic(plaintext, "secure-out", [0])) == sorted(
        (k.encode(), v.upper().encode()) for k, v in rows
    )

    # A wrong password fails the read with the broker's authentication error, not a hang.
    wrong = {**client, "sasl.jaas.config": client["sasl.jaas.config"].replace("spark-secret", "nope")}
    bad = source_options(secured, streaming=False, subscribe="secure-in", kafka_params=wrong)
    with pytest.raises(Exception, match=r"(?i)authentication|SaslAuthenticationException"):
        kafka_spark.read.format("kafka").options(**bad).load().collect()
