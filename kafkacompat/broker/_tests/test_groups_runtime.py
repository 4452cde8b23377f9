"""The group runtime and handlers over real TCP: every group API at the edges of its version range,
parked replies, the timer task, __consumer_offsets persistence, loading and storage failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from kafkacompat.broker._tests.wire_client import RawClient, request, start_broker
from kafkacompat.broker.group_runtime import OFFSETS_TOPIC, GroupRuntime
from kafkacompat.groups import records as rec
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import iter_batches, iter_records

E = ErrorCode
(
    OFFSET_COMMIT,
    OFFSET_FETCH,
    FIND_COORDINATOR,
    JOIN_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    SYNC_GROUP,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    DELETE_GROUPS,
    OFFSET_DELETE,
    API_VERSIONS,
    CREATE_TOPICS,
    METADATA,
) = (8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47, 18, 19, 3)

FAST = (
    "group.initial.rebalance.delay.ms=0",
    "offsets.topic.num.partitions=3",
    "group.min.session.timeout.ms=100",
)


async def create_topic(client: RawClient, name: str, partitions: int) -> None:
    topic = request(CREATE_TOPICS).CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)
    response = await client.call(CREATE_TOPICS, 7, request(CREATE_TOPICS, topics=[topic], timeout_ms=5000))
    assert response.topics[0].error_code == E.NONE


def join_request(group: str, member_id: str = "", session_ms: int = 10_000, **fields: Any) -> Any:
    protocol = request(JOIN_GROUP).JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01meta")
    return request(
        JOIN_GROUP,
        group_id=group,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=fields.pop("rebalance_timeout_ms", 10_000),
        member_id=member_id,
        protocol_type="consumer",
        protocols=[protocol],
        **fields,
    )


async def join(client: RawClient, group: str, version: int = 9, **fields: Any) -> Any:
    """JoinGroup, retrying once with the member id the broker hands out (v4+)."""
    response = await client.call(JOIN_GROUP, version, join_request(group, **fields))
    if response.error_code == E.MEMBER_ID_REQUIRED:
        fields["member_id"] = response.member_id
        response = await client.call(JOIN_GROUP, version, join_request(group, **fields))
    return response


async def sync(
    client: RawClient, group: str, generation: int, member_id: str, assignments: dict[str, bytes]
) -> Any:
    cls = request(SYNC_GROUP)
    body = request(
        SYNC_GROUP,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[
            cls.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments.items()
        ],
    )
    return await client.call(SYNC_GROUP, 5, body)


def commit_request(
    group: str, offsets: dict[tuple[str, int], int], generation: int = -1, member_id: str = ""
) -> Any:
    cls = request(OFFSET_COMMIT)
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            cls.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata="m"
            )
        )
    return request(
        OFFSET_COMMIT,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        topics=[cls.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )


def commit_errors(response: Any) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


async def fetch_offsets(client: RawClient, group: str, version: int = 7) -> dict[tuple[str, int], int]:
    response = await client.call(OFFSET_FETCH, version, request(OFFSET_FETCH, group_id=group, topics=None))
    assert response.error_code == E.NONE
    return {(t.name, p.partition_index): p.committed_offset for t in response.topics for p in t.partitions}


async def test_find_coordinator_versions_and_offsets_topic(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, *FAST)
    client = await RawClient.connect(broker.port)
    versions = await client.call(
        API_VERSIONS,
        3,
        request(API_VERSIONS, client_software_name="groups-test", client_software_version="1"),
    )
    served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert served[FIND_COORDINATOR] == (0, 6) and served[JOIN_GROUP] == (0, 9)
    assert served[OFFSET_COMMIT] == (0, 9) and served[OFFSET_FETCH] == (0, 9)
    assert served[SYNC_GROUP] == (0, 5) and served[HEARTBEAT] == (0, 4) and served[LEAVE_GROUP] == (0, 5)
    assert served[DESCRIBE_GROUPS] == (0, 5) and served[LIST_GROUPS] == (0, 5)
    assert served[DELETE_GROUPS] == (0, 2) and served[OFFSET_DELETE] == (0, 0)
    assert 68 not in served and 69 not in served  # ConsumerGroupHeartbeat/Describe are not advertised
    assert broker.state.metadata.topic(OFFSETS_TOPIC) is None  # created on first use only

    v0 = await client.call(FIND_COORDINATOR, 0, request(FIND_COORDINATOR, key="g"))
    assert (v0.error_code, v0.node_id, v0.host, v0.port) == (E.NONE, 1, "127.0.0.1", broker.port)
    topic = broker.state.metadata.topic(OFFSETS_TOPIC)
    assert topic is not None and topic.partitions == 3 and topic.internal
    assert topic.configs["cleanup.policy"] == "compact"
    v3 = await client.call(FIND_COORDINATOR, 3, request(FIND_COORDINATOR, key="tx", key_type=1))
    assert (v3.error_code, v3.node_id, v3.port) == (E.NONE, 1, broker.port)  # the transaction coordinator
    txn_topic = broker.state.metadata.topic("__transaction_state")
    assert txn_topic is not None and txn_topic.internal and txn_topic.configs["cleanup.policy"] == "compact"
    v6 = await client.call(
        FIND_COORDINATOR, 6, request(FIND_COORDINATOR, key_type=0, coordinator_keys=["a", "b"])
    )
    assert [(c.key, c.error_code, c.node_id, c.port) for c in v6.coordinators] == [
        ("a", E.NONE, 1, broker.port),
        ("b", E.NONE, 1, broker.port),
    ]
    txn = await client.call(
        FIND_COORDINATOR, 4, request(FIND_COORDINATOR, key_type=1, coordinator_keys=["t"])
    )
    assert (txn.coordinators[0].error_code, txn.coordinators[0].node_id) == (E.NONE, 1)
    bad = await client.call(
        FIND_COORDINATOR, 4, request(FIND_COORDINATOR, key_type=7, coordinator_keys=["t"])
    )
    assert bad.coordinators[0].error_code == E.INVALID_REQUEST


async def test_membership_round_trip(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, *FAST)
    a = await RawClient.connect(broker.port)
    b = await RawClient.connect(broker.port)
    first = await join(a, "g")
    assert first.error_code == E.NONE and first.leader == first.member_id and first.generation_id == 1
    assert [m.metadata for m in first.members] == [b"\x00\x01meta"]
    assert (await sync(a, "g", 1, first.member_id, {first.member_id: b"A"})).assignment == b"A"

    # A second member parks the group in a rebalance; the first learns of it by heartbeat and rejoins.
    async with trio.open_nursery() as inner:
        second: list[Any] = []

        async def join_b() -> None:
            second.append(await join(b, "g"))

        inner.start_soon(join_b)
        with trio.fail_after(5):
            while True:
                hb = await a.call(
                    HEARTBEAT, 4, request(HEARTBEAT, group_id="g", generation_id=1, member_id=first.member_id)
                )
                if hb.error_code == E.REBALANCE_IN_PROGRESS:
                    break
                await trio.sleep(0.01)
        rejoin = await a.call(JOIN_GROUP, 9, join_request("g", member_id=first.member_id))
    (joined_b,) = second
    assert rejoin.generation_id == joined_b.generation_id == 2
    assert rejoin.leader == first.member_id and len(rejoin.members) == 2 and joined_b.members == []

    # The follower's SyncGroup waits for the leader's.
    async with trio.open_nursery() as inner:
        follower: list[Any] = []

        async def sync_b() -> None:
            follower.append(await sync(b, "g", 2, joined_b.member_id, {}))

        inner.start_soon(sync_b)
        await trio.sleep(0.05)
        assert follower == []
        leader = await sync(a, "g", 2, first.member_id, {first.member_id: b"A2", joined_b.member_id: b"B2"})
    assert leader.assignment == b"A2" and follower[0].assignment == b"B2"
    assert (follower[0].protocol_type, follower[0].protocol_name) == ("consumer", "range")

    described = await a.call(DESCRIBE_GROUPS, 5, request(DESCRIBE_GROUPS, groups=["g", "nope"]))
    g, nope = described.groups
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
        E.NONE,
        "Stable",
        "consumer",
        "range",
    )
    assert sorted(m.member_assignment for m in g.members) == [b"A2", b"B2"]
    assert {m.client_host for m in g.members} == {"/127.0.0.1"} and {m.client_id for m in g.members} == {
        "raw"
    }
    assert (nope.error_code, nope.group_state) == (E.NONE, "Dead")
    listed = await a.call(
        LIST_GROUPS, 5, request(LIST_GROUPS, states_filter=["stable"], types_filter=["classic"])
    )
    assert [(x.group_id, x.group_state, x.group_type, x.protocol_type) for x in listed.groups] == [
        ("g", "Stable", "classic", "consumer")
    ]
    assert (await a.call(LIST_GROUPS, 4, request(LIST_GROUPS, states_filter=["Empty"]))).groups == []
    assert [x.group_id for x in (await a.call(LIST_GROUPS, 0, request(LIST_GROUPS))).groups] == ["g"]

    # Members commit with their generation; others are refused.
    await create_topic(a, "t", 2)
    ok = await a.call(
        OFFSET_COMMIT, 9, commit_request("g", {("t", 0): 5, ("t", 9): 1, ("x", 0): 1}, 2, first.member_id)
    )
    assert commit_errors(ok) == {("t", 0): E.NONE, ("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION, ("x", 0): 3}
    stale = await a.call(OFFSET_COMMIT, 9, commit_request("g", {("t", 0): 6}, 1, first.member_id))
    assert commit_errors(stale) == {("t", 0): E.ILLEGAL_GENERATION}
    assert await fetch_offsets(a, "g") == {("t", 0): 5}
    assert (await a.call(DELETE_GROUPS, 2, request(DELETE_GROUPS, groups_names=["g"]))).results[
        0
    ].error_code == (E.NON_EMPTY_GROUP)
    deleted = await a.call(OFFSET_DELETE, 0, request(OFFSET_DELETE, group_id="g", topics=[]))
    assert deleted.error_code == E.NONE

    # LeaveGroup v0 (one member) and v3+ (a batch)
    left = await b.call(LEAVE_GROUP, 0, request(LEAVE_GROUP, group_id="g", member_id=joined_b.member_id))
    assert left.error_code == E.NONE
    identity = request(LEAVE_GROUP).MemberIdentity
    batch = await a.call(
        LEAVE_GROUP,
        5,
        request(
            LEAVE_GROUP,
            group_id="g",
            members=[identity(member_id=first.member_id), identity(member_id="ghost")],
        ),
    )
    assert [(m.member_id, m.error_code) for m in batch.members] == [
        (first.member_id, E.NONE),
        ("ghost", E.UNKNOWN_MEMBER_ID),
    ]
    assert (await a.call(DESCRIBE_GROUPS, 0, request(DESCRIBE_GROUPS, groups=["g"]))).groups[
        0
    ].group_state == "Empty"

    # Empty now: OffsetDelete works, then DeleteGroups removes the group.
    tp = request(OFFSET_DELETE).OffsetDeleteRequestTopic(
        name="t", partitions=[request(OFFSET_DELETE).OffsetDeleteRequestPartition(partition_index=0)]
    )
    gone = await a.call(OFFSET_DELETE, 0, request(OFFSET_DELETE, group_id="g", topics=[tp]))
    assert [(t.name, [p.error_code for p in t.partitions]) for t in gone.topics] == [("t", [E.NONE])]
    assert await fetch_offsets(a, "g") == {}
    final = await a.call(DELETE_GROUPS, 0, request(DELETE_GROUPS, groups_names=["g", "never"]))
    assert [(r.group_id, r.error_code) for r in final.results] == [
        ("g", E.GROUP_ID_NOT_FOUND),
        ("never", E.GROUP_ID_NOT_FOUND),
    ]


async def test_offsets_in_every_version(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, *FAST)
    client = await RawClient.connect(broker.port)
    await create_topic(client, "t", 3)
    for version in range(10):
        response = await client.call(
            OFFSET_COMMIT, version, commit_request(f"g{version}", {("t", 1): 10 + version})
        )
        assert commit_errors(response) == {("t", 1): E.NONE}, version
    cls = request(OFFSET_FETCH)
    for version in range(8):
        wanted = [cls.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]
        response = await client.call(
            OFFSET_FETCH, version, request(OFFSET_FETCH, group_id=f"g{version}", topics=wanted)
        )
        parts = {
            p.partition_index: (p.committed_offset, p.metadata, p.error_code)
            for p in response.topics[0].partitions
        }
        assert parts == {0: (-1, "", E.NONE), 1: (10 + version, "m", E.NONE)}, version
    groups = [
        cls.OffsetFetchRequestGroup(group_id="g8", topics=None),
        cls.OffsetFetchRequestGroup(
            group_id="g9", topics=[cls.OffsetFetchRequestTopics(name="t", partition_indexes=[1])]
        ),
        cls.OffsetFetchRequestGroup(group_id="none", topics=None),
    ]
    response = await client.call(OFFSET_FETCH, 9, request(OFFSET_FETCH, groups=groups, require_stable=True))
    assert [
        (
            g.group_id,
            g.error_code,
            [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in g.topics],
        )
        for g in response.groups
    ] == [("g8", 0, [("t", [(1, 18)])]), ("g9", 0, [("t", [(1, 19)])]), ("none", 0, [])]


async def test_session_timeout_fires_and_records_persist(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, *FAST)
    client = await RawClient.connect(broker.port)
    joined = await join(client, "s", session_ms=300)
    await sync(client, "s", joined.generation_id, joined.member_id, {joined.member_id: b"x"})
    with trio.fail_after(5):  # no heartbeats: the timer task expires the member on its own
        while True:
            described = await client.call(DESCRIBE_GROUPS, 5, request(DESCRIBE_GROUPS, groups=["s"]))
            if described.groups[0].group_state == "Empty":
                break
            await trio.sleep(0.05)
    # Every change went to __consumer_offsets in Kafka's formats: the last group record is Empty.
    runtime = broker.state.groups
    partition = runtime.core.partition_for("s")
    log = broker.state.partition_log(OFFSETS_TOPIC, partition)
    data = b"".join(s.read_bytes() for s in log.read(0, 1 << 20).slices)
    values = [
        rec.decode_group_metadata_value(r.value)
        for b in iter_batches(data)
        for r in iter_records(b)
        if r.value is not None and isinstance(rec.decode_key(r.key), rec.GroupMetadataKey)
    ]
    assert [len(v.members) for v in values][-1] == 0 and values[-1].generation == values[-2].generation + 1
    assert log.high_watermark == log.log_end_offset


async def test_restart_replays_offsets_and_groups(nursery: trio.Nursery, tmp_path: Path) -> None:
    async def run_once(check: Any) -> None:
        async with trio.open_nursery() as inner:
            broker = await start_broker(inner, tmp_path, *FAST)
            await broker.state.groups.loaded.wait()
            client = await RawClient.connect(broker.port)
            await check(client)
            await client.aclose()
            broker.request_shutdown()

    state: dict[str, Any] = {}

    async def first(client: RawClient) -> None:
        await create_topic(client, "t", 2)
        joined = await join(client, "live", session_ms=60_000)
        await sync(client, "live", joined.generation_id, joined.member_id, {joined.member_id: b"assigned"})
        state["member"] = joined.member_id
        committed = await client.call(OFFSET_COMMIT, 8, commit_request("plain", {("t", 0): 7, ("t", 1): 3}))
        assert set(commit_errors(committed).values()) == {E.NONE}
        assert commit_errors(await client.call(OFFSET_COMMIT, 8, commit_request("plain", {("t", 1): 4}))) == {
            ("t", 1): 0
        }

    async def second(client: RawClient) -> None:
        assert await fetch_offsets(client, "plain") == {("t", 0): 7, ("t", 1): 4}
        (group,) = (await client.call(DESCRIBE_GROUPS, 5, request(DESCRIBE_GROUPS, groups=["live"]))).groups
        assert group.group_state == "Stable"
        assert [(m.member_id, m.member_assignment) for m in group.members] == [(state["member"], b"assigned")]
        hb = await client.call(
            HEARTBEAT, 4, request(HEARTBEAT, group_id="live", generation_id=1, member_id=state["member"])
        )
        assert hb.error_code == E.NONE

    await run_once(first)
    await run_once(second)


async def test_loading_answers_load_in_progress(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, *FAST)
    client = await RawClient.connect(broker.port)
    await create_topic(client, "t", 1)
    assert commit_errors(await client.call(OFFSET_COMMIT, 8, commit_request("g", {("t", 0): 42}))) == {
        ("t", 0): 0
    }
    # A second runtime over the same logs: the topic exists, so every partition starts out loading.
    runtime = GroupRuntime(broker.state)
    fetched = await runtime.call(lambda now: runtime.core.offset_fetch("g", None, now), may_write=False)
    assert fetched.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    listed = await runtime.call(lambda now: runtime.core.list_groups(now), may_write=False)
    assert listed.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    async with trio.open_nursery() as inner:
        inner.start_soon(runtime.run)
        await runtime.loaded.wait()
        fetched = await runtime.call(lambda now: runtime.core.offset_fetch("g", None, now), may_write=False)
        inner.cancel_scope.cancel()
    assert fetched.error_code == E.NONE and [(p.topic, p.offset) for p in fetched.partitions] == [("t", 42)]


async def test_storage_failure_answers_coordinator_not_available(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    broker = await start_broker(nursery, tmp_path, *FAST)
    a = await RawClient.connect(broker.port)
    b = await RawClient.connect(broker.port)
    await create_topic(a, "t", 1)
    await a.call(FIND_COORDINATOR, 3, request(FIND_COORDINATOR, key="g"))
    partition = broker.state.groups.core.partition_for("g")
    log = broker.state.partition_log(OFFSETS_TOPIC, partition)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KafkaError(E.KAFKA_STORAGE_ERROR, "disk gone")

    first = await join(a, "g", session_ms=60_000)
    await sync(a, "g", 1, first.member_id, {first.member_id: b"A1"})  # generation 1 is persisted
    async with trio.open_nursery() as inner:
        joined: list[Any] = []

        async def join_b() -> None:
            joined.append(await join(b, "g"))

        inner.start_soon(join_b)
        with trio.fail_after(5):
            while broker.state.groups.core.groups["g"].state.value != "PreparingRebalance":
                await trio.sleep(0.01)
        rejoin = await a.call(JOIN_GROUP, 9, join_request("g", member_id=first.member_id))
    assert rejoin.error_code == E.NONE and rejoin.generation_id == 2
    # The leader's SyncGroup writes the group; that write fails. Neither SyncGroup may succeed.
    log.append_as_leader = broken  # type: ignore[method-assign]
    async with trio.open_nursery() as inner:
        parked: list[Any] = []

        async def sync_b() -> None:
            parked.append(await sync(b, "g", 2, joined[0].member_id, {}))

        inner.start_soon(sync_b)
        await trio.sleep(0.05)
        leader = await sync(a, "g", 2, first.member_id, {first.member_id: b"A", joined[0].member_id: b"B"})
    assert leader.error_code == E.COORDINATOR_NOT_AVAILABLE
    assert parked[0].error_code == E.COORDINATOR_NOT_AVAILABLE
    # The partition is reloaded from the log: the group is back as last persisted (generation 1, only
    # the first member), and with the disk healthy again the first member carries on.
    del log.append_as_leader
    with trio.fail_after(5):
        while True:
            fetched = await a.call(OFFSET_FETCH, 7, request(OFFSET_FETCH, group_id="g", topics=None))
            if fetched.error_code == E.NONE:
                break
            assert fetched.error_code in (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS)
            await trio.sleep(0.01)
    (group,) = (await a.call(DESCRIBE_GROUPS, 5, request(DESCRIBE_GROUPS, groups=["g"]))).groups
    assert group.group_state == "Stable" and [m.member_id for m in group.members] == [first.member_id]
    beat = request(HEARTBEAT, group_id="g", generation_id=1, member_id=first.member_id)
    assert (await a.call(HEARTBEAT, 4, beat)).error_code == E.NONE


async def test_shutdown_answers_parked_join(nursery: trio.Nursery, tmp_path: Path) -> None:
    async with trio.open_nursery() as inner:
        broker = await start_broker(inner, tmp_path, *FAST)
        a = await RawClient.connect(broker.port)
        b = await RawClient.connect(broker.port)
        first = await join(a, "g", session_ms=60_000)
        await sync(a, "g", 1, first.member_id, {first.member_id: b"A"})
        parked: list[Any] = []

        async def join_b() -> None:
            parked.append(await join(b, "g"))

        inner.start_soon(join_b)
        with trio.fail_after(5):
            while broker.state.groups.core.groups["g"].state.value != "PreparingRebalance":
                await trio.sleep(0.01)
        started = trio.current_time()
        broker.request_shutdown()
        with trio.fail_after(5):
            await broker.stopped.wait()
    # The parked JoinGroup did not hold the shutdown for its rebalance timeout (10 s here).
    assert trio.current_time() - started < 5
    assert parked[0].error_code == E.NOT_COORDINATOR


async def test_offsets_topic_created_by_someone_else(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, *FAST)  # offsets.topic.num.partitions=3
    client = await RawClient.connect(broker.port)
    await create_topic(client, OFFSETS_TOPIC, 2)
    await create_topic(client, "t", 1)
    for group in ("a", "b", "c", "d"):
        response = await client.call(OFFSET_COMMIT, 8, commit_request(group, {("t", 0): len(group)}))
        assert commit_errors(response) == {("t", 0): E.NONE}
    runtime = broker.state.groups
    assert runtime.partitions == 2
    for group in ("a", "b", "c", "d"):
        assert await fetch_offsets(client, group) == {("t", 0): 1}
        # the record landed in the partition Kafka's hash picks for a 2-partition topic
        log = broker.state.partition_log(OFFSETS_TOPIC, rec.partition_for(group, 2))
        data = b"".join(s.read_bytes() for s in log.read(0, 1 << 20).slices)
        keys = [rec.decode_key(r.key) for b in iter_batches(data) for r in iter_records(b)]
        assert any(getattr(k, "group", None) == group for k in keys)


async def test_single_member_lifecycle_in_every_version(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, *FAST)
    client = await RawClient.connect(broker.port)
    for version in range(10):
        group = f"v{version}"
        joined = await join(client, group, version=version)
        assert joined.error_code == E.NONE and joined.leader == joined.member_id, version
        assert joined.protocol_name == "range" and joined.generation_id == 1
        assert [m.member_id for m in joined.members] == [joined.member_id]
        cls = request(SYNC_GROUP)
        sync_version = min(version, 5)
        synced = await client.call(
            SYNC_GROUP,
            sync_version,
            request(
                SYNC_GROUP,
                group_id=group,
                generation_id=1,
                member_id=joined.member_id,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[cls.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"a")],
            ),
        )
        assert (synced.error_code, synced.assignment) == (E.NONE, b"a"), version
        beat = request(HEARTBEAT, group_id=group, generation_id=1, member_id=joined.member_id)
        assert (await client.call(HEARTBEAT, min(version, 4), beat)).error_code == E.NONE
        wrong = request(HEARTBEAT, group_id=group, generation_id=7, member_id=joined.member_id)
        assert (await client.call(HEARTBEAT, min(version, 4), wrong)).error_code == E.ILLEGAL_GENERATION
        describe_version = min(version, 5)
        (described,) = (
            await client.call(DESCRIBE_GROUPS, describe_version, request(DESCRIBE_GROUPS, groups=[group]))
        ).groups
        assert (described.group_state, described.members[0].member_assignment) == ("Stable", b"a"), version
        leave_version = min(version, 5)
        if leave_version >= 3:
            identity = request(LEAVE_GROUP).MemberIdentity(member_id=joined.member_id)
            leave = request(LEAVE_GROUP, group_id=group, members=[identity])
        else:
            leave = request(LEAVE_GROUP, group_id=group, member_id=joined.member_id)
        assert (await client.call(LEAVE_GROUP, leave_version, leave)).error_code == E.NONE
        # Empty without offsets: the group may be deleted (DeleteGroups 0-2)
        deleted = await client.call(DELETE_GROUPS, version % 3, request(DELETE_GROUPS, groups_names=[group]))
        assert deleted.results[0].error_code == E.NONE, version
    for version in range(6):
        listed = await client.call(LIST_GROUPS, version, request(LIST_GROUPS))
        assert listed.error_code == E.NONE and listed.groups == [], version
