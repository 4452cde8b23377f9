"""Micro-benchmark of the per-record validator (kafkacompat/log/record_validator.py).

Validates pre-built batches of 100-byte and 1 KiB records, uncompressed and with each codec, and prints
throughput in MB of record bytes (uncompressed) per CPU second, records per CPU second and CPU
microseconds per MB. Compressed rows include the inflate, which the validator pays too; the `walk only`
column times the record walk over the already-inflated bytes, so the two columns show where the time
goes. Timing is process CPU time (time.process_time), best of `--repeat` rounds, so another process on
the machine moves it little.

    .venv/bin/python tools/bench_validator.py [--batches 50] [--records-per-batch 0] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time

from kafkacompat.log.record_validator import TimestampCheck, _walk, validate_batch_records
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
    columns = ("records/s", 11), ("MB/s", 8), ("us/MB", 8), ("walk MB/s", 10), ("walk us/MB", 10)
    print(f"{'record':>7} {'codec':>6} " + " ".join(f"{title:>{width}}" for title, width in columns))
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

            def validate(batches: list[RecordBatchView] = batches) -> None:
                for batch in batches:
                    validate_batch_records(
                        batch,
                        compacted=False,
                        timestamp_check=check,
                        max_inflated_bytes=BOUND,
                        from_client=True,
                    )

            def walk(
                inflated: list[bytes | bytearray] = inflated,
                base: int = batches[0].base_timestamp,
                per_batch: int = per_batch,
            ) -> None:
                low, high = check.bounds()
                for data in inflated:
                    _walk(
                        data,
                        count=per_batch,
                        base_timestamp=base,
                        last_offset_delta=per_batch - 1,
                        from_client=True,
                        compacted=False,
                        low=low,
                        high=high,
                        check=check,
                    )

            seconds = _best(args.repeat, validate)
            walk_seconds = _best(args.repeat, walk)
            print(
                f"{value_size:>6}B {name:>6} {records / seconds:>11,.0f} {megabytes / seconds:>8.1f} "
                f"{seconds / megabytes * 1e6:>8.0f} {megabytes / walk_seconds:>10.1f} "
                f"{walk_seconds / megabytes * 1e6:>10.0f}"
            )


if __name__ == "__main__":
    main()
