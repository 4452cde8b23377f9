#!/usr/bin/env python3
"""Benchmark kafkacompat side by side with peer brokers (same as `kafkacompat bench`).

    tools/bench.py fetch-peers [--dir /tmp/kafkacompat-peers]   # prints ready-made --peer arguments
    tools/bench.py --quick                                      # smoke run against kafkacompat alone
    tools/bench.py --peer 'tansu=/path/tansu broker --listener-url tcp://127.0.0.1:{port} ...' \
        --json bench.json --plot docs/
    tools/bench.py report --json bench.json --markdown          # re-render a saved run

The logic lives in kafkacompat.bench (importable from an installed package); this file only puts the
source tree on sys.path when run from a checkout.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kafkacompat.bench.cli import main

    raise SystemExit(main())
