"""Produce and consume throughput through a PLAINTEXT, an SSL and a SASL_SSL listener of one broker.

Theory of operation: starts `kafkacompat serve` as a child process with three listeners (certificates
from `kafkacompat dev-certs` in a temporary directory), then, for each listener in turn, times one
confluent-kafka producer writing N records of S random bytes to a fresh single-partition topic
(acks=1, first produce() to the end of flush()) and one assign-based consumer reading them all back
from the beginning. PLAINTEXT fetches go out with sendfile; the TLS ones through the connection's
staging writer (preadv into one buffer, large TLS writes), so the gap between the rows is the price of
TLS on this machine. Prints one line per listener and phase (MB/s, records/s); `--json` for a machine
-readable copy. Nothing is kept: the data dir and certificates are temporary.

    PYTHONPATH=. .venv/bin/python tools/bench_tls.py [--messages 200000] [--size 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="bench-secret";'


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _client_config(listener: str, port: int, certs: dict[str, Path]) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{port}", "broker.address.family": "v4"}
    if listener in ("SSL", "SASL_SSL"):
        config["security.protocol"] = listener
        config["ssl.ca.location"] = str(certs["ca.pem"])
    if listener == "SASL_SSL":
        config.update({"sasl.mechanism": "PLAIN", "sasl.username": "bench", "sasl.password": "bench-secret"})
    return config


def _produce(config: dict[str, Any], topic: str, count: int, size: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({**config, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20})
    producer.list_topics(topic, timeout=10)
    payload = os.urandom(size)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError("produce did not finish")
    return time.perf_counter() - started


def _consume(config: dict[str, Any], topic: str, count: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {**config, "group.id": f"bench-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
         "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760}
    )  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = 0
    started = None
    deadline = time.monotonic() + 300
    while seen < count and time.monotonic() < deadline:
        for message in consumer.consume(10000, 1.0):
            if message.error() is None:
                if started is None:
                    started = time.perf_counter()
                seen += 1
    elapsed = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    if seen < count:
        raise RuntimeError(f"consumed {seen} of {count}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from confluent_kafka.admin import AdminClient, NewTopic

    from kafkacompat.commands.dev_certs import make_dev_certs

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kafkacompat-bench-tls-") as scratch:
        certs = make_dev_certs(Path(scratch) / "certs")
        ports = {name: _free_port() for name in ("PLAINTEXT", "SSL", "SASL_SSL")}
        listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
        overrides = [
            f"listeners={listeners}",
            f"log.dirs={scratch}/data",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={certs['broker-keystore.pem']}",
            "sasl.enabled.mechanisms=PLAIN",
            f"sasl.jaas.config={JAAS}",
        ]
        command = [sys.executable, "-m", "kafkacompat", "serve", "--log-level", "WARNING"]
        for override in overrides:
            command += ["--override", override]
        broker = subprocess.Popen(command)
        try:
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
            deadline = time.monotonic() + 20
            while True:
                try:
                    admin.list_topics(timeout=1)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            for listener, port in ports.items():
                topic = f"bench-{listener.lower()}-{uuid.uuid4().hex[:6]}"
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
                config = _client_config(listener, port, certs)
                megabytes = args.messages * args.size / 1e6
                for phase, seconds in (
                    ("produce", _produce(config, topic, args.messages, args.size)),
                    ("consume", _consume(config, topic, args.messages)),
                ):
                    results.append(
                        {
                            "listener": listener,
                            "phase": phase,
                            "seconds": round(seconds, 3),
                            "mb_per_s": round(megabytes / seconds, 1),
                            "records_per_s": round(args.messages / seconds),
                        }
                    )
        finally:
            broker.terminate()
            broker.wait(30)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print(f"{args.messages} records of {args.size} bytes, one partition, confluent-kafka")
        for row in results:
            print(
                f"{row['listener']:<10} {row['phase']:<8} {row['mb_per_s']:>8.1f} MB/s "
                f"{row['records_per_s']:>9} records/s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
