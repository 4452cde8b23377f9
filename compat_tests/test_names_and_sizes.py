"""Names and sizes: hostile topic names never reach the file system outside log.dirs; absurd sizes and
configs are refused with Kafka's errors; a group of 1,000 members and oversized member metadata stay
within group.max.size and message.max.bytes.

Real clients (confluent-kafka's AdminClient and consumer, kafka-python's admin client) where they send
the bad input; the project's own small client or raw frames where a client refuses to.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from compat_tests.clients import ck_consume_all, create_topic
from kafkacompat.broker._tests.wire_client import RawClient, request
from kafkacompat.client import KafkaClient
from kafkacompat.local_brokers import InProcessBroker
from kafkacompat.wire.errors import ErrorCode as E

pytest.importorskip("confluent_kafka")

ILLEGAL_NAMES = [
    "..",
    ".",
    "../escape",
    "../../../tmp/kafkacompat-escape",
    "/absolute",
    "a/b",
    "a\\b",
    "x" * 250,
    "ü-topic",
    "名前",
    "with space",
    "nul\x00byte",
]
CLIENT_SENDABLE = [n for n in ILLEGAL_NAMES if "\x00" not in n]  # librdkafka refuses a NUL itself
LONGEST_LEGAL = "l" * 249  # Kafka's limit; its partition dir names still fit 255 bytes


def _confluent_create_errors(bootstrap: str, topics: list[Any], **options: Any) -> dict[str, int]:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    codes = {}
    for name, future in admin.create_topics(topics, operation_timeout=10, **options).items():
        try:
            future.result(15)
            codes[name] = 0
        except KafkaException as exc:
            codes[name] = exc.args[0].code()
    return codes


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.restarts_broker
def test_hostile_topic_names_never_leave_log_dirs(tmp_path: Path) -> None:
    from confluent_kafka.admin import NewTopic

    data = tmp_path / "data"
    outside_before = set(os.listdir(tmp_path))
    tmp_before = set(os.listdir("/tmp"))
    with InProcessBroker(data) as broker:
        bootstrap = broker.bootstrap
        codes = _confluent_create_errors(bootstrap, [NewTopic(n, 1, 1) for n in CLIENT_SENDABLE])
        assert codes == {name: E.INVALID_TOPIC_EXCEPTION for name in CLIENT_SENDABLE}
        with KafkaClient(bootstrap) as client:  # the name librdkafka will not send, as a raw CreateTopics
            topic = request(19).CreatableTopic(name="nul\x00byte", num_partitions=1, replication_factor=1)
            created = client.send(19, request(19, topics=[topic], timeout_ms=5000), version=7)
            assert created.topics[0].error_code == E.INVALID_TOPIC_EXCEPTION
        with KafkaClient(bootstrap) as client:
            metadata = client.metadata(ILLEGAL_NAMES, auto_create=True)  # auto-creation must refuse too
            assert {t.name: t.error_code for t in metadata.topics} == {
                name: E.INVALID_TOPIC_EXCEPTION for name in ILLEGAL_NAMES
            }
            produce = request(0)
            for name in ILLEGAL_NAMES:
                answer = client.send(
                    0,
                    produce.__class__(
                        acks=-1,
                        timeout_ms=5000,
                        topic_data=[
                            produce.TopicProduceData(
                                name=name,
                                partition_data=[produce.PartitionProduceData(index=0, records=None)],
                            )
                        ],
                    ),
                    version=9,
                )
                (partition,) = answer.responses[0].partition_responses
                assert partition.error_code == E.UNKNOWN_TOPIC_OR_PARTITION, name
            deleted = client.send(20, request(20, topic_names=ILLEGAL_NAMES, timeout_ms=5000), version=5)
            assert {r.name: r.error_code for r in deleted.responses} == {
                name: E.UNKNOWN_TOPIC_OR_PARTITION for name in ILLEGAL_NAMES
            }
            grow = [request(37).CreatePartitionsTopic(name=n, count=3) for n in ILLEGAL_NAMES]
            grown = client.send(37, request(37, topics=grow, timeout_ms=5000), version=3)
            # illegal names are no topics: an admin call on one gets either of Kafka's two answers for it
            not_a_topic = {E.INVALID_TOPIC_EXCEPTION, E.UNKNOWN_TOPIC_OR_PARTITION}
            assert {r.name for r in grown.results} == set(ILLEGAL_NAMES)
            assert {r.error_code for r in grown.results} <= not_a_topic
            altered = client.send(
                44,
                request(44, resources=[
                    request(44).AlterConfigsResource(resource_type=2, resource_name=n, configs=[
                        request(44).AlterableConfig(name="retention.ms", config_operation=0, value="1000")])
                    for n in ILLEGAL_NAMES]),
                version=1,
            )  # fmt: skip
            assert {r.resource_name for r in altered.responses} == set(ILLEGAL_NAMES)
            assert {r.error_code for r in altered.responses} <= not_a_topic
        # the longest legal name works end to end, including its deletion (renamed within 255 bytes)
        create_topic(bootstrap, LONGEST_LEGAL, 2)
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(LONGEST_LEGAL, b"long-named", partition=1)
        assert producer.flush(10) == 0
        assert [m.value() for m in ck_consume_all(bootstrap, LONGEST_LEGAL, 1, 1)] == [b"long-named"]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([LONGEST_LEGAL], operation_timeout=10)[LONGEST_LEGAL].result(15)
        names = os.listdir(data)
        assert f"{LONGEST_LEGAL}-1" not in names
        doomed = [n for n in names if n.endswith("-delete")]
        assert len(doomed) == 2 and all(len(n.encode()) <= 255 for n in doomed)
    # nothing was created outside the log dir, and inside it only legal partition dirs
    assert set(os.listdir(tmp_path)) == outside_before | {"data"}
    assert not {n for n in set(os.listdir("/tmp")) - tmp_before if "escape" in n}
    for entry in _tree(data):
        resolved = (data / entry).resolve()
        assert resolved.is_relative_to(data.resolve()) and not (data / entry).is_symlink(), entry
        assert all(part not in ("..", ".") for part in Path(entry).parts), entry
    top = {Path(e).parts[0] for e in _tree(data)}
    illegal_dirs = {n for n in top if any(n.startswith(bad + "-") for bad in ILLEGAL_NAMES if bad)}
    assert illegal_dirs == set()


def test_absurd_partition_counts_and_configs_get_kafkas_errors(bootstrap: str) -> None:
    from confluent_kafka.admin import NewTopic

    tag = uuid.uuid4().hex[:8]
    cases = {
        f"huge-{tag}": (NewTopic(f"huge-{tag}", 100_000, 1), E.POLICY_VIOLATION),
        f"rf-{tag}": (NewTopic(f"rf-{tag}", 1, 10000), E.INVALID_REPLICATION_FACTOR),
    }
    absurd_configs = {
        "segment.bytes": "1",
        "retention.ms": "-5",
        "max.message.bytes": "-1",
        "segment.ms": "0",
        "min.insync.replicas": "0",
        "cleanup.policy": "shred",
        "compression.type": "rar",
        "retention.bytes": "9" * 40,
        "message.timestamp.type": "WallClock",
        "no.such.topic.config": "1",
    }
    for i, (name, value) in enumerate(absurd_configs.items()):
        topic = f"cfg{i}-{tag}"
        cases[topic] = (NewTopic(topic, 1, 1, config={name: value}), E.INVALID_CONFIG)
    huge, _ = cases.pop(f"huge-{tag}")
    for validate_only in (True, False):
        codes = _confluent_create_errors(
            bootstrap, [t for t, _ in cases.values()], validate_only=validate_only
        )
        assert codes == {name: code for name, (_, code) in cases.items()}, validate_only
        # Kafka's controller counts the partitions of the whole request: past 10,000 every topic is refused
        small = NewTopic(f"small-{tag}", 1, 1)
        codes = _confluent_create_errors(bootstrap, [huge, small], validate_only=validate_only)
        assert codes == {huge.topic: E.POLICY_VIOLATION, small.topic: E.POLICY_VIOLATION}
    # counts librdkafka refuses to send, as raw CreateTopics
    with KafkaClient(bootstrap) as client:
        topics = [
            request(19).CreatableTopic(name=f"{label}-{tag}", num_partitions=count, replication_factor=1)
            for label, count in (("negative", -5), ("zero", 0), ("max", 0x7FFFFFFF))
        ]
        answer = client.send(19, request(19, topics=topics[:2], timeout_ms=5000), version=7)
        assert [t.error_code for t in answer.topics] == [E.INVALID_PARTITIONS, E.INVALID_PARTITIONS]
        answer = client.send(19, request(19, topics=topics[2:], timeout_ms=5000), version=7)
        assert [t.error_code for t in answer.topics] == [E.POLICY_VIOLATION]
    # kafka-python sends the 100,000 partitions too, and gets the same answer
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic
    from kafka.errors import PolicyViolationError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        with pytest.raises(PolicyViolationError):
            admin.create_topics([KpNewTopic(f"kp-huge-{tag}", 100_000, 1)])
    finally:
        admin.close()


# --- a group of 1,000 members, oversized member metadata -------------------------------------------

JOIN, SYNC = 11, 14
MEMBERS = 1000


async def _join_many(port: int, group: str, count: int, metadata_size: int) -> list[Any]:
    """`count` members join `group` on connections of their own (JoinGroup v3: no member-id round trip)."""
    answers: list[Any] = []

    async def member(i: int) -> None:
        await trio.sleep(i * 0.002)  # connect at a steady pace, not all in one burst
        client = await RawClient.connect(port)
        protocol = request(JOIN).JoinGroupRequestProtocol(
            name="range", metadata=bytes([i % 251]) * metadata_size
        )
        join = request(JOIN, group_id=group, session_timeout_ms=60_000, rebalance_timeout_ms=60_000,
                       member_id="", protocol_type="consumer", protocols=[protocol])  # fmt: skip
        answers.append((await client.call(JOIN, 3, join, timeout=120), client))

    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(member, i)
    return answers


async def _leader_sync(answers: list[Any], group: str) -> int:
    response, client = next((r, c) for r, c in answers if r.leader == r.member_id)
    assert len(response.members) == len(answers)
    assignments = [
        request(SYNC).SyncGroupRequestAssignment(member_id=m.member_id, assignment=b"\x00\x00" + b"\x00" * 8)
        for m in response.members
    ]
    sync = request(SYNC, group_id=group, generation_id=response.generation_id, member_id=response.member_id,
                   assignments=assignments)  # fmt: skip
    return (await client.call(SYNC, 3, sync, timeout=60)).error_code


@pytest.mark.restarts_broker
async def test_a_thousand_members_within_group_max_size_and_message_max_bytes(tmp_path: Path) -> None:
    broker = InProcessBroker(
        tmp_path / "data",
        [
            f"group.max.size={MEMBERS}",
            "group.initial.rebalance.delay.ms=3000",
            "offsets.topic.num.partitions=1",
            # queued.max.requests stays at its default (500): 1,000 JoinGroups wait at once, and a
            # waiting (parked) request holds no slot, as in Kafka
        ],
    )
    await trio.to_thread.run_sync(broker.start)
    try:
        # 1,000 members with ordinary metadata: one generation, the leader sees them all, the group is
        # stored; member 1,001 is refused with GROUP_MAX_SIZE_REACHED
        answers = await _join_many(broker.port, "big", MEMBERS, 100)
        assert {r.error_code for r, _ in answers} == {E.NONE}
        assert len({r.generation_id for r, _ in answers}) == 1
        extra = await RawClient.connect(broker.port)
        protocol = request(JOIN).JoinGroupRequestProtocol(name="range", metadata=b"x")
        join = request(JOIN, group_id="big", session_timeout_ms=60_000, rebalance_timeout_ms=60_000,
                       member_id="", protocol_type="consumer", protocols=[protocol])  # fmt: skip
        refused = await extra.call(JOIN, 3, join)
        assert refused.error_code == E.GROUP_MAX_SIZE_REACHED
        assert await _leader_sync(answers, "big") == E.NONE
        # a real client is refused the same way
        from confluent_kafka import Consumer

        await trio.to_thread.run_sync(create_topic, broker.bootstrap, "size-test")
        errors: list[Any] = []
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "big",
                             "error_cb": errors.append, "session.timeout.ms": 10000})  # fmt: skip
        try:
            consumer.subscribe(["size-test"])
            for _ in range(60):
                message = await trio.to_thread.run_sync(consumer.poll, 0.25)
                if message is not None and message.error() is not None:
                    errors.append(message.error())
                if any(e.code() == E.GROUP_MAX_SIZE_REACHED for e in errors):
                    break
        finally:
            await trio.to_thread.run_sync(consumer.close)
        assert any(e.code() == E.GROUP_MAX_SIZE_REACHED for e in errors), errors
        for _, client in answers:
            await client.aclose()
        # 1,000 members whose metadata adds up past message.max.bytes (1,000 x 1,500 bytes): the group
        # record cannot be stored, and the leader's SyncGroup gets UNKNOWN_SERVER_ERROR, as from Kafka's
        # coordinator; the broker goes on serving
        answers = await _join_many(broker.port, "oversized", MEMBERS, 1500)
        assert {r.error_code for r, _ in answers} == {E.NONE}
        assert await _leader_sync(answers, "oversized") == E.UNKNOWN_SERVER_ERROR
        for _, client in answers:
            await client.aclose()
        topic = f"after-{uuid.uuid4().hex[:6]}"
        await trio.to_thread.run_sync(create_topic, broker.bootstrap, topic)
    finally:
        await trio.to_thread.run_sync(broker.stop)
