"""Benchmark of the log layer: append and read throughput beside `dd` on the same disk in the same run.

Usage: python tools/bench_log.py [--dir DIR] [--total-mb 1024] [--repeat 5] [--fsync]

Theory of operation: for each batch size (1 MiB and 16 KiB) one v2 batch is built once and appended
again and again through `PartitionLog.append_as_leader` (full validation, CRC check, offset patching,
pwrite, index updates, rolls at 1 GiB): the timed work is exactly what a Produce request costs the log.
`dd if=/dev/zero bs=<size>` then writes the same number of bytes to the same directory, so the ratio
compares our append path with the plain write path of the same disk and page cache. Without `--fsync`
both stop at the page cache (Kafka's default flush policy); with it both end with one fsync
(`flush()` / `conv=fsync`). Reads walk the whole log with `PartitionLog.read(max_bytes=1 MiB)` and move
the bytes with `os.sendfile` to /dev/null (the zero-copy path the broker uses) and with `pread`.
Every write measurement starts after an (untimed) `sync`, so no run pays for the previous run's
writeback; on a shared VM runs are still noisy (only ever slower), hence the best of several runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kafkacompat.log import LogConfig, PartitionLog, ReadResult
from kafkacompat.log.batch_header import read_header
from kafkacompat.wire.records import build_batch

MIB = 1024 * 1024


def make_batch(size: int) -> bytearray:
    """A batch of about `size` bytes made of 1 KiB records (the payload is opaque to the log anyway)."""
    record_value = os.urandom(1000)
    count = max(1, size // 1024)
    batch = build_batch([(None, record_value, (), 1_700_000_000_000)] * count)
    return bytearray(batch)


def bench_append(
    directory: str, batch_size: int, total_bytes: int, fsync: bool
) -> tuple[float, PartitionLog]:
    pl = PartitionLog(
        os.path.join(directory, f"bench-{batch_size}"), "bench", batch_size, LogConfig(), sync=False
    )
    batch = make_batch(batch_size)
    appends = max(1, total_bytes // len(batch))
    now = 1_700_000_000_000
    os.sync()  # start without dirty pages of the previous run (untimed)
    started = time.perf_counter()
    for _ in range(appends):
        batch[0:8] = b"\0" * 8  # a fresh client batch has base offset 0; the append patched it in place
        pl.append_as_leader(batch, 0, now)
    if fsync:
        pl.flush()
    elapsed = time.perf_counter() - started
    return appends * len(batch) / elapsed / MIB, pl


def bench_dd(directory: str, block_size: int, total_bytes: int, fsync: bool) -> float:
    target = os.path.join(directory, "dd.bin")
    count = max(1, total_bytes // block_size)
    command = ["dd", "if=/dev/zero", f"of={target}", f"bs={block_size}", f"count={count}"]
    if fsync:
        command.append("conv=fsync")
    os.sync()
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - started
    os.unlink(target)
    return count * block_size / elapsed / MIB


def bench_read(pl: PartitionLog, mode: str) -> float:
    sink = os.open(os.devnull, os.O_WRONLY)
    offset = pl.log_start_offset
    moved = 0
    started = time.perf_counter()
    try:
        while offset < pl.log_end_offset:
            result = pl.read(offset, MIB)
            for piece in result.slices:
                if mode == "sendfile":
                    sent = 0
                    while sent < piece.size:
                        n = os.sendfile(sink, piece.fd, piece.position + sent, piece.size - sent)
                        if n == 0:
                            break
                        sent += n
                    moved += sent
                else:
                    moved += len(piece.read_bytes())
            offset = _next_offset_after(result)  # reads return whole batches
    finally:
        os.close(sink)
    elapsed = time.perf_counter() - started
    return moved / elapsed / MIB


def _next_offset_after(result: ReadResult) -> int:

    piece = result.slices[-1]
    position = piece.position
    end = piece.position + piece.size
    next_offset = result.first_offset
    while position < end:
        header = read_header(piece.fd, position)
        assert header is not None
        next_offset = header.next_offset
        position += header.size
    return next_offset


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--total-mb", type=int, default=1024, help="bytes to write per measurement, in MiB")
    parser.add_argument("--fsync", action="store_true", help="end every write measurement with one fsync")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (the best is shown)")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="bench-log-", dir=args.dir)
    total = args.total_mb * MIB
    try:
        print(f"directory {base}, {args.total_mb} MiB per run, best of {args.repeat}, fsync: {args.fsync}")
        print(
            f"{'batch':>8} {'append MB/s':>12} {'dd MB/s':>10} {'ratio':>6} "
            f"{'read sendfile':>14} {'read pread':>11}"
        )
        for batch_size in (MIB, 16 * 1024):
            appends, dds, sendfiles, preads = [], [], [], []
            for rep in range(args.repeat):
                # alternate the order so that neither side always inherits the other's dirty pages
                if rep % 2 == 0:
                    dds.append(bench_dd(base, batch_size, total, args.fsync))
                append_rate, pl = bench_append(base, batch_size, total, args.fsync)
                appends.append(append_rate)
                if rep % 2 == 1:
                    dds.append(bench_dd(base, batch_size, total, args.fsync))
                sendfiles.append(bench_read(pl, "sendfile"))
                preads.append(bench_read(pl, "pread"))
                pl.close(clean=False)
                shutil.rmtree(pl.directory)
            # best of the runs: on a shared VM the noise only ever slows a run down
            append_rate, dd_rate = max(appends), max(dds)
            label = "1 MiB" if batch_size == MIB else "16 KiB"
            print(
                f"{label:>8} {append_rate:12.0f} {dd_rate:10.0f} {append_rate / dd_rate:6.2f} "
                f"{max(sendfiles):14.0f} {max(preads):11.0f}"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
