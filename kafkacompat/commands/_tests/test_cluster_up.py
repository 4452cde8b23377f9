"""`kafkacompat cluster up` in an install without pytest (the full run with ZooKeeper and real clients is
compat_tests/test_cluster.py's `test_cluster_up_runs_zookeeper_and_brokers_until_interrupted`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
