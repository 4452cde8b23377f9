"""`kafkacompat doctor`: where the broker listens, what it holds, and the first problems in sight.

Theory of operation
-------------------
For the person whose client does not connect. Two independent looks, each reported as it goes:

1. Over the wire (`kafkacompat.client.KafkaClient`, so it works against any Kafka broker): ApiVersions
   (API count and the versions of the main APIs; the protocol carries no software version, which comes
   from the broker's Prometheus endpoint when DescribeConfigs shows `metrics.listener` set), Metadata
   (cluster id, controller, every broker's advertised address, topics and their partitions' leaders
   and ISR), DescribeLogDirs (log dirs, their
   size, total and usable bytes), ListGroups with each group's state, members and lag (the requests of
   `kafkacompat groups describe`). Each advertised address is connected to from here: a broker that
   advertises an address its clients cannot reach is the most common reason a client gets through the
   bootstrap and then fails.
2. On disk, for log dirs given with `--data-dir`, named by `--config`, reported by the broker and
   present on this machine, or `./data` (`make run`'s): size and free space of the file system,
   `meta.properties` (which cluster and node the dir belongs to), the clean-shutdown marker, and the
   `.lock` file: whether a process holds its flock (tried non-blocking and released at once; a held lock
   means a broker is running on the dir) and, on Linux, which process holds it (from /proc/locks).

Findings are facts (printed under their heading) and problems (collected, printed last with a hint).
Exit status: 0 when no problem was found, 1 when a problem was found, 2 when no broker answered at the
bootstrap address (the unreachable case says which address, the error, and the likely causes).
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkacompat.client import DEFAULT_BOOTSTRAP, ClientError, CommandError, KafkaClient, error_name
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

HELP = "say where the broker listens, what it holds and the first problems seen (client cannot connect?)"

RESOURCE_BROKER = 4
MAIN_APIS = {
    ApiKey.PRODUCE: "Produce",
    ApiKey.FETCH: "Fetch",
    ApiKey.METADATA: "Metadata",
    ApiKey.JOIN_GROUP: "JoinGroup",
}

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
# a log dir's file system is "full" below both limits (Kafka stops a log dir at the first failed write)
LOW_SPACE_FRACTION = 0.05
LOW_SPACE_BYTES = 1 << 30

EXIT_OK, EXIT_PROBLEMS, EXIT_UNREACHABLE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=None,
        metavar="HOST:PORT",
        help=f"broker to ask (default: from --config, else {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="the broker's server.properties (listeners, log dirs)"
    )
    parser.add_argument(
        "--data-dir", action="append", default=[], metavar="DIR", help="a log dir to inspect (repeatable)"
    )
    parser.add_argument(
        "--timeout", type=float, default=5.0, metavar="SECONDS", help="network timeout (default 5)"
    )


@dataclass
class Report:
    """What doctor found: printed facts as they come, problems collected for the end."""

    problems: list[str] = field(default_factory=list)
    started: bool = False

    def heading(self, text: str) -> None:
        print(f"\n{text}" if self.started else text)
        self.started = True

    def fact(self, text: str) -> None:
        print(f"  {text}")

    def problem(self, text: str) -> None:
        self.problems.append(text)
        print(f"  PROBLEM: {text}")


def run(args: argparse.Namespace) -> int:
    report = Report()
    config = _load_config(args.config, report)
    bootstrap = args.bootstrap_server or _bootstrap_from_config(config) or DEFAULT_BOOTSTRAP
    data_dirs = [Path(d) for d in args.data_dir]
    if not data_dirs and config is not None:
        data_dirs = list(config.log_dirs)
    reachable, broker_dirs, cluster_id = check_broker(bootstrap, args.timeout, report)
    if not data_dirs:
        data_dirs = [Path(d) for d in broker_dirs if os.path.isdir(d)]
    if not data_dirs and Path("data", META_PROPERTIES).exists():
        data_dirs = [Path("data")]
    served = {os.path.realpath(d) for d in broker_dirs}
    for data_dir in data_dirs:
        check_data_dir(
            data_dir,
            report,
            broker_reachable=reachable,
            cluster_id=cluster_id,
            served=os.path.realpath(data_dir) in served,
        )
    report.heading("Summary")
    if not reachable:
        report.fact(f"no broker answered at {bootstrap} (see above)")
        for problem in report.problems:
            report.fact(f"- {problem}")
        return EXIT_UNREACHABLE
    if report.problems:
        report.fact(f"{len(report.problems)} problem(s):")
        for problem in report.problems:
            report.fact(f"- {problem}")
        return EXIT_PROBLEMS
    report.fact("no problems found")
    return EXIT_OK


def _load_config(path: str | None, report: Report) -> Any:
    if path is None:
        return None
    from kafkacompat.config import BrokerConfig, ConfigError

    try:
        return BrokerConfig.load(path, warn_unknown=False)
    except ConfigError as exc:
        report.heading(f"Config {path}")
        report.problem(f"cannot load it: {exc}")
        return None


def _bootstrap_from_config(config: Any) -> str | None:
    """The first (PLAINTEXT) listener of a server.properties, as a client on this machine would reach it."""
    if config is None:
        return None
    from kafkacompat.config import ConfigError

    try:
        advertised = config.advertised_listeners
        listeners = config.listeners
        protocols = config.security_protocol_map
        # the doctor speaks plaintext: the first PLAINTEXT listener, else the first one
        listener = next((item for item in listeners if protocols.get(item.name) == "PLAINTEXT"), listeners[0])
    except (ConfigError, IndexError):
        return None
    public = advertised.get(listener.name, listener)
    host = public.host or "localhost"
    port = public.port or listener.port
    return f"{host}:{port}"


# --- over the wire -----------------------------------------------------------------------------------


def check_broker(bootstrap: str, timeout: float, report: Report) -> tuple[bool, list[str], str | None]:
    """(reachable, log dirs the broker reports, cluster id); prints what it finds."""
    from kafkacompat.client import parse_bootstrap

    report.heading(f"Broker at {bootstrap}")
    try:
        addresses = parse_bootstrap(bootstrap)
    except ClientError as exc:
        report.problem(str(exc))
        return False, [], None
    # A plain TCP connect first: its OSError says why nothing answers (refused, unresolvable, timeout).
    refusals = []
    for host, port in addresses:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            break
        except OSError as exc:
            refusals.append((f"{host}:{port}", exc))
    else:
        for address, exc in refusals:
            report.fact(f"UNREACHABLE: cannot connect to {address}: {exc}")
            report.fact("likely causes:")
            for cause in likely_causes(exc, address):
                report.fact(f"  - {cause}")
        report.problems.append(f"cannot connect to {bootstrap}: {refusals[-1][1]}")
        return False, [], None
    try:
        client = KafkaClient(bootstrap, client_id="kafkacompat-doctor", timeout=timeout)
    except ClientError as exc:
        report.fact(f"UNREACHABLE as a Kafka broker: the connection opens, then {exc}")
        report.fact("likely causes:")
        for cause in likely_causes(None, bootstrap):
            report.fact(f"  - {cause}")
        report.problems.append(f"no Kafka broker answers at {bootstrap}: {exc}")
        return False, [], None
    with client:
        try:
            return _inspect_broker(client, timeout, report)
        except (ClientError, CommandError) as exc:
            report.problem(f"the broker answered, then a request failed: {exc}")
            return True, [], None


def likely_causes(error: OSError | None, address: str) -> list[str]:
    """What usually lies behind a failed connection to a broker, most likely first."""
    if isinstance(error, ConnectionRefusedError):
        return [
            f"nothing listens on {address}: is the broker running (`kafkacompat serve`, `make run`)?",
            "the broker listens on another port or interface: compare its `listeners` setting "
            "(or pass --config server.properties)",
            "it is still starting (recovering a large log dir) or has exited: look at its log",
        ]
    if isinstance(error, socket.gaierror):
        return [f"the host name in {address} does not resolve on this machine (typo? DNS? /etc/hosts?)"]
    if isinstance(error, (TimeoutError, socket.timeout)):
        return [
            "no answer within the timeout: a firewall dropping packets, a wrong address, or a broker "
            "too busy to accept (try --timeout 30)",
        ]
    if isinstance(error, OSError) and error.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return ["no route to that host from this machine (network, VPN, container network)"]
    return [
        "something accepted the connection but did not answer as a Kafka broker: another service on "
        "that port, or a listener that expects TLS or SASL first",
    ]


def _inspect_broker(
    client: KafkaClient, timeout: float, report: Report
) -> tuple[bool, list[str], str | None]:
    from kafkacompat.wire.messages import request_class

    versions = client.connection().versions
    main = ", ".join(
        f"{name} v{versions[key][0]}-{versions[key][1]}" for key, name in MAIN_APIS.items() if key in versions
    )
    report.fact(f"answers: {len(versions)} APIs ({main})")
    metadata = client.metadata(None)
    report.fact(f"cluster id: {metadata.cluster_id}, controller: {metadata.controller_id}")
    for broker in metadata.brokers:
        address = f"{broker.host}:{broker.port}"
        report.fact(f"broker {broker.node_id} advertises {address}")
        failure = _try_connect(broker.host, broker.port, timeout)
        if failure is not None:
            report.problem(
                f"broker {broker.node_id} advertises {address}, which this machine cannot reach ({failure}): "
                "clients get through the bootstrap and then fail; set advertised.listeners to an address "
                "clients can reach"
            )
    _report_metrics_endpoint(client, metadata, timeout, report)
    _report_topics(metadata, report)
    log_dirs = _report_log_dirs(client, report, request_class(ApiKey.DESCRIBE_LOG_DIRS))
    _report_groups(client, report)
    return True, log_dirs, metadata.cluster_id


def _report_metrics_endpoint(client: KafkaClient, metadata: Any, timeout: float, report: Report) -> None:
    """The broker's own listener settings, and the software version, memory and CPU, which the Kafka
    protocol does not carry: from the broker's Prometheus endpoint when its `metrics.listener` is set
    (broker configs, read with DescribeConfigs; a broker that refuses it is simply not asked more)."""
    from kafkacompat.wire.messages import request_class

    if ApiKey.DESCRIBE_CONFIGS not in client.connection().versions or not metadata.brokers:
        return
    cls = request_class(ApiKey.DESCRIBE_CONFIGS)
    node = metadata.brokers[0]
    resource = cls.DescribeConfigsResource(
        resource_type=RESOURCE_BROKER,
        resource_name=str(node.node_id),
        configuration_keys=["listeners", "advertised.listeners", "metrics.listener"],
    )
    try:
        response = client.send(ApiKey.DESCRIBE_CONFIGS, cls(resources=[resource]), node_id=node.node_id)
    except ClientError:
        return
    configs = {c.name: c.value for r in response.results if not r.error_code for c in r.configs}
    for name in ("listeners", "advertised.listeners"):
        if configs.get(name):
            report.fact(f"broker {node.node_id} {name}={configs[name]}")
    listener = configs.get("metrics.listener")
    if not listener:
        report.fact("software version: not carried by the Kafka protocol (set metrics.listener to see it)")
        return
    url = _metrics_url(listener, node.host)
    if url.endswith(":0/metrics"):
        report.fact(
            f"metrics.listener={listener}: a port picked at start (the broker logs 'metrics endpoint on')"
        )
        return
    try:
        text = _fetch(url, timeout)
    except OSError as exc:
        report.problem(f"metrics endpoint {url} (metrics.listener) does not answer: {exc}")
        return
    samples = _samples(text)
    version = next((labels for name, labels, _ in samples if name == "kafkacompat_build_info"), "")
    found = re.search(r'version="([^"]*)"', version)
    report.fact(f"software: kafkacompat {found.group(1)}" if found else "software: (no build info)")
    values = {name: value for name, labels, value in samples if not labels}
    if "process_resident_memory_bytes" in values:
        report.fact(
            f"process: {_bytes(values['process_resident_memory_bytes'])} resident, "
            f"{values.get('process_cpu_seconds_total', 0):.1f} s CPU; metrics at {url}"
        )


def _metrics_url(listener: str, broker_host: str) -> str:
    match = re.match(r"^http://(\[[^\]]*\]|[^:/]*):(\d+)", listener.strip(), re.IGNORECASE)
    if match is None:
        return listener
    host = match.group(1)
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = broker_host
    return f"http://{host}:{match.group(2)}/metrics"


def _fetch(url: str, timeout: float) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as response:
        return str(response.read().decode("utf-8", "replace"))


def _samples(text: str) -> list[tuple[str, str, float]]:
    """(name, label text, value) of each sample line of Prometheus' text format."""
    result = []
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if match:
            try:
                result.append((match.group(1), match.group(2) or "", float(match.group(3))))
            except ValueError:
                continue
    return result


