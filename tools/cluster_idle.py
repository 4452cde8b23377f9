"""What an idle cluster costs: each broker's CPU and ZooKeeper's requests while nothing happens.

Theory of operation
-------------------
Starts a 3-broker cluster on a local ZooKeeper (`local_brokers.LocalCluster`), creates `--partitions`
partitions of replication factor 3 (topics of `--per-topic` partitions, `--batch` topics per
CreateTopics), waits until every broker's Metadata shows them all led, lets it settle, then idles for
`--idle` seconds and reports:

- each broker's CPU over the idle window, in % of one core (user + system ticks of the process and all
  its threads, from /proc/<pid>/stat), and ZooKeeper's;
- the requests ZooKeeper received over the window (the `Received` count of its `srvr` four-letter
  word, every client's requests and pings together): an idle cluster that does not poll makes only its
  sessions' pings, whatever its size;
- the time to create one more topic (4 partitions, RF 3): CreateTopics answered, and until every broker
  answers Metadata with a leader for each of its partitions.

    .venv/bin/python tools/cluster_idle.py --partitions 10000 --idle 60

The brokers run with Kafka's defaults except `offsets.topic.num.partitions=3` and
`transaction.state.log.num.partitions=3` (small internal topics) unless `--override` adds settings.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafkacompat.local_brokers import LocalCluster

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its threads so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # after the command: state is field 3; utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / TICKS


def zookeeper_received(port: int) -> int:
    """ZooKeeper's count of requests received (srvr's `Received`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"srvr")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    for line in answer.decode().splitlines():
        if line.startswith("Received:"):
            return int(line.split(":", 1)[1])
    raise RuntimeError(f"no Received in srvr's answer: {answer!r}")


def all_led(bootstrap: str, topics: list[str] | None) -> bool:
    """Whether the broker at `bootstrap` lists `topics` (every topic when None) with every partition led."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_topics(timeout=30).topics
    wanted = topics if topics is not None else list(listed)
    for name in wanted:
        metadata = listed.get(name)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return False
        if any(p.leader < 0 for p in metadata.partitions.values()):
            return False
    return True


def create_topics(cluster: LocalCluster, names: list[str], partitions: int, batch: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for start in range(0, len(names), batch):
        chunk = names[start : start + batch]
        futures = admin.create_topics(
            [NewTopic(n, partitions, 3) for n in chunk], operation_timeout=300, request_timeout=300
        )
        for future in futures.values():
            future.result(600)


def wait_all_brokers(cluster: LocalCluster, topics: list[str] | None, timeout: float) -> float:
    """Seconds until every broker lists `topics` led."""
    started = time.monotonic()
    for broker in cluster.brokers.values():
        while not all_led(broker.bootstrap, topics):
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"broker at {broker.bootstrap} does not list every partition led")
            time.sleep(0.05)
    return time.monotonic() - started


def idle_cost(cluster: LocalCluster, seconds: float) -> dict[str, object]:
    """CPU (% of a core) of each broker and of ZooKeeper, and ZooKeeper's requests, over `seconds`."""
    pids = {f"broker-{i}": b.process.pid for i, b in cluster.brokers.items() if b.process is not None}
    assert cluster.zookeeper.process is not None
    pids["zookeeper"] = cluster.zookeeper.process.pid
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    received = zookeeper_received(cluster.zookeeper.port)
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    received = zookeeper_received(cluster.zookeeper.port) - received
    return {
        "cpu_percent": {n: round(100 * (cpu_seconds(p) - before[n]) / elapsed, 2) for n, p in pids.items()},
        "zookeeper_requests": received,
        "zookeeper_requests_per_second": round(received / elapsed, 2),
        "seconds": round(elapsed, 1),
    }


def time_one_topic(cluster: LocalCluster) -> dict[str, float]:
    """Seconds to create one topic (4 partitions, RF 3): answered, and led at every broker."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    name = f"one-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    admin.create_topics([NewTopic(name, 4, 3)], operation_timeout=60)[name].result(120)
    answered = time.monotonic() - started
    wait_all_brokers(cluster, [name], 120)
    return {
        "create_answered_s": round(answered, 3),
        "led_at_every_broker_s": round(time.monotonic() - started, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10000, help="partitions to create (RF 3)")
    parser.add_argument("--per-topic", type=int, default=100, help="partitions per topic")
    parser.add_argument("--batch", type=int, default=10, help="topics per CreateTopics request")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle measured")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds to wait before measuring")
    parser.add_argument("--override", action="append", default=[], help="broker setting key=value")
    parser.add_argument("--dir", help="where the temporary data directory goes (removed after)")
    parser.add_argument("--keep", action="store_true", help="wait for Enter before stopping the cluster")
    args = parser.parse_args(argv)

    overrides = [
        "offsets.topic.num.partitions=3",
        "transaction.state.log.num.partitions=3",
        *args.override,
    ]
    with tempfile.TemporaryDirectory(prefix="kc-idle-", dir=args.dir) as data_dir:
        with LocalCluster(data_dir, 3, overrides) as cluster:
            cluster.wait_until_ready(60)
            report: dict[str, object] = {"partitions": args.partitions}
            count = max(args.partitions // args.per_topic, 0)
            names = [f"idle-{i:05d}" for i in range(count)]
            started = time.monotonic()
            create_topics(cluster, names, args.per_topic, args.batch)
            report["create_all_s"] = round(time.monotonic() - started, 1)
            report["led_at_every_broker_s"] = round(wait_all_brokers(cluster, names, 1800), 1)
            time.sleep(args.settle)
            report["idle"] = idle_cost(cluster, args.idle)
            print(json.dumps(report, indent=2), file=sys.stderr, flush=True)
            try:
                report["one_topic"] = time_one_topic(cluster)
            except Exception as exc:  # a broker that died shows in its log, under --dir with --keep
                report["one_topic"] = {"error": repr(exc)}
            report["brokers_running"] = [
                i for i, b in cluster.brokers.items() if b.process is not None and b.process.poll() is None
            ]
            print(json.dumps(report, indent=2))
            if args.keep:
                input(f"cluster data in {data_dir}; press Enter to stop and remove it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
