"""`kafkacompat dump-log FILE...`: print segment, index and snapshot files, like kafka-dump-log.sh.

Theory of operation: each file is dispatched on its suffix. `.log` files are walked batch by batch with
`os.pread` (a damaged tail is reported, never fatal); `--deep-iteration` decodes the records of each batch
with kafkacompat.wire.records, `--print-data-log` adds keys and values (as UTF-8 text, like Kafka's default
decoder). `.index`/`.timeindex`/`.txnindex` print their entries, `.snapshot` the producer entries.
Output lines use kafka-dump-log's field names so that existing habits and scripts carry over.
A large .log file whose dump goes to a file or a pipe reports its progress on stderr (kafkacompat.progress:
a bar on a terminal, a line every few seconds otherwise; nothing for files read within a second).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from typing import TextIO

from kafkacompat.log.batch_header import read_header
from kafkacompat.log.producer_state import read_snapshot
from kafkacompat.progress import Progress
from kafkacompat.wire.errors import KafkaError
from kafkacompat.wire.records import RecordBatchView, iter_records

HELP = "print the batches, records and index entries of Kafka log segment files"

_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files", nargs="+", metavar="FILE", help=".log, .index, .timeindex, .txnindex or .snapshot files"
    )
    parser.add_argument("--deep-iteration", action="store_true", help="also print every record of each batch")
    parser.add_argument("--print-data-log", action="store_true", help="print keys and values (implies deep)")


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", "replace")


def _base_offset(path: str) -> int:
    stem = os.path.basename(path).split(".", 1)[0]
    return int(stem) if stem.isdigit() else 0


def dump_log_file(
    path: str, out: TextIO, *, deep: bool, data: bool, progress: Progress | None = None
) -> None:
    """Print every batch of a .log file; `progress` (if given) hears of the bytes walked so far."""
    out.write(f"Log starting offset: {_base_offset(path)}\n")
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        if progress is not None:
            progress.total = size
        position = 0
        while position < size:
            if progress is not None:
                progress.update(position)
            header = read_header(fd, position)
            if (
                header is None
                or header.batch_length < 49
                or position + header.size > size
                or header.magic != 2
            ):
                out.write(f"Found {size - position} invalid bytes at the end of {os.path.basename(path)}\n")
                return
            raw = os.pread(fd, header.size, position)
            batch = RecordBatchView(memoryview(raw))
            time_kind = "LogAppendTime" if header.log_append_time else "CreateTime"
            horizon = (
                f"OptionalLong[{batch.delete_horizon_ms}]"
                if batch.has_delete_horizon
                else "OptionalLong.empty"
            )
            out.write(
                f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
                f"count: {header.records_count} "
                f"baseSequence: {header.base_sequence} lastSequence: {batch.last_sequence} "
                f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
                f"partitionLeaderEpoch: {header.partition_leader_epoch} "
                f"isTransactional: {str(header.is_transactional).lower()} "
                f"isControl: {str(header.is_control).lower()} deleteHorizonMs: {horizon} "
                f"position: {position} {time_kind}: {header.max_timestamp} size: {header.size} "
                f"magic: {header.magic} compresscodec: {_CODECS.get(header.compression, 'unknown')} "
                f"crc: {header.crc} isvalid: {str(batch.verify_crc()).lower()}\n"
            )
            if deep or data:
                try:
                    for record in iter_records(batch):
                        sequence = (
                            -1
                            if header.base_sequence < 0
                            else (header.base_sequence + record.offset_delta) % 2**31
                        )
                        line = (
                            f"| offset: {record.offset} {time_kind}: {record.timestamp} "
                            f"keySize: {-1 if record.key is None else len(record.key)} "
                            f"valueSize: {-1 if record.value is None else len(record.value)} "
                            f"sequence: {sequence} headerKeys: [{', '.join(k for k, _ in record.headers)}]"
                        )
                        if data:
                            if record.key is not None:
                                line += f" key: {_text(record.key)}"
                            line += f" payload: {_text(record.value)}"
                        out.write(line + "\n")
                except KafkaError as exc:
                    out.write(f"| records could not be decoded: {exc}\n")
            position += header.size
        if progress is not None:
            progress.update(position)


def dump_index_file(path: str, out: TextIO, *, time_index: bool) -> None:
    base = _base_offset(path)
    entry_size = 12 if time_index else 8
    with open(path, "rb") as f:
        content = f.read()
    usable = len(content) - len(content) % entry_size
    for at in range(0, usable, entry_size):
        if time_index:
            timestamp = int.from_bytes(content[at : at + 8], "big", signed=True)
            relative = int.from_bytes(content[at + 8 : at + 12], "big", signed=True)
            out.write(f"timestamp: {timestamp} offset: {base + relative}\n")
        else:
            relative = int.from_bytes(content[at : at + 4], "big", signed=True)
            position = int.from_bytes(content[at + 4 : at + 8], "big", signed=True)
            out.write(f"offset: {base + relative} position: {position}\n")
    if usable != len(content):
        out.write(f"Found {len(content) - usable} trailing bytes that are not a whole index entry\n")


def dump_txn_index_file(path: str, out: TextIO) -> None:
    with open(path, "rb") as f:
        content = f.read()
    usable = len(content) - len(content) % 34
    for version, pid, first, last, lso in struct.iter_unpack(">hqqqq", content[:usable]):
        out.write(
            f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
            f"lastStableOffset: {lso}\n"
        )
    if usable != len(content):
        out.write(f"Found {len(content) - usable} trailing bytes that are not a whole index entry\n")


def dump_snapshot_file(path: str, out: TextIO) -> None:
    for entry in read_snapshot(path):
        last = entry.batches[-1] if entry.batches else None
        txn = (
            "OptionalLong.empty"
            if entry.current_txn_first_offset < 0
            else f"{entry.current_txn_first_offset}"
        )
        out.write(
            f"producerId: {entry.producer_id} producerEpoch: {entry.epoch} "
            f"coordinatorEpoch: {entry.coordinator_epoch} currentTxnFirstOffset: {txn} "
            f"firstSequence: {last.first_seq if last else -1} lastSequence: {last.last_seq if last else -1} "
            f"lastOffset: {last.last_offset if last else -1} offsetDelta: {last.offset_delta if last else 0} "
            f"timestamp: {last.timestamp if last else -1}\n"
        )


def _progress(path: str, out: TextIO) -> Progress:
    """Progress of one large file on stderr; none when the output itself goes to the terminal."""
    output_on_terminal = bool(getattr(out, "isatty", lambda: False)())
    return Progress(f"dump-log {os.path.basename(path)}", unit="bytes", enabled=not output_on_terminal)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    status = 0
    for path in args.files:
        out.write(f"Dumping {path}\n")
        try:
            if path.endswith(".log"):
                with _progress(path, out) as progress:
                    dump_log_file(
                        path, out, deep=args.deep_iteration, data=args.print_data_log, progress=progress
                    )
            elif path.endswith(".timeindex"):
                dump_index_file(path, out, time_index=True)
            elif path.endswith(".index"):
                dump_index_file(path, out, time_index=False)
            elif path.endswith(".txnindex"):
                dump_txn_index_file(path, out)
            elif path.endswith(".snapshot"):
                dump_snapshot_file(path, out)
            else:
                out.write(f"Ignoring unknown file {path}\n")
                status = 1
        except (OSError, ValueError) as exc:
            out.write(f"Could not read {path}: {exc}\n")
            status = 1
    return status
