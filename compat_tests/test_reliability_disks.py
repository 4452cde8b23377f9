"""Disk failures with a real broker process and real clients (docs/RELIABILITY.md, "Disks").

Two log dirs: a normal one and a small tmpfs (root only: `mount -t tmpfs`; skipped where mounting is not
permitted). Producing into a partition on the tmpfs until ENOSPC must take that log dir offline, as
Kafka does: its partitions answer KAFKA_STORAGE_ERROR, DescribeLogDirs reports the dir with that error,
and the broker keeps serving the other dir. After space returns and the broker restarts, every
acknowledged record is there exactly once and writes resume. A failed fsync does the same (fault
injected into an in-process broker's os.fsync for files under one dir).
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import create_topic, kp_consume_all
from kafkacompat.local_brokers import BrokerProcess, InProcessBroker

pytestmark = pytest.mark.restarts_broker

KAFKA_STORAGE_ERROR = 56
TMPFS_SIZE = "8m"


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip() or result.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _log_dirs(bootstrap: str) -> dict[str, dict[str, Any]]:
    """DescribeLogDirs through kafka-python's admin client: log dir -> {error_code, partitions}."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        [per_broker] = admin.describe_log_dirs()
    finally:
        admin.close()
    return {
        d["log_dir"]: {
            "error_code": d["error_code"],
            "partitions": {(t["name"], p["partition_index"]) for t in d["topics"] for p in t["partitions"]},
        }
        for d in per_broker["log_dirs"]
    }


def _fetch_error(bootstrap: str, topic: str, partition: int) -> int:
    """The partition error code of one Fetch at offset 0 (kafkacompat's small protocol client)."""
    from kafkacompat.client import KafkaClient
    from kafkacompat.wire.messages import request_class

    fetch = request_class(1)
    with KafkaClient(bootstrap) as client:
        response = client.send(
            1,
            fetch(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    fetch.FetchTopic(
                        topic=topic,
                        partitions=[
                            fetch.FetchPartition(
                                partition=partition,
                                current_leader_epoch=-1,
                                fetch_offset=0,
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=1 << 20,
                            )
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
            ),
            version=12,
        )
    [topic_response] = response.responses
    [data] = topic_response.partitions
    return int(data.error_code)


def _producer(bootstrap: str) -> Any:
    from kafka import KafkaProducer

    # retries=0: the storage error must reach the caller at once, not after delivery.timeout.ms
    return KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0, linger_ms=0, max_block_ms=10000)


def _fill(path: Path, leave_bytes: int) -> Path:
    """Write a filler file until `path`'s file system has about `leave_bytes` free."""
    stats = os.statvfs(path)
    free = stats.f_bavail * stats.f_frsize
    filler = path / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))
    return filler


