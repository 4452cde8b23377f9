"""Apache Kafka as the reference broker: resolve it with Maven at one pinned version, start and stop KRaft
brokers in a directory.

Usage:
    python tools/reference_kafka.py resolve [--kafka-version V]
    python tools/reference_kafka.py start --dir DIR [--brokers 1|3] [--override key=value ...]
    python tools/reference_kafka.py stop --dir DIR

Theory of operation:

- Resolution. Apache Kafka's broker is the `kafka.Kafka` main class of `org.apache.kafka:kafka_2.13`;
  that artifact's runtime dependencies are everything a KRaft broker and controller load (kafka-server,
  kafka-raft, kafka-metadata, kafka-storage, the coordinators, kafka-clients, Scala, log4j-core), and
  `kafka.tools.StorageTool`, which formats the storage, is in it too. The tool writes a pom naming it
  (plus log4j's binding for SLF4J 1.7, which Kafka's distribution ships beside it so that its SLF4J log
  lines reach log4j) into the cache directory and runs
  `mvn dependency:build-classpath` (the plugin pinned) on it: Maven fetches every jar into its local
  repository (`~/.m2`, from Maven Central when it is empty) and the class path is written to
  `<cache>/classpath.txt`. A later run reuses that file while every jar it names exists.
  The cache is `.venv/kafka/<version>/` of this repository unless `--cache` says otherwise.
  The version is `KAFKA_VERSION` below, or the `KAFKA_VERSION` environment variable, or
  `--kafka-version` (the Makefile's `KAFKA_VERSION` is passed that way).
- Start. One broker is a combined node (`process.roles=broker,controller`, node id 1, a quorum of one).
  Three brokers are three combined nodes, ids 1-3, a static quorum of three voters
  (`controller.quorum.voters`), so the cluster survives the loss of any one node as Kafka's
  recommended production layouts do, with no separate controller JVM. Every node gets a client port
  and a controller port picked free on 127.0.0.1, its storage formatted with `StorageTool format`
  under one cluster id, and a JVM started in a session of its own (heap `-Xmx512m`, G1 with Kafka's own
  start-script flags), its log4j output in `DIR/node-N/server.log` and its stdout/stderr in
  `DIR/node-N/stdout.log`. The config starts from Kafka's quickstart: auto topic creation on, and on
  a single node the replication factors of `__consumer_offsets`, `__transaction_state` and
  `__share_group_state` at 1 (`transaction.state.log.min.isr=1`) so that groups and transactions work;
  three nodes keep Kafka's defaults (3 and 2). `--override key=value` adds or replaces any setting
  on every node. The tool waits until every node answers Metadata listing every broker, writes
  `DIR/reference.json` (version, bootstrap, nodes, pids), prints the bootstrap list on stdout and the
  start-up time on stderr, and exits; the JVMs keep running.
- Stop. SIGTERM to every node recorded in `DIR/reference.json` whose process is still the JVM that was
  started there (its command line names DIR), then SIGKILL to those still running after
  `--timeout` seconds (30 by default).
- Exit codes: 0 done, 1 failed (a line on stderr says why; the node's log tail is printed when a JVM
  exits or does not answer in time).

The Python standard library and kafkacompat's blocking client (for the Metadata wait) are all it imports.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

KAFKA_VERSION = "4.4.0"
# log4j's SLF4J 1.7 binding, as Kafka's distribution ships it (the version Kafka 4.4.0's log4j-core has)
LOG4J_SLF4J_BINDING = "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
REPO = Path(__file__).resolve().parent.parent
STATE_FILE = "reference.json"
HEAP = "-Xmx512m"
JVM_FLAGS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
HOST = "127.0.0.1"
START_TIMEOUT = 180.0
STOP_TIMEOUT = 30.0

# Kafka's quickstart config (config/server.properties), minus what `start` sets per node
SINGLE_NODE_CONFIG = {
    "offsets.topic.replication.factor": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}
COMMON_CONFIG = {
    "auto.create.topics.enable": "true",
    "num.partitions": "1",
    "log.retention.check.interval.ms": "300000",
}


class ReferenceError(Exception):
    """A step failed; the message says which and why."""


@dataclass(frozen=True)
class Node:
    node_id: int
    port: int
    controller_port: int

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"


# --- pure parts ---------------------------------------------------------------------------------------


def generate_pom(version: str) -> str:
    """A pom whose runtime dependencies are what the broker and StorageTool load."""
    group, artifact, binding_version = LOG4J_SLF4J_BINDING.split(":")
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kafkacompat.reference</groupId>
  <artifactId>reference-kafka</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{binding_version}</version>
    </dependency>
  </dependencies>
</project>
"""


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ReferenceError(f"--override {item!r}: expected key=value")
        overrides[key.strip()] = value.strip()
    return overrides


