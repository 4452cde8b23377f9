"""Child process of the crash test: open the log (recovering it), then append until killed.

Prints `START <log end offset>` once the log is open, then `<base> <last> <sha1 of the stored batch>`
after each append has returned. The parent SIGKILLs it at a random moment.
"""

from __future__ import annotations

import hashlib
import sys

from kafkacompat.log import LogConfig, LogManager
from kafkacompat.wire.records import build_batch


def main() -> None:
    log_dir, seed = sys.argv[1], int(sys.argv[2])
    config = LogConfig.from_properties({"segment.bytes": "65536", "index.interval.bytes": "1024"})
    manager = LogManager([log_dir], config, 1, "crash-test", sync=False)
    manager.startup()
    pl = manager.create_log("crash", 0)
    out = sys.stdout
    out.write(f"START {pl.log_end_offset}\n")
    out.flush()
    i = 0
    while True:
        count = 1 + (seed + i) % 7
        records = [
            (None, b"%d-%d-" % (seed, i) + b"x" * ((seed * 31 + i * 17) % 900), (), 1_700_000_000_000 + i)
            for _ in range(count)
        ]
        batch = bytearray(build_batch(records))
        result = pl.append_as_leader(batch, 0, 1_700_000_000_000 + i)
        out.write(f"{result.base_offset} {result.last_offset} {hashlib.sha1(batch).hexdigest()}\n")
        out.flush()
        i += 1


if __name__ == "__main__":
    main()