def _try_connect(host: str, port: int, timeout: float) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return str(exc) or type(exc).__name__


def _report_topics(metadata: Any, report: Report) -> None:
    topics = sorted(metadata.topics, key=lambda t: t.name or "")
    user = [t for t in topics if not t.is_internal]
    internal = [t.name for t in topics if t.is_internal]
    partitions = sum(len(t.partitions) for t in topics)
    report.heading(f"Topics: {len(user)} (+{len(internal)} internal), {partitions} partitions")
    for topic in user[:20]:
        report.fact(f"{topic.name}: {len(topic.partitions)} partition(s)")
    if len(user) > 20:
        report.fact(f"... and {len(user) - 20} more")
    offline, under = [], []
    for topic in topics:
        if topic.error_code:
            report.problem(f"topic {topic.name}: {error_name(topic.error_code)}")
            continue
        for p in topic.partitions:
            name = f"{topic.name}-{p.partition_index}"
            if p.leader_id < 0 or p.error_code == ErrorCode.LEADER_NOT_AVAILABLE:
                offline.append(name)
            elif len(p.isr_nodes) < len(p.replica_nodes):
                under.append(name)
    if offline:
        report.problem(f"{len(offline)} offline partition(s) (no leader): {', '.join(offline[:10])}")
    if under:
        report.problem(f"{len(under)} under-replicated partition(s): {', '.join(under[:10])}")


