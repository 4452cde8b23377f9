"""Partition logs in Kafka's on-disk format (synchronous; no trio here).

Public API: `LogManager` (log dirs, startup/recovery, checkpoints, shutdown), `PartitionLog` (append,
read, offsets, retention, truncation, flush), `FileSlice` (what reads return), `LogConfig` (topic-level
storage configs with Kafka's names and defaults), `cleaner.CleanPlan` / `clean_log` (compaction).
Each module's docstring describes the file format it owns.
"""

from kafkacompat.log.config import TOPIC_CONFIG_DEFS, ConfigDef, LogConfig
from kafkacompat.log.file_slice import FileSlice
from kafkacompat.log.manager import LogManager
from kafkacompat.log.partition_log import AppendResult, PartitionLog, ReadResult

__all__ = [
    "TOPIC_CONFIG_DEFS",
    "AppendResult",
    "ConfigDef",
    "FileSlice",
    "LogConfig",
    "LogManager",
    "PartitionLog",
    "ReadResult",
]
