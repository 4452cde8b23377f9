"""Group administration through each client's admin API and the `kafkacompat groups` command.

Two kinds of groups: an active consumer group (one confluent-kafka member, Stable) and an inactive one
that only holds committed offsets (committed without joining, as tools and "simple" consumers do, so
it is Empty). Uses the suite's broker (conftest: fast rebalances) unless `--bootstrap` is given.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from compat_tests.clients import run_async


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{i}".encode(), partition=partition)
    assert producer.flush(15) == 0


def commit_without_joining(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


@pytest.fixture
def topic2(bootstrap: str, make_topic: Callable[..., str]) -> str:
    """A two-partition topic with 10 records in each partition."""
    topic = make_topic(2)
    produce(bootstrap, topic, 2, 10)
    return topic


@pytest.fixture
def inactive_group(bootstrap: str, topic2: str) -> str:
    group = _name("inactive")
    commit_without_joining(bootstrap, group, {(topic2, 0): 3, (topic2, 1): 7})
    return group


@pytest.fixture
def active_group(bootstrap: str, topic2: str) -> Iterator[tuple[str, Any]]:
    from confluent_kafka import Consumer

    group = _name("active")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "compat-member",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic2])
    deadline = time.monotonic() + 30
    while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
        consumer.poll(0.05)
    assert len(consumer.assignment()) == 2
    try:
        yield group, consumer
    finally:
        consumer.close()


# --- kafka-python ----------------------------------------------------------------------------------


@pytest.fixture
def kp_admin(bootstrap: str) -> Iterator[Any]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        yield admin
    finally:
        admin.close()


def test_kp_admin_list_describe_offsets(
    kp_admin: Any, topic2: str, inactive_group: str, active_group: tuple[str, Any]
) -> None:
    from kafka import TopicPartition

    active, _ = active_group
    listed = {g["group_id"]: g for g in kp_admin.list_groups()}
    assert active in listed and inactive_group in listed
    assert listed[active]["protocol_type"] == "consumer"
    stable = {g["group_id"] for g in kp_admin.list_groups(states_filter=["Stable"])}
    assert active in stable and inactive_group not in stable

    described = kp_admin.describe_groups([active, inactive_group])
    group = described[active]
    assert group["group_state"] == "Stable"
    assert group["protocol_type"] == "consumer"
    (member,) = group["members"]
    assert member["client_id"] == "compat-member"
    assignment = member["member_assignment"]
    assigned = {(a["topic"], p) for a in assignment["assigned_partitions"] for p in a["partitions"]}
    assert assigned == {(topic2, 0), (topic2, 1)}
    assert described[inactive_group]["group_state"] == "Empty"
    assert described[inactive_group]["members"] == []

    offsets = kp_admin.list_group_offsets({inactive_group: None})[inactive_group]
    assert {tp: o.offset for tp, o in offsets.items()} == {
        TopicPartition(topic2, 0): 3,
        TopicPartition(topic2, 1): 7,
    }


def test_kp_admin_alter_reset_delete_offsets_and_groups(
    kp_admin: Any, topic2: str, inactive_group: str, active_group: tuple[str, Any]
) -> None:
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec
    from kafka.errors import NoError
    from kafka.structs import OffsetAndMetadata

    tp0, tp1 = TopicPartition(topic2, 0), TopicPartition(topic2, 1)
    altered = kp_admin.alter_group_offsets(inactive_group, {tp0: OffsetAndMetadata(5, "", -1)})
    assert altered == {tp0: NoError}
    reset = kp_admin.reset_group_offsets(inactive_group, {tp1: OffsetSpec.EARLIEST})
    assert reset[tp1]["error"] is NoError and reset[tp1]["offset"] == 0
    offsets = kp_admin.list_group_offsets({inactive_group: None})[inactive_group]
    assert {tp: o.offset for tp, o in offsets.items()} == {tp0: 5, tp1: 0}

    # OffsetDelete: allowed for a group without members
    assert kp_admin.delete_group_offsets(inactive_group, [tp0]) == {tp0: NoError}
    offsets = kp_admin.list_group_offsets({inactive_group: None})[inactive_group]
    assert set(offsets) == {tp1}

    # A group with members cannot be deleted; an Empty one can, and is gone afterwards.
    active, _ = active_group
    results = kp_admin.delete_groups([active, inactive_group])
    assert results == {active: "NonEmptyGroupError", inactive_group: "OK"}
    assert kp_admin.describe_groups([inactive_group])[inactive_group]["group_state"] == "Dead"
    assert inactive_group not in {g["group_id"] for g in kp_admin.list_groups()}


def test_kp_admin_remove_static_member(bootstrap: str, kp_admin: Any, topic2: str) -> None:
    from confluent_kafka import Consumer
    from kafka.admin import MemberToRemove
    from kafka.errors import NoError

    group = _name("static")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": "instance-a",
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic2])
    deadline = time.monotonic() + 30
    while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
        consumer.poll(0.05)
    consumer.close()  # a static member stays in the group after close
    assert kp_admin.describe_groups([group])[group]["group_state"] == "Stable"
    removed = kp_admin.remove_group_members(group, [MemberToRemove(group_instance_id="instance-a")])
    assert list(removed.values()) == [NoError]
    assert kp_admin.describe_groups([group])[group]["group_state"] == "Empty"


# --- confluent-kafka -------------------------------------------------------------------------------


def test_confluent_admin_groups(
    bootstrap: str, topic2: str, inactive_group: str, active_group: tuple[str, Any]
) -> None:
    from confluent_kafka import (
        ConsumerGroupState,
        ConsumerGroupTopicPartitions,
        KafkaError,
        KafkaException,
        TopicPartition,
    )
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    active, _ = active_group
    listed = admin.list_consumer_groups(request_timeout=10).result()
    by_id = {g.group_id: g for g in listed.valid}
    assert by_id[active].state == ConsumerGroupState.STABLE
    assert by_id[inactive_group].state == ConsumerGroupState.EMPTY
    assert not by_id[active].is_simple_consumer_group
    stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}, request_timeout=10).result()
    assert active in {g.group_id for g in stable.valid}
    assert inactive_group not in {g.group_id for g in stable.valid}

    described = admin.describe_consumer_groups([active], request_timeout=10)[active].result()
    assert described.state == ConsumerGroupState.STABLE
    assert described.partition_assignor == "range"
    (member,) = described.members
    assert member.client_id == "compat-member"
    assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == {
        (topic2, 0),
        (topic2, 1),
    }

    fetched = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(inactive_group)])[
        inactive_group
    ]
    assert {(tp.topic, tp.partition): tp.offset for tp in fetched.result().topic_partitions} == {
        (topic2, 0): 3,
        (topic2, 1): 7,
    }
    altered = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(inactive_group, [TopicPartition(topic2, 1, 9)])]
    )[inactive_group].result()
    assert [(tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions] == [(1, 9, None)]
    fetched = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(inactive_group, [TopicPartition(topic2, 1)])]
    )[inactive_group].result()
    assert [tp.offset for tp in fetched.topic_partitions] == [9]

    with pytest.raises(KafkaException) as info:
        admin.delete_consumer_groups([active], request_timeout=10)[active].result()
    assert info.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    admin.delete_consumer_groups([inactive_group], request_timeout=10)[inactive_group].result()
    listed = admin.list_consumer_groups(request_timeout=10).result()
    assert inactive_group not in {g.group_id for g in listed.valid}


# --- aiokafka --------------------------------------------------------------------------------------


def test_aiokafka_admin_groups(
    bootstrap: str, topic2: str, inactive_group: str, active_group: tuple[str, Any]
) -> None:
    pytest.importorskip("aiokafka")
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.structs import TopicPartition

    active, _ = active_group

    async def run() -> tuple[Any, Any, Any]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            listed = await admin.list_consumer_groups()
            described = await admin.describe_consumer_groups([active])
            offsets = await admin.list_consumer_group_offsets(inactive_group)
            return listed, described, offsets
        finally:
            await admin.close()

    listed, described, offsets = run_async(run())
    ids = {entry[0]: entry[1] for entry in listed}
    assert ids[active] == "consumer" and inactive_group in ids
    (response,) = described
    (group,) = response.groups
    error_code, group_id, state = group[0], group[1], group[2]
    assert (error_code, group_id, state) == (0, active, "Stable")
    assert {tp: o.offset for tp, o in offsets.items()} == {
        TopicPartition(topic2, 0): 3,
        TopicPartition(topic2, 1): 7,
    }


# --- kafkacompat groups (CLI) ----------------------------------------------------------------------


def cli(bootstrap: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        [sys.executable, "-m", "kafkacompat", "groups", *args, "--bootstrap-server", bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if ok and completed.returncode != 0:
        raise AssertionError(f"kafkacompat groups {' '.join(args)} failed: {completed.stderr}")
    return completed


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if line.strip()]


def test_cli_list_describe_reset_delete(
    bootstrap: str, topic2: str, inactive_group: str, active_group: tuple[str, Any]
) -> None:
    active, _ = active_group
    listed = cli(bootstrap, "list").stdout.split()
    assert active in listed and inactive_group in listed
    states = {r[0]: r[1] for r in rows(cli(bootstrap, "list", "--state").stdout)[1:]}
    assert states[active] == "Stable" and states[inactive_group] == "Empty"

    out = cli(bootstrap, "describe", "--group", inactive_group).stdout
    assert f"Consumer group '{inactive_group}' has no active members." in out
    table = rows(out)[1:]
    assert table[0][:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert [r[:6] for r in table[1:]] == [
        [inactive_group, topic2, "0", "3", "10", "7"],
        [inactive_group, topic2, "1", "7", "10", "3"],
    ]
    members = rows(cli(bootstrap, "describe", "--group", active, "--members").stdout)
    assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert members[1][0] == active and members[1][3:] == ["compat-member", "2"]
    state = rows(cli(bootstrap, "describe", "--group", active, "--state").stdout)
    coordinator_address, coordinator_id = state[1][1], state[1][2]
    assert state[1][0] == active and state[1][4:] == ["Stable", "1"]
    assert ":" in coordinator_address and coordinator_id.startswith("(") and coordinator_id.endswith(")")

    # reset: dry run by default, --execute commits; an active group is refused
    dry = rows(
        cli(bootstrap, "reset-offsets", "--group", inactive_group, "--all-topics", "--to-earliest").stdout
    )
    assert dry[1:] == [[inactive_group, topic2, "0", "0"], [inactive_group, topic2, "1", "0"]]
    assert [r[3] for r in rows(cli(bootstrap, "describe", "--group", inactive_group).stdout)[2:]] == [
        "3",
        "7",
    ]
    cli(
        bootstrap,
        "reset-offsets",
        "--group",
        inactive_group,
        "--topic",
        f"{topic2}:1",
        "--to-offset",
        "4",
        "--execute",
    )
    cli(bootstrap, "reset-offsets", "--group", inactive_group, "--topic", topic2, "--to-latest", "--execute")
    assert [r[3] for r in rows(cli(bootstrap, "describe", "--group", inactive_group).stdout)[2:]] == [
        "10",
        "10",
    ]
    cli(
        bootstrap,
        "reset-offsets",
        "--group",
        inactive_group,
        "--topic",
        f"{topic2}:0",
        "--to-offset",
        "4",
        "--execute",
    )
    assert [r[3] for r in rows(cli(bootstrap, "describe", "--group", inactive_group).stdout)[2:]] == [
        "4",
        "10",
    ]
    future = "2999-01-01T00:00:00"
    out = cli(bootstrap, "reset-offsets", "--group", inactive_group, "--all-topics", "--to-datetime", future)
    assert [r[3] for r in rows(out.stdout)[1:]] == ["10", "10"]
    past = "2000-01-01T00:00:00"
    out = cli(bootstrap, "reset-offsets", "--group", inactive_group, "--all-topics", "--to-datetime", past)
    assert [r[3] for r in rows(out.stdout)[1:]] == ["0", "0"]
    refused = cli(bootstrap, "reset-offsets", "--group", active, "--all-topics", "--to-earliest", ok=False)
    assert refused.returncode == 1 and "inactive" in refused.stderr

    failed = cli(bootstrap, "delete", "--group", active, ok=False)
    assert failed.returncode == 1 and "NON_EMPTY_GROUP" in failed.stderr
    deleted = cli(bootstrap, "delete", "--group", inactive_group)
    assert f"('{inactive_group}') was successful" in deleted.stdout
    assert inactive_group not in cli(bootstrap, "list").stdout.split()
    gone = cli(bootstrap, "describe", "--group", inactive_group, ok=False)
    assert gone.returncode == 1 and gone.stdout == ""
    assert gone.stderr == f"Error: Consumer group '{inactive_group}' does not exist.\n"
    both = cli(bootstrap, "describe", "--group", inactive_group, "--group", active, "--state", ok=False)
    assert both.returncode == 1 and "does not exist" in both.stderr  # the others are still described
    assert [r[0] for r in rows(both.stdout)[1:]] == [active]
