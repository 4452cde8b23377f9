"""`kafkacompat topics|configs|produce|consume` run as subprocesses against the broker, checked against
what real clients see (and vice versa)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from compat_tests.clients import ck_consume_all, kp_consume_all


def cli(
    bootstrap: str, *args: str, input: bytes | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    command, *rest = args
    result = subprocess.run(
        [sys.executable, "-m", "kafkacompat", command, *rest, "--bootstrap-server", bootstrap],
        input=input,
        capture_output=True,
        timeout=60,
    )
    completed = subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode("utf-8", "replace"), result.stderr.decode()
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kafkacompat {' '.join(args)} failed: {completed.stderr}")
    return completed


def test_topics_lifecycle(bootstrap: str, topic_name: str) -> None:
    created = cli(
        bootstrap,
        "topics",
        "create",
        "--topic",
        topic_name,
        "--partitions",
        "2",
        "--config",
        "retention.ms=90000",
    )
    assert created.stdout.strip() == f"Created topic {topic_name}."
    again = cli(bootstrap, "topics", "create", "--topic", topic_name, "--partitions", "2", check=False)
    assert again.returncode == 1 and "already exists" in again.stderr
    assert cli(bootstrap, "topics", "create", "--topic", topic_name, "--if-not-exists").returncode == 0
    assert topic_name in cli(bootstrap, "topics", "list").stdout.split()

    cli(bootstrap, "topics", "alter", "--topic", topic_name, "--partitions", "3")
    described = cli(bootstrap, "topics", "describe", "--topic", topic_name).stdout.splitlines()
    head, *partitions = described
    assert head.startswith(f"Topic: {topic_name}\tTopicId: ")
    # the broker's default.replication.factor (1, or 3 with `--cluster`), as librdkafka sees the topic
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic_name, timeout=10)
    factor = len(metadata.topics[topic_name].partitions[0].replicas)
    assert f"\tPartitionCount: 3\tReplicationFactor: {factor}\tConfigs: retention.ms=90000" in head
    assert [line.split("\t")[2] for line in partitions] == ["Partition: 0", "Partition: 1", "Partition: 2"]
    shrink = cli(bootstrap, "topics", "alter", "--topic", topic_name, "--partitions", "2", check=False)
    assert shrink.returncode == 1

    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic_name, timeout=10)
    assert len(metadata.topics[topic_name].partitions) == 3

    cli(bootstrap, "topics", "delete", "--topic", topic_name)
    assert topic_name not in cli(bootstrap, "topics", "list").stdout.split()
    missing = cli(bootstrap, "topics", "describe", "--topic", topic_name, check=False)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_configs_describe_and_alter(bootstrap: str, make_topic: Callable[..., str]) -> None:
    name = make_topic(1, {"retention.ms": "90000"})
    described = cli(bootstrap, "configs", "describe", "--entity-type", "topics", "--entity-name", name).stdout
    assert described.splitlines() == [
        f"Dynamic configs for topic {name} are:",
        "  retention.ms=90000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=90000}",
    ]
    altered = cli(
        bootstrap,
        "configs",
        "alter",
        "--entity-type",
        "topics",
        "--entity-name",
        name,
        "--add-config",
        "max.message.bytes=4096,cleanup.policy=[compact,delete]",
        "--delete-config",
        "retention.ms",
    )
    assert altered.stdout.strip() == f"Completed updating config for topic {name}."

    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, name)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["max.message.bytes"].value == "4096"
    assert configs["cleanup.policy"].value == "compact,delete"
    assert configs["retention.ms"].is_default

    every = cli(bootstrap, "configs", "describe", "--topic", name, "--all").stdout.splitlines()
    assert every[0] == f"All configs for topic {name} are:"
    assert any(line.startswith("  segment.bytes=") for line in every)
    bad = cli(
        bootstrap, "configs", "alter", "--topic", name, "--add-config", "segment.bytes=tiny", check=False
    )
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr


def test_configs_describe_topic_lists_only_its_own_dynamic_configs(
    bootstrap: str, make_topic: Callable[..., str]
) -> None:
    name = make_topic(1, {"retention.ms": "90000"})
    # a cluster-wide dynamic broker default that topics inherit (delete.retention.ms falls back to it)
    cli(
        bootstrap,
        "configs",
        "alter",
        "--entity-type",
        "brokers",
        "--entity-default",
        "--add-config",
        "log.cleaner.delete.retention.ms=4000000",
    )
    try:
        every = cli(bootstrap, "configs", "describe", "--topic", name, "--all").stdout
        assert "  delete.retention.ms=4000000 " in every  # the topic does inherit it
        described = cli(bootstrap, "configs", "describe", "--topic", name).stdout
        assert described.splitlines() == [
            f"Dynamic configs for topic {name} are:",
            "  retention.ms=90000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=90000}",
        ]
    finally:
        cli(
            bootstrap,
            "configs",
            "alter",
            "--entity-type",
            "brokers",
            "--entity-default",
            "--delete-config",
            "log.cleaner.delete.retention.ms",
        )


def test_groups_reset_offsets_without_execute_warns_that_nothing_changed(
    bootstrap: str, make_topic: Callable[..., str]
) -> None:
    import uuid

    name = make_topic(1)
    group = f"cli-reset-{uuid.uuid4().hex[:8]}"
    cli(bootstrap, "produce", "--topic", name, input=b"a\nb\nc\n")
    plan = cli(bootstrap, "groups", "reset-offsets", "--group", group, "--topic", name, "--to-latest")
    assert plan.stdout.split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET", group, name, "0", "3"]
    assert "--execute" in plan.stderr and "WARN" in plan.stderr
    never = cli(bootstrap, "groups", "describe", "--group", group, check=False)
    assert never.returncode == 1 and "does not exist" in never.stderr  # nothing was committed
    dry = cli(
        bootstrap, "groups", "reset-offsets", "--group", group, "--topic", name, "--to-latest", "--dry-run"
    )
    assert dry.stdout == plan.stdout and dry.stderr == ""
    done = cli(
        bootstrap, "groups", "reset-offsets", "--group", group, "--topic", name, "--to-latest", "--execute"
    )
    assert done.stdout == plan.stdout and done.stderr == ""
    described = cli(bootstrap, "groups", "describe", "--group", group).stdout
    assert [line.split()[:4] for line in described.splitlines() if line.startswith(group)] == [
        [group, name, "0", "3"]
    ]


def test_configs_brokers(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    node = str(admin.describe_cluster().result(10).nodes[0].id)
    every = cli(bootstrap, "configs", "describe", "--entity-type", "brokers", "--entity-name", node, "--all")
    lines = every.stdout.splitlines()
    assert lines[0] == f"All configs for broker {node} are:"
    assert any(line.startswith("  num.partitions=") for line in lines)
    refused = cli(
        bootstrap, "configs", "alter", "--broker", node, "--add-config", "log.retention.hours=1", check=False
    )
    assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr


def test_produce_then_consume_with_keys_and_headers(bootstrap: str, make_topic: Callable[..., str]) -> None:
    name = make_topic(3)
    lines = b"".join(b"h%d:x%d\tkey-%d\tvalue %d\n" % (i, i, i, i) for i in range(12))
    cli(
        bootstrap,
        "produce",
        "--topic",
        name,
        "--property",
        "parse.key=true",
        "--property",
        "parse.headers=true",
        input=lines,
    )

    from kafka.partitioner.default import murmur2

    by_partition: dict[int, list[tuple[bytes, bytes, list]]] = {p: [] for p in range(3)}
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(name, p) for p in range(3)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        deadline = time.monotonic() + 15
        while sum(len(v) for v in by_partition.values()) < 12 and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                by_partition[tp.partition].extend((r.key, r.value, list(r.headers)) for r in records)
    finally:
        consumer.close()
    assert sum(len(v) for v in by_partition.values()) == 12
    for partition, records in by_partition.items():
        for key, value, headers in records:
            # the Java client's default partitioner places each key where the CLI put it
            assert (murmur2(key) & 0x7FFFFFFF) % 3 == partition
            i = int(key.split(b"-")[1])
            assert value == f"value {i}".encode() and headers == [(f"h{i}", f"x{i}".encode())]

    out = cli(
        bootstrap,
        "consume",
        "--topic",
        name,
        "--from-beginning",
        "--max-messages",
        "12",
        "--property",
        "print.key=true",
        "--property",
        "print.headers=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "key.separator=|",
    )
    printed = sorted(out.stdout.splitlines())
    expected = sorted(
        f"Partition:{p}|Offset:{offset}|{h[0][0]}:{h[0][1].decode()}|{k.decode()}|{v.decode()}"
        for p, records in by_partition.items()
        for offset, (k, v, h) in enumerate(records)
    )
    assert printed == expected
    assert "Processed a total of 12 messages" in out.stderr


def test_produce_creates_a_missing_topic_through_metadata(bootstrap: str, topic_name: str) -> None:
    cli(bootstrap, "produce", "--topic", topic_name, input=b"first\nsecond\n")
    assert topic_name in cli(bootstrap, "topics", "list").stdout.split()
    out = cli(bootstrap, "consume", "--topic", topic_name, "--from-beginning", "--max-messages", "2")
    assert sorted(out.stdout.splitlines()) == ["first", "second"]


def test_consume_max_messages_stops_at_n_across_partitions(
    bootstrap: str, make_topic: Callable[..., str]
) -> None:
    name = make_topic(4)
    lines = b"".join(b"key-%d\tvalue %d\n" % (i, i) for i in range(40))
    cli(bootstrap, "produce", "--topic", name, "--property", "parse.key=true", input=lines)
    for n in (1, 3, 10):
        out = cli(bootstrap, "consume", "--topic", name, "--from-beginning", "--max-messages", str(n))
        assert len(out.stdout.splitlines()) == n, out.stdout
        assert f"Processed a total of {n} messages" in out.stderr


def test_consume_partition_offset_and_timeout(bootstrap: str, make_topic: Callable[..., str]) -> None:
    name = make_topic(1)
    cli(bootstrap, "produce", "--topic", name, input=b"".join(b"line %d\n" % i for i in range(5)))
    tail = cli(
        bootstrap, "consume", "--topic", name, "--partition", "0", "--offset", "3", "--timeout-ms", "1500"
    )
    assert tail.stdout.splitlines() == ["line 3", "line 4"]
    assert "Processed a total of 2 messages" in tail.stderr
    stamped = cli(
        bootstrap,
        "consume",
        "--topic",
        name,
        "--from-beginning",
        "--max-messages",
        "1",
        "--property",
        "print.timestamp=true",
    )
    kind, _, rest = stamped.stdout.partition(":")
    assert kind == "CreateTime" and rest.split("\t")[1].strip() == "line 0"
    latest = cli(bootstrap, "consume", "--topic", name, "--timeout-ms", "1000")
    assert latest.stdout == "" and "Processed a total of 0 messages" in latest.stderr


def test_consume_after_delete_records_starts_at_log_start(
    bootstrap: str, make_topic: Callable[..., str]
) -> None:
    name = make_topic(1)
    cli(bootstrap, "produce", "--topic", name, input=b"".join(b"m%d\n" % i for i in range(6)))
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.delete_records([TopicPartition(name, 0, 4)]).values()
    assert future.result(10).low_watermark == 4
    out = cli(
        bootstrap,
        "consume",
        "--topic",
        name,
        "--from-beginning",
        "--timeout-ms",
        "1500",
        "--property",
        "print.offset=true",
    )
    assert out.stdout.splitlines() == ["Offset:4\tm4", "Offset:5\tm5"]
    earliest = cli(
        bootstrap,
        "consume",
        "--topic",
        name,
        "--partition",
        "0",
        "--offset",
        "earliest",
        "--max-messages",
        "1",
    )
    assert earliest.stdout.splitlines() == ["m4"]
    # a position below the log start is out of range: reset to the end (latest), as the console consumer does
    below = cli(
        bootstrap, "consume", "--topic", name, "--partition", "0", "--offset", "1", "--timeout-ms", "1000"
    )
    assert below.stdout == "" and "Processed a total of 0 messages" in below.stderr


@pytest.mark.parametrize("line", [b"no separator here\n"])
def test_produce_reports_unparsable_lines(
    bootstrap: str, make_topic: Callable[..., str], line: bytes
) -> None:
    name = make_topic(1)
    result = cli(
        bootstrap,
        "produce",
        "--topic",
        name,
        "--property",
        "parse.key=true",
        input=b"k\tv\n" + line,
        check=False,
    )
    assert result.returncode == 1 and "No key separator found on line number 2" in result.stderr
    records = kp_consume_all(bootstrap, name, 0, 1, timeout=5)
    assert [(r.key, r.value) for r in records] == [(b"k", b"v")]  # lines before the bad one were sent


@pytest.mark.parametrize(("acks", "codec"), [("0", "none"), ("1", "gzip"), ("all", "zstd"), ("-1", "lz4")])
def test_produce_acks_and_codecs(
    bootstrap: str, make_topic: Callable[..., str], acks: str, codec: str
) -> None:
    name = make_topic(1)
    lines = b"".join(f"record {i}\n".encode() for i in range(50))
    cli(
        bootstrap,
        "produce",
        "--topic",
        name,
        "--request-required-acks",
        acks,
        "--compression-codec",
        codec,
        input=lines,
    )
    messages = ck_consume_all(bootstrap, name, 0, 50, timeout=10)  # librdkafka reads every codec
    assert [m.value() for m in messages] == [f"record {i}".encode() for i in range(50)]
    printed = cli(bootstrap, "consume", "--topic", name, "--from-beginning", "--max-messages", "50")
    assert printed.stdout.splitlines() == [f"record {i}" for i in range(50)]


def test_configs_broker_loggers(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    node = str(admin.describe_cluster().result(10).nodes[0].id)
    listed = cli(bootstrap, "configs", "describe", "--entity-type", "broker-loggers", "--entity-name", node)
    lines = listed.stdout.splitlines()
    assert lines[0] == f"All configs for broker-logger {node} are:"
    assert any(line.startswith("  root=") for line in lines)
    name = next(line.split("=")[0].strip() for line in lines[1:] if not line.startswith("  root="))
    try:
        cli(
            bootstrap,
            "configs",
            "alter",
            "--entity-type",
            "broker-loggers",
            "--entity-name",
            node,
            "--add-config",
            f"{name}=TRACE",
        )
        again = cli(
            bootstrap, "configs", "describe", "--entity-type", "broker-loggers", "--entity-name", node
        ).stdout
        assert f"  {name}=TRACE sensitive=false synonyms={{}}" in again.splitlines()
        bad = cli(
            bootstrap,
            "configs",
            "alter",
            "--entity-type",
            "broker-loggers",
            "--entity-name",
            node,
            "--add-config",
            f"{name}=LOUD",
            check=False,
        )
        assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr
    finally:
        cli(
            bootstrap,
            "configs",
            "alter",
            "--entity-type",
            "broker-loggers",
            "--entity-name",
            node,
            "--delete-config",
            name,
        )


def test_consume_read_committed_leaves_out_aborted_transactions(
    bootstrap: str, make_topic: Callable[..., str]
) -> None:
    import uuid

    from confluent_kafka import Producer

    name = make_topic(1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"cli-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(name, value=b"aborted %d" % i)
    assert producer.flush(30) == 0  # in the log before the abort
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(name, value=b"committed %d" % i)
    producer.commit_transaction(30)
    cli(bootstrap, "produce", "--topic", name, input=b"plain\n")  # not transactional: read by both

    def consume(isolation: str) -> list[str]:
        out = cli(
            bootstrap,
            "consume",
            "--topic",
            name,
            "--from-beginning",
            "--timeout-ms",
            "1500",
            "--isolation-level",
            isolation,
        )
        return out.stdout.splitlines()

    assert consume("read_committed") == ["committed 0", "committed 1", "plain"]
    # the markers take offsets but are never records
    assert consume("read_uncommitted") == [
        "aborted 0",
        "aborted 1",
        "aborted 2",
        "committed 0",
        "committed 1",
        "plain",
    ]
