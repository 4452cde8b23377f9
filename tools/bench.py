#!/usr/bin/env python3
"""Benchmark kafkacompat side by side with peer brokers (same as `kafkacompat bench`).

    tools/bench.py fetch-peers [--dir /tmp/kafkacompat-peers]   # prints ready-made --peer arguments
    tools/bench.py --quick                                      # smoke run against kafkacompat alone
    tools/bench.py --peer 'tansu=/path/tansu broker --listener-url tcp://127.0.0.1:{port} ...' \
        --json bench.json --plot docs/
    tools/bench.py report --json bench.json --markdown          # re-render a saved run

The logic lives in kafkacompat.bench (importable from an installed package); this file only puts the
source tree on sys.path when run from a checkout. The broker under test and every client worker are
spawned with this interpreter, so when it lacks the project's dependencies (e.g. the shebang found a
system python), the script re-executes itself with the checkout's `.venv` (made by `make test`) or
stops with a one-line explanation instead of failing in every child process.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv"
REQUIRED = ("trio", "confluent_kafka")  # the broker's event loop and the benchmark's clients


def interpreter_plan(missing: Sequence[str], venv_python_exists: bool, running_in_venv: bool) -> str | None:
    """What to do about the interpreter: None to go on, "reexec" to restart with the venv's python,
    or the message to exit with (status 2)."""
    if not missing:
        return None
    if venv_python_exists and not running_in_venv:
        return "reexec"
    return (
        f"tools/bench.py: this python ({sys.executable}) lacks {', '.join(missing)}; run `make test` once "
        f"(it creates {VENV}) or run this script with a python that has kafkacompat's `test` extras"
    )


def _ensure_interpreter() -> None:
    missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
    venv_python = VENV / "bin" / "python"
    # compare prefixes, not executables: the venv's python is usually a symlink to the system's
    running_in_venv = Path(sys.prefix).resolve() == VENV.resolve()
    plan = interpreter_plan(missing, venv_python.exists(), running_in_venv)
    if plan == "reexec":
        os.execv(str(venv_python), [str(venv_python), str(Path(__file__).resolve()), *sys.argv[1:]])
    elif plan is not None:
        print(plan, file=sys.stderr)
        raise SystemExit(2)


if __name__ == "__main__":
    _ensure_interpreter()
    sys.path.insert(0, str(REPO))
    from kafkacompat.bench.cli import main

    raise SystemExit(main())
