"""Regressions found by the live fuzzer (kafkacompat/fuzzing, tools/fuzz.py): each test replays the
kind of frame that made the broker log a traceback or die, and checks that it is answered or refused
with Kafka's error code and that the broker keeps serving (and restarts) afterwards.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from kafkacompat.broker._tests.wire_client import RawClient, batch, create, produce, request, start_broker
from kafkacompat.wire.errors import ErrorCode as E

JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, DELETE_GROUPS, FIND_COORDINATOR = 11, 13, 14, 15, 42, 10
OFFSET_COMMIT = 8
FAST = ("group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=3")
# The wire codec decodes strings with surrogateescape: bytes that are not UTF-8 arrive as lone surrogates.
NOT_UTF8_GROUP = b"g\xff\xfe-\xc3".decode("utf-8", "surrogateescape")


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def _join(group: str) -> Any:
    protocol = request(JOIN_GROUP).JoinGroupRequestProtocol(
        name="range", metadata=b"\x00\x00\x00\x00\x00\x00"
    )
    return request(
        JOIN_GROUP,
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=100,
        member_id="",
        protocol_type="consumer",
        protocols=[protocol],
    )


async def test_group_ids_that_are_not_utf8_are_served_stored_and_replayed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by the fuzzer: such a group id crashed the group timer loop (and the broker with it) when its
    group record was encoded, and logged tracebacks in JoinGroup/LeaveGroup/DescribeGroups/DeleteGroups
    (the coordinator partition hash and the member id length check)."""
    caplog.set_level(logging.INFO)
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, tmp_path, *FAST)
        await broker.state.groups.loaded.wait()
        client = await RawClient.connect(broker.port)
        found = await client.call(
            FIND_COORDINATOR, 3, request(FIND_COORDINATOR, key=NOT_UTF8_GROUP, key_type=0)
        )
        assert found.error_code == E.NONE
        joined = await client.call(
            JOIN_GROUP, 0, _join(NOT_UTF8_GROUP)
        )  # v0: joins at once, no member id round
        assert joined.error_code == E.NONE and joined.member_id
        await trio.sleep(0.3)  # past the rebalance timeout: the timer loop completes the join and stores it
        described = await client.call(DESCRIBE_GROUPS, 5, request(DESCRIBE_GROUPS, groups=[NOT_UTF8_GROUP]))
        assert described.groups[0].error_code == E.NONE
        assert described.groups[0].group_id == NOT_UTF8_GROUP
        assert [m.member_id for m in described.groups[0].members] == [joined.member_id]
        synced = await client.call(
            SYNC_GROUP,
            0,
            request(
                SYNC_GROUP,
                group_id=NOT_UTF8_GROUP,
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                assignments=[
                    request(SYNC_GROUP).SyncGroupRequestAssignment(
                        member_id=joined.member_id, assignment=b"a"
                    )
                ],
            ),
        )
        assert synced.error_code == E.NONE
        left = await client.call(
            LEAVE_GROUP, 0, request(LEAVE_GROUP, group_id=NOT_UTF8_GROUP + "\udcff", member_id="m\udc80")
        )
        assert left.error_code == E.UNKNOWN_MEMBER_ID
        await client.aclose()
        broker.request_shutdown()
    async with trio.open_nursery() as nursery:  # the group records replay after a restart
        broker = await start_broker(nursery, tmp_path, *FAST)
        await broker.state.groups.loaded.wait()
        client = await RawClient.connect(broker.port)
        described = await client.call(DESCRIBE_GROUPS, 5, request(DESCRIBE_GROUPS, groups=[NOT_UTF8_GROUP]))
        assert described.groups[0].group_id == NOT_UTF8_GROUP
        assert described.groups[0].group_state == "Stable"
        deleted = await client.call(DELETE_GROUPS, 2, request(DELETE_GROUPS, groups_names=[NOT_UTF8_GROUP]))
        assert deleted.results[0].error_code == E.NON_EMPTY_GROUP
        await client.aclose()
        broker.request_shutdown()
    assert _errors(caplog) == []


