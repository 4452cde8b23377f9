"""`kafkacompat cluster up`: a local ZooKeeper and N brokers in the foreground, for development.

Theory of operation: `LocalCluster` (kafkacompat.local_brokers) starts a ZooKeeper server from the Debian
`zookeeper` package's jars and N `kafkacompat serve` child processes with `broker.id` 1..N and
`zookeeper.connect` pointing at it, each with its data under `--dir` (a temp dir by default, removed at
the end unless given). Once all are up it prints the bootstrap list and waits; Ctrl-C (or SIGTERM) stops
the brokers in order, then ZooKeeper. Broker logs are in `<dir>/broker-N/broker.log`.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

HELP = "run a local cluster (ZooKeeper + N brokers) in the foreground: cluster up --brokers 3"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up"], help="up: start the cluster and wait for Ctrl-C")
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    parser.add_argument("--dir", metavar="DIR", help="data dir (default: a temp dir removed at exit)")
    parser.add_argument(
        "--override",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a broker config value for every broker (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    from kafkacompat.local_brokers import LocalCluster
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable

    if args.brokers < 1:
        print("kafkacompat cluster: --brokers must be at least 1", file=sys.stderr)
        return 2
    owned = args.dir is None
    data_dir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kafkacompat-cluster-"))
    overrides = [
        "zookeeper.session.timeout.ms=6000",
        "controlled.shutdown.retry.backoff.ms=500",
        # as Kafka's, __transaction_state is refused with fewer live brokers than its replication factor
        # (3): a smaller development cluster gets one that fits
        f"transaction.state.log.replication.factor={min(args.brokers, 3)}",
        f"transaction.state.log.min.isr={min(args.brokers, 2)}",
        *args.override,
    ]
    try:
        cluster = LocalCluster(data_dir, args.brokers, overrides)
    except ZooKeeperUnavailable as exc:
        print(f"kafkacompat cluster: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        cluster.start()
        print(f"zookeeper: {cluster.zookeeper.connect_string}{cluster.chroot}", flush=True)
        print(f"data: {data_dir}", flush=True)
        # a client told the bootstrap finds every broker and a controller (an admin client that asked
        # too soon could get controller -1 and not ask again for a long while)
        cluster.wait_until_ready()
        print(f"bootstrap: {cluster.bootstrap}", flush=True)
        while not stop.wait(0.5):
            for broker_id, broker in cluster.brokers.items():
                if broker.process is not None and broker.process.poll() is not None:
                    print(f"broker {broker_id} exited ({broker.process.returncode}); see {broker.log_path}")
                    broker.process = None
        print("stopping", flush=True)
        return 0
    except RuntimeError as exc:
        print(f"kafkacompat cluster: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
        if owned:
            shutil.rmtree(data_dir, ignore_errors=True)
