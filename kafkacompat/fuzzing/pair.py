"""The well-behaved pair: a producer and a consumer that run beside the fuzzer, and what they measure.

Theory of operation: `good_pair()` runs a confluent-kafka producer (acks=all, idempotent) and a group
consumer on one topic at a steady rate. Each record carries its send time, so the consumer measures
end-to-end latency; every acknowledged record must be consumed (`lost` counts those that were not), and
every error either side saw is kept. A campaign runs the pair in a process of its own
(`pair_subprocess()`: `python -m kafkacompat.fuzzing good-pair`), which prints its summary as one JSON
line; `pair_result()` stops it with SIGINT and reads that line, `pair_result_wait()` reads it from a pair
that runs out its time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kafkacompat.fuzzing.latency import PAIR_WINDOW_SECONDS, latency_windows, now_ms, percentile

__all__ = [
    "good_pair",
    "pair_result",
    "pair_result_wait",
    "pair_subprocess",
]


def good_pair(
    bootstrap: str, topic: str, seconds: float, rate: float, stop: Callable[[], bool]
) -> dict[str, Any]:
    """A confluent-kafka producer (acks=all) and a group consumer on `topic`, side by side for `seconds`.

    Each value carries its send time; the consumer measures end-to-end latency. Returns the latency
    percentiles, the produce acknowledgement latency, and every error either side saw. Every
    acknowledged record must be consumed (`lost` counts those that were not).
    """
    from confluent_kafka import Consumer, KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    for future in futures.values():
        try:
            future.result(15)
        except Exception as exc:  # TOPIC_ALREADY_EXISTS on a second phase
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    errors: list[str] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"good-pair-{topic}",
            "auto.offset.reset": "latest",
            "enable.auto.commit": True,
            "fetch.wait.max.ms": 100,
            "error_cb": lambda err: errors.append(f"consumer: {err}"),
        }
    )
    assigned: list[bool] = []
    consumer.subscribe([topic], on_assign=lambda c, parts: assigned.append(True))
    deadline = time.monotonic() + 30
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.1)
    if not assigned:
        errors.append("consumer: no assignment within 30 s")
    e2e: list[float] = []
    e2e_at: list[float] = []  # when each e2e sample was sent (ms), for the timeline
    seen: set[int] = set()
    sent_at: dict[int, float] = {}

    def drain(timeout: float) -> None:
        message = consumer.poll(timeout)
        while message is not None:
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(f"consume: {message.error()}")
            else:
                sequence = int(message.key())
                if sequence in sent_at and sequence not in seen:
                    seen.add(sequence)
                    e2e.append(now_ms() - sent_at[sequence])
                    e2e_at.append(sent_at[sequence])
            message = consumer.poll(0)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "enable.idempotence": True,
            "error_cb": lambda err: errors.append(f"producer: {err}"),
        }
    )
    # warm-up: producer id, metadata and connection are in place before anything is measured
    producer.produce(topic, key=b"-1", value=b"warm-up")
    producer.flush(30)
    drain(1.0)
    acked: set[int] = set()
    ack_latency: list[float] = []

    def delivered(err: Any, msg: Any) -> None:
        sequence = int(msg.key())
        if err is not None:
            errors.append(f"delivery: {err}")
            return
        acked.add(sequence)
        ack_latency.append(now_ms() - sent_at[sequence])

    started = time.monotonic()
    interval = 1.0 / rate
    next_send = started
    sequence = 0
    while time.monotonic() - started < seconds and not stop():
        now = time.monotonic()
        if now >= next_send:
            sent_at[sequence] = now_ms()
            producer.produce(topic, key=str(sequence).encode(), value=b"x" * 100, on_delivery=delivered)
            sequence += 1
            next_send += interval
        producer.poll(0)
        drain(max(0.0, min(next_send - time.monotonic(), 0.01)))
    producer.flush(30)
    settle = time.monotonic() + 15
    while len(seen & acked) < len(acked) and time.monotonic() < settle:
        drain(0.1)
    consumer.close()
    return {
        "records_sent": sequence,
        "acked": len(acked),
        "consumed": len(seen),
        "lost": len(acked - seen),
        "errors": errors[:20],
        "error_count": len(errors),
        "e2e_p50_ms": round(percentile(e2e, 0.50), 2),
        "e2e_p99_ms": round(percentile(e2e, 0.99), 2),
        "ack_p99_ms": round(percentile(ack_latency, 0.99), 2),
        "e2e_by_window": latency_windows(e2e_at, e2e, PAIR_WINDOW_SECONDS),
        # every sample (wall ms sent, ms taken), for a campaign that splits them by block; it takes
        # them out of its summary
        "e2e_samples": [[round(at, 1), round(took, 3)] for at, took in zip(e2e_at, e2e, strict=True)],
    }


def pair_subprocess(bootstrap: str, topic: str, seconds: float, rate: float) -> Any:
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "kafkacompat.fuzzing", "good-pair", "--bootstrap", bootstrap, "--topic", topic,
         "--seconds", str(seconds), "--rate", str(rate)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def pair_result(process: Any, *, interrupt: bool = True) -> dict[str, Any]:
    import json
    import signal

    if interrupt and process.poll() is None:
        process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=120 if interrupt else 300)
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"errors": [f"good pair exited with {process.returncode} and no summary"], "error_count": 1}


def pair_result_wait(process: Any) -> dict[str, Any]:
    """The summary of a pair that runs out its time. Read while it runs, not after it exits: a summary
    larger than the pipe's buffer (64 KiB; every sample is in it) would block the pair's exit."""
    return pair_result(process, interrupt=False)
