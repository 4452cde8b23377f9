"""Micro-benchmark of the per-record validator (kafkacompat/log/record_validator.py), both record walks.

Validates pre-built batches of 100-byte and 1 KiB records, uncompressed and with each codec, once with
the pure-Python record walk (`record_walk.python_walk`, the reference) and once with the compiled one
(`record_walk.compiled_walk`, kafkacompat/log/_record_walk.c; skipped, and said so, when it was not
built). For each walk it prints records per CPU second and CPU microseconds per MB of record bytes
(uncompressed) for the walk alone, over the already-inflated records, and for the whole
`validate_batch_records`, whose compressed rows include the inflate the validator pays too; the two
show where the time goes. Timing is process CPU time (time.process_time), best of `--repeat` rounds, so
another process on the machine moves it little.

    .venv/bin/python tools/bench_validator.py [--batches 50] [--records-per-batch 0] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from kafkacompat.log import record_walk
from kafkacompat.log.record_validator import TimestampCheck, validate_batch_records
from kafkacompat.wire import compression
from kafkacompat.wire.records import CompressionCodec, RecordBatchView, RecordInput, build_batch

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BOUND = 64 * 1024 * 1024


def _batches(value_size: int, per_batch: int, count: int, codec: int, now: int) -> list[RecordBatchView]:
    # half random, half repeated: compressible like typical payloads, not trivially so
    def value(i: int) -> bytes:
        half = value_size // 2
        return os.urandom(half) + bytes([i & 0xFF]) * (value_size - half)

    out = []
    for b in range(count):
        records = [
            RecordInput(b"key-%d" % i, value(i), [("trace", b"abc")] if i % 4 == 0 else (), now + i)
            for i in range(per_batch)
        ]
        out.append(RecordBatchView(bytearray(build_batch(records, compression=codec, base_offset=0))))
        del b
    return out


def _best(rounds: int, action: object) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        action()  # type: ignore[operator]
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--records-per-batch", type=int, default=0, help="0: a ~1 MiB batch's worth")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    now = int(time.time() * 1000)
    check = TimestampCheck(now, 3_600_000, 3_600_000)
    low, high = check.bounds()
    walks = {"py": record_walk.python_walk}
    if record_walk.COMPILED:
        walks["C"] = record_walk.compiled_walk
    print(record_walk.walk_in_use())
    titles = [f"{name} {what}" for what in ("walk rec/s",) for name in walks]
    titles += [
        f"{name} {what}" for what in ("walk us/MB", "validate rec/s", "validate us/MB") for name in walks
    ]
    print(f"{'record':>7} {'codec':>6} " + " ".join(f"{title:>{max(len(title), 11)}}" for title in titles))
    for value_size in (100, 1024):
        per_batch = args.records_per_batch or max(1, (1024 * 1024) // (value_size + 20))
        for name, codec in CODECS.items():
            batches = _batches(value_size, per_batch, args.batches, codec, now)
            inflated = [
                bytes(b.records_data)
                if codec == CompressionCodec.NONE
                else compression.decompress(codec, b.records_data, BOUND)
                for b in batches
            ]
            megabytes = sum(len(d) for d in inflated) / 1e6
            records = per_batch * len(batches)
            walk_seconds: dict[str, float] = {}
            validate_seconds: dict[str, float] = {}
            for walk_name, walk in walks.items():

                def walk_only(
                    walk: Callable[..., object] = walk,
                    inflated: list[bytes | bytearray] = inflated,
                    base: int = batches[0].base_timestamp,
                    per_batch: int = per_batch,
                    plain: bool = codec == CompressionCodec.NONE,
                ) -> None:
                    for data in inflated:
                        walk(
                            data,
                            count=per_batch,
                            base_timestamp=base,
                            last_offset_delta=per_batch - 1,
                            from_client=True,
                            compacted=False,
                            low=low,
                            high=high,
                            check=check,
                            plain=plain,
                        )

                def validate(batches: list[RecordBatchView] = batches) -> None:
                    for batch in batches:
                        validate_batch_records(
                            batch,
                            compacted=False,
                            timestamp_check=check,
                            max_inflated_bytes=BOUND,
                            from_client=True,
                        )

                walk_seconds[walk_name] = _best(args.repeat, walk_only)
                saved, record_walk.walk = record_walk.walk, walk
                try:
                    validate_seconds[walk_name] = _best(args.repeat, validate)
                finally:
                    record_walk.walk = saved
            cells = [f"{records / walk_seconds[w]:,.0f}" for w in walks]
            cells += [f"{walk_seconds[w] / megabytes * 1e6:,.0f}" for w in walks]
            cells += [f"{records / validate_seconds[w]:,.0f}" for w in walks]
            cells += [f"{validate_seconds[w] / megabytes * 1e6:,.0f}" for w in walks]
            print(
                f"{value_size:>6}B {name:>6} "
                + " ".join(
                    f"{cell:>{max(len(title), 11)}}" for cell, title in zip(cells, titles, strict=True)
                )
            )


if __name__ == "__main__":
    main()
