"""`kafkacompat bench`: the benchmark suite (see kafkacompat.bench); tools/bench.py is the same command."""

from __future__ import annotations

import argparse

from kafkacompat.bench.cli import HELP, add_arguments

__all__ = ["HELP", "add_arguments", "run"]


def run(args: argparse.Namespace) -> int:
    from kafkacompat.bench.cli import run as run_bench

    return run_bench(args)