def _report_log_dirs(client: KafkaClient, report: Report, cls: Any) -> list[str]:
    if ApiKey.DESCRIBE_LOG_DIRS not in client.connection().versions:
        return []
    response = client.send(ApiKey.DESCRIBE_LOG_DIRS, cls(topics=None))
    report.heading("Log dirs (as the broker reports them)")
    dirs = []
    for result in response.results:
        dirs.append(result.log_dir)
        size = sum(p.partition_size for t in result.topics for p in t.partitions)
        count = sum(len(t.partitions) for t in result.topics)
        line = f"{result.log_dir}: {count} partition(s), {_bytes(size)}"
        if result.error_code:
            report.problem(f"log dir {result.log_dir}: {error_name(result.error_code)}")
        if getattr(result, "total_bytes", -1) > 0:
            line += f"; file system {_bytes(result.usable_bytes)} free of {_bytes(result.total_bytes)}"
            if _low_space(result.usable_bytes, result.total_bytes):
                report.problem(
                    f"log dir {result.log_dir} is almost full ({_bytes(result.usable_bytes)} free)"
                )
        report.fact(line)
    return dirs


def _report_groups(client: KafkaClient, report: Report) -> None:
    from kafkacompat.commands import groups as groups_command

    found = groups_command.list_groups(client)
    report.heading(f"Consumer groups: {len(found)}")
    for group_id, _, _ in found[:20]:
        try:
            description = groups_command.describe_group(client, group_id)
            offsets = groups_command.committed_offsets(client, group_id, description.coordinator)
            ends = groups_command.list_offsets(client, sorted(offsets), groups_command.LATEST_TIMESTAMP)
        except (ClientError, CommandError) as exc:
            report.problem(f"group {group_id}: {exc}")
            continue
        lag = sum(max(ends[tp] - offset, 0) for tp, offset in offsets.items() if ends.get(tp, -1) >= 0)
        report.fact(
            f"{group_id}: {description.state}, {len(description.members)} member(s), "
            f"{len(offsets)} committed partition(s), lag {lag}"
        )
    if len(found) > 20:
        report.fact(f"... and {len(found) - 20} more")