CREATE_TOPICS, METADATA = 19, 3


async def test_create_topics_beyond_ten_thousand_partitions_is_a_policy_violation(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Found by the fuzzer: CreateTopics with 100,000 (or 2^31-1) partitions began making that many
    directories, stalling the broker. Kafka's controller refuses more than 10,000 partitions per request."""
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    topic = request(CREATE_TOPICS).CreatableTopic
    huge = request(
        CREATE_TOPICS,
        topics=[
            topic(name="huge", num_partitions=100_000, replication_factor=1),
            topic(name="small", num_partitions=1, replication_factor=1),
        ],
        timeout_ms=5000,
    )
    answer = await client.call(CREATE_TOPICS, 7, huge)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("huge", E.POLICY_VIOLATION),
        ("small", E.POLICY_VIOLATION),
    ]
    assert answer.topics[0].error_message == "Excessively large number of partitions per request."
    split = request(
        CREATE_TOPICS,
        topics=[
            topic(name="a", num_partitions=0x7FFFFFFF, replication_factor=1),
        ],
        timeout_ms=5000,
    )
    assert (await client.call(CREATE_TOPICS, 2, split)).topics[0].error_code == E.POLICY_VIOLATION
    within = request(
        CREATE_TOPICS, topics=[topic(name="ok", num_partitions=3, replication_factor=1)], timeout_ms=5000
    )
    assert (await client.call(CREATE_TOPICS, 7, within)).topics[0].error_code == E.NONE
    assert not (tmp_path / "huge-0").exists() and not (tmp_path / "a-0").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("ok-", "huge-", "small-"))) == [
        "ok-0",
        "ok-1",
        "ok-2",
    ]
    await client.aclose()


