"""The Java client (kafka-clients 3.9.2): admin, idempotent produce with every codec, groups, offsets.

compat_tests/java/KafkaCompatProbe.java (see compat_tests/java_probe.py for where the client jar comes
from) runs as a separate JVM per command; it prints what the client saw, and these tests check that
against what confluent-kafka wrote or reads. test_groups_matrix.py runs the Java client's group
scenarios through the same probe's interactive `member` command.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable

import pytest

from compat_tests.clients import ck_consume_partitions
from compat_tests.java_probe import probe_command, unavailable_reason

BASE_TS = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

JavaProbe = Callable[..., list[list[str]]]


@pytest.fixture(scope="session")
def java() -> JavaProbe:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    command = probe_command()

    def run(*args: str, timeout: float = 90) -> list[list[str]]:
        result = subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, (
            f"java probe {args} failed:\n{result.stdout[-2000:]}{result.stderr[-4000:]}"
        )
        return [line.split(" ") for line in result.stdout.splitlines() if line]

    return run


def _lines(output: list[list[str]], word: str) -> list[list[str]]:
    return [fields[1:] for fields in output if fields[0] == word]


def test_java_admin_topic_lifecycle(bootstrap: str, topic_name: str, java: JavaProbe) -> None:
    from confluent_kafka.admin import AdminClient

    out = java("admin", bootstrap, topic_name)
    assert _lines(out, "created") == [[topic_name]]
    assert _lines(out, "recreate-error") == [["TopicExistsException"]]
    nodes = _lines(out, "node")
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert sorted(int(n[0]) for n in nodes) == sorted(metadata.brokers)
    assert _lines(out, "cluster-id") == [[metadata.cluster_id]]
    assert _lines(out, "listed") == [["true"]]
    partitions = _lines(out, "partition")
    assert [p[0] for p in partitions] == ["0", "1", "2"]
    assert all(p[2] in {n[0] for n in nodes} and p[4] == "1" and p[6] == "1" for p in partitions)
    assert _lines(out, "topic-id") == [["true"]]
    assert _lines(out, "config") == [
        ["retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"],
        ["cleanup.policy", "delete", "DEFAULT_CONFIG"],
    ]
    assert _lines(out, "partitions-after-increase") == [["4"]]
    assert _lines(out, "deleted") == [[topic_name]]
    assert _lines(out, "redelete-error") == [["UnknownTopicOrPartitionException"]]


@pytest.mark.parametrize("codec", CODECS)
def test_java_idempotent_produce_is_read_by_librdkafka(
    bootstrap: str, make_topic: Callable[..., str], java: JavaProbe, codec: str
) -> None:
    topic = make_topic(3)
    count = 300
    out = java("produce", bootstrap, topic, codec, str(count))
    acked = {int(i): (int(p), int(o)) for i, p, o in _lines(out, "acked")}
    assert sorted(acked) == list(range(count))
    for partition in range(3):
        offsets = [acked[i][1] for i in range(count) if acked[i][0] == partition]
        assert offsets == list(range(count // 3)), f"partition {partition} offsets {offsets[:10]}..."
    read = ck_consume_partitions(bootstrap, topic, dict.fromkeys(range(3), count // 3))
    by_position = {(m.partition(), m.offset()): m for messages in read.values() for m in messages}
    assert len(by_position) == count
    for i, position in acked.items():
        message = by_position[position]
        assert message.key() == f"key-{i}".encode()
        expected = None if i % 7 == 0 else f"value {i} {'x' * (i % 50)}".encode()
        assert message.value() == expected
        assert message.headers() == [("n", str(i).encode())]
        assert message.timestamp()[1] == BASE_TS + i


def test_java_group_member_reads_commits_and_resumes(
    bootstrap: str, make_topic: Callable[..., str], java: JavaProbe
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = make_topic(3)
    group = f"java-group-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    sent: dict[int, tuple[bytes, bytes | None, list[tuple[str, bytes]]]] = {}
    written: dict[tuple[int, int], int] = {}  # (partition, offset) -> record number

    def produce(start: int, stop: int) -> None:
        for i in range(start, stop):
            value = None if i % 5 == 0 else (b"" if i % 5 == 1 else bytes([i % 256]) * (i % 40 + 1))
            headers = [("h", f"{i}".encode()), ("empty", b"")] if i % 2 else []
            sent[i] = (f"k{i}".encode(), value, headers)

            def delivered(err: object, msg: object, i: int = i) -> None:
                assert err is None, err
                written[(msg.partition(), msg.offset())] = i  # type: ignore[attr-defined]

            producer.produce(topic, key=sent[i][0], value=value, partition=i % 3, headers=headers or None,
                             timestamp=BASE_TS + i, on_delivery=delivered)
        assert producer.flush(15) == 0

    def hexed(data: bytes | None) -> str:
        return "-" if data is None else ("=" if data == b"" else data.hex())

    def expected_line(position: tuple[int, int]) -> list[str]:
        i = written[position]
        key, value, headers = sent[i]
        header_text = "".join(f"{k}={hexed(v)}," for k, v in headers) or "-"
        return [str(position[0]), str(position[1]), str(BASE_TS + i), hexed(key), hexed(value), header_text]

    produce(0, 150)
    first = java("consume-group", bootstrap, topic, group, "150")
    assert sorted(_lines(first, "record")) == sorted(expected_line(p) for p in list(written))
    ends = {p: 1 + max(o for (q, o) in written if q == p) for p in range(3)}
    assert sorted(_lines(first, "committed")) == sorted([str(p), str(ends[p])] for p in range(3))
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = checker.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == ends
    finally:
        checker.close()

    described = java("describe-group", bootstrap, group)
    assert _lines(described, "group-listed") == [["true"]]
    assert _lines(described, "group-state") == [["Empty", "members", "0", "protocol", "-"]]
    expected_offsets = sorted([topic, str(p), str(ends[p])] for p in range(3))
    assert sorted(_lines(described, "group-offset")) == expected_offsets

    before = set(written)
    produce(150, 180)
    second = java("consume-group", bootstrap, topic, group, "30")
    new_positions = sorted(set(written) - before)
    assert sorted(_lines(second, "record")) == sorted(expected_line(p) for p in new_positions)


def test_java_offset_lookups_and_out_of_range(bootstrap: str, topic: str, java: JavaProbe) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=BASE_TS + 10 * i)
    assert producer.flush(15) == 0
    out = java("offsets", bootstrap, topic, str(BASE_TS + 65))  # first record at or after: i = 7
    assert _lines(out, "beginning") == [["0"]]
    assert _lines(out, "end") == [["20"]]
    assert _lines(out, "for-time") == [["7", str(BASE_TS + 70)]]
    assert _lines(out, "first-after-seek") == [["7", str(BASE_TS + 70)]]
    assert _lines(out, "out-of-range") == [["OffsetOutOfRangeException"]]
