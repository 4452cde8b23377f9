"""Transactions with real clients: commit and abort, read_committed, exactly-once offsets, fencing.

confluent-kafka (librdkafka), kafka-python and aiokafka transactional producers write; consumers of each
isolation level read back. Every assertion holds against a stock Kafka too; the broker the suite starts
checks for timed-out transactions every 500 ms (COMPAT_OVERRIDES) so the timeout test is quick.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from compat_tests.clients import run_async
from compat_tests.test_compaction import TOPIC_CONFIGS, ck_create, target  # noqa: F401  (module fixture)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _tid(name: str) -> str:
    return f"compat-{name}-{uuid.uuid4().hex[:8]}"


def ck_producer(bootstrap: str, tid: str, **config: Any) -> Any:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **config})
    producer.init_transactions(30)
    return producer


def read_to_end(
    bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float = 20
) -> list[Any]:
    """Every message a consumer of `isolation` sees from the start to the end of each partition
    (the last stable offset for read_committed), as (partition, offset, value)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        seen: list[Any] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    continue
                raise AssertionError(f"consumer error: {message.error()}")
            at_end.discard(message.partition())
            seen.append((message.partition(), message.offset(), message.value()))
        assert len(at_end) == partitions, "the consumer did not reach the end of every partition"
        return seen
    finally:
        consumer.close()


def values(messages: list[Any]) -> list[bytes]:
    return sorted(m[2] for m in messages)


