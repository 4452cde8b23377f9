"""One small interface over kafka-python 3.x, confluent-kafka, aiokafka and the Java client, so a scenario
is written once and run with each client.

Theory of operation:
- `Member` is one subscribed group consumer that polls in a thread of its own, as applications do
  (kafka-python runs rebalances inside poll(), so several members polled in turn from one thread stall
  each other; aiokafka's heartbeats and fetches run only while its event loop runs, so its thread keeps
  a private loop turning). Everything that touches the client (poll, commit, committed, close) runs on
  that thread: the test hands it a command and waits for the answer. The test reads snapshots only:
  `partitions()` (assignment after the last poll), `seen()` (records so far) and `events` (rebalance
  callbacks, in order).
- A driver per client (`_KafkaPythonDriver`, `_ConfluentDriver`, `_AioKafkaDriver`, `_JavaDriver`) maps
  the common calls onto the client's API; aiokafka's driver owns an event loop and runs each coroutine to
  completion on it; the Java driver talks to a JVM running compat_tests/java/KafkaCompatProbe.java.
- Data-path helpers (`produce`, `consume`, `end_offset`, `offset_for_time`) do the same for one-shot
  producer/assign-consumer work, reporting per-record results so a refused record is visible.
- `python -m compat_tests.group_clients member CLIENT BOOTSTRAP GROUP TOPIC` runs one member in a child
  process and prints `ASSIGNED p,q,...` whenever its assignment changes (for SIGKILL tests).
"""

from __future__ import annotations

import asyncio
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, NamedTuple

CLIENTS = ("kafka-python", "confluent", "aiokafka")
SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms: the shortest session a stock broker accepts
# Static members (group.instance.id) are there to be restarted within their session without a rebalance:
# a restart (a JVM's, on a loaded machine) can take longer than 6 s, so theirs is longer (Kafka's
# consumer default is 45 s)
STATIC_SESSION_MS = 30000


# Clients whose subscribe() sends nothing to the group coordinator: they join from their first poll (the
# others -- librdkafka, aiokafka -- join from a background thread as soon as they subscribe). A member of
# these can be started "held" (client built and subscribed, not polled) and released later.
JOINS_ON_FIRST_POLL = frozenset({"kafka-python", "java"})


def session_ms(instance_id: str | None) -> int:
    return SESSION_MS if instance_id is None else STATIC_SESSION_MS
HEARTBEAT_MS = 500

Record = tuple[int, int, bytes | None]  # partition, offset, value


# --- drivers: one client each; called only from the member's thread -----------------------------------


def kafka_python_subscribe(consumer: Any, topic: str, **subscribe_args: Any) -> None:
    """Subscribe a kafka-python consumer to `topic` so that its first join already knows the topic.

    kafka-python 3.0.12 joins without waiting for the metadata of what it subscribes to. Its group leader
    keeps a snapshot of the subscribed topics' metadata and rejoins when it changes: if the first join
    happens before the topic's metadata arrives, the leader assigns nothing (or from an empty snapshot)
    and rejoins as soon as the metadata comes; if poll() then times out while that JoinGroup/SyncGroup is
    in flight, the finished join is never applied (need_rejoin() already reads False) and the member
    stalls for good: no heartbeats, no fetches (see FINDINGS.md). So: fetch the topic's partitions
    before subscribing, and wait for the coordinator's snapshot to hold the topic before the first poll.
    Applications see their topics first too; the Java client waits for metadata before it joins.
    """
    deadline = time.monotonic() + 15
    while not consumer.partitions_for_topic(topic):
        assert time.monotonic() < deadline, f"kafka-python never saw the partitions of {topic}"
        time.sleep(0.05)
    consumer.subscribe([topic], **subscribe_args)
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is not None and hasattr(coordinator, "_metadata_snapshot"):
        deadline = time.monotonic() + 15
        while topic not in (coordinator._metadata_snapshot or {}) and time.monotonic() < deadline:
            time.sleep(0.02)


