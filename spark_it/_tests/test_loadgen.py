"""tools/loadgen.py: seeded generators, pacing and accounting with a fake producer, and one real run
against a kafkacompat broker read back with assign (no consumer group)."""

from __future__ import annotations

import io
import json
import re
import time
from collections import Counter
from typing import Any

import pytest

from spark_it._tests.helpers import load_loadgen, utc_ms

loadgen = load_loadgen()

START = utc_ms("2026-11-22T10:00:00Z")
LOG_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) service=(\w+) level=(DEBUG|INFO|WARN|ERROR) "
    r"host=(\w+-\d+) trace_id=([0-9a-f]{16}) msg=(.+)$"
)


def take(kind: str, seed: int | None, count: int = 200, **kw: Any) -> list[Any]:
    return list(loadgen.events(kind, seed=seed, count=count, start_ms=START, **kw))


@pytest.mark.parametrize("kind", ["activity", "logs"])
def test_seed_makes_runs_reproducible(kind: str) -> None:
    assert take(kind, 42) == take(kind, 42)
    assert take(kind, 42) != take(kind, 43)


def test_activity_events_are_valid_page_views() -> None:
    events = take("activity", 1, count=2000, spacing_ms=250)
    last_in_session: dict[str, tuple[str, str]] = {}
    follow_ups = 0
    for i, event in enumerate(events):
        record = json.loads(event.value)
        assert set(record) == {"user_id", "session_id", "page", "ts", "referrer", "user_agent", "country"}
        assert event.key == record["user_id"].encode()
        assert re.fullmatch(r"u\d{6}", record["user_id"])
        assert record["page"].startswith("/")
        assert event.timestamp_ms == START + i * 250
        assert utc_ms(record["ts"]) == event.timestamp_ms
        previous = last_in_session.get(record["user_id"])
        if previous is not None and previous[0] == record["session_id"]:
            # Within a session the referrer is the page the user viewed just before.
            assert record["referrer"] == "https://shop.example.com" + previous[1]
            follow_ups += 1
        last_in_session[record["user_id"]] = (record["session_id"], record["page"])
    users = Counter(json.loads(e.value)["user_id"] for e in events)
    pages = Counter(json.loads(e.value)["page"] for e in events)
    # Skewed popularity: the busiest user and page are far above the average.
    assert users.most_common(1)[0][1] > 5 * len(events) / len(users)
    assert pages.most_common(1)[0][1] > 3 * len(events) / len(pages)
    assert follow_ups > 100


def test_log_events_are_parseable_lines() -> None:
    events = take("logs", 2, count=2000)
    levels: Counter[str] = Counter()
    for i, event in enumerate(events):
        match = LOG_LINE.match(event.value.decode())
        assert match, event.value
        assert event.key == match.group(2).encode()
        assert utc_ms(match.group(1)) == event.timestamp_ms == START + i * 100
        assert match.group(4).startswith(match.group(2) + "-")
        levels[match.group(3)] += 1
    assert levels.most_common(1)[0][0] == "INFO"
    assert set(levels) == {"DEBUG", "INFO", "WARN", "ERROR"}
    assert len({e.key for e in events}) == len(loadgen.LogGenerator.SERVICES)


def test_late_events_move_back_in_time_without_changing_the_rest() -> None:
    on_time = take("activity", 5, count=500)
    late = take("activity", 5, count=500, late_fraction=0.2, late_max_ms=60_000)
    assert [e.key for e in late] == [e.key for e in on_time]
    moved = [(a, b) for a, b in zip(on_time, late, strict=True) if a.timestamp_ms != b.timestamp_ms]
    assert 50 < len(moved) < 150
    for original, shifted in moved:
        assert 0 < original.timestamp_ms - shifted.timestamp_ms <= 60_000
        assert json.loads(shifted.value)["ts"] == loadgen.iso_millis(shifted.timestamp_ms)
    with pytest.raises(ValueError):
        take("activity", 5, late_fraction=1.5)
    with pytest.raises(ValueError):
        take("metrics", 5)


def test_clock_supplies_event_time() -> None:
    events = take("logs", 9, count=5, clock=lambda i: 1_000_000 + i * i)
    assert [e.timestamp_ms for e in events] == [1_000_000, 1_000_001, 1_000_004, 1_000_009, 1_000_016]


