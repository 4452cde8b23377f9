"""Damaged files after a SIGKILL, with a real broker process and confluent-kafka reading back.

The broker is killed (SIGKILL) after acknowledged writes; its files are then damaged the ways a crash
or a bad disk leaves them — a segment torn mid-batch, bytes flipped inside a batch, a missing `.index`
and a garbled `.timeindex`, garbled checkpoints, leftover `.cleaned`/`.swap`/`.deleted` files — and it is
started again. As Kafka does, it must start, keep every batch before the damage, drop the damaged batch
and what follows it, rebuild indexes, and take new writes at the new end. A log dir whose
meta.properties names another cluster makes it refuse to start, with a clear error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compat_tests.clients import ck_consume_all, create_topic
from kafkacompat.local_brokers import BrokerProcess
from kafkacompat.log._tests.helpers import batch_positions, segment_logs

pytestmark = pytest.mark.restarts_broker
pytest.importorskip("confluent_kafka")

RECORDS = 300
SMALL_SEGMENTS = {"segment.bytes": "8192"}


def _produce(bootstrap: str, topic: str, count: int, prefix: str) -> None:
    from confluent_kafka import Producer

    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, key=b"%d" % i, value=f"{prefix}-{i:05d}-".encode() * 8,
                         on_delivery=lambda err, msg: err and errors.append(err))  # fmt: skip
        producer.flush(10)  # one batch per record: many batches, several segments
    assert producer.flush(10) == 0 and errors == []


def _values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    return [m.value() for m in ck_consume_all(bootstrap, topic, 0, count, timeout=30)]


def _flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0xA5]))


def test_files_damaged_after_sigkill_are_recovered_as_kafka_recovers_them(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    data = broker.data_dir
    try:
        for topic in ("torn", "flipped", "indexes"):
            create_topic(broker.bootstrap, topic, 1, SMALL_SEGMENTS)
            _produce(broker.bootstrap, topic, RECORDS, topic)
        written = {
            topic: _values(broker.bootstrap, topic, RECORDS) for topic in ("torn", "flipped", "indexes")
        }
        assert all(len(v) == RECORDS for v in written.values())
        broker.kill()  # SIGKILL: no flush, no checkpoints, no clean-shutdown marker

        # torn: the last segment ends in the middle of a batch
        torn_log = segment_logs(str(data / "torn-0"))[-1]
        position, size, torn_base, _ = batch_positions(torn_log)[-3]
        with open(torn_log, "r+b") as f:
            f.truncate(position + size // 2)
        # flipped: a byte inside a batch of a middle segment (CRC-covered), later segments exist
        flipped_logs = segment_logs(str(data / "flipped-0"))
        assert len(flipped_logs) >= 3
        position, size, flipped_base, _ = batch_positions(flipped_logs[1])[4]
        _flip(flipped_logs[1], position + size - 10)
        # indexes: a missing .index, a garbled .timeindex, leftovers of compaction and retention deletes
        index_logs = segment_logs(str(data / "indexes-0"))
        os.unlink(index_logs[0][:-4] + ".index")
        Path(index_logs[1][:-4] + ".timeindex").write_bytes(b"\xff" * 30)
        Path(index_logs[-1][:-4] + ".index").write_bytes(b"\x00\x00\x00\x09" * 5)
        stem = Path(index_logs[0]).name
        (data / "indexes-0" / (stem + ".cleaned")).write_bytes(b"partial compaction output")
        (data / "indexes-0" / (stem + ".swap")).write_bytes(b"interrupted swap")
        (data / "indexes-0" / "00000000000000999999.log.deleted").write_bytes(b"deleted segment")
        # every offset checkpoint garbled: recovery starts from offset 0 everywhere
        for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
                     "replication-offset-checkpoint"):  # fmt: skip
            (data / name).write_bytes(b"0\n7\ngarbage \xff\n")
        log_size = broker.log_path.stat().st_size

        broker.start()
        assert _values(broker.bootstrap, "torn", torn_base) == written["torn"][:torn_base]
        assert _values(broker.bootstrap, "flipped", flipped_base) == written["flipped"][:flipped_base]
        assert _values(broker.bootstrap, "indexes", RECORDS) == written["indexes"]
        leftovers = [
            n for n in os.listdir(data / "indexes-0") if n.endswith((".cleaned", ".swap", ".deleted"))
        ]
        assert leftovers == []
        # the damaged logs end where the damage began and take new writes there
        for topic, end in (("torn", torn_base), ("flipped", flipped_base), ("indexes", RECORDS)):
            _produce(broker.bootstrap, topic, 1, f"{topic}-after")
            (after,) = (m for m in ck_consume_all(broker.bootstrap, topic, 0, 1, start=end))
            assert after.offset() == end and after.value().startswith(f"{topic}-after".encode())
        log_text = broker.log_path.read_bytes()[log_size:].decode("utf-8", "replace")
        assert "Traceback" not in log_text
        assert "log torn-0 was damaged and repaired" in log_text
        assert "log flipped-0 was damaged and repaired" in log_text
    finally:
        broker.stop()

    # a second log dir whose meta.properties belongs to another cluster: refused, with the reason
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    (second_dir / "meta.properties").write_text("\n".join(
        "cluster.id=AnotherClusterAAAAAAAAAA" if line.startswith("cluster.id=") else line
        for line in (data / "meta.properties").read_text().splitlines()
    ) + "\n")  # fmt: skip
    refused = BrokerProcess(data, [f"log.dirs={data},{second_dir}"])
    with pytest.raises(
        RuntimeError, match=f"log dir {second_dir} belongs to cluster AnotherClusterAAAAAAAAAA"
    ):
        refused.start()
    refused.stop()
    assert _values_offline(data) == RECORDS + 1, "a refused start touches no data"


def _values_offline(data: Path) -> int:
    """Records in indexes-0 as the files hold them (read with kafka-python's parser, broker stopped)."""
    return sum(last - base + 1 for path in segment_logs(str(data / "indexes-0"))
               for _, _, base, last in batch_positions(path))  # fmt: skip
