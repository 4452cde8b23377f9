"""`kafkacompat cluster up` in an install without pytest (the full run with ZooKeeper and real clients is
compat_tests/test_cluster.py's `test_cluster_up_runs_zookeeper_and_brokers_until_interrupted`)."""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkacompat.testing import env_without_pytest


def test_cluster_up_needs_no_pytest(tmp_path: Path) -> None:
    env = env_without_pytest(tmp_path / "no-pytest")
    blocked = subprocess.run([sys.executable, "-c", "import pytest"], env=env, capture_output=True, text=True)
    assert blocked.returncode == 1 and "ImportError: no pytest in this environment" in blocked.stderr
    # the modules cluster up runs, all imported
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import kafkacompat.client, kafkacompat.commands.cluster, kafkacompat.local_brokers,"
            " kafkacompat.replication.zk_server",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert imported.returncode == 0, imported.stderr
    # and the command itself, up to the ZooKeeper server it cannot start here: with no java on PATH, the
    # LocalCluster it imported finds no ZooKeeper, which the command reports without a traceback
    env["PATH"] = str(tmp_path / "no-java")
    up = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafkacompat",
            "cluster",
            "up",
            "--brokers",
            "1",
            "--dir",
            str(tmp_path / "c"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (up.returncode, up.stderr) == (
        1,
        "kafkacompat cluster: no java on PATH (Debian: apt-get install zookeeper)\n",
    )


def _free_ports(count: int) -> int:
    """A first port of `count` consecutive ports nothing listens on now."""
    for _ in range(50):
        base = random.randrange(20000, 60000)
        try:
            for port in range(base, base + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError("no run of free ports")


def test_cluster_up_base_port_broker_logs_and_restart(tmp_path: Path) -> None:
    from kafkacompat.client import ClientError, KafkaClient
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable, find_zookeeper_classpath

    try:
        find_zookeeper_classpath()
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"cluster mode needs ZooKeeper: {exc}")
    base = _free_ports(3)
    data = tmp_path / "c"
    up = ["cluster", "up", "--brokers", "2", "--base-port", str(base), "--dir", str(data)]
    process = subprocess.Popen(
        [sys.executable, "-m", "kafkacompat", *up],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("bootstrap: "):
                break
        assert f"zookeeper: 127.0.0.1:{base + 2}/kafkacompat" in lines
        for broker_id in (1, 2):
            log = data / f"broker-{broker_id}" / "broker.log"
            assert f"broker {broker_id}: 127.0.0.1:{base + broker_id - 1} log {log}" in lines
            assert "started, listening on" in log.read_text()
        assert f"restart broker N: kafkacompat cluster restart N --dir {data}" in lines
        assert lines[-1] == f"bootstrap: 127.0.0.1:{base},127.0.0.1:{base + 1}"

        log = data / "broker-2" / "broker.log"
        starts = log.read_text().count("started, listening on")
        restarted = subprocess.run(
            [sys.executable, "-m", "kafkacompat", "cluster", "restart", "2", "--dir", str(data)],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert restarted.returncode == 0, restarted.stderr
        assert restarted.stdout == f"Restarted broker 2; log {log}\n"
        assert log.read_text().count("started, listening on") == starts + 1
        deadline = time.monotonic() + 30
        while True:  # broker 2 again on its port, and in the cluster
            try:
                with KafkaClient(f"127.0.0.1:{base + 1}", timeout=5) as client:
                    if sorted(b.node_id for b in client.metadata([]).brokers) == [1, 2]:
                        break
            except (ClientError, OSError):
                pass
            assert time.monotonic() < deadline, "broker 2 did not rejoin"
            time.sleep(0.2)
        missing = subprocess.run(
            [sys.executable, "-m", "kafkacompat", "cluster", "restart", "3", "--dir", str(data)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert missing.returncode == 1 and "has no broker 3" in missing.stderr
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    nobody = subprocess.run(
        [sys.executable, "-m", "kafkacompat", "cluster", "restart", "1", "--dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert nobody.returncode == 1 and "no `cluster up` is running" in nobody.stderr
