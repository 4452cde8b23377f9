"""Delayed file deletes: what is due is decided on the trio thread, the files are closed and removed in a
worker thread, so the event loop never waits for the unlink of a big segment."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kafkacompat.broker._tests.test_admin_harness import AdminHarness
from kafkacompat.log import manager as manager_module
from kafkacompat.log.segment import LogSegment


async def test_segment_and_partition_files_are_removed_off_the_trio_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = AdminHarness(tmp_path / "data", ("log.segment.bytes=200", "log.segment.delete.delay.ms=1000"))
    state = harness.state
    try:
        await state.create_topic("rolled", 1)
        await state.create_topic("dropped", 1)
        for _ in range(4):
            harness.append("rolled", 0, 3)
        partition_log = state.partition_log("rolled", 0)
        assert len(partition_log.segments) > 1
        # retire every segment but the active one
        partition_log.delete_records_before(partition_log.log_end_offset, state.now_ms())
        await state.delete_topic("dropped")

        removed_in: dict[str, int] = {}
        real_delete_files = LogSegment.delete_files
        real_rmtree = manager_module.shutil.rmtree

        def delete_files(segment: LogSegment) -> None:
            removed_in.setdefault("segment", threading.get_ident())
            real_delete_files(segment)

        def rmtree(path: str, *args: object, **kwargs: object) -> None:
            removed_in.setdefault("partition dir", threading.get_ident())
            real_rmtree(path, *args, **kwargs)

        monkeypatch.setattr(LogSegment, "delete_files", delete_files)
        monkeypatch.setattr(manager_module.shutil, "rmtree", rmtree)
        await state.delete_expired_files()
        assert removed_in == {}  # nothing is due before file.delete.delay.ms
        later = (state.now_ms() + 5_000) / 1000
        monkeypatch.setattr(state, "clock", lambda: later)
        await state.delete_expired_files()
        trio_thread = threading.get_ident()
        assert set(removed_in) == {"segment", "partition dir"}
        assert trio_thread not in removed_in.values()
        leftovers = [n for n in os.listdir(harness.data_dir) if n.endswith("-delete")]
        leftovers += [n for n in os.listdir(harness.data_dir / "rolled-0") if n.endswith(".deleted")]
        assert leftovers == []
    finally:
        harness.close()