async def test_other_clients_are_served_while_thousands_of_partitions_are_created(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Found by the fuzzer beside its well-behaved pair: a CreateTopics of thousands of partitions (legal
    up to 10,000) made its logs in one go and froze every other client for seconds. Now other requests
    are answered meanwhile, and the topic appears only once all its partitions exist."""
    broker = await start_broker(nursery, tmp_path)
    creator = await RawClient.connect(broker.port)
    other = await RawClient.connect(broker.port)
    topic = request(CREATE_TOPICS).CreatableTopic(name="wide", num_partitions=1000, replication_factor=1)
    await creator.send(CREATE_TOPICS, 7, request(CREATE_TOPICS, topics=[topic], timeout_ms=60_000))
    while not (tmp_path / "wide-0").exists():
        await trio.sleep(0.001)
    seen = await other.call(METADATA, 12, request(METADATA, topics=None), timeout=60)
    assert "wide" not in {t.name for t in seen.topics}, "no half-made topic is visible"
    assert not (tmp_path / "wide-999").exists(), "answered while the creation was still under way"
    _, created = await creator.receive(CREATE_TOPICS, 7, timeout=120)
    assert created.topics[0].error_code == E.NONE
    seen = await other.call(METADATA, 12, request(METADATA, topics=None))
    (wide,) = [t for t in seen.topics if t.name == "wide"]
    assert len(wide.partitions) == 1000
    await creator.aclose()
    await other.aclose()


async def test_offset_commit_with_a_huge_retention_time_is_stored(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Found by the fuzzer: OffsetCommit v2-v4 with retention_time_ms near 2^63 overflowed the record's
    int64 expire timestamp (a traceback and a closed connection). Kafka adds in Java longs, which wrap."""
    broker = await start_broker(nursery, tmp_path, *FAST)
    await broker.state.groups.loaded.wait()
    client = await RawClient.connect(broker.port)
    topic = request(CREATE_TOPICS).CreatableTopic(name="t", num_partitions=1, replication_factor=1)
    await client.call(CREATE_TOPICS, 7, request(CREATE_TOPICS, topics=[topic], timeout_ms=5000))
    commit = request(OFFSET_COMMIT)
    for retention in (2**63 - 1, 2**62, -(2**63)):
        answer = await client.call(OFFSET_COMMIT, 2, commit.__class__(
            group_id="g", generation_id_or_member_epoch=-1, member_id="", retention_time_ms=retention,
            topics=[commit.OffsetCommitRequestTopic(name="t", partitions=[
                commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])]))  # fmt: skip
        assert answer.topics[0].partitions[0].error_code == E.NONE
    await client.aclose()


async def test_a_fetch_out_of_file_descriptors_answers_a_storage_error_and_leaks_none(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the long fuzz runs: with the process out of descriptors (EMFILE, thousands of partitions
    open), duplicating a segment fd for a fetch raised out of the handler — a traceback, a closed
    connection, and the descriptors already duplicated for earlier partitions of the response leaked."""
    import errno

    from kafkacompat.broker._tests.wire_client import batch, create, fetch_request, produce
    from kafkacompat.broker.handlers import fetch

    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await create(client, "t", 2)
    for partition in (0, 1):
        assert (await produce(client, "t", batch(b"v%d" % partition), partition=partition)).error_code == 0
    real_init = fetch.HeldSlice.__init__
    held: list[fetch.HeldSlice] = []

    def second_fails(self: fetch.HeldSlice, file_slice: Any) -> None:
        if held:
            raise OSError(errno.EMFILE, "Too many open files")
        real_init(self, file_slice)
        held.append(self)

    monkeypatch.setattr(fetch.HeldSlice, "__init__", second_fails)
    answer = await client.call(1, 12, fetch_request("t", 0, partitions=(0, 1)))
    codes = {p.partition_index: (p.error_code, len(p.records or b"")) for p in answer.responses[0].partitions}
    assert codes[0][0] == E.NONE and codes[0][1] > 0
    assert codes[1] == (E.KAFKA_STORAGE_ERROR, 0)
    with trio.move_on_after(10):  # released right after the send, which the client may see first
        while held[0].fd != -1:
            await trio.sleep(0.01)
    assert held[0].fd == -1, "the duplicate held for partition 0 was released after the send"
    await client.aclose()


def test_a_creation_that_cannot_fit_in_the_descriptors_left_is_refused_before_any_file(
    tmp_path: Path,
) -> None:
    """Found by the long fuzz runs: CreateTopics/CreatePartitions of thousands of partitions (legal up to
    10,000) under a 20,000-descriptor limit failed with EMFILE thousands of logs in, and made and rolled
    back those logs on the event loop for seconds. A broker process with `ulimit -n 1024` here."""
    from kafkacompat.client import KafkaClient
    from kafkacompat.testing import BrokerProcess

    broker = BrokerProcess(tmp_path / "data", open_files=1024).start()
    try:
        with KafkaClient(broker.bootstrap) as client:
            topic = request(CREATE_TOPICS).CreatableTopic
            wide = request(
                CREATE_TOPICS,
                topics=[topic(name="wide", num_partitions=1000, replication_factor=1)],
                timeout_ms=5000,
            )
            answer = client.send(CREATE_TOPICS, wide, version=7)
            assert answer.topics[0].error_code == E.KAFKA_STORAGE_ERROR
            assert "file descriptors" in answer.topics[0].error_message
            assert not any(p.name.startswith("wide-") for p in (tmp_path / "data").iterdir())
            fits = request(
                CREATE_TOPICS,
                topics=[topic(name="fits", num_partitions=50, replication_factor=1)],
                timeout_ms=5000,
            )
            assert client.send(CREATE_TOPICS, fits, version=7).topics[0].error_code == E.NONE
            grow = request(
                37,
                topics=[request(37).CreatePartitionsTopic(name="fits", count=1000, assignments=None)],
                timeout_ms=5000,
            )
            assert client.send(37, grow, version=3).results[0].error_code == E.KAFKA_STORAGE_ERROR
            assert client.metadata(["fits"]).topics[0].partitions.__len__() == 50
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_path.read_text()


def test_java_string_hash_matches_the_definition_for_long_and_odd_ids() -> None:
    """The coordinator-partition hash was a Python loop per code unit; it is now a C-level sum of products
    (found by the fuzzer: DescribeGroups naming 1,000 ids of 5,000 characters held the event loop)."""
    import random

    from kafkacompat.groups import records as rec
    from kafkacompat.groups._tests.test_records import java_hash_by_definition

    rng = random.Random(18)
    for length in [0, 1, 2, 31, 254, 255, 256, 257, 1500]:
        chars = [
            chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x100, 0xD7FF)])) for _ in range(length)
        ]
        value = "".join(chars)
        assert rec.java_string_hash(value) == java_hash_by_definition(value)
        assert rec.java_string_hash(value) == java_hash_by_definition(value)  # and again, from the cache
    assert rec.java_string_hash("\U0001f600" * 300) == java_hash_by_definition("\U0001f600" * 300)


async def test_the_open_descriptors_are_counted_at_most_once_a_second_and_logs_opened_since_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each CreateTopics/CreatePartitions counted the open descriptors by walking /proc/self/fd: 15-25 ms
    of CPU for the 12,000 of a long fuzz run, several times a second. A count is now used for
    DESCRIPTOR_COUNT_SECONDS, and the logs opened since count DESCRIPTORS_PER_LOG each meanwhile."""
    import resource

    from kafkacompat.broker import state
    from kafkacompat.wire.errors import KafkaError

    walks = []

    def count() -> int:
        walks.append(time.monotonic())
        return 1000

    monkeypatch.setattr(state, "_open_descriptors", count)
    monkeypatch.setattr(state, "_descriptor_count", state._DescriptorCount())
    monkeypatch.setattr(resource, "getrlimit", lambda which: (4096, 4096))
    # 4,096 - 1,000 in use - 512 kept free: room for 861 logs (the configured room is 1,170)
    await state.check_descriptors_for(800, 0, 10)
    await state.check_descriptors_for(800, 0, 10)
    assert len(walks) == 1
    # the 800 logs opened since the count hold 2,400 descriptors: 100 more do not fit in the 184 left
    with pytest.raises(KafkaError) as refused:
        await state.check_descriptors_for(100, 800, 10)
    assert refused.value.code == E.KAFKA_STORAGE_ERROR
    assert len(walks) == 1
    monkeypatch.setattr(state, "DESCRIPTOR_COUNT_SECONDS", 0.0)  # the count is old: walked again
    await state.check_descriptors_for(100, 800, 10)
    assert len(walks) == 2


def test_partition_logs_may_not_take_the_descriptors_kept_for_connections(tmp_path: Path) -> None:
    """Found by the long fuzz run (1,000,000 frames): fuzzed CreateTopics/CreatePartitions of a few hundred
    partitions each (never counted: only requests of more than limit/12 partitions were), new logs
    counted by the one descriptor they hold before their first append, and deleted logs keeping theirs
    for file.delete.delay.ms filled the 20,000 descriptors; accepts and the well-behaved pair's
    connections failed. Under `ulimit -n 1024`, 64 open logs fit beside the 768 descriptors kept free
    (max(512, limit/20) + min(max.connections, limit/4)); deleted logs count until they are removed."""
    from kafkacompat.broker.state import max_open_logs
    from kafkacompat.client import KafkaClient
    from kafkacompat.testing import BrokerProcess

    assert max_open_logs(1024, 2**31 - 1) == 64
    broker = BrokerProcess(tmp_path / "data", ["log.segment.delete.delay.ms=3000"], open_files=1024).start()
    topic = request(CREATE_TOPICS).CreatableTopic

    def create(name: str, partitions: int) -> Any:
        ask = request(
            CREATE_TOPICS,
            topics=[topic(name=name, num_partitions=partitions, replication_factor=1)],
            timeout_ms=5000,
        )
        return client.send(CREATE_TOPICS, ask, version=7).topics[0]

    try:
        with KafkaClient(broker.bootstrap) as client:
            assert create("small-1", 30).error_code == E.NONE
            assert create("small-2", 30).error_code == E.NONE
            third = create("small-3", 30)  # 90 logs would not fit, though only ~70 descriptors are open
            assert third.error_code == E.KAFKA_STORAGE_ERROR
            assert "64 open partition logs" in third.error_message
            deletion = request(20, topic_names=["small-1"], timeout_ms=5000)
            assert client.send(20, deletion, version=4).responses[0].error_code == E.NONE
            # the deleted logs keep their files open for file.delete.delay.ms: still no room
            assert create("small-3", 30).error_code == E.KAFKA_STORAGE_ERROR
            deadline = time.monotonic() + 30
            while create("small-3", 30).error_code != E.NONE:  # room again once they are removed
                assert time.monotonic() < deadline, "the deleted logs were never removed"
                time.sleep(0.5)
            # a client connects and is served beside the 60 logs
            with KafkaClient(broker.bootstrap) as other:
                assert len(other.metadata(["small-3"]).topics[0].partitions) == 30
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_path.read_text()


async def test_requests_waiting_for_the_metadata_lock_hold_no_request_slot(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Found by the long fuzz run: behind a long creation (thousands of logs, made in chunks), every
    request waiting for the metadata lock held its queued.max.requests slot and never looked at its
    socket. Fuzzing clients gave up after 0.5 s and reconnected, the waiters of their dead connections
    took every slot, and the well-behaved producer's acks=all produce waited for a slot until the
    creation ended (72 s, its connection timed out). Now a lock wait holds no slot and is abandoned when
    its client leaves: the produce is answered while the creation goes on, and no dead waiter creates its
    topic afterwards."""
    broker = await start_broker(nursery, tmp_path, "queued.max.requests=4")
    admin = await RawClient.connect(broker.port)
    assert (await create(admin, "pair")).error_code == E.NONE
    topic = request(CREATE_TOPICS).CreatableTopic
    wide = await RawClient.connect(broker.port)
    creation = request(
        CREATE_TOPICS,
        topics=[topic(name="wide", num_partitions=2000, replication_factor=1)],
        timeout_ms=120_000,
    )
    await wide.send(CREATE_TOPICS, 7, creation)
    await trio.sleep(0.05)  # the creation has taken the metadata lock and is making logs
    waiters = []
    for index in range(8):  # more than the 4 slots
        waiter = await RawClient.connect(broker.port)
        late = topic(name=f"late-{index}", num_partitions=1, replication_factor=1)
        one = request(CREATE_TOPICS, topics=[late], timeout_ms=120_000)
        await waiter.send(CREATE_TOPICS, 7, one)
        waiters.append(waiter)
    await trio.sleep(0.2)
    for waiter in waiters:  # they give up, as the fuzzer does after 0.5 s
        await waiter.aclose()
    producer = await RawClient.connect(broker.port)
    with trio.fail_after(60):
        answer = await produce(producer, "pair", batch(b"value"))
    assert answer.error_code == E.NONE
    early = None
    with trio.move_on_after(0.01):
        early = await wide.read_frame()
    assert early is None, "the produce was answered only after the creation: it waited for it"
    assert await wide.read_frame(timeout=180) is not None
    assert broker.state.metadata.topic("wide") is not None
    await trio.sleep(0.5)
    assert [t.name for t in broker.state.metadata.topics() if t.name.startswith("late-")] == []
    for client in (admin, wide, producer):
        await client.aclose()
    broker.request_shutdown()
