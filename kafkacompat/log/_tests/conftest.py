from __future__ import annotations

import pytest

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
