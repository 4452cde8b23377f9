"""Handlers over real TCP: Metadata, Produce, Fetch, ListOffsets, Create/DeleteTopics, InitProducerId."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import trio

from kafkacompat.broker._tests.wire_client import (
    RawClient,
    batch,
    create,
    fetch_request,
    produce,
    produce_request,
    request,
    start_broker,
)
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.primitives import ZERO_UUID

PRODUCE, FETCH, LIST_OFFSETS, METADATA, CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID = (
    0,
    1,
    2,
    3,
    19,
    20,
    22,
)


async def test_metadata_auto_create_and_errors(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "num.partitions=3")
    client = await RawClient.connect(broker.port)
    wanted = [request(METADATA).MetadataRequestTopic(name=n) for n in ("fresh", "bad name!", "x" * 250)]
    first = await client.call(METADATA, 12, request(METADATA, topics=wanted, allow_auto_topic_creation=True))
    assert [(t.name, t.error_code) for t in first.topics] == [
        ("fresh", ErrorCode.LEADER_NOT_AVAILABLE),
        ("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("x" * 250, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ]
    second = await client.call(METADATA, 12, request(METADATA, topics=wanted[:1]))
    topic = second.topics[0]
    assert topic.error_code == ErrorCode.NONE and topic.topic_id != ZERO_UUID
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in topic.partitions] == [
        (i, 1, [1], [1]) for i in range(3)
    ]
    assert second.controller_id == 1 and second.cluster_id
    no_create = request(
        METADATA,
        topics=[request(METADATA).MetadataRequestTopic(name="other")],
        allow_auto_topic_creation=False,
    )
    assert (await client.call(METADATA, 9, no_create)).topics[
        0
    ].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    by_id = request(
        METADATA,
        topics=[
            request(METADATA).MetadataRequestTopic(name=None, topic_id=topic.topic_id),
            request(METADATA).MetadataRequestTopic(name=None, topic_id=uuid.uuid4()),
        ],
    )
    found = (await client.call(METADATA, 12, by_id)).topics
    assert [(t.name, t.error_code) for t in found] == [("fresh", 0), (None, ErrorCode.UNKNOWN_TOPIC_ID)]
    everything = await client.call(METADATA, 0, request(METADATA, topics=[]))
    assert [t.name for t in everything.topics] == ["fresh"]


async def test_metadata_auto_create_disabled(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "auto.create.topics.enable=false")
    client = await RawClient.connect(broker.port)
    response = await client.call(
        METADATA,
        12,
        request(
            METADATA,
            topics=[request(METADATA).MetadataRequestTopic(name="nope")],
            allow_auto_topic_creation=True,
        ),
    )
    assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_produce_errors(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "message.max.bytes=2000")
    client = await RawClient.connect(broker.port)
    await create(client, "p")
    good = await produce(client, "p", batch(b"a", b"b"))
    assert (good.error_code, good.base_offset, good.log_start_offset) == (0, 0, 0)
    assert (await produce(client, "p", batch(b"c"), acks=2)).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert (await produce(client, "missing", batch(b"c"))).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (
        await produce(client, "p", batch(b"c"), partition=5)
    ).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await produce(client, "p", batch(b"x" * 3000))).error_code == ErrorCode.MESSAGE_TOO_LARGE
    corrupt = bytearray(batch(b"payload"))
    corrupt[-1] ^= 0xFF
    answer = await produce(client, "p", bytes(corrupt))
    # Kafka carries an error message only for per-record refusals (ReplicaManager's hasCustomErrorMessage)
    assert answer.error_code == ErrorCode.CORRUPT_MESSAGE and answer.error_message is None
    assert (await produce(client, "p", b"")).error_code == ErrorCode.INVALID_RECORD
    # a message-format v1 message set: offset, size, crc, magic 1, attributes, timestamp, key, value
    legacy = (
        (0).to_bytes(8, "big")
        + (22).to_bytes(4, "big")
        + b"\x00" * 4
        + b"\x01\x00"
        + b"\x00" * 8
        + b"\xff\xff\xff\xff"
        + b"\x00\x00\x00\x00"
    )
    assert (await produce(client, "p", legacy)).error_code in (
        ErrorCode.INVALID_RECORD,
        ErrorCode.CORRUPT_MESSAGE,
    )
    internal = request(METADATA, topics=[request(METADATA).MetadataRequestTopic(name="__consumer_offsets")])
    with trio.fail_after(10):
        while (await client.call(METADATA, 12, internal)).topics[0].error_code != 0:
            await trio.sleep(0.05)
    refused = await produce(client, "__consumer_offsets", batch(b"forged"))
    assert refused.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert broker.state.partition_log("p", 0).log_end_offset == 2


async def test_failed_acks0_produce_closes_the_connection(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await create(client, "quiet")
    await client.send(PRODUCE, 9, produce_request("quiet", batch(b"ok"), acks=0))
    assert (await client.call(METADATA, 9, request(METADATA, topics=[]))).topics == []  # still open
    await client.send(PRODUCE, 9, produce_request("unknown", batch(b"ok"), acks=0))
    assert await client.is_closed()
    assert broker.state.partition_log("quiet", 0).log_end_offset == 1


async def test_fetch_responses_do_not_leak_descriptors(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await create(client, "fds")
    await produce(client, "fds", batch(b"data"))
    await client.call(FETCH, 12, fetch_request("fds", 0))
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        answer = await client.call(FETCH, 12, fetch_request("fds", 0))
        assert len(answer.responses[0].partitions[0].records) > 0
    assert len(os.listdir("/proc/self/fd")) <= before + 2


async def test_idempotent_duplicate_gets_original_offsets(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await create(client, "idem")
    pid = (
        await client.call(
            INIT_PRODUCER_ID, 4, request(INIT_PRODUCER_ID, transactional_id=None, transaction_timeout_ms=1000)
        )
    ).producer_id
    first = batch(b"a", b"b", producer_id=pid, producer_epoch=0, base_sequence=0)
    assert (await produce(client, "idem", first)).base_offset == 0
    assert (
        await produce(client, "idem", batch(b"c", producer_id=pid, producer_epoch=0, base_sequence=2))
    ).base_offset == 2
    again = await produce(client, "idem", first)
    assert (again.error_code, again.base_offset) == (0, 0)
    gap = await produce(client, "idem", batch(b"d", producer_id=pid, producer_epoch=0, base_sequence=9))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert broker.state.partition_log("idem", 0).log_end_offset == 3


async def test_fetch_parks_until_produce_wakes_it(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    producer = await RawClient.connect(broker.port)
    await create(client, "wait")
    sent = await client.send(FETCH, 12, fetch_request("wait", 0, max_wait_ms=20_000, min_bytes=1))
    await trio.sleep(0.1)
    started = trio.current_time()
    await produce(producer, "wait", batch(b"hello"))
    correlation_id, response = await client.receive(FETCH, 12)
    assert correlation_id == sent and trio.current_time() - started < 2
    partition = response.responses[0].partitions[0]
    assert (partition.error_code, partition.high_watermark, partition.last_stable_offset) == (0, 1, 1)
    assert len(partition.records) > 61


async def test_fetch_times_out_with_empty_non_null_records(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await create(client, "empty")
    started = time.monotonic()
    response = await client.call(FETCH, 4, fetch_request("empty", 0, max_wait_ms=200, min_bytes=1))
    assert time.monotonic() - started >= 0.19
    partition = response.responses[0].partitions[0]
    assert partition.error_code == 0 and partition.records is not None and len(partition.records) == 0
    assert partition.aborted_transactions is None
    committed = await client.call(FETCH, 4, fetch_request("empty", 0, isolation_level=1))
    assert committed.responses[0].partitions[0].aborted_transactions == []


async def test_fetch_errors_and_limits(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    created = await create(client, "f", partitions=2)
    for i in range(5):
        await produce(client, "f", batch(b"v" * 100, b"w" * 100), partition=i % 2)
    out_of_range = await client.call(FETCH, 11, fetch_request("f", 99))
    assert out_of_range.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    unknown = await client.call(FETCH, 11, fetch_request("nope", 0))
    assert unknown.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    by_id = await client.call(FETCH, 13, fetch_request(created.topic_id, 0, by_id=True, partitions=(0, 1)))
    assert by_id.responses[0].topic_id == created.topic_id
    assert [p.high_watermark for p in by_id.responses[0].partitions] == [6, 4]
    unknown_id = await client.call(FETCH, 16, fetch_request(uuid.uuid4(), 0, by_id=True))
    assert unknown_id.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    # request max_bytes: the first batch always comes back whole (KIP-74), then the budget is spent
    small = await client.call(FETCH, 11, fetch_request("f", 0, partitions=(0, 1), max_bytes=10))
    sizes = [len(p.records) for p in small.responses[0].partitions]
    assert sizes[0] > 200 and sizes[1] == 0
    fenced = fetch_request("f", 0)
    fenced.topics[0].partitions[0].current_leader_epoch = 5
    answer = await client.call(FETCH, 11, fenced)
    assert answer.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


async def test_fetch_sessions(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await create(client, "s", partitions=2)
    await produce(client, "s", batch(b"one"), partition=0)
    full = await client.call(
        FETCH, 12, fetch_request("s", 0, partitions=(0, 1), session_id=0, session_epoch=0)
    )
    session_id = full.session_id
    assert session_id != 0 and len(full.responses[0].partitions) == 2
    # the client moves partition 0 past what it got; nothing else changed: no partitions in the answer
    same = fetch_request("s", 1, partitions=(0,), session_id=session_id, session_epoch=1)
    assert (await client.call(FETCH, 12, same)).responses == []
    await produce(client, "s", batch(b"two"), partition=1)
    changed = fetch_request("s", 0, session_id=session_id, session_epoch=2)
    changed.topics = []
    answer = await client.call(FETCH, 12, changed)
    assert [(p.partition_index, p.high_watermark) for p in answer.responses[0].partitions] == [(1, 1)]
    stale = fetch_request("s", 0, session_id=session_id, session_epoch=2)
    assert (await client.call(FETCH, 12, stale)).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    missing = fetch_request("s", 0, session_id=session_id + 1, session_epoch=1)
    assert (await client.call(FETCH, 12, missing)).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


async def test_list_offsets(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await create(client, "lo")
    base = int(time.time() * 1000) - 10_000
    for i, ts in enumerate([base, base + 5000, base + 2000]):
        await produce(client, "lo", batch(str(i).encode(), timestamp=ts))

    async def lookup(timestamp: int, version: int = 9, **fields: Any) -> Any:
        partition = request(LIST_OFFSETS).ListOffsetsPartition(
            partition_index=0, timestamp=timestamp, **fields
        )
        body = request(
            LIST_OFFSETS,
            replica_id=-1,
            isolation_level=0,
            topics=[request(LIST_OFFSETS).ListOffsetsTopic(name="lo", partitions=[partition])],
        )
        return (await client.call(LIST_OFFSETS, version, body)).topics[0].partitions[0]

    assert (await lookup(-1)).offset == 3
    assert (await lookup(-2)).offset == 0
    assert ((await lookup(-3)).offset, (await lookup(-3)).timestamp) == (1, base + 5000)
    assert ((await lookup(base + 1000)).offset, (await lookup(base + 1000)).timestamp) == (1, base + 5000)
    assert (await lookup(base + 60_000)).offset == -1
    assert (await lookup(-1, version=0, max_num_offsets=1)).old_style_offsets == [3]
    assert (await lookup(-1, current_leader_epoch=3)).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


async def test_create_topics_validation(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    assert (await create(client, "ok", partitions=2)).num_partitions == 2
    assert (await create(client, "ok")).error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert (await create(client, "zero", num_partitions=0)).error_code == ErrorCode.INVALID_PARTITIONS
    assert (await create(client, "huge", num_partitions=2**31 - 1)).error_code == ErrorCode.POLICY_VIOLATION
    assert (
        await create(client, "rf", replication_factor=3)
    ).error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert (
        await create(client, "rf0", replication_factor=0)
    ).error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    bad = request(CREATE_TOPICS).CreatableTopicConfig(name="retention.ms", value="soon")
    assert (await create(client, "cfg", configs=[bad])).error_code == ErrorCode.INVALID_CONFIG
    unknown = request(CREATE_TOPICS).CreatableTopicConfig(name="no.such.config", value="1")
    assert (await create(client, "cfg2", configs=[unknown])).error_code == ErrorCode.INVALID_CONFIG
    assert (await create(client, "bad/name")).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    good = request(CREATE_TOPICS).CreatableTopicConfig(name="retention.ms", value="1234")
    defaults = await create(client, "dflt", num_partitions=-1, replication_factor=-1, configs=[good])
    assert (defaults.error_code, defaults.num_partitions, defaults.replication_factor) == (0, 1, 1)
    reported = {c.name: (c.value, c.config_source) for c in defaults.configs}
    assert reported["retention.ms"] == ("1234", 1) and reported["segment.bytes"] == ("1073741824", 5)
    twice = [request(CREATE_TOPICS).CreatableTopic(name="dup", num_partitions=1, replication_factor=1)] * 2
    answer = await client.call(CREATE_TOPICS, 7, request(CREATE_TOPICS, topics=twice, timeout_ms=1000))
    assert [t.error_code for t in answer.topics] == [ErrorCode.INVALID_REQUEST] * 2
    only = [request(CREATE_TOPICS).CreatableTopic(name="v", num_partitions=1, replication_factor=1)]
    validated = await client.call(CREATE_TOPICS, 7, request(CREATE_TOPICS, topics=only, validate_only=True))
    assert validated.topics[0].error_code == 0 and "v" not in broker.state.metadata


async def test_delete_topics_by_name_and_id(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "log.segment.delete.delay.ms=0")
    client = await RawClient.connect(broker.port)
    await create(client, "a")
    b = await create(client, "b", partitions=2)
    by_name = await client.call(
        DELETE_TOPICS, 5, request(DELETE_TOPICS, topic_names=["a", "zzz"], timeout_ms=1000)
    )
    assert [(r.name, r.error_code) for r in by_name.responses] == [
        ("a", 0),
        ("zzz", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    states = [
        request(DELETE_TOPICS).DeleteTopicState(name=None, topic_id=b.topic_id),
        request(DELETE_TOPICS).DeleteTopicState(name=None, topic_id=uuid.uuid4()),
    ]
    by_id = await client.call(DELETE_TOPICS, 6, request(DELETE_TOPICS, topics=states, timeout_ms=1000))
    assert [(r.name, r.error_code) for r in by_id.responses] == [("b", 0), (None, ErrorCode.UNKNOWN_TOPIC_ID)]
    assert len(broker.state.metadata) == 0
    assert not any(p.name in ("a-0", "b-0", "b-1") for p in tmp_path.iterdir())  # renamed away at once
    with trio.fail_after(10):  # and removed by the delayed delete (file.delete.delay.ms = 0 here)
        while any(p.name.endswith("-delete") for p in tmp_path.iterdir()):
            await trio.sleep(0.05)
    assert (await produce(client, "b", batch(b"x"))).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_producer_ids_unique_across_restart(nursery: trio.Nursery, tmp_path: Path) -> None:
    async def ids(count: int) -> list[int]:
        async with trio.open_nursery() as inner:
            broker = await start_broker(inner, tmp_path)
            client = await RawClient.connect(broker.port)
            body = request(INIT_PRODUCER_ID, transactional_id=None, transaction_timeout_ms=1000)
            result = [(await client.call(INIT_PRODUCER_ID, 4, body)).producer_id for _ in range(count)]
            # a transactional id's producer id comes from the same blocks (the first call of each run
            # finds the id known from the previous run: same producer id, next epoch)
            txn = request(INIT_PRODUCER_ID, transactional_id="txn", transaction_timeout_ms=1000)
            answer = await client.call(INIT_PRODUCER_ID, 4, txn)
            assert answer.error_code == ErrorCode.NONE
            result.append(answer.producer_id)
            broker.request_shutdown()
        return result

    first = await ids(3)
    second = await ids(3)
    assert second[3] == first[3]  # the transactional id kept its producer id across the restart
    plain = first[:3] + second[:3] + first[3:]
    assert len(set(plain)) == 7
    assert min(second[:3]) > max(first)


async def test_logs_missing_from_the_topic_table_are_adopted(tmp_path: Path) -> None:
    async with trio.open_nursery() as inner:
        broker = await start_broker(inner, tmp_path)
        client = await RawClient.connect(broker.port)
        await create(client, "kept", partitions=2)
        await produce(client, "kept", batch(b"a", b"b"), partition=1)
        broker.request_shutdown()
    (tmp_path / "kafkacompat-metadata.json").unlink()  # as after a crash before the table was written
    async with trio.open_nursery() as inner:
        broker = await start_broker(inner, tmp_path)
        client = await RawClient.connect(broker.port)
        wanted = request(
            METADATA,
            topics=[request(METADATA).MetadataRequestTopic(name="kept")],
            allow_auto_topic_creation=False,
        )
        topic = (await client.call(METADATA, 12, wanted)).topics[0]
        assert (topic.error_code, len(topic.partitions)) == (0, 2)
        answer = await client.call(FETCH, 12, fetch_request("kept", 0, partitions=(1,)))
        assert answer.responses[0].partitions[0].high_watermark == 2
        broker.request_shutdown()