class _KafkaPythonDriver:
    def __init__(
        self, bootstrap: str, group: str, topic: str, instance_id: str | None, on_event: Any
    ) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                on_event("revoke", revoked)

            def on_partitions_assigned(self, assigned: Any) -> None:
                on_event("assign", assigned)

        self.topic = topic
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            group_instance_id=instance_id,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=session_ms(instance_id),
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        kafka_python_subscribe(self.consumer, topic, listener=Listener())

    def poll(self) -> list[Record]:
        return [
            (r.partition, r.offset, r.value) for rs in self.consumer.poll(timeout_ms=100).values() for r in rs
        ]

    def assignment(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self.consumer.assignment())

    def commit(self, offsets: dict[int, int]) -> None:
        from kafka import OffsetAndMetadata, TopicPartition

        self.consumer.commit(
            {TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        )

    def committed(self, partitions: list[int]) -> dict[int, int | None]:
        from kafka import TopicPartition

        return {p: self.consumer.committed(TopicPartition(self.topic, p)) for p in partitions}

    def close(self) -> None:
        self.consumer.close()


class _ConfluentDriver:
    def __init__(
        self, bootstrap: str, group: str, topic: str, instance_id: str | None, on_event: Any
    ) -> None:
        from confluent_kafka import Consumer

        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": session_ms(instance_id),
            "heartbeat.interval.ms": HEARTBEAT_MS,
        }
        if instance_id is not None:
            config["group.instance.id"] = instance_id
        self.topic = topic
        self.consumer = Consumer(config)
        self.consumer.subscribe(
            [topic],
            on_assign=lambda _, tps: on_event("assign", tps),
            on_revoke=lambda _, tps: on_event("revoke", tps),
        )

    def poll(self) -> list[Record]:
        records: list[Record] = []
        message = self.consumer.poll(0.1)
        while message is not None:
            if message.error() is None:
                records.append((message.partition(), message.offset(), message.value()))
            if len(records) >= 500:
                break
            message = self.consumer.poll(0)
        return records

    def assignment(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self.consumer.assignment())

    def commit(self, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        self.consumer.commit(
            offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False
        )

    def committed(self, partitions: list[int]) -> dict[int, int | None]:
        from confluent_kafka import TopicPartition

        found = self.consumer.committed([TopicPartition(self.topic, p) for p in partitions], timeout=10)
        return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}

    def close(self) -> None:
        self.consumer.close()