def end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[int]:
    """ListOffsets latest with the isolation level (kafka-python sends it as asked)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = consumer.end_offsets(tps)
        return [ends[tp] for tp in tps]
    finally:
        consumer.close()


# --- confluent-kafka ---------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_commit_and_abort(bootstrap: str, make_topic: Any, codec: str) -> None:
    topic = make_topic(partitions=2)
    producer = ck_producer(bootstrap, _tid("ck-" + codec), **{"compression.type": codec, "linger.ms": 5})
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, value=b"commit-%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"abort-%d" % i, partition=i % 2)
    assert producer.flush(30) == 0  # sent, so the aborted records are in the log
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"commit-last", partition=0)
    producer.commit_transaction(30)

    committed = sorted([b"commit-%d" % i for i in range(20)] + [b"commit-last"])
    aborted = sorted(b"abort-%d" % i for i in range(10))
    assert values(read_to_end(bootstrap, topic, 2, "read_committed")) == committed
    assert values(read_to_end(bootstrap, topic, 2, "read_uncommitted")) == sorted(committed + aborted)
    # the markers take offsets (one per transaction per partition it touched) but no consumer ever sees
    # them as messages: partition 0 holds 10 + 5 + 1 records and 3 markers, partition 1 15 and 2
    ends = end_offsets(bootstrap, topic, 2, "read_uncommitted")
    assert ends == [19, 17]
    assert end_offsets(bootstrap, topic, 2, "read_committed") == ends


def test_read_committed_stops_at_the_open_transaction(bootstrap: str, make_topic: Any) -> None:
    topic = make_topic(partitions=1)
    plain = __import__("confluent_kafka").Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(30)
    producer = ck_producer(bootstrap, _tid("open"))
    producer.begin_transaction()
    producer.produce(topic, value=b"pending", partition=0)
    assert producer.flush(30) == 0
    plain.produce(topic, value=b"after", partition=0)  # behind the open transaction
    plain.flush(30)

    assert values(read_to_end(bootstrap, topic, 1, "read_uncommitted")) == [b"after", b"before", b"pending"]
    assert values(read_to_end(bootstrap, topic, 1, "read_committed")) == [b"before"]
    assert end_offsets(bootstrap, topic, 1, "read_committed") == [1]  # the last stable offset
    assert end_offsets(bootstrap, topic, 1, "read_uncommitted") == [3]

    producer.commit_transaction(30)
    assert values(read_to_end(bootstrap, topic, 1, "read_committed")) == [b"after", b"before", b"pending"]
    assert end_offsets(bootstrap, topic, 1, "read_committed") == [4]  # past the marker


def test_confluent_consume_transform_produce(bootstrap: str, make_topic: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition

    source, sink = make_topic(partitions=2), make_topic(partitions=1)
    plain = __import__("confluent_kafka").Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        plain.produce(source, value=b"%d" % i, partition=i % 2)
    plain.flush(30)
    group = f"eos-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = ck_producer(bootstrap, _tid("ctp"))
    consumer.subscribe([source])
    try:
        done = 0
        aborted_once = False
        deadline = time.monotonic() + 60
        while done < 30 and time.monotonic() < deadline:
            batch = consumer.consume(10, 0.5)
            batch = [m for m in batch if not m.error()]
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                producer.produce(sink, value=b"x" + message.value(), partition=0)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            if not aborted_once:
                # abort the first batch: its output vanishes and its offsets are not committed, so the
                # consumer must go back and read it again
                aborted_once = True
                producer.abort_transaction(30)
                committed = consumer.committed(consumer.assignment(), 30)
                for tp in committed:
                    assert tp.offset < 0, "an aborted transaction's offsets became visible"
                    consumer.seek(TopicPartition(tp.topic, tp.partition, 0))
                continue
            producer.commit_transaction(30)
            done += len(batch)
        assert done == 30
        committed = consumer.committed([TopicPartition(source, 0), TopicPartition(source, 1)], 30)
        assert [tp.offset for tp in committed] == [15, 15]
    finally:
        consumer.close()
    out = values(read_to_end(bootstrap, sink, 1, "read_committed"))
    assert out == sorted(b"x%d" % i for i in range(30))  # each input exactly once


def test_zombie_producer_is_fenced(bootstrap: str, make_topic: Any) -> None:
    from confluent_kafka import KafkaError, KafkaException

    topic = make_topic(partitions=1)
    tid = _tid("zombie")
    zombie = ck_producer(bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    assert zombie.flush(30) == 0
    successor = ck_producer(bootstrap, tid)  # same transactional id: bumps the epoch, aborts the zombie's
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as failure:
        zombie.produce(topic, value=b"zombie-2", partition=0)
        zombie.commit_transaction(30)
    error = failure.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
    assert values(read_to_end(bootstrap, topic, 1, "read_committed")) == [b"successor"]


def test_transaction_timeout_aborts(bootstrap: str, make_topic: Any) -> None:
    from confluent_kafka import KafkaException

    topic = make_topic(partitions=1)
    producer = ck_producer(bootstrap, _tid("timeout"), **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce(topic, value=b"left-open", partition=0)
    assert producer.flush(30) == 0
    assert end_offsets(bootstrap, topic, 1, "read_committed") == [0]
    deadline = time.monotonic() + 40
    while end_offsets(bootstrap, topic, 1, "read_committed") != [2] and time.monotonic() < deadline:
        time.sleep(0.5)
    # the coordinator aborted it: the record and an ABORT marker, nothing for read_committed
    assert end_offsets(bootstrap, topic, 1, "read_committed") == [2]
    assert values(read_to_end(bootstrap, topic, 1, "read_committed")) == []
    assert values(read_to_end(bootstrap, topic, 1, "read_uncommitted")) == [b"left-open"]
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)


def test_invalid_transaction_timeout(bootstrap: str) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": _tid("bad-timeout"),
            "transaction.timeout.ms": 900_001,  # above transaction.max.timeout.ms (Kafka's default)
            "message.timeout.ms": 300_000,
        }
    )
    with pytest.raises(KafkaException) as failure:
        producer.init_transactions(30)
    assert failure.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


# --- kafka-python and aiokafka ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_transactions(bootstrap: str, make_topic: Any, codec: str) -> None:
    from kafka import KafkaProducer

    topic = make_topic(partitions=1)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=_tid("kp"),
        compression_type=None if codec == "none" else codec,
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, value=b"kp-commit-%d" % i, partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, value=b"kp-abort", partition=0)
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close(5)
    committed = sorted(b"kp-commit-%d" % i for i in range(5))
    assert values(read_to_end(bootstrap, topic, 1, "read_committed")) == committed
    assert values(read_to_end(bootstrap, topic, 1, "read_uncommitted")) == sorted([*committed, b"kp-abort"])

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        seen: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(seen) < 5 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                seen.extend(r.value for r in batch)
        assert sorted(seen) == committed
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_transactions(bootstrap: str, make_topic: Any, codec: str) -> None:
    topic = make_topic(partitions=1)

    async def scenario() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=_tid("aio"),
            compression_type=None if codec == "none" else codec,
        )
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(5):
                    await producer.send_and_wait(topic, b"aio-commit-%d" % i, partition=0)
            try:
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"aio-abort", partition=0)
                    raise RuntimeError("abort this one")
            except RuntimeError:
                pass
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            seen: list[bytes] = []
            for _ in range(50):
                batches = await consumer.getmany(tp, timeout_ms=200)
                seen.extend(r.value for r in batches.get(tp, []))
                if len(seen) >= 5:
                    break
            return seen
        finally:
            await consumer.stop()

    committed = sorted(b"aio-commit-%d" % i for i in range(5))
    assert sorted(run_async(scenario())) == committed
    assert values(read_to_end(bootstrap, topic, 1, "read_uncommitted")) == sorted([*committed, b"aio-abort"])


def test_exactly_once_while_the_transforming_process_is_killed(bootstrap: str, make_topic: Any) -> None:
    """A consume-transform-produce worker is SIGKILLed six times (at random moments, and with a transaction's
    output already in the log) and restarted; the output read with read_committed holds every input
    exactly once (no duplicate, no gap)."""
    import os
    import random
    import subprocess
    import sys

    from confluent_kafka import Consumer, Producer, TopicPartition

    source, sink = make_topic(partitions=3), make_topic(partitions=1)
    count = 600
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        plain.produce(source, value=b"%04d" % i, partition=i % 3)
    assert plain.flush(30) == 0
    group, tid = f"eos-kill-{uuid.uuid4().hex[:6]}", _tid("eos-kill")
    command = [sys.executable, "-m", "compat_tests.eos_worker", bootstrap, source, sink, group, tid]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    rng = random.Random(14)

    def committed_total() -> int:
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            parts = probe.committed([TopicPartition(source, p) for p in range(3)], 30)
            return sum(max(tp.offset, 0) for tp in parts)
        finally:
            probe.close()

    kills = 0
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        worker = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert worker.stdout is not None and worker.stdout.readline().strip() == b"ready"
            if kills < 6:
                if kills % 2:
                    time.sleep(rng.uniform(0.1, 1.5))  # SIGKILL at a random moment
                else:
                    for _ in range(rng.randint(1, 8)):  # SIGKILL with a transaction's output in the log
                        assert worker.stdout.readline().strip() == b"in-txn"
                worker.kill()
                kills += 1
                continue
            while committed_total() < count and time.monotonic() < deadline:
                time.sleep(0.5)
            break
        finally:
            if worker.poll() is None:
                worker.kill()
            worker.wait()
    assert kills == 6
    assert committed_total() == count
    out = [m[2] for m in read_to_end(bootstrap, sink, 1, "read_committed")]
    expected = [b"out-%04d" % i for i in range(count)]
    assert len(out) == len(set(out)), "duplicates in the output"
    assert sorted(out) == expected, "gaps in the output"
    # the kills did cut transactions short: their output is in the log, aborted
    assert len(read_to_end(bootstrap, sink, 1, "read_uncommitted")) > count


# --- the CLI ---------------------------------------------------------------------------------------------


def test_cli_transactions_list_describe_abort(bootstrap: str, make_topic: Any) -> None:
    """`kafkacompat transactions` sees a confluent-kafka transaction left open and aborts it like
    kafka-transactions.sh abort (DescribeProducers, then WriteTxnMarkers)."""
    from compat_tests.test_cli import cli

    topic = make_topic(partitions=1)
    tid = _tid("cli")
    producer = ck_producer(bootstrap, tid)
    producer.begin_transaction()
    producer.produce(topic, value=b"hanging", partition=0)
    assert producer.flush(30) == 0

    listed = cli(bootstrap, "transactions", "list").stdout.splitlines()
    assert listed[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    [row] = [line.split() for line in listed[1:] if line.split()[0] == tid]
    assert row[3] == "Ongoing"
    described = cli(bootstrap, "transactions", "describe", "--transactional-id", tid).stdout.splitlines()
    header, values_row = described[0].split(), described[1].split()
    fields = dict(zip(header, values_row, strict=True))
    assert fields["TransactionalId"] == tid and fields["ProducerId"] == row[2]
    assert fields["TransactionState"] == "Ongoing" and fields["TopicPartitions"] == f"{topic}-0"
    assert end_offsets(bootstrap, topic, 1, "read_committed") == [0]

    aborted = cli(
        bootstrap, "transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "0"
    )
    assert "Aborted" in aborted.stdout
    assert end_offsets(bootstrap, topic, 1, "read_committed") == [2]  # the record and the ABORT marker
    assert values(read_to_end(bootstrap, topic, 1, "read_committed")) == []

    missing = cli(bootstrap, "transactions", "describe", "--transactional-id", "no-such-id", check=False)
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr
    nothing = cli(
        bootstrap,
        "transactions",
        "abort",
        "--topic",
        topic,
        "--partition",
        "0",
        "--start-offset",
        "5",
        check=False,
    )
    assert nothing.returncode == 1 and "no open transaction" in nothing.stderr


def test_kafka_python_admin_transactions(bootstrap: str, make_topic: Any) -> None:
    """kafka-python's admin: list/describe transactions, describe producers, abort a hanging transaction
    (WriteTxnMarkers with coordinator epoch -1, the admin bypass)."""
    from kafka import TopicPartition
    from kafka.admin import AbortTransactionSpec, KafkaAdminClient
    from kafka.errors import TransactionalIdNotFoundError

    topic = make_topic(partitions=1)
    tid = _tid("kp-admin")
    producer = ck_producer(bootstrap, tid, **{"transaction.timeout.ms": 45000})
    producer.begin_transaction()
    producer.produce(topic, value=b"hanging", partition=0)
    assert producer.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        listed = [
            t for by_broker in admin.list_transactions(state_filters=["Ongoing"]).values() for t in by_broker
        ]
        [mine] = [t for t in listed if t.transactional_id == tid]
        assert str(getattr(mine.state, "value", mine.state)) == "Ongoing"
        assert [t for t in listed if str(getattr(t.state, "value", t.state)) != "Ongoing"] == []
        description = admin.describe_transactions([tid])[tid]
        assert str(getattr(description.state, "value", description.state)) == "Ongoing"
        assert description.producer_id == mine.producer_id and description.transaction_timeout_ms == 45000
        assert {(tp.topic, tp.partition) for tp in description.topic_partitions} == {(topic, 0)}
        with pytest.raises(TransactionalIdNotFoundError):
            admin.describe_transactions(["no-such-transactional-id"])
        tp = TopicPartition(topic, 0)
        [state] = admin.describe_producers([tp])[tp].active_producers
        assert (state.producer_id, state.current_transaction_start_offset) == (mine.producer_id, 0)
        admin.abort_transaction(AbortTransactionSpec(tp, state.producer_id, state.producer_epoch))
    finally:
        admin.close()
    assert end_offsets(bootstrap, topic, 1, "read_committed") == [2]
    assert values(read_to_end(bootstrap, topic, 1, "read_committed")) == []


def test_transactional_offsets_are_pending_until_commit(bootstrap: str, make_topic: Any) -> None:
    """Offsets sent with send_offsets_to_transaction are invisible until the transaction commits: a
    read_uncommitted consumer sees no offset, a read_committed one (OffsetFetch require_stable) waits
    through UNSTABLE_OFFSET_COMMIT; after the commit both see it."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    source, sink = make_topic(partitions=1), make_topic(partitions=1)
    group = f"pending-{uuid.uuid4().hex[:6]}"
    metadata_source = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    producer = ck_producer(bootstrap, _tid("pending"))
    producer.begin_transaction()
    producer.produce(sink, value=b"v", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition(source, 0, 5)], metadata_source.consumer_group_metadata(), 30
    )

    def committed(isolation: str, timeout: float) -> int:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": isolation})
        try:
            return consumer.committed([TopicPartition(source, 0)], timeout)[0].offset
        finally:
            consumer.close()

    assert committed("read_uncommitted", 10) < 0
    with pytest.raises(KafkaException) as waited:
        committed("read_committed", 3)
    assert waited.value.args[0].code() == KafkaError._TIMED_OUT
    producer.commit_transaction(30)
    assert committed("read_uncommitted", 10) == 5
    assert committed("read_committed", 10) == 5
    metadata_source.close()


