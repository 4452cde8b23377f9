"""DescribeLogDirs (key 35), versions 0-4.

Behaviour: one result per log dir of this broker (absolute path), listing the requested partitions
that live in it (null topics = every partition; partitions this node does not hold are left out, as
Kafka leaves them out) with their size in bytes (sum of segment files), offset lag 0 (no future
replicas, no replica movement here) and is_future_key false. v4 adds the dir's total and usable bytes
from `statvfs` (run in a worker thread); v3+ the top-level error code. Offline partitions are left out.
With an authorizer, needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED, no results).
A log dir that a disk error took offline is reported as Kafka reports it: error KAFKA_STORAGE_ERROR, no
topics, total and usable bytes -1.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.wire._generated.describe_log_dirs_response import DescribeLogDirsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.describe_log_dirs_request import DescribeLogDirsRequest

API_KEY = ApiKey.DESCRIBE_LOG_DIRS
MIN_VERSION = 0
MAX_VERSION = 4

DirResult = DescribeLogDirsResponse.DescribeLogDirsResult
TopicResult = DescribeLogDirsResponse.DescribeLogDirsTopic
PartitionResult = DescribeLogDirsResponse.DescribeLogDirsPartition


def disk_space(path: str) -> tuple[int, int]:
    """(total bytes, usable bytes) of the file system holding `path`; (-1, -1) if it cannot be read."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return -1, -1
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


async def handle(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    broker = ctx.broker
    logs = broker.logs
    if not cluster_allowed(ctx, Op.DESCRIBE):
        return DescribeLogDirsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    if request.topics is None:
        wanted = None
    else:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    per_dir: dict[str, dict[str, list[Any]]] = {d: {} for d in logs.log_dirs}
    turn = Turn()  # thousands of partitions: other clients run in between (fairness.py)
    for (topic, partition), partition_log in sorted(logs.all_logs()):
        await turn.spend()
        if wanted is not None and (topic, partition) not in wanted:
            continue
        try:
            if logs.get_log(topic, partition) is None or partition_log.offline:
                continue
            size = partition_log.size_in_bytes
        except KafkaError:
            continue
        log_dir = os.path.dirname(os.path.abspath(partition_log.directory))
        per_dir.setdefault(log_dir, {}).setdefault(topic, []).append(
            PartitionResult(partition_index=partition, partition_size=size, offset_lag=0, is_future_key=False)
        )
    results = []
    for log_dir, topics in per_dir.items():
        total, usable = -1, -1
        if log_dir in logs.offline_dirs:
            results.append(
                DirResult(
                    error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                    log_dir=log_dir,
                    topics=[],
                    total_bytes=-1,
                    usable_bytes=-1,
                )
            )
            continue
        if ctx.api_version >= 4:
            total, usable = await trio.to_thread.run_sync(disk_space, log_dir)
        results.append(
            DirResult(
                error_code=ErrorCode.NONE,
                log_dir=log_dir,
                topics=[TopicResult(name=name, partitions=parts) for name, parts in topics.items()],
                total_bytes=total,
                usable_bytes=usable,
            )
        )
    return DescribeLogDirsResponse(error_code=ErrorCode.NONE, results=results)
