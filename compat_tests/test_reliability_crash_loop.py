"""Crash loop: SIGKILL the broker at random moments under load (docs/RELIABILITY.md, "Crash loop").

Two clients write all the time: confluent-kafka (librdkafka) idempotent with acks=all, and kafka-python
with acks=1 (retries=0, one request in flight, so nothing it sends is ever written twice). A third
commits consumer group offsets (kafka-python) that only grow. Compaction runs on a keyed topic and
retention on another, both with tiny segments, so the cleaner and the retention task are busy when the
kill lands. Each round: load for a random 0.2-1.5 s, SIGKILL, start again on the same port and data.

After the last round: every acknowledged record is read back exactly once, at the offset it was
acknowledged with, in the order it was sent; each partition's offsets are dense and no value appears
twice; the compacted topic still holds the last acknowledged value of every key; the committed group
offsets never went backwards across any crash.

CI runs 10 rounds; `RELIABILITY_CRASH_ROUNDS=100` runs the long form (figures in the doc).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import create_topic
from kafkacompat.local_brokers import BrokerProcess

pytestmark = pytest.mark.restarts_broker

ROUNDS = int(os.environ.get("RELIABILITY_CRASH_ROUNDS", "10"))
IDEMPOTENT, ACKS1, COMPACTED, RETAINED = "crash-idem", "crash-acks1", "crash-compact", "crash-retained"
GROUP = "crash-loop-group"
KEYS = 50


class Writers:
    """The client threads and what each had acknowledged (appended only by its own thread)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.idempotent_acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.acks1_acked: list[tuple[int, int, bytes]] = []
        self.compacted_acked: dict[bytes, tuple[int, bytes]] = {}  # key -> (offset, value) of the last ack
        self.acks1_failed = 0
        self.commits: list[int] = []  # acknowledged committed offsets, in order
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._guard, args=(target,), daemon=True)
            for target in (self._confluent_idempotent, self._kafka_python_acks1, self._committer)
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(120)
        assert not self.errors, self.errors

    def _guard(self, target: Any) -> None:
        try:
            target()
        except Exception as exc:  # surfaced by finish()
            self.errors.append(f"{target.__name__}: {exc!r}")

    def _confluent_idempotent(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                # batches that pile up during an outage must still fit the tiny test segments (a larger
                # one gets RECORD_LIST_TOO_LARGE, as from Kafka)
                "batch.size": 8192,
                "message.timeout.ms": 300000,
                "reconnect.backoff.max.ms": 200,
                "log_level": 0,  # connection refused during every outage: expected, not worth a line
            }
        )
        failures: list[str] = []

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(str(err))
            elif msg.topic() == IDEMPOTENT:
                self.idempotent_acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                self.compacted_acked[msg.key()] = (msg.offset(), msg.value())

        def produce(topic: str, **fields: Any) -> None:
            while True:  # each record is produced exactly once: a full queue waits, never skips or repeats
                try:
                    producer.produce(topic, **fields)
                    return
                except BufferError:
                    producer.poll(0.05)

        sequence = 0
        while not self.stop.is_set():
            produce(IDEMPOTENT, value=f"i{sequence:09d}".encode(), partition=sequence % 2, on_delivery=report)
            key = f"k{sequence % KEYS}".encode()
            produce(COMPACTED, key=key, value=f"c{sequence:09d}".encode(), on_delivery=report)
            produce(RETAINED, value=b"r" * 200)
            sequence += 1
            if sequence % 20 == 0:
                producer.poll(0)
                time.sleep(0.005)
        remaining = producer.flush(120)
        assert remaining == 0, f"{remaining} idempotent records never delivered"
        # an idempotent producer with retries delivers everything or fails fatally: nothing may fail
        assert not failures, failures[:5]

    def _kafka_python_acks1(self) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks=1,
            retries=0,
            max_in_flight_requests_per_connection=1,
            request_timeout_ms=3000,
            reconnect_backoff_max_ms=200,
            max_block_ms=5000,
        )
        sequence = 0
        try:
            while not self.stop.is_set():
                value = f"a{sequence:09d}".encode()
                sequence += 1
                try:
                    metadata = producer.send(ACKS1, value=value, partition=0).get(10)
                except KafkaError:
                    self.acks1_failed += 1  # not acknowledged: may or may not be in the log
                    time.sleep(0.05)
                    continue
                self.acks1_acked.append((0, metadata.offset, value))
        finally:
            producer.close(5)

    def _committer(self) -> None:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        tp = TopicPartition(IDEMPOTENT, 0)
        offset = 0
        while not self.stop.is_set():
            consumer = None
            try:
                consumer = KafkaConsumer(
                    bootstrap_servers=self.bootstrap,
                    group_id=GROUP,
                    enable_auto_commit=False,
                    request_timeout_ms=5000,
                    reconnect_backoff_max_ms=200,
                )
                while not self.stop.is_set():
                    offset += 1
                    consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
                    self.commits.append(offset)
                    time.sleep(0.02)
            except KafkaError:
                time.sleep(0.1)  # the broker is down or coming up; the next commit goes higher anyway
            except Exception as exc:
                if "NodeNotReady" not in repr(exc) and "timed out" not in repr(exc).lower():
                    raise
                time.sleep(0.1)
            finally:
                if consumer is not None:
                    try:
                        consumer.close(autocommit=False)
                    except Exception:
                        pass


def _committed(bootstrap: str) -> int:
    """The group's committed offset of IDEMPOTENT-0 as the broker reports it now (-1: none)."""
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition

    deadline = time.monotonic() + 60
    while True:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
            try:
                offsets = admin.list_group_offsets({GROUP: None})[GROUP]
            finally:
                admin.close()
            found = offsets.get(TopicPartition(IDEMPOTENT, 0))
            return -1 if found is None else found.offset
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the coordinator is loading __consumer_offsets after the restart