def keyed_transaction(
    producer: Any, topic: str, count: int, prefix: bytes, commit: bool, keys: bytes | None = None
) -> None:
    """One transaction of `count` records to partition 0, keyed `<keys or prefix>-<i>` with values
    `prefix` + 60 x "v", one record a batch (each flushed alone: the compaction tests' segment.bytes is
    small), then committed or aborted."""
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, key=b"%s-%d" % (keys or prefix, i), value=prefix + b"v" * 60, partition=0)
        assert producer.flush(30) == 0
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def test_compaction_removes_aborted_transactional_records(target: Any) -> None:  # noqa: F811
    """A compacted topic written in transactions: the cleaner drops the aborted records (a
    read_uncommitted consumer stops seeing them) and compacts the committed ones like any others."""
    topic = f"compact-txn-{uuid.uuid4().hex[:8]}"
    ck_create(target.bootstrap, topic, TOPIC_CONFIGS)
    producer = ck_producer(target.bootstrap, _tid("compact"))
    keyed_transaction(producer, topic, 4, b"committed", True)
    keyed_transaction(producer, topic, 4, b"aborted", False)
    keyed_transaction(producer, topic, 4, b"more", True, keys=b"committed")  # overwrites the first's keys
    time.sleep(0.3)  # past segment.ms: the next append rolls, so everything above becomes cleanable
    keyed_transaction(producer, topic, 4, b"last", True)
    expected = sorted([b"more"] * 4 + [b"last"] * 4)
    deadline = time.monotonic() + target.wait
    seen: list[bytes] = []
    while time.monotonic() < deadline:
        seen = sorted(m[2].rstrip(b"v") for m in read_to_end(target.bootstrap, topic, 1, "read_uncommitted"))
        if seen == expected:
            break
        time.sleep(0.3)
    assert seen == expected, "the aborted and overwritten records were not compacted away"
    committed = sorted(m[2].rstrip(b"v") for m in read_to_end(target.bootstrap, topic, 1, "read_committed"))
    assert committed == expected