class _AioKafkaDriver:
    """aiokafka on a private event loop owned by the member's thread; the loop turns inside each call."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, instance_id: str | None, on_event: Any
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.topic = topic
        self.consumer: Any = self.loop.run_until_complete(
            self._start(bootstrap, group, topic, instance_id, on_event)
        )

    @staticmethod
    async def _start(bootstrap: str, group: str, topic: str, instance_id: str | None, on_event: Any) -> Any:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                on_event("revoke", revoked)

            def on_partitions_assigned(self, assigned: Any) -> None:
                on_event("assign", assigned)

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            group_instance_id=instance_id,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=session_ms(instance_id),
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        await consumer.start()
        consumer.subscribe([topic], listener=Listener())
        return consumer

    def poll(self) -> list[Record]:
        batches = self.loop.run_until_complete(self.consumer.getmany(timeout_ms=100))
        return [(r.partition, r.offset, r.value) for rs in batches.values() for r in rs]

    def assignment(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self.consumer.assignment())

    def commit(self, offsets: dict[int, int]) -> None:
        from aiokafka import TopicPartition

        self.loop.run_until_complete(
            self.consumer.commit({TopicPartition(self.topic, p): o for p, o in offsets.items()})
        )

    def committed(self, partitions: list[int]) -> dict[int, int | None]:
        from aiokafka import TopicPartition

        async def fetch() -> dict[int, int | None]:
            return {p: await self.consumer.committed(TopicPartition(self.topic, p)) for p in partitions}

        return self.loop.run_until_complete(fetch())

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.consumer.stop())
        finally:
            self.loop.close()


class _JavaPartition(NamedTuple):
    partition: int


class _JavaDriver:
    """The Java client in a JVM of its own (KafkaCompatProbe's `member` command), one line per command.

    Rebalance callbacks run inside the JVM's poll and come back as lines of the poll's answer. If this
    process dies, the JVM sees the end of its input and halts at once, so a killed member stays killed.
    """

    def __init__(
        self, bootstrap: str, group: str, topic: str, instance_id: str | None, on_event: Any
    ) -> None:
        from compat_tests.java_probe import probe_command

        self.on_event = on_event
        self.assigned: frozenset[int] = frozenset()
        self.stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [*probe_command(), "member", bootstrap, group, topic, instance_id or "-",
             str(session_ms(instance_id)), str(HEARTBEAT_MS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self._answer()

    def _answer(self, command: str | None = None) -> list[list[str]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        if command is not None:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        lines: list[list[str]] = []
        while True:
            line = self.process.stdout.readline()
            if not line:
                self.stderr.seek(0)
                detail = self.stderr.read().decode(errors="replace")[-3000:]
                raise RuntimeError(f"Java member ended (status {self.process.wait()}): {detail}")
            words = line.split()
            if words == ["done"]:
                return lines
            if words[0] == "event":
                parts = [] if words[2] == "-" else [_JavaPartition(int(p)) for p in words[2].split(",")]
                self.on_event(words[1], parts)
            else:
                lines.append(words)

    def poll(self) -> list[Record]:
        records: list[Record] = []
        for words in self._answer("poll"):
            if words[0] == "record":
                value = None if words[3] == "-" else (b"" if words[3] == "=" else bytes.fromhex(words[3]))
                records.append((int(words[1]), int(words[2]), value))
            elif words[0] == "assignment":
                self.assigned = frozenset() if words[1] == "-" else frozenset(map(int, words[1].split(",")))
        return records

    def assignment(self) -> frozenset[int]:
        return self.assigned

    def commit(self, offsets: dict[int, int]) -> None:
        self._answer("commit " + ",".join(f"{p}:{o}" for p, o in offsets.items()))

    def committed(self, partitions: list[int]) -> dict[int, int | None]:
        found = {int(w[1]): int(w[2]) for w in self._answer("committed " + ",".join(map(str, partitions)))}
        return {p: (o if o >= 0 else None) for p, o in found.items()}

    def close(self) -> None:
        try:
            self._answer("close")
            self.process.wait(30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.stderr.close()


_DRIVERS: dict[str, Callable[..., Any]] = {
    "kafka-python": _KafkaPythonDriver,
    "confluent": _ConfluentDriver,
    "aiokafka": _AioKafkaDriver,
    "java": _JavaDriver,
}


# --- the member ---------------------------------------------------------------------------------------


class Member:
    """A subscribed group consumer of `client` on its own polling thread. The thread owns the client;
    the test reads snapshots and sends commands (commit, committed, close) that the thread runs between
    polls."""

    def __init__(
        self,
        client: str,
        bootstrap: str,
        group: str,
        topic: str,
        *,
        instance_id: str | None = None,
        held: bool = False,
    ) -> None:
        """`held`: build and subscribe the client (for a Java member: start its JVM) but do not poll it
        until `release()`; only for clients in JOINS_ON_FIRST_POLL, which do not join before polling."""
        assert not held or client in JOINS_ON_FIRST_POLL, f"{client} joins as soon as it subscribes"
        self.client = client
        self.events: list[tuple[str, frozenset[int]]] = []
        self._args = (bootstrap, group, topic, instance_id)
        self._lock = threading.Lock()
        self._seen: list[Record] = []
        self._partitions: frozenset[int] = frozenset()
        self._commands: queue.Queue[tuple[Callable[[Any], Any], Future[Any]]] = queue.Queue()
        self._stop = threading.Event()
        self._released = threading.Event()
        if not held:
            self._released.set()
        self._started: Future[None] = Future()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"member-{client}", daemon=True)
        self._thread.start()
        self._started.result(90)  # a Java member is a JVM: its start alone can take 30 s on a loaded machine

    def _on_event(self, kind: str, tps: Any) -> None:
        with self._lock:
            self.events.append((kind, frozenset(tp.partition for tp in tps)))

    def _run(self) -> None:
        try:
            driver = _DRIVERS[self.client](*self._args, self._on_event)
        except BaseException as exc:
            self._started.set_exception(exc)
            return
        self._started.set_result(None)
        try:
            while not self._released.wait(0.05):
                if self._stop.is_set():
                    return
            while not self._stop.is_set():
                while True:
                    try:
                        command, future = self._commands.get_nowait()
                    except queue.Empty:
                        break
                    try:
                        future.set_result(command(driver))
                    except BaseException as exc:
                        future.set_exception(exc)
                records = driver.poll()
                assigned = driver.assignment()
                with self._lock:
                    self._seen.extend(records)
                    self._partitions = assigned
        except BaseException as exc:
            self.error = exc
        finally:
            try:
                driver.close()
            finally:
                while not self._commands.empty():
                    self._commands.get_nowait()[1].set_exception(RuntimeError("member closed"))

    def release(self) -> None:
        """Start polling a member created `held`: its first poll joins the group."""
        self._released.set()

    def _call(self, command: Callable[[Any], Any], timeout: float = 30) -> Any:
        if not self._thread.is_alive():
            raise RuntimeError(f"member thread ended: {self.error!r}")
        future: Future[Any] = Future()
        self._commands.put((command, future))
        return future.result(timeout)

    def partitions(self) -> frozenset[int]:
        with self._lock:
            return self._partitions

    def seen(self) -> list[Record]:
        with self._lock:
            return list(self._seen)

    def clear_events(self) -> None:
        with self._lock:
            self.events.clear()

    def event_list(self) -> list[tuple[str, frozenset[int]]]:
        with self._lock:
            return list(self.events)

    def commit(self, offsets: dict[int, int]) -> None:
        """Commit these next-offsets (partition -> offset) synchronously."""
        self._call(lambda driver: driver.commit(offsets))

    def committed(self, partitions: list[int]) -> dict[int, int | None]:
        return self._call(lambda driver: driver.committed(partitions))  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop polling and close the client (a dynamic member sends LeaveGroup, a static one does not)."""
        self._stop.set()
        self._thread.join(40)
        assert not self._thread.is_alive(), f"{self.client} member did not close"

    def __enter__(self) -> Member:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll an observed condition until it holds or `timeout` seconds pass (no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# --- data path: one-shot producers and assign-based consumers ---------------------------------------


def produce(
    client: str,
    bootstrap: str,
    topic: str,
    values: list[bytes],
    *,
    partition: int = 0,
    timestamps: list[int] | None = None,
    codec: str | None = None,
    linger_ms: int | None = None,
    batch_bytes: int | None = None,
    max_request_bytes: int | None = None,
) -> list[int | BaseException]:
    """Produce `values` in order; the result per record is its offset or the error the client reported."""
    stamps: list[int | None] = list(timestamps) if timestamps is not None else [None] * len(values)
    if client == "kafka-python":
        return _kp_produce(
            bootstrap, topic, values, partition, stamps, codec, linger_ms, batch_bytes, max_request_bytes
        )
    if client == "confluent":
        return _ck_produce(
            bootstrap, topic, values, partition, stamps, codec, linger_ms, batch_bytes, max_request_bytes
        )
    if client == "aiokafka":
        return asyncio.run(
            _aio_produce(
                bootstrap, topic, values, partition, stamps, codec, linger_ms, batch_bytes, max_request_bytes
            )
        )
    raise ValueError(client)


def _kp_produce(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    partition: int,
    stamps: list[int | None],
    codec: str | None,
    linger_ms: int | None,
    batch_bytes: int | None,
    max_request_bytes: int | None,
) -> list[int | BaseException]:
    from kafka import KafkaProducer

    config: dict[str, Any] = {"bootstrap_servers": bootstrap, "compression_type": codec, "retries": 0}
    if linger_ms is not None:
        config["linger_ms"] = linger_ms
    if batch_bytes is not None:
        config["batch_size"] = batch_bytes
    if max_request_bytes is not None:
        config["max_request_size"] = max_request_bytes
    producer = KafkaProducer(**config)
    try:
        futures = [
            producer.send(topic, value=v, partition=partition, timestamp_ms=ts)
            for v, ts in zip(values, stamps, strict=True)
        ]
        producer.flush(30)
        results: list[int | BaseException] = []
        for future in futures:
            try:
                results.append(future.get(30).offset)
            except Exception as exc:
                results.append(exc)
        return results
    finally:
        producer.close(10)


def _ck_produce(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    partition: int,
    stamps: list[int | None],
    codec: str | None,
    linger_ms: int | None,
    batch_bytes: int | None,
    max_request_bytes: int | None,
) -> list[int | BaseException]:
    from confluent_kafka import KafkaException, Producer

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "compression.type": codec or "none"}
    if linger_ms is not None:
        config["linger.ms"] = linger_ms
    if batch_bytes is not None:
        config["batch.size"] = batch_bytes
    if max_request_bytes is not None:
        config["message.max.bytes"] = max_request_bytes
    producer = Producer(config)
    results: list[int | BaseException] = [RuntimeError("no delivery report")] * len(values)

    def reporter(index: int) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            results[index] = KafkaException(err) if err is not None else msg.offset()

        return report

    for index, (value, ts) in enumerate(zip(values, stamps, strict=True)):
        kwargs: dict[str, Any] = {"value": value, "partition": partition, "on_delivery": reporter(index)}
        if ts is not None:
            kwargs["timestamp"] = ts
        producer.produce(topic, **kwargs)
        producer.poll(0)
    assert producer.flush(30) == 0, "confluent producer did not deliver everything in time"
    return results


async def _aio_produce(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    partition: int,
    stamps: list[int | None],
    codec: str | None,
    linger_ms: int | None,
    batch_bytes: int | None,
    max_request_bytes: int | None,
) -> list[int | BaseException]:
    from aiokafka import AIOKafkaProducer

    # acks=all (the Java client's default; aiokafka's is 1): answered means committed, so the end offset
    # (the high watermark) counts every answered record on a cluster as well
    config: dict[str, Any] = {"bootstrap_servers": bootstrap, "compression_type": codec, "acks": "all"}
    if linger_ms is not None:
        config["linger_ms"] = linger_ms
    if batch_bytes is not None:
        config["max_batch_size"] = batch_bytes
    if max_request_bytes is not None:
        config["max_request_size"] = max_request_bytes
    producer = AIOKafkaProducer(**config)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value=v, partition=partition, timestamp_ms=ts)
            for v, ts in zip(values, stamps, strict=True)
        ]
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
    finally:
        await producer.stop()
    return [o if isinstance(o, BaseException) else o.offset for o in outcomes]


