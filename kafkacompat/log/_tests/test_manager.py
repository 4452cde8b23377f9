"""LogManager: log dir files in Kafka's formats, clean/unclean startup, delete, offline partitions."""

from __future__ import annotations

import collections
import os
import time

import pytest

from kafkacompat.log import LogConfig, LogManager
from kafkacompat.log._tests.helpers import make_batch
from kafkacompat.log.checkpoints import read_meta_properties, read_offset_checkpoint
from kafkacompat.wire.errors import ErrorCode, KafkaError

NOW = 1_700_000_100_000


def new_manager(dirs, **kwargs) -> LogManager:
    manager = LogManager([str(d) for d in dirs], LogConfig(), 3, "Zx1clusterid", sync=False, **kwargs)
    manager.startup()
    return manager


def test_log_dir_files_follow_kafkas_formats(tmp_path):
    manager = new_manager([tmp_path])
    pl = manager.create_log("orders", 2, topic_id="q0kSLhN0SP6Q5V8yIh1wIw")
    for _ in range(4):
        pl.append_as_leader(make_batch([b"a", b"b"]), 0, NOW)
    pl.update_high_watermark(6)
    manager.shutdown()
    props = read_meta_properties(str(tmp_path / "meta.properties"))
    assert props["version"] == "1" and props["node.id"] == "3" and props["cluster.id"] == "Zx1clusterid"
    assert len(props["directory.id"]) == 22
    with open(tmp_path / "recovery-point-offset-checkpoint") as f:
        assert f.read() == "0\n1\norders 2 8\n"
    with open(tmp_path / "replication-offset-checkpoint") as f:
        assert f.read() == "0\n1\norders 2 6\n"
    with open(tmp_path / "log-start-offset-checkpoint") as f:
        assert f.read() == "0\n1\norders 2 0\n"
    assert os.path.exists(tmp_path / ".kafka_cleanshutdown")
    assert sorted(os.listdir(tmp_path / "orders-2")) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "00000000000000000008.snapshot",
        "leader-epoch-checkpoint",
        "partition.metadata",
    ]
    with open(tmp_path / "orders-2" / "partition.metadata") as f:
        assert f.read() == "version: 0\ntopic_id: q0kSLhN0SP6Q5V8yIh1wIw"
    manager = new_manager([tmp_path])
    assert manager.get_log("orders", 2).topic_id == "q0kSLhN0SP6Q5V8yIh1wIw"
    manager.shutdown()


def test_restart_restores_offsets_and_removes_the_marker_until_next_clean_shutdown(tmp_path):
    manager = new_manager([tmp_path])
    pl = manager.create_log("t", 0)
    pl.append_as_leader(make_batch([b"a"] * 3), 0, NOW)
    pl.update_high_watermark(3)
    pl.append_as_leader(make_batch([b"a"] * 3), 0, NOW)
    pl.update_high_watermark(5)
    manager.shutdown()
    manager = new_manager([tmp_path])
    assert not os.path.exists(tmp_path / ".kafka_cleanshutdown")
    pl = manager.get_log("t", 0)
    assert (pl.log_end_offset, pl.high_watermark, pl.recovery_point) == (6, 5, 6)
    assert pl.load_report.recovered_segments == 0
    manager.close_without_marker()
    manager = new_manager([tmp_path])  # no marker now: recovery from the recovery point
    assert manager.get_log("t", 0).load_report.recovered_segments == 1
    manager.shutdown()


def test_foreign_log_dir_is_refused(tmp_path):
    new_manager([tmp_path]).shutdown()
    with pytest.raises(RuntimeError):
        LogManager([str(tmp_path)], LogConfig(), 4, "Zx1clusterid").startup()
    with pytest.raises(RuntimeError):
        LogManager([str(tmp_path)], LogConfig(), 3, "other").startup()


def test_delete_log_renames_then_removes_and_leftovers_are_cleaned(tmp_path):
    manager = new_manager([tmp_path])
    pl = manager.create_log("gone", 0)
    pl.append_as_leader(make_batch([b"a"]), 0, NOW)
    in_flight = pl.read(0, 100).slices[0]
    assert manager.delete_log("gone", 0, now_ms=NOW)
    assert manager.get_log("gone", 0) is None
    (renamed,) = [n for n in os.listdir(tmp_path) if n.startswith("gone-0")]
    assert renamed.endswith("-delete")
    assert len(in_flight.read_bytes()) == in_flight.size  # the fd stays open during the delay
    assert manager.run_pending_deletes(NOW + 59_999) == 0
    assert manager.run_pending_deletes(NOW + 60_000) == 1
    assert not [n for n in os.listdir(tmp_path) if n.startswith("gone-0")]
    assert manager.create_log("gone", 0).log_end_offset == 0
    leftover = tmp_path / "gone-1.0123456789abcdef0123456789abcdef-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"")
    manager.shutdown()
    manager = new_manager([tmp_path])
    assert not leftover.exists()
    assert manager.get_log("gone", 1) is None
    manager.shutdown()


