"""Transactions across broker restarts: SIGKILL (and SIGTERM) mid-transaction, then the broker recovers the
last stable offset, the aborted-transaction index and the coordinator's state; transactional ids expire
(restarts_broker)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import create_topic
from compat_tests.test_transactions import end_offsets, read_to_end, values
from kafkacompat.testing import BrokerProcess

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