def test_full_log_dir_goes_offline_others_serve(tmp_path: Path, small_tmpfs: Path) -> None:
    from kafka.errors import KafkaStorageError

    big = tmp_path / "big"
    broker = BrokerProcess(big, [f"log.dirs={big},{small_tmpfs}", "num.partitions=1"]).start()
    try:
        create_topic(broker.bootstrap, "spread", partitions=2)
        dirs = _log_dirs(broker.bootstrap)
        assert set(dirs) == {str(big), str(small_tmpfs)}
        # a new partition goes to the dir holding the fewest: one partition in each dir
        on_small = [p for t, p in dirs[str(small_tmpfs)]["partitions"] if t == "spread"]
        on_big = [p for t, p in dirs[str(big)]["partitions"] if t == "spread"]
        assert len(on_small) == 1 and len(on_big) == 1, dirs
        small_partition, big_partition = on_small[0], on_big[0]

        filler = _fill(small_tmpfs, 256 * 1024)
        producer = _producer(broker.bootstrap)
        acknowledged: list[tuple[int, bytes]] = []
        storage_error = None
        value_size = 16 * 1024
        try:
            for i in range(200):  # 3.2 MB, far more than the 256 KiB left
                value = f"{i:08d}".encode() + b"x" * (value_size - 8)
                try:
                    metadata = producer.send("spread", value=value, partition=small_partition).get(15)
                except KafkaStorageError as exc:
                    storage_error = exc
                    break
                acknowledged.append((metadata.offset, value))
            assert storage_error is not None, "the full tmpfs never refused a write"
            assert 0 < len(acknowledged) < 200
            # every later write to that dir is refused too, space or not
            with pytest.raises(KafkaStorageError):
                producer.send("spread", value=b"later", partition=small_partition).get(15)
            # the other dir carries on: writes and reads
            big_offsets = [
                producer.send("spread", value=f"big{i}".encode(), partition=big_partition).get(15).offset
                for i in range(50)
            ]
        finally:
            producer.close(5)
        assert big_offsets == list(range(50))
        records = kp_consume_all(broker.bootstrap, "spread", big_partition, 50)
        assert [r.value for r in records] == [f"big{i}".encode() for i in range(50)]
        # Kafka's view of an offline dir: DescribeLogDirs error, fetches of its partitions refused
        dirs = _log_dirs(broker.bootstrap)
        assert dirs[str(small_tmpfs)]["error_code"] == KAFKA_STORAGE_ERROR
        assert dirs[str(small_tmpfs)]["partitions"] == set()
        assert dirs[str(big)]["error_code"] == 0
        assert _fetch_error(broker.bootstrap, "spread", small_partition) == KAFKA_STORAGE_ERROR
        assert _fetch_error(broker.bootstrap, "spread", big_partition) == 0
        assert broker.process is not None and broker.process.poll() is None  # the broker lives on

        # space returns; after a restart the dir is online, nothing acknowledged is lost, writes resume
        filler.unlink()
        broker.restart()
        dirs = _log_dirs(broker.bootstrap)
        assert dirs[str(small_tmpfs)]["error_code"] == 0
        records = kp_consume_all(broker.bootstrap, "spread", small_partition, len(acknowledged))
        assert [(r.offset, r.value) for r in records] == acknowledged
        producer = _producer(broker.bootstrap)
        try:
            resumed = producer.send("spread", value=b"resumed", partition=small_partition).get(15)
        finally:
            producer.close(5)
        assert resumed.offset == len(acknowledged)
    finally:
        broker.stop()


def test_fsync_failure_takes_the_dir_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing fsync (EIO) under one log dir: that dir goes offline, the other keeps serving."""
    from kafka.errors import KafkaStorageError

    first, second = tmp_path / "d1", tmp_path / "d2"
    failing = str(second)
    real_fsync = os.fsync
    failures: list[str] = []

    def fsync(fd: int) -> None:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target.startswith(failing + os.sep) and "spread-" in target:
            failures.append(target)
            raise OSError(errno.EIO, "injected fsync failure", target)
        real_fsync(fd)

    # flush after every message, so each produce fsyncs its partition
    broker = InProcessBroker(first, [f"log.dirs={first},{second}", "log.flush.interval.messages=1"]).start()
    try:
        create_topic(broker.bootstrap, "spread", partitions=2)
        dirs = _log_dirs(broker.bootstrap)
        [(_, on_second)] = [tp for tp in dirs[failing]["partitions"] if tp[0] == "spread"]
        [(_, on_first)] = [tp for tp in dirs[str(first)]["partitions"] if tp[0] == "spread"]
        monkeypatch.setattr(os, "fsync", fsync)
        producer = _producer(broker.bootstrap)
        try:
            with pytest.raises(KafkaStorageError):
                producer.send("spread", value=b"a", partition=on_second).get(15)
            with pytest.raises(KafkaStorageError):
                producer.send("spread", value=b"b", partition=on_second).get(15)
            assert producer.send("spread", value=b"c", partition=on_first).get(15).offset == 0
        finally:
            producer.close(5)
        assert failures
        deadline = time.monotonic() + 10
        while _log_dirs(broker.bootstrap)[failing]["error_code"] != KAFKA_STORAGE_ERROR:
            assert time.monotonic() < deadline, "the dir with the failed fsync was not reported offline"
            time.sleep(0.1)
        assert _log_dirs(broker.bootstrap)[str(first)]["error_code"] == 0
        assert _fetch_error(broker.bootstrap, "spread", on_second) == KAFKA_STORAGE_ERROR
    finally:
        monkeypatch.undo()
        broker.stop()
