"""Live protocol fuzzing of a broker on this machine: `tools/fuzz.py run --frames N` (see --help).

The engine, seeds and mutations live in kafkacompat/fuzzing/; docs/RELIABILITY.md has the figures.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafkacompat.fuzzing.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