def _read_partition(bootstrap: str, topic: str, partition: int) -> list[tuple[int, bytes | None, bytes]]:
    """Every record of one partition, from its log start to its high watermark: (offset, key, value)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "crash-loop-reader", "enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        consumer.assign([TopicPartition(topic, partition, low)])
        records: list[tuple[int, bytes | None, bytes]] = []
        deadline = time.monotonic() + 120
        while (not records or records[-1][0] < high - 1) and high > low:
            assert time.monotonic() < deadline, f"{topic}-{partition}: read {len(records)} up to {high}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert not message.error(), message.error()
            records.append((message.offset(), message.key(), message.value()))
        return records
    finally:
        consumer.close()


def _log_start(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-loop-reader"})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30, cached=False)
        return int(low)
    finally:
        consumer.close()


def _check_exactly_once_in_order(acked: list[tuple[int, int, bytes]], partitions: int, found: dict) -> None:
    for partition in range(partitions):
        mine = [(offset, value) for p, offset, value in acked if p == partition]
        log = {offset: value for offset, _, value in found[partition]}
        seen: dict[bytes, int] = {}
        twice = []
        for offset, _, value in found[partition]:
            if value in seen:
                twice.append((value, seen[value], offset))
            seen[value] = offset
        assert not twice, f"partition {partition}: values written twice (value, first, second): {twice[:5]}"
        offsets = [offset for offset, _, _ in found[partition]]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else True
        lost = [(offset, value) for offset, value in mine if log.get(offset) != value]
        assert not lost, f"partition {partition}: {len(lost)} acknowledged records lost, e.g. {lost[:3]}"
        # acknowledged in the order they were sent: offsets grow with the values' sequence numbers
        assert [v for _, v in sorted(mine)] == sorted(v for _, v in mine), f"partition {partition}: order"


def test_crash_loop(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data",
        [
            "log.retention.check.interval.ms=200",
            "log.cleaner.backoff.ms=200",
            "file.delete.delay.ms=100",
            "group.initial.rebalance.delay.ms=0",
            "offsets.topic.num.partitions=3",
            "offsets.commit.timeout.ms=5000",
        ],
    ).start()
    rng = random.Random(int(os.environ.get("RELIABILITY_SEED", "18")))
    writers = None
    try:
        create_topic(broker.bootstrap, IDEMPOTENT, partitions=2, configs={"segment.bytes": "65536"})
        create_topic(broker.bootstrap, ACKS1, partitions=1, configs={"segment.bytes": "65536"})
        create_topic(
            broker.bootstrap,
            COMPACTED,
            partitions=1,
            configs={
                "cleanup.policy": "compact",
                "segment.bytes": "16384",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        create_topic(
            broker.bootstrap,
            RETAINED,
            partitions=1,
            configs={"segment.bytes": "16384", "retention.bytes": "32768"},
        )
        writers = Writers(broker.bootstrap)
        writers.start()
        commit_floor = -1  # the highest commit acknowledged before the latest crash
        seen_committed: list[int] = []
        started = time.monotonic()
        for _ in range(ROUNDS):
            time.sleep(rng.uniform(0.2, 1.5))
            floor_now = writers.commits[-1] if writers.commits else -1
            broker.kill()
            broker.start()
            committed = _committed(broker.bootstrap)
            assert committed >= max(floor_now, commit_floor), (committed, floor_now, commit_floor)
            commit_floor = max(commit_floor, floor_now)
            seen_committed.append(committed)
        time.sleep(1.0)
        writers.finish()
        elapsed = time.monotonic() - started
        assert seen_committed == sorted(seen_committed), "committed offsets went backwards"
        found = {p: _read_partition(broker.bootstrap, IDEMPOTENT, p) for p in (0, 1)}
        _check_exactly_once_in_order(writers.idempotent_acked, 2, found)
        acks1 = {0: _read_partition(broker.bootstrap, ACKS1, 0)}
        _check_exactly_once_in_order(writers.acks1_acked, 1, acks1)
        compacted = _read_partition(broker.bootstrap, COMPACTED, 0)
        latest = {key: value for _, key, value in compacted}
        assert {k: v for k, (_, v) in writers.compacted_acked.items()} == {
            k: latest.get(k) for k in writers.compacted_acked
        }
        # the log start offset, not a read: retention keeps deleting this topic's oldest segments while
        # a reader walks it (a reader whose position is deleted under it is reset to the end)
        retained_start = _log_start(broker.bootstrap, RETAINED, 0)
        assert retained_start > 0, "retention never ran on the retained topic"
        figures = {
            "rounds": ROUNDS,
            "seconds": round(elapsed, 1),
            "idempotent_acked": len(writers.idempotent_acked),
            "acks1_acked": len(writers.acks1_acked),
            "acks1_failed_during_outages": writers.acks1_failed,
            "compacted_keys": len(writers.compacted_acked),
            "compacted_records_left": len(compacted),
            "retained_log_start": retained_start,
            "commits_acked": len(writers.commits),
            "final_committed": seen_committed[-1] if seen_committed else None,
        }
        print(json.dumps({"test": "crash_loop", **figures}))
        if os.environ.get("RELIABILITY_FIGURES"):
            with open(os.environ["RELIABILITY_FIGURES"], "a") as f:
                f.write(json.dumps({"test": "crash_loop", **figures}) + "\n")
        assert len(writers.idempotent_acked) > 0 and len(writers.acks1_acked) > 0
    finally:
        if writers is not None:
            writers.stop.set()
        broker.stop()
