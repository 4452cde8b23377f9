"""`kafkacompat cluster up|restart`: a local ZooKeeper and N brokers in the foreground, for development.

Theory of operation: `cluster up` has `LocalCluster` (kafkacompat.local_brokers) start a ZooKeeper server
from the Debian `zookeeper` package's jars and N `kafkacompat serve` child processes with `broker.id`
1..N and `zookeeper.connect` pointing at it, each with its data under `--dir` (a temp dir by default,
removed at the end unless given). Ports are free ones picked at random, or with `--base-port P` broker N
listens on P + N - 1 and ZooKeeper on P + N_brokers. Once all are up it prints each broker's address and
log file (`<dir>/broker-N/broker.log`), the command that restarts one, and the bootstrap list, and waits;
Ctrl-C (or SIGTERM) stops the brokers, then ZooKeeper.

The brokers are children of the `cluster up` process, so that process restarts them:
`kafkacompat cluster restart N --dir DIR` asks it to, through files in DIR. `cluster up` writes its pid
to `DIR/cluster-up.pid`; `restart` writes `DIR/restart-broker-N`, which `cluster up` (looking every half
second) answers by stopping broker N (orderly, SIGTERM) if it runs and starting it again on the same
port and data, then writing `DIR/restart-broker-N.result` ("ok" or the error), which `restart` prints
and removes. A broker that exits on its own is reported with its log and the same restart command.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HELP = "run a local cluster (ZooKeeper + N brokers) in the foreground: cluster up --brokers 3"

PID_FILE = "cluster-up.pid"
#: how long `restart` waits for `cluster up` to restart a broker (its orderly stop, then its start)
RESTART_WAIT_SECONDS = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=["up", "restart"],
        help="up: start the cluster and wait for Ctrl-C; restart N: restart broker N of a running `up`",
    )
    parser.add_argument("broker", nargs="?", type=int, metavar="N", help="restart: the broker id")
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    parser.add_argument(
        "--dir", metavar="DIR", help="data dir (up: default a temp dir removed at exit; restart: required)"
    )
    parser.add_argument(
        "--base-port",
        type=int,
        metavar="PORT",
        help="broker N listens on PORT + N - 1, ZooKeeper on PORT + brokers (default: free ports)",
    )
    parser.add_argument(
        "--override",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a broker config value for every broker (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    if args.action == "restart":
        return restart(args)
    if args.broker is not None:
        print("kafkacompat cluster: up takes no broker id (--brokers sets how many)", file=sys.stderr)
        return 2
    return up(args)


def restart_request(data_dir: Path, broker_id: int) -> Path:
    return data_dir / f"restart-broker-{broker_id}"


def restart_command(data_dir: Path, broker_id: int) -> str:
    return f"kafkacompat cluster restart {broker_id} --dir {shlex.quote(str(data_dir))}"


def up(args: argparse.Namespace) -> int:
    from kafkacompat.local_brokers import LocalCluster
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable

    if args.brokers < 1:
        print("kafkacompat cluster: --brokers must be at least 1", file=sys.stderr)
        return 2
    if args.base_port is not None and not 0 < args.base_port <= 65535 - args.brokers:
        print(
            f"kafkacompat cluster: --base-port must leave room for {args.brokers + 1} ports", file=sys.stderr
        )
        return 2
    owned = args.dir is None
    data_dir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kafkacompat-cluster-"))
    data_dir = data_dir.absolute()
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
        cluster = LocalCluster(data_dir, args.brokers, overrides, base_port=args.base_port)
    except ZooKeeperUnavailable as exc:
        print(f"kafkacompat cluster: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    pid_file = data_dir / PID_FILE
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{os.getpid()}\n")
        cluster.start()
        print(f"zookeeper: {cluster.zookeeper.connect_string}{cluster.chroot}", flush=True)
        print(f"data: {data_dir}", flush=True)
        for broker_id, broker in cluster.brokers.items():
            print(f"broker {broker_id}: {broker.bootstrap} log {broker.log_path}", flush=True)
        print(
            f"restart broker N: kafkacompat cluster restart N --dir {shlex.quote(str(data_dir))}", flush=True
        )
        # a client told the bootstrap finds every broker and a controller (an admin client that asked
        # too soon could get controller -1 and not ask again for a long while)
        cluster.wait_until_ready()
        print(f"bootstrap: {cluster.bootstrap}", flush=True)
        while not stop.wait(0.5):
            for broker_id, broker in cluster.brokers.items():
                if restart_request(data_dir, broker_id).exists():
                    _restart(cluster, data_dir, broker_id)
                elif broker.process is not None and broker.process.poll() is not None:
                    print(
                        f"broker {broker_id} exited ({broker.process.returncode}); see {broker.log_path}; "
                        f"restart it: {restart_command(data_dir, broker_id)}",
                        flush=True,
                    )
                    broker.process = None
        print("stopping", flush=True)
        return 0
    except RuntimeError as exc:
        print(f"kafkacompat cluster: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
        pid_file.unlink(missing_ok=True)
        if owned:
            shutil.rmtree(data_dir, ignore_errors=True)


def _restart(cluster: Any, data_dir: Path, broker_id: int) -> None:
    """Answer a `cluster restart` request (module docstring)."""
    request = restart_request(data_dir, broker_id)
    print(f"restarting broker {broker_id}", flush=True)
    try:
        broker = cluster.restart_broker(broker_id)
        outcome = "ok"
        print(f"broker {broker_id} restarted: {broker.bootstrap} log {broker.log_path}", flush=True)
    except RuntimeError as exc:
        outcome = f"broker {broker_id} did not start again: {exc}"
        print(outcome, flush=True)
    result = request.with_name(request.name + ".result")
    result.write_text(outcome)
    request.unlink(missing_ok=True)


def restart(args: argparse.Namespace) -> int:
    if args.broker is None or args.dir is None:
        print(
            "kafkacompat cluster: restart needs the broker id and --dir of the running `cluster up`",
            file=sys.stderr,
        )
        return 2
    data_dir = Path(args.dir).absolute()
    try:
        pid = int((data_dir / PID_FILE).read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        print(f"kafkacompat cluster: no `cluster up` is running on {data_dir}", file=sys.stderr)
        return 1
    if not (data_dir / f"broker-{args.broker}").is_dir():
        print(f"kafkacompat cluster: the cluster on {data_dir} has no broker {args.broker}", file=sys.stderr)
        return 1
    request = restart_request(data_dir, args.broker)
    result = request.with_name(request.name + ".result")
    result.unlink(missing_ok=True)
    request.write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + RESTART_WAIT_SECONDS
    while not result.exists():
        if time.monotonic() > deadline:
            request.unlink(missing_ok=True)
            print(
                f"kafkacompat cluster: broker {args.broker} was not restarted within "
                f"{RESTART_WAIT_SECONDS:.0f} s",
                file=sys.stderr,
            )
            return 1
        time.sleep(0.2)
    outcome = result.read_text()
    result.unlink(missing_ok=True)
    if outcome != "ok":
        print(f"kafkacompat cluster: {outcome}", file=sys.stderr)
        return 1
    print(f"Restarted broker {args.broker}; log {data_dir / f'broker-{args.broker}' / 'broker.log'}")
    return 0