class FakeProducer:
    """Just enough of confluent_kafka.Producer: a bounded queue; delivery callbacks run on poll with a
    timeout and on flush (poll(0) finds nothing acknowledged yet, so the queue really fills up)."""

    class Message:
        def __init__(self, key: bytes, value: bytes) -> None:
            self._key, self._value = key, value

        def key(self) -> bytes:
            return self._key

        def value(self) -> bytes:
            return self._value

    def __init__(self, queue_limit: int = 10, fail_every: int = 0) -> None:
        self.queue: list[tuple[Any, Any]] = []
        self.queue_limit = queue_limit
        self.fail_every = fail_every
        self.produced: list[tuple[str, bytes, bytes, int]] = []
        self.buffer_errors = 0
        self.reports = 0

    def produce(self, topic: str, value: bytes, key: bytes, timestamp: int, on_delivery: Any) -> None:
        if len(self.queue) >= self.queue_limit:
            self.buffer_errors += 1
            raise BufferError("queue full")
        self.produced.append((topic, key, value, timestamp))
        self.queue.append((self.Message(key, value), on_delivery))

    def poll(self, timeout: float = 0) -> int:
        if timeout <= 0:
            return 0  # as with a real broker, nothing has been acknowledged yet
        if not self.queue:
            time.sleep(timeout)  # a real poll blocks up to its timeout when there is nothing to report
            return 0
        served = 0
        while self.queue:
            message, callback = self.queue.pop(0)
            served += 1
            self.reports += 1
            failed = self.fail_every and self.reports % self.fail_every == 0
            callback("broker said no" if failed else None, message)
        return served

    def flush(self, timeout: float = 0) -> int:
        self.poll(1.0)
        return 0


def test_produce_accounts_delivered_records_and_bytes() -> None:
    producer = FakeProducer(queue_limit=3)
    source = take("logs", 1, count=50)
    stream = io.StringIO()
    summary = loadgen.produce(producer, "t", iter(source), progress_stream=stream, total=50)
    assert summary.records == 50 and summary.failed == 0
    assert producer.buffer_errors > 0  # the full queue was waited out, nothing was lost
    assert summary.bytes == sum(len(e.key) + len(e.value) for e in source)
    assert [(k, v, ts) for _, k, v, ts in producer.produced] == [
        (e.key, e.value, e.timestamp_ms) for e in source
    ]
    assert "100%" in stream.getvalue()
    line = summary.line()
    assert f"records=50 failed=0 bytes={summary.bytes}" in line and "rec/s" in line


def test_produce_paces_to_rate_and_stops_after_duration() -> None:
    producer = FakeProducer(queue_limit=1000)
    began = time.monotonic()
    summary = loadgen.produce(producer, "t", iter(take("logs", 1, count=40)), rate=200, progress_stream=None)
    elapsed = time.monotonic() - began
    assert summary.records == 40
    assert elapsed >= 39 / 200 * 0.95  # event n waits for start + n/rate
    endless = loadgen.events("logs", seed=1, start_ms=START)
    summary = loadgen.produce(FakeProducer(1000), "t", endless, rate=100, duration=0.3, progress_stream=None)
    assert 25 <= summary.records <= 31


def test_produce_counts_failed_deliveries() -> None:
    producer = FakeProducer(queue_limit=1, fail_every=4)
    summary = loadgen.produce(producer, "t", iter(take("activity", 1, count=20)), progress_stream=None)
    assert summary.failed == 5 and summary.records == 15
    assert summary.errors and "broker said no" in summary.errors[0]


def test_main_refuses_open_ended_or_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert loadgen.main(["--kind", "logs"]) == 2
    assert loadgen.main(["--count", "-1"]) == 2
    assert loadgen.main(["--rate", "0"]) == 2
    assert "give --count" in capsys.readouterr().err


def test_loadgen_against_a_real_broker(kafkacompat_broker: Any, capsys: pytest.CaptureFixture[str]) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    bootstrap = kafkacompat_broker.bootstrap
    topic = "loadgen-activity"
    argv = [
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--count",
        "600",
        "--seed",
        "11",
        "--start",
        "2026-11-22T10:00:00Z",
        "--spacing-ms",
        "50",
        "--partitions",
        "3",
        "--quiet",
    ]
    assert loadgen.main(argv) == 0
    err = capsys.readouterr().err
    assert "records=600 failed=0" in err

    expected = Counter(
        (e.key, e.value, e.timestamp_ms) for e in take("activity", 11, count=600, spacing_ms=50)
    )
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "loadgen-readback", "enable.auto.commit": False}
    )
    got: Counter[tuple[bytes, bytes, int]] = Counter()
    partition_of_key: dict[bytes, set[int]] = {}
    try:
        for partition in range(3):
            low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, partition), 10)
            assert low == 0
            consumer.assign([confluent_kafka.TopicPartition(topic, partition, 0)])
            position = 0
            deadline = time.monotonic() + 20
            while position < high and time.monotonic() < deadline:
                for message in consumer.consume(500, 1.0):
                    assert message.error() is None, message.error()
                    assert message.offset() == position
                    position += 1
                    got[(message.key(), message.value(), message.timestamp()[1])] += 1
                    partition_of_key.setdefault(message.key(), set()).add(partition)
            assert position == high
    finally:
        consumer.close()
    assert got == expected
    assert all(len(parts) == 1 for parts in partition_of_key.values())  # keyed: one partition per user
    assert len({p for parts in partition_of_key.values() for p in parts}) == 3
