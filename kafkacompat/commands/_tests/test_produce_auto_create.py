"""`kafkacompat produce` and topic auto-creation: created through Metadata where the broker allows it,
a prompt error where it does not."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from kafkacompat.local_brokers import InProcessBroker


def _produce(bootstrap: str, topic: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkacompat", "produce", "--topic", topic, "--bootstrap-server", bootstrap],
        input="a\nb\n",
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_created_with_num_partitions(tmp_path: Path) -> None:
    with InProcessBroker(tmp_path / "data", ["num.partitions=3"]) as broker:
        result = _produce(broker.bootstrap, "fresh")
        assert result.returncode == 0, result.stderr
        assert broker.broker.state.metadata.topic("fresh").partitions == 3


def test_refused_when_auto_creation_is_off(tmp_path: Path) -> None:
    with InProcessBroker(tmp_path / "data", ["auto.create.topics.enable=false"]) as broker:
        started = time.monotonic()
        result = _produce(broker.bootstrap, "absent")
        assert result.returncode == 1
        assert "absent: UNKNOWN_TOPIC_OR_PARTITION" in result.stderr
        assert time.monotonic() - started < 30  # not the whole auto-creation wait of every retry
        assert broker.broker.state.metadata.topic("absent") is None
