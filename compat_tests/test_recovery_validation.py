"""A stored batch whose CRC is right but whose records are not is damage: recovery truncates it.

An older version that did not walk records could have stored such a batch, and every reader would
then fail on it. Here one is written straight into a real broker process's segment file (header and
CRC-32C right, its second record's length a negative varint) after a crash (SIGKILL), followed by a
sound batch. Started again, the broker recovers the segment: the invalid batch and everything after it
are cut, with one log line naming the partition, the offset and the reason; kafka-python reads the
partition to its end without an error, and new writes land where the invalid batch was.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from compat_tests import hostile
from compat_tests.clients import create_topic, kp_consume_all
from kafkacompat.local_brokers import BrokerProcess
from kafkacompat.log._tests.helpers import segment_logs

pytestmark = pytest.mark.restarts_broker
pytest.importorskip("kafka")

RECORDS = 20


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    try:
        for value in values:
            producer.send(topic, key=b"k", value=value).get(timeout=15)
    finally:
        producer.close()


def _invalid_batch(base_offset: int, now_ms: int) -> bytes:
    """Three records, the second's length written as -5; everything else, CRC included, right."""
    records = [hostile.Rec(key=b"k", value=b"poison-%d" % i) for i in range(3)]
    data = (
        hostile.framed(records[0].body(0))
        + hostile.framed(records[1].body(1), length=-5)
        + hostile.framed(records[2].body(2))
    )
    return hostile.batch(
        data, count=3, base_timestamp=now_ms, base_offset=base_offset, partition_leader_epoch=0
    )


def test_a_stored_invalid_batch_is_truncated_by_recovery(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(broker.bootstrap, "poisoned", 1)
        written = [b"value-%02d" % i for i in range(RECORDS)]
        _produce(broker.bootstrap, "poisoned", written)
        broker.kill()  # a crash: the next start recovers the active segment

        segment = segment_logs(str(broker.data_dir / "poisoned-0"))[-1]
        now_ms = int(time.time() * 1000)
        sound_after = hostile.valid_batch([hostile.Rec(key=b"k", value=b"after")], now_ms)
        sound_after = (RECORDS + 3).to_bytes(8, "big") + sound_after[8:]  # base offset is outside the CRC
        with open(segment, "ab") as f:
            f.write(_invalid_batch(RECORDS, now_ms) + sound_after)
        log_size = broker.log_path.stat().st_size

        broker.start()
        read = kp_consume_all(broker.bootstrap, "poisoned", 0, RECORDS + 4, timeout=5)
        assert [(r.offset, r.value) for r in read] == list(enumerate(written))
        _produce(broker.bootstrap, "poisoned", [b"new"])
        (after,) = kp_consume_all(broker.bootstrap, "poisoned", 0, 1, start=RECORDS)
        assert (after.offset, after.value) == (RECORDS, b"new")

        log_text = broker.log_path.read_bytes()[log_size:].decode("utf-8", "replace")
        lines = [line for line in log_text.splitlines() if "log poisoned-0 was damaged and repaired" in line]
        assert len(lines) == 1, log_text[-3000:]
        assert f"at offset {RECORDS}" in lines[0] and "invalid records" in lines[0]
        assert "Invalid record size" in lines[0]
        assert "Traceback" not in log_text
    finally:
        broker.stop()
