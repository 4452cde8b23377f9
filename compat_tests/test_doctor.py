"""`kafkacompat doctor` against a real broker, a closed port, and log dirs in each lock state.

The broker runs in a child process (so its log dir is another process's, as in real use); the data is
written with confluent-kafka and kafka-python; doctor runs as `python -m kafkacompat doctor`.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.clients import create_topic
from kafkacompat.commands import doctor
from kafkacompat.local_brokers import BrokerProcess

pytestmark = pytest.mark.restarts_broker


def run_doctor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-m", "kafkacompat", "doctor", "--timeout", "5", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd or root,
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path / "data", ["group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=3"]
    ).start()
    yield process
    process.stop()


def test_a_healthy_broker_with_topics_groups_and_lag(broker: BrokerProcess) -> None:
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    create_topic(broker.bootstrap, "orders", 3)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        producer.produce("orders", value=b"order %d" % i, partition=i % 3)
    assert producer.flush(15) == 0
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="billing", enable_auto_commit=False)
    committed = {TopicPartition("orders", 0): 4, TopicPartition("orders", 1): 10}
    consumer.commit({tp: OffsetAndMetadata(offset, "", -1) for tp, offset in committed.items()})
    consumer.close()

    result = run_doctor("--bootstrap-server", broker.bootstrap)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert f"Broker at {broker.bootstrap}" in out
    assert re.search(r"answers: \d+ APIs \(Produce v\d+-\d+, Fetch v\d+-\d+", out)
    assert f"broker 1 advertises {broker.bootstrap}" in out
    assert re.search(r"broker 1 listeners=PLAINTEXT://127\.0\.0\.1:\d+", out)  # as configured (port 0)
    assert "Topics: 1 (+1 internal), 6 partitions" in out
    assert "orders: 3 partition(s)" in out
    # partition 0 holds 10 records, 4 committed; partition 1 all 10 committed
    assert "billing: Empty, 0 member(s), 2 committed partition(s), lag 6" in out
    # the broker reports its log dir, which is on this machine: doctor looks at it too
    data_dir = os.path.realpath(broker.data_dir)
    assert f"Data dir {data_dir}" in out
    assert "the broker that answered reports this dir as one of its log dirs" in out
    assert re.search(r"file system: [\d.]+ \w+ free of [\d.]+ \w+", out)
    assert "no problems found" in out


def test_a_closed_port_is_reported_with_its_address_the_error_and_causes() -> None:
    port = closed_port()
    result = run_doctor("--bootstrap-server", f"127.0.0.1:{port}")
    assert result.returncode == doctor.EXIT_UNREACHABLE
    assert f"UNREACHABLE: cannot connect to 127.0.0.1:{port}" in result.stdout
    assert "Connection refused" in result.stdout
    assert "is the broker running" in result.stdout
    assert "listeners" in result.stdout


def test_an_address_that_is_not_a_kafka_broker() -> None:
    """A listener that accepts and closes (like a TLS-only or unrelated service) is told apart."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        import threading

        def accept_and_close() -> None:
            for _ in range(4):
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                conn.close()

        thread = threading.Thread(target=accept_and_close, daemon=True)
        thread.start()
        result = run_doctor("--bootstrap-server", f"127.0.0.1:{port}")
    assert result.returncode == doctor.EXIT_UNREACHABLE
    assert "UNREACHABLE as a Kafka broker" in result.stdout
    assert "did not answer as a Kafka broker" in result.stdout


def test_an_unreachable_advertised_address_is_a_problem(tmp_path: Path) -> None:
    port = closed_port()
    broker = BrokerProcess(tmp_path / "data", [f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}"]).start()
    try:
        result = run_doctor("--bootstrap-server", broker.bootstrap)
    finally:
        broker.stop()
    assert result.returncode == doctor.EXIT_PROBLEMS, result.stdout
    assert f"broker 1 advertises 127.0.0.1:{port}, which this machine cannot reach" in result.stdout
    assert "advertised.listeners" in result.stdout


def test_a_held_lock_without_an_answering_broker(tmp_path: Path) -> None:
    """Another process holds the log dir's .lock, yet nothing answers at the address: doctor says so."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=abc\n")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(data / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = run_doctor("--bootstrap-server", f"127.0.0.1:{closed_port()}", "--data-dir", str(data))
        # doctor's own try-lock must not have taken or broken the holder's lock
        state = doctor.lock_state(data)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == doctor.EXIT_UNREACHABLE
    assert f"lock: .lock held by process {holder.pid}" in result.stdout
    assert "holds" in result.stdout and "does not answer at the bootstrap address" in result.stdout
    assert state.held and state.holder_pid == holder.pid
    # the holder is gone: the same file is now a leftover, not a held lock
    after = doctor.lock_state(data)
    assert after.exists and not after.held
    result = run_doctor("--bootstrap-server", f"127.0.0.1:{closed_port()}", "--data-dir", str(data))
    assert "present but not held" in result.stdout
    assert "last shutdown was not clean" in result.stdout


def test_lock_state_without_a_lock_file(tmp_path: Path) -> None:
    state = doctor.lock_state(tmp_path)
    assert not state.exists and not state.held


def test_a_nearly_full_file_system_is_a_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk check reads statvfs; a file system with 10 MiB of 100 GiB free is reported as full."""

    class NearlyFull:
        f_frsize = 4096
        f_blocks = 100 * (1 << 30) // 4096
        f_bavail = 10 * (1 << 20) // 4096

    monkeypatch.setattr(doctor.os, "statvfs", lambda path: NearlyFull)
    report = doctor.Report()
    doctor.check_data_dir(tmp_path, report, broker_reachable=True)
    assert any("almost full (10.0 MiB free)" in problem for problem in report.problems)
    NearlyFull.f_bavail = 10 * (1 << 30) // 4096  # 10 GiB free: fine
    roomy = doctor.Report()
    doctor.check_data_dir(tmp_path, roomy, broker_reachable=True)
    assert roomy.problems == []


def test_config_file_names_the_address_and_the_log_dir(broker: BrokerProcess, tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text(f"listeners=PLAINTEXT://127.0.0.1:{broker.port}\nlog.dirs={broker.data_dir}\n")
    result = run_doctor("--config", str(properties))
    assert result.returncode == 0, result.stdout
    assert f"Broker at 127.0.0.1:{broker.port}" in result.stdout
    assert f"Data dir {broker.data_dir}" in result.stdout


def test_version_and_process_from_the_metrics_endpoint(tmp_path: Path) -> None:
    """The Kafka protocol has no software version; doctor finds metrics.listener and asks the endpoint."""
    import kafkacompat

    broker = BrokerProcess(tmp_path / "data", [f"metrics.listener=http://127.0.0.1:{closed_port()}"]).start()
    try:
        result = run_doctor("--bootstrap-server", broker.bootstrap)
    finally:
        broker.stop()
    assert result.returncode == 0, result.stdout
    assert f"software: kafkacompat {kafkacompat.__version__}" in result.stdout
    assert re.search(
        r"process: [\d.]+ MiB resident, [\d.]+ s CPU; metrics at http://127\.0\.0\.1:\d+/metrics",
        result.stdout,
    )


def test_without_metrics_the_version_is_said_to_be_unknown(broker: BrokerProcess) -> None:
    result = run_doctor("--bootstrap-server", broker.bootstrap)
    assert "software version: not carried by the Kafka protocol" in result.stdout
