from __future__ import annotations

import itertools
import os

import pytest

from kafkacompat.log._tests.helpers import parse_log_file
from kafkacompat.log.config import LogConfig
from kafkacompat.log.partition_log import PartitionLog


@pytest.fixture
def make_log(tmp_path):
    """Factory for a PartitionLog in a temp dir (fsync off: tests do not need durability)."""
    logs: list[PartitionLog] = []

    def factory(overrides: dict[str, str] | None = None, *, name: str = "t-0", **kwargs) -> PartitionLog:
        config = LogConfig.from_properties(overrides or {})
        topic, _, partition = name.rpartition("-")
        kwargs.setdefault("sync", False)
        pl = PartitionLog(str(tmp_path / name), topic, int(partition), config, **kwargs)
        logs.append(pl)
        return pl

    yield factory
    for pl in logs:
        try:
            pl.close(clean=False)
        except OSError:
            pass


@pytest.fixture
def damaged_files_ok():
    """Requested by tests that leave deliberately damaged segment files behind."""


@pytest.fixture(autouse=True)
def _kafka_python_reads_every_segment(request):
    """After each test, kafka-python (an independent reader) must parse every .log file the test left,
    with valid CRCs and offsets increasing across the segments of each partition dir."""
    if "tmp_path" not in request.fixturenames or "damaged_files_ok" in request.fixturenames:
        yield
        return
    root = request.getfixturevalue("tmp_path")
    yield
    for directory, _, names in os.walk(root):
        logs = sorted(n for n in names if n.endswith(".log"))
        previous_end = -1
        for name in logs:
            batches = parse_log_file(os.path.join(directory, name))
            if batches:
                assert batches[0].base_offset >= int(name[:-4]) and batches[0].base_offset > previous_end
                for a, b in itertools.pairwise(batches):
                    assert b.base_offset > a.last_offset
                previous_end = batches[-1].last_offset