# --- on disk -----------------------------------------------------------------------------------------


def check_data_dir(
    path: Path,
    report: Report,
    *,
    broker_reachable: bool,
    cluster_id: str | None = None,
    served: bool = False,
) -> None:
    """Inspect one log dir on this machine. `served`: the broker that answered reports it as its own."""
    report.heading(f"Data dir {path}")
    if not path.is_dir():
        report.problem(f"{path} does not exist or is not a directory")
        return
    meta = _read_properties(path / META_PROPERTIES)
    if meta is None:
        report.fact(f"no {META_PROPERTIES}: no broker has started on it yet")
    else:
        report.fact(
            f"belongs to cluster {meta.get('cluster.id')}, node {meta.get('node.id', meta.get('broker.id'))}"
        )
        if cluster_id and meta.get("cluster.id") not in (None, cluster_id):
            report.fact(f"(the broker that answered is in cluster {cluster_id}: another broker's dir)")
    partitions = [
        p for p in path.iterdir() if p.is_dir() and "-" in p.name and not p.name.endswith("-delete")
    ]
    used = _dir_size(path)
    report.fact(f"{len(partitions)} partition dir(s), {_bytes(used)} on disk")
    try:
        stats = os.statvfs(path)
    except OSError as exc:
        report.problem(f"cannot read the file system of {path}: {exc}")
    else:
        total, free = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
        report.fact(f"file system: {_bytes(free)} free of {_bytes(total)}")
        if _low_space(free, total):
            report.problem(
                f"the file system of {path} is almost full ({_bytes(free)} free): writes will fail and the "
                "broker takes the log dir offline; free space or lower retention (retention.ms/bytes)"
            )
    lock = lock_state(path)
    clean = (path / CLEAN_SHUTDOWN_FILE).exists()
    if lock.held:
        holder = f" by process {lock.holder_pid}" if lock.holder_pid else ""
        report.fact(f"lock: {LOCK_FILE} held{holder}: a broker is running on this dir")
        if not broker_reachable:
            report.problem(
                f"a broker holds {path}{'/' + LOCK_FILE} but does not answer at the bootstrap address: it "
                "listens elsewhere (check its `listeners`), is still starting (recovering logs), or hangs"
            )
    elif lock.exists:
        report.fact(
            f"lock: {LOCK_FILE} present but not held (left by a broker that stopped; harmless, the next "
            "start takes it)"
        )
    else:
        report.fact(f"lock: no {LOCK_FILE} file")
    if served:
        report.fact("the broker that answered reports this dir as one of its log dirs")
    elif clean:
        report.fact("last shutdown was clean: the next start loads the logs without recovery")
    elif meta is not None and not lock.held:
        report.fact(
            "last shutdown was not clean (no clean-shutdown marker): the next start verifies the newest "
            "segments (recovery), which takes longer on large logs"
        )