def node_config(
    node: Node, nodes: Sequence[Node], log_dir: Path, overrides: Mapping[str, str]
) -> dict[str, str]:
    """One node's server.properties: a combined broker+controller of a static quorum of `nodes`."""
    config = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in nodes),
        "listeners": f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{node.port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        **COMMON_CONFIG,
        **(SINGLE_NODE_CONFIG if len(nodes) == 1 else {}),
    }
    config.update(overrides)
    return config


def render_properties(config: Mapping[str, str]) -> str:
    """A Java properties file: backslashes and line breaks escaped, and in keys the separators too."""

    def escape(text: str, separators: bool) -> str:
        text = text.replace("\\", "\\\\").replace("\n", "\\n")
        return text.replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ") if separators else text

    return "".join(f"{escape(key, True)}={escape(value, False)}\n" for key, value in config.items())


def log4j_config(log_file: Path) -> str:
    return (
        "status = warn\n"
        "appender.file.type = File\n"
        "appender.file.name = FILE\n"
        f"appender.file.fileName = {log_file}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.file.ref = FILE\n"
        "logger.kafka.name = kafka\nlogger.kafka.level = INFO\n"
        "logger.apache.name = org.apache.kafka\nlogger.apache.level = INFO\n"
    )


def kafka_uuid() -> str:
    """A random cluster id as Kafka prints one (Uuid.randomUuid: URL-safe base64 of 16 bytes, no padding,
    never starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


# --- resolution ---------------------------------------------------------------------------------------


def default_cache(version: str) -> Path:
    return REPO / ".venv" / "kafka" / version


def resolve(version: str, cache: Path | None = None) -> list[str]:
    """The broker's runtime class path, from `<cache>/classpath.txt` or from Maven."""
    cache = cache or default_cache(version)
    classpath_file = cache / "classpath.txt"
    if classpath_file.exists():
        jars = [j for j in classpath_file.read_text().strip().split(os.pathsep) if j]
        if jars and all(Path(j).exists() for j in jars):
            return jars
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "pom.xml").write_text(generate_pom(version))
    started = time.monotonic()
    print(f"reference_kafka: resolving Apache Kafka {version} with Maven", file=sys.stderr)
    command = [
        "mvn",
        "-B",
        "-q",
        "-f",
        str(cache / "pom.xml"),
        f"{DEPENDENCY_PLUGIN}:build-classpath",
        f"-Dmdep.outputFile={classpath_file}",
        "-Dmdep.includeScope=runtime",
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except FileNotFoundError as exc:
        raise ReferenceError("Maven (mvn) is not installed") from exc
    if result.returncode != 0 or not classpath_file.exists():
        raise ReferenceError(
            f"mvn failed to resolve Kafka {version}:\n{(result.stdout + result.stderr)[-3000:]}"
        )
    jars = [j for j in classpath_file.read_text().strip().split(os.pathsep) if j]
    print(
        f"reference_kafka: {len(jars)} jars resolved in {time.monotonic() - started:.1f} s", file=sys.stderr
    )
    return jars


# --- processes ----------------------------------------------------------------------------------------


def java_command() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return "java"


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((HOST, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _format(jars: list[str], node_dir: Path, cluster_id: str) -> subprocess.Popen[bytes]:
    with open(node_dir / "format.log", "wb") as out:
        return subprocess.Popen(
            [
                java_command(),
                "-Xmx256m",
                f"-Dlog4j2.configurationFile={node_dir / 'log4j2.properties'}",
                "-cp",
                os.pathsep.join(jars),
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(node_dir / "server.properties"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _launch(jars: list[str], node_dir: Path) -> subprocess.Popen[bytes]:
    with open(node_dir / "stdout.log", "ab") as out:
        process = subprocess.Popen(
            [
                java_command(),
                HEAP,
                *JVM_FLAGS,
                f"-Dlog4j2.configurationFile={node_dir / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={node_dir}",
                "-cp",
                os.pathsep.join(jars),
                "kafka.Kafka",
                str(node_dir / "server.properties"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process


def _alive(pid: int, directory: Path) -> bool:
    """Whether `pid` is still the JVM started for `directory` (not exited, not a zombie, not reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X") and str(directory) in cmdline


def _metadata_ready(bootstrap: str, brokers: int) -> bool:
    from kafkacompat.client import ClientError, KafkaClient

    try:
        with KafkaClient(bootstrap, timeout=5) as client:
            metadata = client.metadata([])
        return len(metadata.brokers) == brokers and metadata.controller_id >= 0
    except (ClientError, OSError):
        return False


def start(
    directory: Path,
    brokers: int,
    overrides: Mapping[str, str],
    version: str,
    cache: Path | None = None,
    timeout: float = START_TIMEOUT,
) -> str:
    directory = directory.resolve()
    state_file = directory / STATE_FILE
    if state_file.exists():
        state = json.loads(state_file.read_text())
        if any(_alive(n["pid"], directory) for n in state["nodes"]):
            raise ReferenceError(f"{directory}: reference brokers already running (stop them first)")
    jars = resolve(version, cache)
    started = time.monotonic()
    ports = free_ports(2 * brokers)
    nodes = [Node(i + 1, ports[2 * i], ports[2 * i + 1]) for i in range(brokers)]
    cluster_id = kafka_uuid()
    formats = []
    for node in nodes:
        node_dir = directory / f"node-{node.node_id}"
        node_dir.mkdir(parents=True, exist_ok=True)
        config = node_config(node, nodes, node_dir / "data", overrides)
        (node_dir / "server.properties").write_text(render_properties(config))
        (node_dir / "log4j2.properties").write_text(log4j_config(node_dir / "server.log"))
        formats.append((node_dir, _format(jars, node_dir, cluster_id)))
    for node_dir, process in formats:
        if process.wait(timeout=120) != 0:
            raise ReferenceError(f"formatting {node_dir} failed:\n{_tail(node_dir / 'format.log')}")
    formatted = time.monotonic()
    processes = {node.node_id: _launch(jars, directory / f"node-{node.node_id}") for node in nodes}
    bootstrap = ",".join(node.bootstrap for node in nodes)
    state_file.write_text(
        json.dumps(
            {
                "version": version,
                "bootstrap": bootstrap,
                "cluster_id": cluster_id,
                "nodes": [
                    {
                        "node_id": n.node_id,
                        "port": n.port,
                        "controller_port": n.controller_port,
                        "pid": processes[n.node_id].pid,
                    }
                    for n in nodes
                ],
            },
            indent=2,
        )
    )
    deadline = started + timeout
    waiting = list(nodes)
    while waiting:
        node = waiting[0]
        node_dir = directory / f"node-{node.node_id}"
        if processes[node.node_id].poll() is not None:
            _abandon(processes.values())
            raise ReferenceError(f"node {node.node_id} exited:\n{_tail(node_dir / 'stdout.log')}")
        if _metadata_ready(node.bootstrap, brokers):
            waiting.pop(0)
            continue
        if time.monotonic() > deadline:
            _abandon(processes.values())
            raise ReferenceError(
                f"node {node.node_id} did not answer Metadata within {timeout:.0f} s:\n"
                f"{_tail(node_dir / 'server.log')}"
            )
        time.sleep(0.2)
    ready = time.monotonic()
    print(
        f"reference_kafka: Apache Kafka {version}, {brokers} broker(s) ready in {ready - started:.1f} s "
        f"(format {formatted - started:.1f} s, JVM start to Metadata {ready - formatted:.1f} s)",
        file=sys.stderr,
    )
    return bootstrap


def _abandon(processes: Iterable[subprocess.Popen[bytes]]) -> None:
    """Stop the JVMs of a start that failed (this process is their parent)."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def stop(directory: Path, timeout: float = STOP_TIMEOUT) -> int:
    """Stop the nodes recorded in `directory`; the number that were running."""
    directory = directory.resolve()
    state_file = directory / STATE_FILE
    if not state_file.exists():
        return 0
    pids = [n["pid"] for n in json.loads(state_file.read_text())["nodes"]]
    running = [pid for pid in pids if _alive(pid, directory)]
    for pid in running:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(pid, directory) for pid in running):
        time.sleep(0.1)
    for pid in running:
        if _alive(pid, directory):
            print(f"reference_kafka: pid {pid} still running after {timeout:.0f} s, SIGKILL", file=sys.stderr)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return len(running)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)

    def add_version(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--kafka-version",
            default=os.environ.get("KAFKA_VERSION") or KAFKA_VERSION,
            help=f"Apache Kafka version (default: $KAFKA_VERSION or {KAFKA_VERSION})",
        )
        p.add_argument("--cache", type=Path, default=None, help="class path cache (default .venv/kafka/V)")

    p_resolve = sub.add_parser("resolve", help="resolve Kafka with Maven; print the classpath file")
    add_version(p_resolve)
    p_start = sub.add_parser("start", help="format and start KRaft brokers in DIR; print the bootstrap list")
    add_version(p_start)
    p_start.add_argument("--dir", type=Path, required=True)
    p_start.add_argument("--brokers", type=int, choices=(1, 3), default=1)
    p_start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    p_start.add_argument("--timeout", type=float, default=START_TIMEOUT)
    p_stop = sub.add_parser("stop", help="stop the brokers started in DIR")
    p_stop.add_argument("--dir", type=Path, required=True)
    p_stop.add_argument("--timeout", type=float, default=STOP_TIMEOUT)
    args = parser.parse_args(argv)
    try:
        if args.command == "resolve":
            resolve(args.kafka_version, args.cache)
            print((args.cache or default_cache(args.kafka_version)) / "classpath.txt")
        elif args.command == "start":
            print(
                start(
                    args.dir,
                    args.brokers,
                    parse_overrides(args.override),
                    args.kafka_version,
                    args.cache,
                    args.timeout,
                ),
                flush=True,
            )
        else:
            stopped = stop(args.dir, args.timeout)
            print(f"reference_kafka: stopped {stopped} node(s)", file=sys.stderr)
    except ReferenceError as exc:
        print(f"reference_kafka: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
