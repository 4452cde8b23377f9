"""Command line of the benchmark: `kafkacompat bench [run|fetch-peers|report] ...` and tools/bench.py.

Theory of operation: one argparse parser serves both entry points. The optional first word picks the
action: `run` (the default) starts kafkacompat (or uses `--bootstrap`) plus every `--peer`, runs the
workloads and prints the side-by-side table and the goals; `fetch-peers` downloads the peer brokers
(see `peers.py`) and prints the `--peer` arguments; `report` rebuilds the table, the goals and
(with --plot) the charts from a saved `--json` file. `settings_from_args()` is the pure part that turns
options into `runner.Settings`, so it is unit-tested without starting anything.

A run checks first that the client library its workers use (confluent-kafka) imports, and stops with an
install hint if not, before it starts a broker. While it runs, SIGTERM and SIGHUP unwind it as Ctrl-C
does (`_signals_unwind`): the runner's `finally` stops every broker it started and removes its temp dir.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kafkacompat.bench.brokers import BrokerSpec, check_loopback, kafkacompat_spec, parse_peer
from kafkacompat.bench.runner import Settings

__all__ = ["HELP", "add_arguments", "build_parser", "main", "run", "settings_from_args", "specs_from_args"]

HELP = "benchmark kafkacompat (produce/consume throughput, latency, group join, memory) against peers"

WORKLOADS = ("startup", "produce", "consume", "e2e", "groups", "big")
CLIENT_WORKLOADS = ("produce", "consume", "e2e", "groups", "big")  # run confluent-kafka in worker processes
CLIENT_HINT = (
    "the benchmark's clients are confluent-kafka (librdkafka), which is not installed here: "
    "`pip install confluent-kafka` into this environment (for `make run`'s: "
    "`.venv-run/bin/pip install confluent-kafka`), or run it from `make test`'s `.venv`"
)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        default="run",
        choices=("run", "fetch-peers", "report"),
        help="run the benchmark (default), download the peer brokers, or re-render a saved --json file",
    )
    parser.add_argument("--bootstrap", metavar="HOST:PORT", help="use a running broker (loopback only)")
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="[NAME=]COMMAND",
        help="also benchmark a broker started by COMMAND ({port} and {dir} are filled in); repeatable",
    )
    parser.add_argument(
        "--no-kafkacompat",
        action="store_true",
        help="benchmark only the peers (and --bootstrap), not a kafkacompat started here",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker config for the kafkacompat started here (repeatable)",
    )
    parser.add_argument(
        "--messages",
        type=_positive_int,
        help="1 KiB records per produce/consume run (500000); smaller records: as many bytes",
    )
    parser.add_argument("--sizes", metavar="B[,B...]", help="record sizes in bytes (1024,100)")
    parser.add_argument("--acks", metavar="A[,A...]", help="producer acks settings (1,all)")
    parser.add_argument(
        "--replication-factor",
        type=_positive_int,
        help="replication factor of the benchmark's topics (1; e.g. 3 against a cluster-mode --bootstrap)",
    )
    parser.add_argument(
        "--runs", type=_positive_int, help="runs per throughput figure (3; at least 3 advised)"
    )
    parser.add_argument("--e2e-seconds", type=_positive_float, help="length of the latency run (10)")
    parser.add_argument("--e2e-rate", type=_positive_int, help="records/s in the latency run (2000)")
    parser.add_argument(
        "--big-partition-mib",
        type=int,
        metavar="MIB",
        help="also load a partition of MIB MiB and read it from 0 with a default consumer, and with one "
        "whose only change is fetch.queue.backoff.ms=1 (0 = skip)",
    )
    parser.add_argument(
        "--only",
        metavar="W[,W...]",
        help=f"run only these workloads ({', '.join(WORKLOADS)})",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a short smoke run (5,000 records, 2 s latency run)"
    )
    parser.add_argument("--timeout", type=_positive_float, help="seconds a single client may take (180)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON (report: read them)")
    parser.add_argument("--plot", metavar="DIR", nargs="?", const=".", help="write PNG charts into DIR")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    parser.add_argument(
        "--no-pause",
        action="store_true",
        help="keep the brokers not being measured running (by default they are SIGSTOPped meanwhile)",
    )
    parser.add_argument(
        "--dir", default=None, help="fetch-peers: where to put the peers (/tmp/kafkacompat-peers)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tools/bench.py", description=HELP)
    add_arguments(parser)
    return parser


def settings_from_args(args: argparse.Namespace) -> Settings:
    settings = Settings.quick() if args.quick else Settings()
    if args.messages is not None:
        settings.messages = args.messages
    if args.runs is not None:
        settings.runs = args.runs
    if args.e2e_seconds is not None:
        settings.e2e_seconds = args.e2e_seconds
    if args.e2e_rate is not None:
        settings.e2e_rate = args.e2e_rate
    if args.timeout is not None:
        settings.timeout = args.timeout
    if getattr(args, "replication_factor", None) is not None:
        settings.replication_factor = args.replication_factor
    if getattr(args, "no_pause", False):
        settings.pause_others = False
    if args.big_partition_mib is not None:
        if args.big_partition_mib < 0:
            raise ValueError("--big-partition-mib must not be negative")
        settings.big_partition_mib = args.big_partition_mib
    if args.sizes:
        try:
            settings.sizes = tuple(int(x) for x in args.sizes.split(",") if x.strip())
        except ValueError:
            raise ValueError(f"--sizes {args.sizes!r}: comma-separated byte counts expected") from None
        if not settings.sizes or min(settings.sizes) < 16:
            raise ValueError("--sizes: at least one size, each of 16 bytes or more")
    if args.acks:
        settings.acks = tuple(a.strip() for a in args.acks.split(",") if a.strip())
        if not settings.acks or any(a not in ("0", "1", "all", "-1") for a in settings.acks):
            raise ValueError("--acks: pick from 0, 1, all")
    if args.only:
        chosen = tuple(w.strip() for w in args.only.split(",") if w.strip())
        unknown = [w for w in chosen if w not in WORKLOADS]
        if unknown or not chosen:
            raise ValueError(
                f"--only: unknown workload(s) {', '.join(unknown) or '(none)'}; pick from {WORKLOADS}"
            )
        settings.workloads = chosen
    return settings


def specs_from_args(args: argparse.Namespace) -> list[BrokerSpec]:
    specs: list[BrokerSpec] = []
    if args.bootstrap:
        check_loopback(args.bootstrap)
        specs.append(
            BrokerSpec("kafkacompat" if not args.no_kafkacompat else "bootstrap", bootstrap=args.bootstrap)
        )
    elif not args.no_kafkacompat:
        specs.append(kafkacompat_spec(args.override))
    specs += [parse_peer(text) for text in args.peer]
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"two brokers named {', '.join(duplicates)}: name peers as NAME=COMMAND")
    if not specs:
        raise ValueError("nothing to benchmark")
    return specs


def _print_report(results: dict[str, Any], args: argparse.Namespace) -> None:
    from kafkacompat.bench.report import failures, plot, render_goals, render_table

    print(render_table(results, markdown=args.markdown))
    print()
    failed = failures(results)
    if failed:
        print("Failures:")
        for line in failed:
            print(f"- {line}" if args.markdown else f"  {line}")
        print()
    print(render_goals(results, markdown=args.markdown))
    if args.plot is not None:
        try:
            paths = plot(results, args.plot)
        except ImportError:
            print("--plot: matplotlib is not installed; charts skipped", file=sys.stderr)
        else:
            for path in paths:
                print(f"chart: {path}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if args.action == "fetch-peers":
        from kafkacompat.bench.peers import DEFAULT_DIR, describe, fetch_peers

        directory = args.dir or DEFAULT_DIR
        try:
            fetch_peers(directory)
        except (ValueError, OSError) as exc:
            print(f"fetch-peers: {exc}", file=sys.stderr)
            return 2
        print(describe(directory))
        return 0
    if args.action == "report":
        if not args.json:
            print("report: --json FILE is required", file=sys.stderr)
            return 2
        _print_report(json.loads(Path(args.json).read_text()), args)
        return 0
    try:
        settings = settings_from_args(args)
        specs = specs_from_args(args)
    except ValueError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    missing = _missing_client(settings)
    if missing:
        print(f"bench: {missing}", file=sys.stderr)
        return 2
    from kafkacompat.bench.runner import Progress, count_steps, run_benchmark

    attached = sum(1 for s in specs if s.command is None)
    progress = Progress(count_steps(settings, len(specs), attached), enabled=not args.no_progress)
    try:
        with _signals_unwind():
            results = run_benchmark(settings, specs, progress)
    except _Stopped as stopped:
        print(f"bench: stopped by {stopped.name}; brokers stopped, files removed", file=sys.stderr)
        return 128 + stopped.signum
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
        print(f"results: {args.json}", file=sys.stderr)
    _print_report(results, args)
    return 0


def _missing_client(settings: Settings) -> str | None:
    """The install hint when a chosen workload needs confluent-kafka and it does not import."""
    if not any(w in CLIENT_WORKLOADS for w in settings.workloads):
        return None
    try:
        import confluent_kafka  # noqa: F401
    except ImportError as exc:
        return f"{CLIENT_HINT} ({exc})"
    return None


class _Stopped(BaseException):
    """Raised in the main thread by SIGTERM/SIGHUP during a run, so that every `finally` runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """SIGTERM/SIGHUP raise `_Stopped` once; repeats are ignored, so that the cleanup they started (brokers
    stopping, temp dir removal) is not cut short. The previous handlers come back afterwards."""
    signals = (signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.getsignal(signum) for signum in signals}

    def stop(signum: int, frame: object) -> None:
        for other in signals:
            signal.signal(other, signal.SIG_IGN)
        raise _Stopped(signum)

    for signum in signals:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    return run(parser.parse_args(argv))