ConsumedRecord = tuple[int, bytes | None, int]  # offset, value, timestamp


def consume(
    client: str,
    bootstrap: str,
    topic: str,
    count: int,
    *,
    partition: int = 0,
    start: int = 0,
    timeout: float = 30,
) -> list[ConsumedRecord]:
    """Read up to `count` records of one partition from offset `start` with an assign-based consumer."""
    fetch_bytes = 4_000_000
    deadline = time.monotonic() + timeout
    out: list[ConsumedRecord] = []
    if client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            max_partition_fetch_bytes=fetch_bytes,
            fetch_max_bytes=fetch_bytes,
        )
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, start)
            while len(out) < count and time.monotonic() < deadline:
                for rs in consumer.poll(timeout_ms=200).values():
                    out.extend((r.offset, r.value, r.timestamp) for r in rs)
        finally:
            consumer.close()
        return out
    if client == "confluent":
        from confluent_kafka import Consumer, TopicPartition

        ck = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "compat-assign-only",
                "enable.auto.commit": False,
                "max.partition.fetch.bytes": fetch_bytes,
                "fetch.max.bytes": fetch_bytes,
                "receive.message.max.bytes": fetch_bytes + 100_000,
            }
        )
        try:
            ck.assign([TopicPartition(topic, partition, start)])
            while len(out) < count and time.monotonic() < deadline:
                message = ck.poll(0.2)
                if message is None:
                    continue
                if message.error():
                    raise AssertionError(f"consumer error: {message.error()}")
                out.append((message.offset(), message.value(), message.timestamp()[1]))
        finally:
            ck.close()
        return out
    if client == "aiokafka":

        async def run() -> list[ConsumedRecord]:
            from aiokafka import AIOKafkaConsumer, TopicPartition

            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                enable_auto_commit=False,
                max_partition_fetch_bytes=fetch_bytes,
                fetch_max_bytes=fetch_bytes,
            )
            await consumer.start()
            try:
                tp = TopicPartition(topic, partition)
                consumer.assign([tp])
                consumer.seek(tp, start)
                while len(out) < count and time.monotonic() < deadline:
                    for rs in (await consumer.getmany(tp, timeout_ms=200)).values():
                        out.extend((r.offset, r.value, r.timestamp) for r in rs)
            finally:
                await consumer.stop()
            return out

        return asyncio.run(run())
    raise ValueError(client)