@dataclass
class LockState:
    exists: bool
    held: bool
    holder_pid: int | None = None


def lock_state(log_dir: Path) -> LockState:
    """Whether `<log_dir>/.lock` exists and whether a process holds a lock on it (flock or POSIX).

    Tried with a non-blocking flock on a descriptor of our own, released at once (flock locks belong to
    the open file, so this neither takes nor breaks another holder's lock, in this process or another).
    POSIX (fcntl) record locks, which Kafka's Java FileLock takes, do not conflict with flock on Linux;
    /proc/locks lists both kinds, with the holder's pid.
    """
    import fcntl

    path = log_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return LockState(exists=False, held=False)
    except OSError:
        return LockState(exists=True, held=False)
    try:
        inode = os.fstat(fd).st_ino
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = True
        except OSError:
            held = False
        else:
            held = False
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    holder = _lock_holder(inode)
    return LockState(exists=True, held=held or holder is not None, holder_pid=holder)


def _lock_holder(inode: int) -> int | None:
    """The pid holding a lock on the file with this inode, from /proc/locks (Linux), or None."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; blocked waiters are marked "->"
        if len(fields) < 6 or "->" in fields[1]:
            continue
        device_inode = fields[5].split(":")
        if len(device_inode) == 3 and device_inode[2] == str(inode):
            try:
                return int(fields[4])
            except ValueError:
                return None
    return None


def _read_properties(path: Path) -> dict[str, str] | None:
    from kafkacompat.config import parse_properties

    try:
        return parse_properties(path.read_text(encoding="utf-8"))
    except OSError:
        return None


def _dir_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _low_space(free: int, total: int) -> bool:
    return total > 0 and free < LOW_SPACE_BYTES and free < total * LOW_SPACE_FRACTION


def _bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count} B"