def control_batches(bootstrap: str, topic: str) -> list[int]:
    """Offsets of the control batches (transaction markers) in partition 0, from a raw Fetch (v11,
    read_uncommitted) from the log start, at the partition's leader: clients hide markers, so the batches
    are read directly."""
    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class
    from kafkacompat.wire.records import iter_batches

    cls = request_class(1)
    found: list[int] = []
    offset = 0
    with KafkaClient(bootstrap) as client:
        leader = client.partition_leaders(topic)[0]
        while True:
            request = cls(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=52428800,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    cls.FetchTopic(
                        topic=topic,
                        partitions=[
                            cls.FetchPartition(
                                partition=0,
                                current_leader_epoch=-1,
                                fetch_offset=offset,
                                log_start_offset=-1,
                                partition_max_bytes=1048576,
                            )
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
            )
            [data] = client.send(1, request, node_id=leader, version=11).responses[0].partitions
            assert data.error_code == 0, data.error_code
            batches = list(iter_batches(bytes(data.records or b""), allow_partial_tail=True))
            if not batches:
                return found
            found.extend(b.base_offset for b in batches if b.is_control)
            offset = batches[-1].last_offset + 1
            if offset >= data.high_watermark:
                return found


def test_compaction_removes_spent_transaction_markers(target: Any) -> None:  # noqa: F811
    """Kafka's cleaner drops a COMMIT/ABORT marker once no record of its transaction is left and
    delete.retention.ms has passed: a compacted topic written in transactions whose first committed
    transaction is overwritten and whose second is aborted loses those two markers; the markers of
    transactions with records left stay, and read_committed still sees exactly the committed data."""
    from confluent_kafka import Producer

    topic = f"compact-markers-{uuid.uuid4().hex[:8]}"
    ck_create(target.bootstrap, topic, TOPIC_CONFIGS)
    producer = ck_producer(target.bootstrap, _tid("markers"))
    keyed_transaction(producer, topic, 3, b"first", True)
    keyed_transaction(producer, topic, 3, b"aborted", False)
    keyed_transaction(producer, topic, 3, b"second", True, keys=b"first")  # overwrites all of the first
    keyed_transaction(producer, topic, 3, b"last", True)
    markers = control_batches(target.bootstrap, topic)
    assert len(markers) == 4
    # plain writes of one key keep rolling segments, so the cleaner keeps finding dirty data
    filler = Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 0})
    deadline = time.monotonic() + target.wait
    left = markers
    while time.monotonic() < deadline:
        left = control_batches(target.bootstrap, topic)
        if left == markers[2:]:
            break
        filler.produce(topic, key=b"filler", value=b"f" * 200, partition=0)
        filler.flush(10)
        time.sleep(0.3)
    assert left == markers[2:], f"markers left {left} of {markers}"
    expected = sorted([b"second"] * 3 + [b"last"] * 3)
    seen = [m[2].rstrip(b"v") for m in read_to_end(target.bootstrap, topic, 1, "read_committed")]
    assert sorted(v for v in seen if not v.startswith(b"f")) == expected


def describe_transaction(bootstrap: str, tid: str) -> tuple[str, int, int]:
    """(state, producer id, producer epoch) from DescribeTransactions at the id's coordinator."""
    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class

    find, describe = request_class(10), request_class(65)
    with KafkaClient(bootstrap) as client:
        [coordinator] = client.send(10, find(key_type=1, coordinator_keys=[tid]), version=4).coordinators
        assert coordinator.error_code == 0, coordinator
        [state] = client.send(
            65, describe(transactional_ids=[tid]), node_id=coordinator.node_id
        ).transaction_states
    assert state.error_code == 0, state
    return state.transaction_state, state.producer_id, state.producer_epoch