def end_offset(client: str, bootstrap: str, topic: str, partition: int = 0) -> int:
    """The partition's "latest" offset (ListOffsets -1) as the client reports it."""
    if client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap)
        try:
            tp = TopicPartition(topic, partition)
            return int(consumer.end_offsets([tp])[tp])
        finally:
            consumer.close()
    if client == "confluent":
        from confluent_kafka import Consumer, TopicPartition

        ck = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-assign-only"})
        try:
            return int(ck.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
        finally:
            ck.close()
    if client == "aiokafka":

        async def run() -> int:
            from aiokafka import AIOKafkaConsumer, TopicPartition

            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
            await consumer.start()
            try:
                tp = TopicPartition(topic, partition)
                return int((await consumer.end_offsets([tp]))[tp])
            finally:
                await consumer.stop()

        return asyncio.run(run())
    raise ValueError(client)


# --- child-process member (for SIGKILL tests) -------------------------------------------------------


def _child_main(argv: list[str]) -> None:
    client, bootstrap, group, topic = argv
    member = Member(client, bootstrap, group, topic)
    reported: frozenset[int] | None = None
    while member.error is None:
        parts = member.partitions()
        if parts != reported:
            reported = parts
            print("ASSIGNED", ",".join(map(str, sorted(parts))), flush=True)
        time.sleep(0.05)
    raise SystemExit(f"member failed: {member.error!r}")


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] != "member":
        raise SystemExit("usage: python -m compat_tests.group_clients member CLIENT BOOTSTRAP GROUP TOPIC")
    _child_main(sys.argv[2:])