def test_new_partitions_spread_over_log_dirs_and_checkpoints_stay_per_dir(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = new_manager(dirs)
    for p in range(4):
        manager.create_log("t", p)
    manager.shutdown()
    a = read_offset_checkpoint(str(dirs[0] / "recovery-point-offset-checkpoint"))
    b = read_offset_checkpoint(str(dirs[1] / "recovery-point-offset-checkpoint"))
    assert len(a) == len(b) == 2 and not set(a) & set(b)


def test_planned_partitions_spread_over_log_dirs_before_any_is_made(tmp_path):
    """A topic's partitions planned together (to be made in a worker thread) count each other: planning
    4 over 2 dirs that already hold 1 and 0 alternates (fewest first, ties to the first dir) and puts
    2 in each (not all 4 in the emptier dir), and an existing log is planned as itself."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = new_manager(dirs)
    first = manager.create_log("t", 0)
    plans = manager.plan_logs("t", range(5))
    assert plans[0] is first
    chosen = collections.Counter(plan.log_dir for plan in plans[1:])
    assert [plan.log_dir for plan in plans[1:]] == [str(dirs[1]), str(dirs[0])] * 2
    assert chosen == {str(dirs[0]): 2, str(dirs[1]): 2}
    assert manager.get_log("t", 1) is None  # planned, not made
    for plan in plans[1:]:
        manager.attach_log(plan, manager.build_log(plan, NOW))
    assert sorted(os.listdir(dirs[1])).count("t-1") + sorted(os.listdir(dirs[0])).count("t-1") == 1
    assert manager.get_log("t", 4) is not None
    manager.shutdown()


def test_unreadable_partition_is_offline_and_others_work(tmp_path):
    manager = new_manager([tmp_path])
    manager.create_log("ok", 0).append_as_leader(make_batch([b"a"]), 0, NOW)
    manager.create_log("bad", 0).append_as_leader(make_batch([b"a"]), 0, NOW)
    manager.shutdown()
    os.mkdir(tmp_path / "bad-0" / "00000000000000000005.log")  # a "log file" that cannot be opened
    manager = new_manager([tmp_path])
    with pytest.raises(KafkaError) as err:
        manager.get_log("bad", 0)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert manager.get_log("ok", 0).append_as_leader(make_batch([b"b"]), 0, NOW).base_offset == 1
    manager.shutdown()
    assert not os.path.exists(tmp_path / ".kafka_cleanshutdown")  # the dir had a failed log


def test_topic_config_changes_apply_to_existing_logs(tmp_path):
    manager = new_manager([tmp_path])
    pl = manager.create_log("t", 0)
    manager.set_topic_config("t", LogConfig.from_properties({"max.message.bytes": "100"}))
    with pytest.raises(KafkaError) as err:
        pl.append_as_leader(make_batch([b"x" * 500]), 0, NOW)
    assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
    manager.shutdown()


def test_startup_of_1000_partitions_after_clean_shutdown(tmp_path, record_property):
    manager = new_manager([tmp_path])
    for p in range(1000):
        pl = manager.create_log("many", p)
        pl.append_as_leader(make_batch([b"v"] * 3), 0, NOW)
    manager.shutdown()
    started = time.perf_counter()
    manager = new_manager([tmp_path])
    clean_seconds = time.perf_counter() - started
    assert len(manager.logs) == 1000
    assert all(
        pl.log_end_offset == 3 and pl.load_report.recovered_segments == 0 for pl in manager.logs.values()
    )
    manager.close_without_marker()
    started = time.perf_counter()
    manager = new_manager([tmp_path])
    unclean_seconds = time.perf_counter() - started
    assert all(pl.load_report.recovered_segments == 1 for pl in manager.logs.values())
    manager.shutdown()
    record_property("startup_1000_clean_s", round(clean_seconds, 3))
    record_property("startup_1000_unclean_s", round(unclean_seconds, 3))
    print(f"startup of 1000 partitions: clean {clean_seconds:.3f} s, unclean {unclean_seconds:.3f} s")
    assert clean_seconds < 10


def test_one_warning_per_damaged_partition_at_startup(tmp_path, caplog):
    import logging

    manager = new_manager([tmp_path])
    for p in range(3):
        pl = manager.create_log("w", p)
        for _ in range(3):
            pl.append_as_leader(make_batch([b"x" * 200] * 2), 0, NOW)
    manager.close_without_marker()
    for p in (0, 2):
        path = tmp_path / f"w-{p}" / "00000000000000000000.log"
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 7)  # a torn last batch
        os.unlink(tmp_path / f"w-{p}" / "00000000000000000000.index")
    with caplog.at_level(logging.WARNING, logger="kafkacompat.log"):
        manager = new_manager([tmp_path])
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2
    assert any("w-0" in w for w in warnings) and any("w-2" in w for w in warnings)
    assert [manager.get_log("w", p).log_end_offset for p in range(3)] == [4, 6, 4]
    manager.shutdown()


def test_a_log_dir_is_locked_while_a_manager_has_it(tmp_path):
    from kafkacompat.log.dir_lock import LogDirLockedError

    first = new_manager([tmp_path / "a", tmp_path / "b"])
    first.create_log("t", 0).append_as_leader(make_batch([b"x"]), 0, NOW)
    dirs = [str(tmp_path / "c"), str(tmp_path / "b")]
    second = LogManager(dirs, LogConfig(), 3, "Zx1clusterid", sync=False)
    with pytest.raises(LogDirLockedError) as caught:
        second.startup()
    assert caught.value.log_dir == str(tmp_path / "b") and caught.value.holder_pid == os.getpid()
    assert str(tmp_path / "b") in str(caught.value) and f"process {os.getpid()}" in str(caught.value)
    assert not (tmp_path / "c" / "meta.properties").exists()  # refused before touching any dir
    third = LogManager([str(tmp_path / "c")], LogConfig(), 3, "Zx1clusterid", sync=False)
    third.startup()  # the dir the refused manager locked first was released again
    third.shutdown()
    first.close_without_marker()  # a crash releases the locks too (the process's files close)
    again = new_manager([tmp_path / "a", tmp_path / "b"])
    assert again.get_log("t", 0).log_end_offset == 1
    again.shutdown()
    new_manager([tmp_path / "a", tmp_path / "b"]).shutdown()


def test_a_failed_startup_releases_the_locks(tmp_path):
    new_manager([tmp_path]).shutdown()
    foreign = LogManager([str(tmp_path)], LogConfig(), 4, "Zx1clusterid", sync=False)
    with pytest.raises(RuntimeError, match="belongs to node 3"):
        foreign.startup()
    new_manager([tmp_path]).shutdown()


def test_disk_error_takes_the_whole_log_dir_offline(tmp_path, monkeypatch):
    """As Kafka: an I/O error in one partition offlines every partition of its dir; the other dir serves,
    new partitions avoid the offline dir, and it gets neither checkpoints nor a clean-shutdown marker."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = new_manager(dirs)
    a0, b0, a1 = manager.create_log("t", 0), manager.create_log("t", 1), manager.create_log("t", 2)
    assert manager.dir_of("t", 0) == manager.dir_of("t", 2) == str(dirs[0])
    failing_fd = a0.active_segment.fd

    real_pwrite = os.pwrite

    def pwrite(fd, data, offset):
        if fd == failing_fd:
            raise OSError(28, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    with pytest.raises(KafkaError) as err:
        a0.append_as_leader(make_batch([b"x"]), 0, NOW)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    monkeypatch.undo()
    assert str(dirs[0]) in manager.offline_dirs
    for partition in (0, 2):  # t-2 never failed itself: its dir did
        with pytest.raises(KafkaError) as err:
            manager.get_log("t", partition)
        assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert a1.offline
    assert manager.get_log("t", 1).append_as_leader(make_batch([b"y"]), 0, NOW).base_offset == 0
    assert b0.log_end_offset == 1
    for partition in (3, 4):  # new partitions go to the online dir only
        manager.create_log("t", partition)
        assert manager.dir_of("t", partition) == str(dirs[1])
    manager.shutdown()
    assert not (dirs[0] / ".kafka_cleanshutdown").exists()
    assert not (dirs[0] / "recovery-point-offset-checkpoint").exists()
    assert (dirs[1] / ".kafka_cleanshutdown").exists()
    # after a restart (space back) the dir is online again and nothing written before is lost
    manager = new_manager(dirs)
    assert manager.offline_dirs == {}
    assert manager.get_log("t", 0).append_as_leader(make_batch([b"z"]), 0, NOW).base_offset == 0
    manager.shutdown()


def test_every_dir_offline_refuses_new_partitions(tmp_path):
    manager = new_manager([tmp_path])
    manager.mark_dir_offline(str(tmp_path), "injected")
    with pytest.raises(KafkaError) as err:
        manager.create_log("t", 0)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    manager.shutdown()


def test_failed_checkpoint_write_takes_its_dir_offline(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = new_manager(dirs)
    manager.create_log("t", 0)
    manager.create_log("t", 1)
    # a directory where the checkpoint file must go: the write fails with an OSError
    os.mkdir(dirs[0] / "recovery-point-offset-checkpoint.tmp")
    manager.checkpoint()
    assert list(manager.offline_dirs) == [str(dirs[0])]
    assert manager.get_log("t", 1) is not None
    manager.close_without_marker()
