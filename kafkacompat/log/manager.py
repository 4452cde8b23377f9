"""The log dirs of a broker and every partition log in them.

Theory of operation: each log dir holds `meta.properties` (written on first start, checked on every
start: a dir from another cluster or node is refused), the three offset checkpoints
(`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`, `replication-offset-checkpoint`),
the clean-shutdown marker `.kafka_cleanshutdown`, the `.lock` file (dir_lock.py) and one
`<topic>-<partition>` dir per partition.

`startup()` first takes the lock of every log dir, before it reads or writes anything there: a second
broker on the same dirs fails at once, naming the dir and the holder's pid, instead of treating the live
broker's files as those of a crashed one. `shutdown()` and `close_without_marker()` release them.

`startup()` loads every partition dir (a start-up that takes long reports its progress: log lines, or a
bar on a terminal). The marker decides how: present (clean shutdown) means logs are
trusted and loaded cheaply; absent means segments after each log's recovery point are verified and
repaired (see PartitionLog). The marker is removed once loading is done, and written again only by a
complete `shutdown()` (flush, producer snapshots, checkpoints, then the marker).
A partition whose files cannot be read (OSError) is put in `offline_partitions` and every later access
to it raises KafkaError(KAFKA_STORAGE_ERROR); other partitions are unaffected.

Offline log dirs: as Kafka does on an IOException, a disk error (ENOSPC, EIO, a failed fsync) in any
partition of a dir, or in the dir's own files (checkpoints, meta.properties at start-up), takes the
whole dir offline (`mark_dir_offline`, `offline_dirs`): every partition in it refuses appends and reads
with KAFKA_STORAGE_ERROR, no new partition is placed there, its checkpoints are no longer written and
it gets no clean-shutdown marker, so the next start recovers it from its files. Other dirs carry on.
Unlike Kafka, a broker whose dirs are all offline does not halt: it keeps answering (metadata, groups
whose partitions live elsewhere, KAFKA_STORAGE_ERROR for the rest). A dir comes back online only with
a restart (Kafka's rule too), once the disk has space or has been replaced. Files of an offline dir stay
open until shutdown, so FileSlices already handed out stay valid.

`delete_log()` renames the partition dir to `<topic>-<partition>.<uuid hex>-delete` (Kafka's name, the topic
cut short to fit 255 bytes as Kafka cuts it) and
removes it after `file.delete.delay.ms` (`run_pending_deletes`); a crash in between leaves a `-delete`
dir that the next startup removes.

New partitions go to the log dir holding the fewest partitions (Kafka's rule). Topic configs are not
stored here (they belong to the cluster metadata): `startup()` and `create_log()` take them.

Single-threaded, like PartitionLog, except for the blocking calls the broker runs in worker threads:
`build_log()` (a new partition's files, planned by `plan_logs()` and attached by `attach_log()` on the
owner thread); `PartitionLog.flush()`; `DueDeletes.remove()` (files `take_due_deletes()` took off every
list first); and `write_checkpoints()` (which writes a snapshot `checkpoint_offsets()` took on the owner
thread, so it never iterates the table of logs while that thread changes it).
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from kafkacompat.log.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    new_directory_id,
    read_clean_shutdown,
    read_meta_properties,
    read_offset_checkpoint,
    write_clean_shutdown,
    write_meta_properties,
    write_offset_checkpoint,
)
from kafkacompat.log.config import LogConfig
from kafkacompat.log.dir_lock import LogDirLock
from kafkacompat.log.partition_log import PartitionLog, parse_partition_dir_name
from kafkacompat.log.segment import LogSegment
from kafkacompat.progress import Progress
from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = ["DueDeletes", "LogManager", "NewLog"]


_CHECKPOINT_FILES = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT)
# log dir -> checkpoint file name -> (topic, partition) -> offset
CheckpointOffsets = dict[str, dict[str, dict[tuple[str, int], int]]]

log = logging.getLogger("kafkacompat.log")

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class NewLog:
    """Where a partition log not yet made goes (`LogManager.plan_logs`)."""

    tp: TopicPartition
    log_dir: str
    directory: str
    config: LogConfig


class DueDeletes:
    """Files whose file.delete.delay.ms has passed, already taken off the manager's and the logs' pending
    lists by `LogManager.take_due_deletes`. Nothing else refers to them, so `remove()` (close, unlink,
    rmtree: blocking, slow for big files) may run in a worker thread while the owner thread goes on."""

    def __init__(
        self,
        segments: list[tuple[PartitionLog, list[LogSegment]]],
        deleted_logs: list[tuple[str, PartitionLog | None]],
    ) -> None:
        self.segments = segments
        self.deleted_logs = deleted_logs

    def __len__(self) -> int:
        return sum(len(s) for _, s in self.segments) + len(self.deleted_logs)

    def remove(self) -> int:
        """Close and remove everything; returns how many segments and partition dirs that was. A disk
        error takes only the affected log offline (as any storage error does)."""
        for path, partition_log in self.deleted_logs:
            if partition_log is not None:
                partition_log.close(clean=False)
            shutil.rmtree(path, ignore_errors=True)
        for partition_log, segments in self.segments:
            try:
                partition_log.remove_segment_files(segments)
            except KafkaError as exc:
                log.error("delayed delete failed for %s: %s", partition_log.name, exc)
        return len(self)


class LogManager:
    """Owns the log dirs: their metadata files and every PartitionLog loaded from or created in them."""

    def __init__(
        self,
        log_dirs: list[str],
        default_config: LogConfig,
        node_id: int,
        cluster_id: str,
        *,
        sync: bool = True,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_config = default_config
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.sync = sync
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.offline_partitions: dict[TopicPartition, str] = {}
        self.offline_dirs: dict[str, str] = {}  # log dir -> the disk error that took it offline
        self._dir_of: dict[TopicPartition, str] = {}
        self._topic_configs: dict[str, LogConfig] = {}
        self.directory_ids: dict[str, str] = {}
        self._deleted_logs: list[tuple[int, str, PartitionLog | None]] = []  # (deadline, dir, log)
        self._locks: list[LogDirLock] = []
        self.started = False

    # --- startup ---------------------------------------------------------------------------------

    def _prepare_dir(self, log_dir: str) -> None:
        os.makedirs(log_dir, exist_ok=True)
        path = os.path.join(log_dir, META_PROPERTIES)
        if os.path.exists(path):
            try:
                props = read_meta_properties(path)
            except CheckpointError as exc:
                raise RuntimeError(f"log dir {log_dir}: unreadable {META_PROPERTIES}: {exc}") from exc
            if props.get("cluster.id") not in (None, self.cluster_id):
                raise RuntimeError(
                    f"log dir {log_dir} belongs to cluster {props.get('cluster.id')}, not {self.cluster_id}"
                )
            stored_node = props.get("node.id", props.get("broker.id"))
            if stored_node is not None and stored_node != str(self.node_id):
                raise RuntimeError(f"log dir {log_dir} belongs to node {stored_node}, not {self.node_id}")
            self.directory_ids[log_dir] = props.get("directory.id", "")
            if "directory.id" in props:
                return
        directory_id = new_directory_id()
        write_meta_properties(
            path,
            {
                "node.id": str(self.node_id),
                "directory.id": directory_id,
                "version": "1",
                "cluster.id": self.cluster_id,
            },
        )
        self.directory_ids[log_dir] = directory_id

    @staticmethod
    def _read_checkpoint(path: str) -> dict[TopicPartition, int]:
        try:
            return read_offset_checkpoint(path)
        except (CheckpointError, OSError) as exc:
            log.warning(
                "ignoring unreadable checkpoint %s (%s); logs will be recovered from their files", path, exc
            )
            return {}

    def lock_dirs(self) -> None:
        """Take every log dir's `.lock` (creating the dir if needed), or raise LogDirLockedError (a
        RuntimeError) having taken none. `startup()` calls it; the broker may call it earlier."""
        if self._locks:
            return
        locks = []
        try:
            for log_dir in self.log_dirs:
                os.makedirs(log_dir, exist_ok=True)
                lock = LogDirLock(log_dir)
                lock.acquire()
                locks.append(lock)
        except BaseException:
            for lock in locks:
                lock.release()
            raise
        self._locks = locks

    def unlock_dirs(self) -> None:
        locks, self._locks = self._locks, []
        for lock in locks:
            lock.release()

    def startup(self, topic_configs: Mapping[str, LogConfig] | None = None, now_ms: int = 0) -> None:
        """Load every partition of every log dir. `topic_configs`: topic -> LogConfig (default otherwise)."""
        self.lock_dirs()
        try:
            self._load_dirs(topic_configs, now_ms)
        except BaseException:
            self.close_without_marker()  # what was loaded closes; the locks go with it
            raise
        self.started = True

    def _load_dirs(self, topic_configs: Mapping[str, LogConfig] | None, now_ms: int) -> None:
        self._topic_configs.update(topic_configs or {})
        # a long start-up (many partitions, recovery after a crash) reports its progress (progress.py)
        progress = Progress("loading logs", 0, unit="dir entries", logger=log, heartbeat=True)
        for log_dir in self.log_dirs:
            try:
                self._prepare_dir(log_dir)
                names = sorted(os.listdir(log_dir))
            except OSError as exc:
                # as Kafka: a dir that cannot be read or initialised starts offline; the others serve
                self.mark_dir_offline(log_dir, str(exc))
                continue
            clean = read_clean_shutdown(log_dir)
            recovery_points = self._read_checkpoint(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT))
            start_offsets = self._read_checkpoint(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT))
            high_watermarks = self._read_checkpoint(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT))
            progress.total = (progress.total or 0) + len(names)
            for name in names:
                progress.advance(1, name)
                path = os.path.join(log_dir, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith("-delete"):
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                parsed = parse_partition_dir_name(name)
                if parsed is None:
                    continue
                tp = parsed
                try:
                    self._attach(
                        tp,
                        log_dir,
                        PartitionLog(
                            path,
                            tp[0],
                            tp[1],
                            self.config_for(tp[0]),
                            recovery_point=recovery_points.get(tp, 0),
                            log_start_offset=start_offsets.get(tp, 0),
                            high_watermark=high_watermarks.get(tp, 0),
                            clean_shutdown=clean,
                            now_ms=now_ms,
                            sync=self.sync,
                        ),
                    )
                except (OSError, ValueError, KafkaError) as exc:
                    log.error("cannot load log %s: %s; the partition is offline", path, exc)
                    self.offline_partitions[tp] = str(exc)
                    self._dir_of[tp] = log_dir
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
            try:
                if os.path.exists(marker):
                    os.unlink(marker)
            except OSError as exc:
                self.mark_dir_offline(log_dir, str(exc))
        progress.finish()

    def _attach(self, tp: TopicPartition, log_dir: str, partition_log: PartitionLog) -> None:
        self.logs[tp] = partition_log
        self._dir_of[tp] = log_dir
        partition_log.on_storage_error = lambda _log, reason: self.mark_dir_offline(log_dir, reason)

    def mark_dir_offline(self, log_dir: str, reason: str) -> None:
        """Take `log_dir` offline after a disk error: every partition in it answers KAFKA_STORAGE_ERROR
        from now on. Idempotent. May be called from a worker thread (a failed fsync): it only sets flags,
        and it iterates copies of the tables."""
        if log_dir in self.offline_dirs:
            return
        self.offline_dirs[log_dir] = reason
        partitions = [tp for tp, d in list(self._dir_of.items()) if d == log_dir]
        for tp in partitions:
            partition_log = self.logs.get(tp)
            if partition_log is not None:
                partition_log.offline = True
        log.error(
            "log dir %s is offline after a disk error (%s): its %d partition(s) answer KAFKA_STORAGE_ERROR"
            " until the broker restarts; %d of %d log dir(s) remain online",
            log_dir,
            reason,
            len(partitions),
            len(self.log_dirs) - len(self.offline_dirs),
            len(self.log_dirs),
        )

    def dir_of(self, topic: str, partition: int) -> str | None:
        """The log dir holding the partition (online or not), None if this broker has no such log."""
        return self._dir_of.get((topic, partition))

    # --- partitions ------------------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def set_topic_config(self, topic: str, config: LogConfig) -> None:
        """Apply a topic's (new) configs to all its partitions."""
        self._topic_configs[topic] = config
        for (t, _), partition_log in self.logs.items():
            if t == topic:
                partition_log.update_config(config)

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The partition's log, None if it does not exist; KafkaError(KAFKA_STORAGE_ERROR) if offline."""
        tp = (topic, partition)
        if tp in self.offline_partitions:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"{topic}-{partition} is offline: {self.offline_partitions[tp]}",
            )
        log_dir = self._dir_of.get(tp)
        if log_dir is not None and log_dir in self.offline_dirs:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"{topic}-{partition} is in offline log dir {log_dir}: {self.offline_dirs[log_dir]}",
            )
        return self.logs.get(tp)

    def _online_dirs(self) -> list[str]:
        online = [d for d in self.log_dirs if d not in self.offline_dirs]
        if not online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "every log dir is offline")
        return online

    def plan_logs(
        self, topic: str, partitions: Iterable[int], config: LogConfig | None = None
    ) -> list[PartitionLog | NewLog]:
        """For each partition: its log if it exists (given `config`), else where a new one goes.

        New partitions go to the online dir holding the fewest partitions, counting the ones planned
        here too, so a topic's partitions spread over the dirs. Nothing is created: `build_log()` makes
        a plan's files (in any thread) and `attach_log()` adds the result to the table.
        """
        if config is not None:
            self._topic_configs[topic] = config
        online = self._online_dirs()
        counts = collections.Counter(d for d in self._dir_of.values() if d in online)
        plans: list[PartitionLog | NewLog] = []
        for partition in partitions:
            existing = self.get_log(topic, partition)
            if existing is not None:
                if config is not None:
                    existing.update_config(config)
                plans.append(existing)
                continue
            # one dir: no count to take (it made creating N partitions cost N^2)
            log_dir = online[0] if len(online) == 1 else min(online, key=lambda d: counts[d])
            counts[log_dir] += 1
            directory = os.path.join(log_dir, f"{topic}-{partition}")
            plans.append(NewLog((topic, partition), log_dir, directory, self.config_for(topic)))
        return plans

    def build_log(self, plan: NewLog, now_ms: int) -> PartitionLog:
        """The plan's log, its files created: file-system work only, touching no table of this
        manager, so a worker thread may run it (creating a partition's files costs ~2 ms on ext4).
        Raises OSError."""
        topic, partition = plan.tp
        return PartitionLog(plan.directory, topic, partition, plan.config, now_ms=now_ms, sync=self.sync)

    def attach_log(self, plan: NewLog, partition_log: PartitionLog) -> None:
        """Add a log `build_log()` made to the table (owner thread)."""
        self._attach(plan.tp, plan.log_dir, partition_log)

    def create_log(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        *,
        topic_id: str | None = None,
        now_ms: int = 0,
    ) -> PartitionLog:
        """The partition's log, created empty (at offset 0) if it does not exist yet. `topic_id` (Kafka's
        base64 UUID string) is written to the partition's `partition.metadata`."""
        (plan,) = self.plan_logs(topic, [partition], config)
        if isinstance(plan, PartitionLog):
            if topic_id is not None:
                plan.set_topic_id(topic_id)
            return plan
        try:
            partition_log = self.build_log(plan, now_ms)
            if topic_id is not None:
                partition_log.set_topic_id(topic_id)
        except OSError as exc:
            raise self.creation_failed(plan, exc) from exc
        self.attach_log(plan, partition_log)
        return partition_log

    def creation_failed(self, plan: NewLog, exc: OSError) -> KafkaError:
        """A log's files could not be made: its dir goes offline (a disk error), and the error to raise."""
        self.mark_dir_offline(plan.log_dir, str(exc))
        topic, partition = plan.tp
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot create {topic}-{partition}: {exc}")

    def delete_log(self, topic: str, partition: int, now_ms: int) -> bool:
        """Delete the partition's log; False if there was none.

        The dir is renamed to `<topic>-<partition>.<uuid hex>-delete` at once (Kafka's name; a later
        create starts fresh), while its files stay open until `run_pending_deletes()` passes
        `now_ms + file.delete.delay.ms`: FileSlices handed out just before must not meet a closed (or
        reused) descriptor."""
        tp = (topic, partition)
        partition_log = self.logs.pop(tp, None)
        self.offline_partitions.pop(tp, None)
        log_dir = self._dir_of.pop(tp, None)
        if log_dir is None:
            return False
        source = os.path.join(log_dir, f"{topic}-{partition}")
        # Kafka's name, with the topic cut so that it fits a file name (255 bytes): a 249-character topic
        # plus the suffix would not, and the delete would fail
        suffix = f"-{partition}.{uuid.uuid4().hex}-delete"
        doomed = os.path.join(log_dir, topic[: max(0, 255 - len(suffix))] + suffix)
        try:
            os.rename(source, doomed)
        except OSError as exc:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot delete {topic}-{partition}: {exc}"
            ) from exc
        delay = partition_log.config.file_delete_delay_ms if partition_log is not None else 0
        self._deleted_logs.append((now_ms + delay, doomed, partition_log))
        return True

    def open_log_count(self) -> int:
        """Partition logs whose files are open: the live ones and the deleted ones still waiting for
        file.delete.delay.ms (their files stay open until then)."""
        return len(self.logs) + len(self._deleted_logs)

    def all_logs(self) -> Iterator[tuple[TopicPartition, PartitionLog]]:
        return iter(list(self.logs.items()))

    # --- background work (the broker's tasks call these with their clock) ------------------------

    def logs_needing_flush(self, now_ms: int) -> list[PartitionLog]:
        return [pl for pl in self.logs.values() if not pl.offline and pl.flush_needed(now_ms)]

    def compacted_logs(self) -> list[PartitionLog]:
        """Online logs whose cleanup.policy includes compact: the broker's cleaner task runs
        `cleaner.CleanPlan` on them (prepare and commit here, build in a worker thread)."""
        return [pl for pl in self.logs.values() if not pl.offline and pl.config.compacted]

    def run_retention(self, now_ms: int) -> int:
        """Retention on every online log; returns segments deleted. Storage errors only offline that log."""
        deleted = 0
        for tp, partition_log in list(self.logs.items()):
            if partition_log.offline:
                continue
            try:
                deleted += partition_log.delete_old_segments(now_ms)
            except KafkaError as exc:
                log.error("retention failed for %s-%s: %s", tp[0], tp[1], exc)
        return deleted

    def run_pending_deletes(self, now_ms: int) -> int:
        """Remove deleted segments and deleted partition dirs whose delay has passed; returns how many."""
        return self.take_due_deletes(now_ms).remove()

    def take_due_deletes(self, now_ms: int) -> DueDeletes:
        """Decide what `run_pending_deletes` would remove and take it off every pending list (owner
        thread); the returned `DueDeletes.remove()` does the closing and unlinking, in any thread."""
        due_logs = [d for d in self._deleted_logs if d[0] <= now_ms]
        if due_logs:
            self._deleted_logs = [d for d in self._deleted_logs if d[0] > now_ms]
        due_segments = []
        for partition_log in self.logs.values():
            if not partition_log.offline:
                segments = partition_log.take_due_deletes(now_ms)
                if segments:
                    due_segments.append((partition_log, segments))
        return DueDeletes(due_segments, [(path, pl) for _, path, pl in due_logs])

    def checkpoint_offsets(self) -> CheckpointOffsets:
        """What the three offset checkpoints of every log dir must say now. Call it on the thread that owns
        the manager (it reads the table of logs, which that thread changes); the result is plain data that
        `write_checkpoints()` may write from any thread."""
        snapshot: CheckpointOffsets = {
            log_dir: {name: {} for name in _CHECKPOINT_FILES}
            for log_dir in self.log_dirs
            if log_dir not in self.offline_dirs  # an offline dir's files are not touched again
        }
        for tp, partition_log in self.logs.items():
            files = snapshot.get(self._dir_of.get(tp, ""))
            if files is None:
                continue
            files[RECOVERY_POINT_CHECKPOINT][tp] = partition_log.recovery_point
            files[LOG_START_OFFSET_CHECKPOINT][tp] = partition_log.log_start_offset
            files[REPLICATION_OFFSET_CHECKPOINT][tp] = partition_log.high_watermark
        return snapshot

    def write_checkpoints(self, snapshot: CheckpointOffsets) -> None:
        """Write a `checkpoint_offsets()` snapshot. Blocking (fsync): the broker runs it in a worker
        thread; it touches no manager state, so the owner thread may add or remove logs meanwhile."""
        for log_dir, files in snapshot.items():
            try:
                for name, offsets in files.items():
                    write_offset_checkpoint(os.path.join(log_dir, name), offsets, sync=self.sync)
            except OSError as exc:
                self.mark_dir_offline(log_dir, f"writing checkpoints: {exc}")

    def checkpoint(self) -> None:
        """Snapshot and write the offset checkpoints, both on the calling (owner) thread."""
        self.write_checkpoints(self.checkpoint_offsets())

    def shutdown(self, broker_epoch: int = -1) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown marker of each dir whose
        logs all closed cleanly."""
        failed_dirs = set()
        for tp, partition_log in self.logs.items():
            if partition_log.offline:
                failed_dirs.add(self._dir_of.get(tp))
            partition_log.close(clean=True)
            if partition_log.offline:
                failed_dirs.add(self._dir_of.get(tp))
        for tp in self.offline_partitions:
            failed_dirs.add(self._dir_of.get(tp))
        failed_dirs.update(self.offline_dirs)
        self.checkpoint()
        deleted_logs, self._deleted_logs = self._deleted_logs, []
        DueDeletes([], [(path, pl) for _, path, pl in deleted_logs]).remove()  # no delay at shutdown
        for log_dir in self.log_dirs:
            if log_dir not in failed_dirs:
                try:
                    write_clean_shutdown(log_dir, broker_epoch)
                except OSError as exc:
                    log.error("cannot mark %s as cleanly shut down: %s", log_dir, exc)
        self.logs.clear()
        self.started = False
        self.unlock_dirs()

    def close_without_marker(self) -> None:
        """Close every file without flushing or marking a clean shutdown (tests: a simulated crash)."""
        for partition_log in self.logs.values():
            partition_log.close(clean=False)
        for _, _, deleted_log in self._deleted_logs:
            if deleted_log is not None:
                deleted_log.close(clean=False)
        self._deleted_logs = []
        self.logs.clear()
        self.started = False
        self.unlock_dirs()
