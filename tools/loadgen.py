"""Load generator: realistic website-activity or log events produced to a Kafka topic.

Theory of operation: two seeded event generators (`ActivityGenerator`, `LogGenerator`) turn an event
time into one keyed record; they hold the only randomness, so `--seed` makes a run's keys and values
reproducible. Activity events are JSON page views keyed by user id, with sessions, per-user click
paths and Zipf-like user and page popularity; log events are single lines
`<ISO time> service=... level=... host=... trace_id=... msg=...` keyed by service. Both formats are
what spark_it/pipelines (activity, logs) read.

Event time comes from a clock: `wall` (the moment of production; the default with --rate) or
`simulated` (starting at --start and advancing --spacing-ms per event; the default otherwise, so a
--count run is reproducible too). `--late-fraction` moves some events back in time to exercise
watermarks. The record's Kafka timestamp (CreateTime) is the event time.

`produce()` pushes events through a confluent-kafka Producer, paced to --rate with an absolute
schedule (no drift), counts delivered bytes from delivery reports, draws a progress line on stderr
and returns a `Summary` (records, bytes, seconds, rate) that main() prints.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = [
    "ActivityGenerator",
    "Event",
    "LogGenerator",
    "Summary",
    "events",
    "main",
    "produce",
]

DEFAULT_TOPICS = {"activity": "page-views", "logs": "app-logs"}


@dataclass(frozen=True, slots=True)
class Event:
    key: bytes
    value: bytes
    timestamp_ms: int


def iso_millis(ms: int) -> str:
    """2026-11-22T10:00:00.123Z"""
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _zipf_index(rng: random.Random, n: int, s: float = 1.1) -> int:
    """An index in [0, n) with roughly Zipf(s) popularity (index 0 the most popular)."""
    # Inverse-CDF of a continuous power law on [1, n + 1), cheap and good enough for load shapes; its
    # integer part minus one is the index.
    u = rng.random()
    if s == 1.0:
        x = (n + 1) ** u
    else:
        x = (((n + 1) ** (1 - s) - 1) * u + 1) ** (1 / (1 - s))
    return min(n - 1, int(x) - 1)


class ActivityGenerator:
    """Page-view events keyed by user id. Owns its RNG and the per-user session state."""

    PAGES = (
        "/",
        "/products",
        "/products/{id}",
        "/cart",
        "/checkout",
        "/search",
        "/blog",
        "/blog/{slug}",
        "/about",
        "/login",
        "/account",
        "/help",
    )
    NEXT_PAGES = {
        "/": ("/products", "/search", "/blog", "/login", "/about"),
        "/products": ("/products/{id}", "/products/{id}", "/search", "/cart"),
        "/products/{id}": ("/cart", "/products/{id}", "/products", "/search"),
        "/cart": ("/checkout", "/products", "/products/{id}"),
        "/checkout": ("/account", "/"),
        "/search": ("/products/{id}", "/search", "/products"),
        "/blog": ("/blog/{slug}", "/blog/{slug}", "/"),
        "/blog/{slug}": ("/blog", "/blog/{slug}", "/products"),
        "/login": ("/account", "/"),
        "/account": ("/", "/products", "/help"),
        "/about": ("/", "/help"),
        "/help": ("/", "/account"),
    }
    EXTERNAL_REFERRERS = (
        None,
        None,
        "https://www.google.com/",
        "https://www.bing.com/",
        "https://news.ycombinator.com/",
        "https://www.reddit.com/",
        "https://t.co/",
        "https://duckduckgo.com/",
    )
    USER_AGENTS = (
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/131.0",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) Safari/605.1.15",
        "Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) Mobile/15E148",
        "Mozilla/5.0 (Linux; Android 15) Chrome/131.0 Mobile",
    )
    COUNTRIES = ("US", "US", "US", "DE", "GB", "IN", "BR", "FR", "JP", "CA", "AU", "NL")
    SLUGS = ("kafka-on-trio", "zero-copy-fetch", "watermarks-explained", "exactly-once", "log-compaction")
    NEW_SESSION_P = 0.15

    def __init__(self, seed: int | None = None, users: int = 1000, products: int = 500) -> None:
        if users < 1 or products < 1:
            raise ValueError("users and products must be positive")
        self.rng = random.Random(seed)
        self.users = users
        self.products = products
        self._sessions: dict[int, tuple[str, str]] = {}  # user -> (session id, last page template)
        self._last_page: dict[int, str] = {}  # user -> last concrete page (the next view's referrer)
        self._session_counter = 0

    def _concrete(self, template: str) -> str:
        if "{id}" in template:
            return template.replace("{id}", str(_zipf_index(self.rng, self.products) + 1))
        if "{slug}" in template:
            return template.replace("{slug}", self.rng.choice(self.SLUGS))
        return template

    def event(self, timestamp_ms: int) -> Event:
        rng = self.rng
        user = _zipf_index(rng, self.users)
        user_id = f"u{user:06d}"
        state = self._sessions.get(user)
        if state is None or rng.random() < self.NEW_SESSION_P:
            self._session_counter += 1
            session_id = f"s{self._session_counter:08d}-{rng.getrandbits(32):08x}"
            template = self.PAGES[_zipf_index(rng, len(self.PAGES), 1.3)]
            referrer = rng.choice(self.EXTERNAL_REFERRERS)
        else:
            session_id, last_page = state
            template = rng.choice(self.NEXT_PAGES[last_page])
            referrer = "https://shop.example.com" + self._last_page.get(user, "/")
        page = self._concrete(template)
        self._sessions[user] = (session_id, template)
        self._last_page[user] = page
        record = {
            "user_id": user_id,
            "session_id": session_id,
            "page": page,
            "ts": iso_millis(timestamp_ms),
            "referrer": referrer,
            "user_agent": self.USER_AGENTS[user % len(self.USER_AGENTS)],
            "country": self.COUNTRIES[(user * 7) % len(self.COUNTRIES)],
        }
        value = json.dumps(record, separators=(",", ":")).encode()
        return Event(user_id.encode(), value, timestamp_ms)


class LogGenerator:
    """Log lines keyed by service. Owns its RNG."""

    SERVICES = ("api", "auth", "billing", "search", "frontend", "worker")
    LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
    LEVEL_WEIGHTS = (15, 70, 10, 5)
    MESSAGES = {
        "DEBUG": ("cache lookup key=user:{n} hit={hit}", "pool stats active={n} idle={m}"),
        "INFO": (
            "GET /v1/orders/{n} 200 in {ms}ms",
            "POST /v1/cart 201 in {ms}ms",
            "job {n} finished in {ms}ms",
            "user u{n:06d} logged in",
        ),
        "WARN": (
            "slow query took {ms}ms",
            "retrying request to upstream attempt={m}",
            "queue depth {n} above 1000",
        ),
        "ERROR": (
            "upstream timed out after {ms}ms",
            "payment declined code={m}",
            "unhandled exception in handler {n}",
        ),
    }

    def __init__(self, seed: int | None = None, hosts_per_service: int = 3) -> None:
        if hosts_per_service < 1:
            raise ValueError("hosts_per_service must be positive")
        self.rng = random.Random(seed)
        self.hosts_per_service = hosts_per_service

    def event(self, timestamp_ms: int) -> Event:
        rng = self.rng
        service = self.SERVICES[_zipf_index(rng, len(self.SERVICES), 0.8)]
        level = rng.choices(self.LEVELS, self.LEVEL_WEIGHTS)[0]
        message = rng.choice(self.MESSAGES[level]).format(
            n=rng.randrange(1, 100_000),
            m=rng.randrange(1, 10),
            ms=int(rng.expovariate(1 / 80)) + 1,
            hit=rng.choice(("true", "false")),
        )
        host = f"{service}-{rng.randrange(self.hosts_per_service)}"
        line = (
            f"{iso_millis(timestamp_ms)} service={service} level={level} host={host} "
            f"trace_id={rng.getrandbits(64):016x} msg={message}"
        )
        return Event(service.encode(), line.encode(), timestamp_ms)


GENERATORS: dict[str, Callable[..., ActivityGenerator | LogGenerator]] = {
    "activity": ActivityGenerator,
    "logs": LogGenerator,
}


def events(
    kind: str,
    *,
    seed: int | None = None,
    count: int | None = None,
    clock: Callable[[int], int] | None = None,
    start_ms: int | None = None,
    spacing_ms: int = 100,
    late_fraction: float = 0.0,
    late_max_ms: int = 120_000,
) -> Iterator[Event]:
    """`count` events (None: endless). Event time is clock(i) if given, else start_ms + i*spacing_ms.

    With late_fraction > 0 that share of events is moved 1..late_max_ms back in time (out of order).
    """
    if kind not in GENERATORS:
        raise ValueError(f"kind must be one of {sorted(GENERATORS)}, got {kind!r}")
    if not 0.0 <= late_fraction <= 1.0:
        raise ValueError("late_fraction must be within [0, 1]")
    generator = GENERATORS[kind](seed)
    # Lateness draws come from their own stream, so turning it on does not change the events' contents.
    late_rng = random.Random(None if seed is None else seed ^ 0x5EED)
    if start_ms is None:
        start_ms = int(time.time() * 1000)
    i = 0
    while count is None or i < count:
        ts = clock(i) if clock is not None else start_ms + i * spacing_ms
        if late_fraction and late_rng.random() < late_fraction:
            ts = max(0, ts - late_rng.randint(1, late_max_ms))
        yield generator.event(ts)
        i += 1


@dataclass(slots=True)
class Summary:
    records: int = 0  # delivered (acknowledged) records
    failed: int = 0
    bytes: int = 0  # key + value bytes of delivered records
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        mib = self.bytes / (1 << 20)
        mib_rate = mib / self.seconds if self.seconds > 0 else 0.0
        return (
            f"records={self.records} failed={self.failed} bytes={self.bytes} ({mib:.2f} MiB) "
            f"seconds={self.seconds:.2f} rate={self.rate:,.0f} rec/s ({mib_rate:.2f} MiB/s)"
        )


class Progress:
    """A one-line progress display on a stream (redrawn with \\r on a terminal, periodic lines otherwise)."""

    def __init__(self, stream: TextIO, total: int | None, interval: float = 0.25) -> None:
        self.stream = stream
        self.total = total
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.interval = interval if self.tty else max(interval, 5.0)
        self._next = 0.0

    def update(self, sent: int, delivered: int, nbytes: int, elapsed: float, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next:
            return
        self._next = now + self.interval
        rate = delivered / elapsed if elapsed > 0 else 0.0
        text = (
            f"{delivered:,} delivered ({sent:,} sent)  {nbytes / (1 << 20):.1f} MiB  "
            f"{elapsed:.1f} s  {rate:,.0f} rec/s"
        )
        if self.total:
            done = min(1.0, sent / self.total)
            filled = int(done * 30)
            text = f"[{'#' * filled}{'.' * (30 - filled)}] {done:4.0%} " + text
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def produce(
    producer: Any,
    topic: str,
    source: Iterator[Event],
    *,
    rate: float | None = None,
    duration: float | None = None,
    total: int | None = None,
    progress_stream: TextIO | None = sys.stderr,
    flush_timeout: float = 60.0,
) -> Summary:
    """Produce every event of `source` (paced to `rate` per second, stopped after `duration` s)."""
    summary = Summary()

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            summary.failed += 1
            if len(summary.errors) < 10:
                summary.errors.append(str(err))
            return
        summary.records += 1
        summary.bytes += len(msg.key() or b"") + len(msg.value() or b"")

    progress = Progress(progress_stream, total) if progress_stream is not None else None
    start = time.monotonic()
    sent = 0
    try:
        for event in source:
            now = time.monotonic()
            if duration is not None and now - start >= duration:
                break
            if rate:
                # Absolute schedule: event n is due at start + n/rate, so pacing errors do not accumulate.
                due = start + sent / rate
                if duration is not None and due - start >= duration:
                    break
                while now < due:
                    producer.poll(min(due - now, 0.05))
                    now = time.monotonic()
            while True:
                try:
                    producer.produce(
                        topic,
                        value=event.value,
                        key=event.key,
                        timestamp=event.timestamp_ms,
                        on_delivery=delivered,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)  # local queue full: serve delivery reports, then retry
            sent += 1
            producer.poll(0)
            if progress is not None:
                progress.update(sent, summary.records, summary.bytes, time.monotonic() - start)
    except KeyboardInterrupt:
        pass
    finally:
        remaining = producer.flush(flush_timeout)
        summary.seconds = time.monotonic() - start
        if remaining:
            summary.failed += remaining
            summary.errors.append(f"{remaining} record(s) still undelivered after {flush_timeout} s")
        if progress is not None:
            progress.update(sent, summary.records, summary.bytes, summary.seconds, force=True)
            progress.close()
    return summary


def _parse_start(text: str) -> int:
    if text.isdigit():
        return int(text)
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Produce realistic activity or log events to Kafka.")
    parser.add_argument("--kind", choices=sorted(GENERATORS), default="activity")
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--topic", default=None, help="default: page-views (activity) or app-logs (logs)")
    parser.add_argument("--count", type=int, default=None, help="records to produce")
    parser.add_argument(
        "--rate", type=float, default=None, help="records per second (default: as fast as possible)"
    )
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--seed", type=int, default=None, help="makes keys and values reproducible")
    parser.add_argument(
        "--clock",
        choices=("wall", "simulated"),
        default=None,
        help="event time: production time (default with --rate) or --start + n*--spacing-ms",
    )
    parser.add_argument(
        "--start", default=None, help="simulated clock start: ISO-8601 or epoch ms (default: now)"
    )
    parser.add_argument("--spacing-ms", type=int, default=100, help="simulated clock step per event")
    parser.add_argument("--late-fraction", type=float, default=0.0, help="share of events moved back in time")
    parser.add_argument("--late-max-ms", type=int, default=120_000)
    parser.add_argument(
        "--partitions", type=int, default=None, help="create the topic with N partitions if absent"
    )
    parser.add_argument("--acks", default="all")
    parser.add_argument("--compression", default="none", help="none | gzip | snappy | lz4 | zstd")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument(
        "--producer-param",
        type=_key_value,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra librdkafka producer setting",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    return parser


def ensure_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """Create `topic` with `partitions` partitions unless it exists."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=timeout)
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.count is None and args.rate is None and args.duration is None:
        print("loadgen: give --count, --rate (runs until Ctrl-C) or --duration", file=sys.stderr)
        return 2
    if (args.count is not None and args.count < 0) or (args.rate is not None and args.rate <= 0):
        print("loadgen: --count must be >= 0 and --rate > 0", file=sys.stderr)
        return 2
    from confluent_kafka import Producer

    topic = args.topic or DEFAULT_TOPICS[args.kind]
    if args.partitions:
        ensure_topic(args.bootstrap, topic, args.partitions)
    clock_kind = args.clock or ("wall" if args.rate else "simulated")
    clock = (lambda _i: int(time.time() * 1000)) if clock_kind == "wall" else None
    start_ms = _parse_start(args.start) if args.start else None
    source = events(
        args.kind,
        seed=args.seed,
        count=args.count,
        clock=clock,
        start_ms=start_ms,
        spacing_ms=args.spacing_ms,
        late_fraction=args.late_fraction,
        late_max_ms=args.late_max_ms,
    )
    config = {
        "bootstrap.servers": args.bootstrap,
        "acks": args.acks,
        "compression.type": args.compression,
        "linger.ms": args.linger_ms,
        # murmur2 on the key, as the Java client's default partitioner: same key, same partition.
        "partitioner": "murmur2_random",
        **dict(args.producer_param),
    }
    producer = Producer(config)
    summary = produce(
        producer,
        topic,
        source,
        rate=args.rate,
        duration=args.duration,
        total=args.count,
        progress_stream=None if args.quiet else sys.stderr,
    )
    print(f"loadgen: {args.kind} -> {topic}: {summary.line()}", file=sys.stderr)
    for error in summary.errors:
        print(f"loadgen: delivery error: {error}", file=sys.stderr)
    return 0 if summary.failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
