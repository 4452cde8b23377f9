"""Transactions across broker restarts: SIGKILL (and SIGTERM) mid-transaction, then the broker recovers the
last stable offset, the aborted-transaction index and the coordinator's state; transactional ids expire
(restarts_broker)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import create_topic
from compat_tests.test_transactions import end_offsets, read_to_end, values
from kafkacompat.local_brokers import BrokerProcess

pytestmark = pytest.mark.restarts_broker

OVERRIDES = ["transaction.state.log.num.partitions=3", "offsets.topic.num.partitions=3"]


def _producer(bootstrap: str, tid: str) -> Any:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 120_000}
    )
    producer.init_transactions(30)
    return producer


def test_sigkill_mid_transaction_recovers_lso_index_and_coordinator(tmp_path: Path) -> None:
    from confluent_kafka import KafkaException

    broker = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        create_topic(broker.bootstrap, "crash", partitions=1)
        writer = _producer(broker.bootstrap, "crash-writer")
        writer.begin_transaction()
        for i in range(5):
            writer.produce("crash", value=b"c%d" % i, partition=0)
        writer.commit_transaction(30)  # offsets 0-4, marker 5
        writer.begin_transaction()
        writer.produce("crash", value=b"aborted", partition=0)
        assert writer.flush(30) == 0
        writer.abort_transaction(30)  # offset 6, marker 7: an entry in the .txnindex
        zombie = _producer(broker.bootstrap, "crash-open")
        zombie.begin_transaction()
        for i in range(3):
            zombie.produce("crash", value=b"open-%d" % i, partition=0)
        assert zombie.flush(30) == 0  # offsets 8-10, left open
        assert end_offsets(broker.bootstrap, "crash", 1, "read_committed") == [8]

        broker.kill()  # SIGKILL: no snapshot, no clean-shutdown marker
        broker.start()

        # the LSO comes back from the log (producer state replayed), the open transaction still holds it
        assert end_offsets(broker.bootstrap, "crash", 1, "read_committed") == [8]
        assert end_offsets(broker.bootstrap, "crash", 1, "read_uncommitted") == [11]
        partition_dir = tmp_path / "data" / "crash-0"
        assert list(partition_dir.glob("*.txnindex")), "the aborted transaction is not indexed"
        assert values(read_to_end(broker.bootstrap, "crash", 1, "read_committed")) == [
            b"c%d" % i for i in range(5)
        ]
        broker.restart()  # an orderly restart: the open transaction is in the producer-state snapshot
        assert end_offsets(broker.bootstrap, "crash", 1, "read_committed") == [8]
        # the coordinator remembers the open transaction and its partition: a new producer with the same
        # transactional id fences the old one, whose transaction is aborted with a marker in crash-0
        successor = _producer(broker.bootstrap, "crash-open")
        successor.begin_transaction()
        successor.produce("crash", value=b"successor", partition=0)
        successor.commit_transaction(30)
        deadline = time.monotonic() + 20
        while (
            end_offsets(broker.bootstrap, "crash", 1, "read_committed") != [14]
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert end_offsets(broker.bootstrap, "crash", 1, "read_committed") == [14]
        assert values(read_to_end(broker.bootstrap, "crash", 1, "read_committed")) == sorted(
            [b"c%d" % i for i in range(5)] + [b"successor"]
        )
        with pytest.raises(KafkaException):
            zombie.commit_transaction(30)

        # and after a second crash everything is still where it was
        broker.kill()
        broker.start()
        assert end_offsets(broker.bootstrap, "crash", 1, "read_committed") == [14]
        assert values(read_to_end(broker.bootstrap, "crash", 1, "read_uncommitted")) == sorted(
            [b"c%d" % i for i in range(5)] + [b"aborted", b"open-0", b"open-1", b"open-2", b"successor"]
        )
        assert values(read_to_end(broker.bootstrap, "crash", 1, "read_committed")) == sorted(
            [b"c%d" % i for i in range(5)] + [b"successor"]
        )
    finally:
        broker.stop()


def test_idle_transactional_id_expires(tmp_path: Path) -> None:
    """transactional.id.expiration.ms: an idle transactional id is forgotten (a tombstone in
    __transaction_state, so it stays forgotten after a restart); the same id later starts afresh."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TransactionalIdNotFoundError

    broker = BrokerProcess(
        tmp_path / "data",
        [
            *OVERRIDES,
            "transactional.id.expiration.ms=1000",
            "transaction.remove.expired.transaction.cleanup.interval.ms=200",
        ],
    ).start()
    try:
        create_topic(broker.bootstrap, "expiring", partitions=1)
        producer = _producer(broker.bootstrap, "idle-id")
        producer.begin_transaction()
        producer.produce("expiring", value=b"x", partition=0)
        producer.commit_transaction(30)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            first = admin.describe_transactions(["idle-id"])["idle-id"].producer_id
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                listed = [t.transactional_id for ts in admin.list_transactions().values() for t in ts]
                if "idle-id" not in listed:
                    break
                time.sleep(0.2)
            assert "idle-id" not in listed
            with pytest.raises(TransactionalIdNotFoundError):
                admin.describe_transactions(["idle-id"])
        finally:
            admin.close()
        broker.restart()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            with pytest.raises(TransactionalIdNotFoundError):
                admin.describe_transactions(["idle-id"])
            _producer(broker.bootstrap, "idle-id")  # starts afresh: a new producer id at epoch 0
            again = admin.describe_transactions(["idle-id"])["idle-id"]
            assert again.producer_id != first and again.producer_epoch == 0
        finally:
            admin.close()
    finally:
        broker.stop()


