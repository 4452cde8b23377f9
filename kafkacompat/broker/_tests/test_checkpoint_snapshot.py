"""Offset checkpoints are snapshotted on the trio thread and written in a worker thread, so topics can
be created and deleted while a (slow, fsyncing) checkpoint write is in progress."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio

from kafkacompat.broker._tests.test_admin_harness import AdminHarness
from kafkacompat.log import manager as manager_module
from kafkacompat.log.checkpoints import LOG_START_OFFSET_CHECKPOINT, read_offset_checkpoint


async def test_topics_change_while_a_checkpoint_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = AdminHarness(tmp_path / "data")
    state = harness.state
    in_write = threading.Event()
    release = threading.Event()
    try:
        await state.create_topic("kept", 2)
        await state.create_topic("going", 1)
        real_write = manager_module.write_offset_checkpoint

        def slow_write(path: str, offsets: dict, *, sync: bool = True) -> None:
            in_write.set()
            assert release.wait(10), "the test never released the checkpoint write"
            real_write(path, offsets, sync=sync)

        monkeypatch.setattr(manager_module, "write_offset_checkpoint", slow_write)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(state.write_checkpoints)
            with trio.fail_after(10):
                while not in_write.is_set():
                    await trio.sleep(0.005)
            # The worker is inside the write: the table of logs changes under it.
            with trio.fail_after(5):
                await state.delete_topic("going")
                await state.create_topic("new", 3)
            release.set()
        written = read_offset_checkpoint(str(harness.data_dir / LOG_START_OFFSET_CHECKPOINT))
        # what was there when the checkpoint started, not what is there now
        assert set(written) == {("kept", 0), ("kept", 1), ("going", 0)}
        monkeypatch.setattr(manager_module, "write_offset_checkpoint", real_write)
        await state.write_checkpoints()
        written = read_offset_checkpoint(str(harness.data_dir / LOG_START_OFFSET_CHECKPOINT))
        assert set(written) == {("kept", 0), ("kept", 1), ("new", 0), ("new", 1), ("new", 2)}
    finally:
        release.set()
        harness.close()
