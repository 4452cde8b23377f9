"""The fuzzer's command line: `tools/fuzz.py run` and `python -m kafkacompat.fuzzing good-pair`.

Theory of operation: `run` starts a broker process in a temp dir (or uses --bootstrap, --broker-pid and
--broker-log), runs a campaign (kafkacompat.fuzzing.campaign) and prints its JSON summary; it exits 1
when the broker died, logged an unhandled error, gave a bad answer or outgrew its RSS bound. `good-pair`
runs the well-behaved pair alone until its time is up or SIGINT, and prints its summary as one line:
the campaign starts it as a process of its own.
"""

from __future__ import annotations

from pathlib import Path

from kafkacompat.fuzzing.campaign import Campaign, run_campaign
from kafkacompat.fuzzing.latency import ALTERNATE_MARGIN_SECONDS
from kafkacompat.fuzzing.pair import good_pair

__all__ = [
    "HELP",
    "main",
]


HELP = """Live protocol fuzzing of a kafkacompat (or any Kafka) broker on this machine.

  run        start a broker in a temp dir (or use --bootstrap/--broker-pid/--broker-log), run the
             well-behaved pair alone, then beside the fuzzer; print a JSON summary
  good-pair  the well-behaved producer/consumer pair alone (used by `run`, in its own process)
"""


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import signal
    import sys
    import tempfile

    parser = argparse.ArgumentParser(prog="tools/fuzz.py", description=HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run")
    run.add_argument("--bootstrap", help="an already running broker on 127.0.0.1 (default: start one)")
    run.add_argument("--broker-pid", type=int, help="pid of that broker, for RSS and liveness")
    run.add_argument("--broker-log", help="its log file, scanned for tracebacks")
    run.add_argument("--frames", type=int, default=1_000_000)
    run.add_argument("--seconds", type=float, default=3600)
    run.add_argument(
        "--connections", type=int, default=64, help="concurrent connections (the rate grows with them)"
    )
    run.add_argument("--rate", type=float, help="frames per second (default: as fast as possible)")
    run.add_argument("--quiet-seconds", type=float, default=30)
    run.add_argument("--pair-rate", type=float, default=100, help="records per second of the good pair")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--json", help="also write the summary here")
    run.add_argument(
        "--data-dir", help="the started broker's data dir, kept afterwards (default: a temp dir)"
    )
    run.add_argument("--apis", help="comma-separated api keys to fuzz (default: every served api)")
    run.add_argument(
        "--fuzzer-nice",
        type=int,
        default=0,
        help="run the fuzzer itself at this niceness (the broker and the pair keep theirs): on a small"
        " shared machine its own CPU use is not broker unfairness",
    )
    run.add_argument(
        "--fuzzer-cpus",
        help="comma-separated CPUs the fuzzer itself is confined to (the broker and the pair may use"
        " any): as --fuzzer-nice, so that its own CPU use weighs on those CPUs only",
    )
    run.add_argument(
        "--alternate",
        type=float,
        metavar="SECONDS",
        help="fuzz and pause in turns, blocks of SECONDS, beside the same pair (and the control pair):"
        " the summary's `alternating` compares the pair's p99 in the quiet blocks with the fuzzed ones,"
        " both taken in the same minutes of the machine",
    )
    run.add_argument(
        "--fuzzer-idle",
        action="store_true",
        help="run the fuzzer itself under SCHED_IDLE (the broker and the pair keep theirs): it takes only"
        " CPU time nothing else wants, as a hostile client on another machine would",
    )
    run.add_argument(
        "--control-pair",
        action="store_true",
        help="also start a second, idle broker and a second pair against it (quiet alone after the"
        " first, then beside it and the fuzzer): its p99 ratio is what the fuzzer's load on the machine"
        " costs any client",
    )
    run.add_argument(
        "--loop-probe",
        type=float,
        metavar="SECONDS",
        help="start the brokers with their loop probe on (loop.probe.window.seconds, a window of this many"
        " seconds): the summary then has each broker's loop turns and socket wake-up delays per phase",
    )
    pair = commands.add_parser("good-pair")
    pair.add_argument("--bootstrap", required=True)
    pair.add_argument("--topic", required=True)
    pair.add_argument("--seconds", type=float, default=30)
    pair.add_argument("--rate", type=float, default=100)
    args = parser.parse_args(argv)

    if args.command == "run" and args.loop_probe is not None and args.loop_probe <= 0:
        parser.error("--loop-probe must be a window of more than 0 seconds")
    if args.command == "run" and args.alternate is not None:
        if args.alternate <= ALTERNATE_MARGIN_SECONDS:
            parser.error(f"--alternate must exceed {ALTERNATE_MARGIN_SECONDS} s: each block's first"
                         f" {ALTERNATE_MARGIN_SECONDS} s is left out of the figures")  # fmt: skip
        if args.loop_probe and args.alternate - ALTERNATE_MARGIN_SECONDS < 2 * args.loop_probe:
            print(
                f"warning: with --loop-probe {args.loop_probe:g} a block of {args.alternate:g} s may hold"
                " no whole probe window (those across two blocks count for neither)",
                file=sys.stderr,
            )

    if args.command == "good-pair":
        stopping: list[bool] = []
        signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
        print(
            json.dumps(good_pair(args.bootstrap, args.topic, args.seconds, args.rate, lambda: bool(stopping)))
        )
        return 0

    campaign = Campaign(
        bootstrap=args.bootstrap or "",
        broker_pid=args.broker_pid,
        broker_log=args.broker_log,
        frames=args.frames,
        seconds=args.seconds,
        connections=args.connections,
        rate=args.rate,
        quiet_seconds=args.quiet_seconds,
        pair_rate=args.pair_rate,
        seed=args.seed,
        progress=True,
        apis=[int(key) for key in args.apis.split(",")] if args.apis else None,
        fuzzer_nice=args.fuzzer_nice,
        fuzzer_cpus=[int(cpu) for cpu in args.fuzzer_cpus.split(",")] if args.fuzzer_cpus else None,
        fuzzer_idle=args.fuzzer_idle,
        alternate=args.alternate,
    )
    broker = control_broker = None
    broker_overrides = ["group.initial.rebalance.delay.ms=0"]
    if args.loop_probe:
        broker_overrides.append(f"loop.probe.window.seconds={args.loop_probe}")  # both brokers started below
    with tempfile.TemporaryDirectory(prefix="kafkacompat-fuzz-") as tmp:
        if args.control_pair:
            from kafkacompat.local_brokers import BrokerProcess

            control_broker = BrokerProcess(Path(tmp) / "control", broker_overrides).start()
            campaign.control_bootstrap = control_broker.bootstrap
            campaign.control_log = str(control_broker.log_path)
        if not args.bootstrap:
            from kafkacompat.local_brokers import BrokerProcess

            data_dir = Path(args.data_dir) if args.data_dir else Path(tmp) / "data"
            broker = BrokerProcess(data_dir, broker_overrides).start()
            assert broker.process is not None
            campaign.bootstrap = broker.bootstrap
            campaign.broker_pid = broker.process.pid
            campaign.broker_log = str(broker.log_path)
            campaign.data_dir_is_log_dir = True
        try:
            result = run_campaign(campaign)
        finally:
            if broker is not None:
                result_exit = broker.stop()
                print(f"broker exit status {result_exit}", file=sys.stderr)
            if control_broker is not None:
                control_broker.stop()
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    ok = result["broker_alive"] and not result.get("log_problems") and result["fuzz"]["bad_answers"] == 0
    ok = ok and result.get("rss_bound", {}).get("within", True)
    return 0 if ok else 1