class _LogLines(logging.Handler):
    """Collects the messages of a logger (librdkafka's debug log through confluent-kafka's `logger`)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def logger(self, name: str) -> logging.Logger:
        logger = logging.getLogger(name)
        logger.addHandler(self)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        return logger


def _fill_transaction_state(partition_dir: Path, count: int) -> None:
    """Append `count` transactional ids (Empty state) to a stopped broker's `__transaction_state-0`, with
    the log classes the broker itself uses, so that replaying it at start-up takes a few seconds."""
    from kafkacompat.log.config import LogConfig
    from kafkacompat.log.partition_log import PartitionLog
    from kafkacompat.txn import records as rec
    from kafkacompat.wire.records import build_batch

    log = PartitionLog(
        str(partition_dir), "__transaction_state", 0, LogConfig.from_properties({"cleanup.policy": "compact"})
    )
    now = int(time.time() * 1000)
    try:
        for start in range(0, count, 1000):
            records = [
                (
                    rec.encode_key(f"filler-{i}"),
                    rec.encode_value(rec.TxnLogValue(10_000_000 + i, 0, 60_000, 0, {}, now, -1)),
                    (),
                    now,
                )
                for i in range(start, start + 1000)
            ]
            log.append_as_leader(
                bytearray(build_batch(records, base_timestamp=now)), 0, now, check_producers=False
            )
        log.update_high_watermark(log.log_end_offset)
    finally:
        log.close()


def test_clients_retry_while_the_coordinator_loads(tmp_path: Path) -> None:
    """After a restart, a large `__transaction_state` partition answers COORDINATOR_LOAD_IN_PROGRESS while
    it is replayed (read `transaction.state.log.load.buffer.size` bytes at a time, other requests served
    in between); librdkafka's init_transactions retries through it (its log says so) and gets the next
    epoch of the producer id it had before the restart; kafka-python's, started right after another
    restart (so while or just after the partition loads), gets the epoch after that."""

    from confluent_kafka import Producer
    from kafka import KafkaProducer

    from compat_tests.test_transactions import describe_transaction
    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class

    overrides = ["transaction.state.log.num.partitions=1", "transaction.state.log.load.buffer.size=65536"]
    broker = BrokerProcess(tmp_path / "data", overrides).start()
    try:
        _producer(broker.bootstrap, "loading")
        _, producer_id, epoch = describe_transaction(broker.bootstrap, "loading")
        broker.stop()
        _fill_transaction_state(tmp_path / "data" / "__transaction_state-0", 100_000)
        broker.start()

        # a raw InitProducerId first: the partition is still being replayed
        init = request_class(22)(
            transactional_id="probe", transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
        )
        with KafkaClient(broker.bootstrap) as client:
            assert client.send(22, init).error_code == 14  # COORDINATOR_LOAD_IN_PROGRESS

        lines = _LogLines()
        logger = lines.logger(f"rdkafka-{tmp_path.name}")
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "transactional.id": "loading",
                "debug": "eos",
                "logger": logger,
            }
        )
        producer.init_transactions(60)
        producer.poll(0)
        assert any("Coordinator load in progress" in line for line in lines.lines), lines.lines[-20:]
        assert describe_transaction(broker.bootstrap, "loading")[1:] == (producer_id, epoch + 1)
        state, filler_id, _ = describe_transaction(broker.bootstrap, "filler-99999")
        assert (state, filler_id) == ("Empty", 10_099_999)

        # kafka-python right after another restart
        broker.stop()
        broker.start()
        kp = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="loading")
        try:
            kp.init_transactions()
            assert describe_transaction(broker.bootstrap, "loading")[1:] == (producer_id, epoch + 2)
        finally:
            kp.close()
    finally:
        broker.stop()


def test_kip360_epoch_bump_after_messages_time_out(tmp_path: Path) -> None:
    """KIP-360 with librdkafka: the broker is frozen (SIGSTOP) while a transaction's produce request is in
    flight, so the message times out maybe written: an abortable error that needs an epoch bump. Once the
    broker runs again, abort_transaction() aborts and sends InitProducerId with the producer's id and
    epoch; the coordinator bumps the epoch of the same producer id and the producer goes on with its next
    transaction (no init_transactions, no fencing); read_committed sees only that one."""
    import os
    import signal

    from confluent_kafka import KafkaException, Producer

    from compat_tests.test_transactions import describe_transaction

    lines = _LogLines()
    logger = lines.logger(f"rdkafka-{tmp_path.name}")
    broker = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        create_topic(broker.bootstrap, "kip360", partitions=1)
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "transactional.id": "kip360",
                "message.timeout.ms": 3000,
                "transaction.timeout.ms": 60_000,
                "debug": "eos",
                "logger": logger,
            }
        )
        producer.init_transactions(30)
        _, producer_id, epoch = describe_transaction(broker.bootstrap, "kip360")
        producer.begin_transaction()
        producer.produce("kip360", b"before-freeze", partition=0)
        assert producer.flush(30) == 0  # the partition is in the transaction now
        assert broker.process is not None
        os.kill(broker.process.pid, signal.SIGSTOP)
        try:
            producer.produce("kip360", b"in-flight", partition=0)
            producer.flush(6)  # times out in flight
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)
        with pytest.raises(KafkaException) as failed:
            producer.commit_transaction(30)
        assert failed.value.args[0].txn_requires_abort(), failed.value
        producer.abort_transaction(30)
        producer.poll(0)
        # librdkafka's own account: InitProducerId with its id and epoch (KIP-360), answered with a bump
        assert any("requires epoch bump" in line for line in lines.lines), lines.lines[-20:]
        assert any("Requesting ProducerId bump" in line for line in lines.lines), lines.lines[-20:]
        state, bumped_id, bumped_epoch = describe_transaction(broker.bootstrap, "kip360")
        # the same producer id with a newer epoch (Kafka answers a bump with the state Empty)
        assert bumped_id == producer_id and bumped_epoch > epoch, (state, bumped_id, bumped_epoch)

        producer.begin_transaction()
        producer.produce("kip360", b"after-recovery", partition=0)
        producer.commit_transaction(30)
        assert values(read_to_end(broker.bootstrap, "kip360", 1, "read_committed")) == [b"after-recovery"]
    finally:
        broker.stop()
