"""Client quotas on the wire: ACL checks of Describe/AlterClientQuotas, throttle_time_ms and the muted
channel after a throttled produce, and a SASL user's quota taking precedence over a client-id's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from kafkacompat.broker._tests.test_security import certs, connect, plain_login, start_secured
from kafkacompat.broker._tests.wire_client import RawClient, batch, create, produce, request
from kafkacompat.wire.errors import ErrorCode

__all__ = ["certs"]  # the module fixture, shared with test_security

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")

DESCRIBE, ALTER, API_VERSIONS = 48, 49, 18
ACL_OVERRIDES = ("authorizer.class.name=kafka.security.authorizer.AclAuthorizer", "super.users=User:admin")


def alter_body(entity: list[tuple[str, str | None]], key: str, value: float, remove: bool = False) -> Any:
    alter = request(ALTER)
    return request(
        ALTER,
        entries=[
            alter.EntryData(
                entity=[alter.EntityData(entity_type=kind, entity_name=name) for kind, name in entity],
                ops=[alter.OpData(key=key, value=value, remove=remove)],
            )
        ],
        validate_only=False,
    )


async def login(broker: Any, certs: dict[str, Path], user: str) -> RawClient:
    client = await connect(broker, "SASL_PLAINTEXT", certs)
    assert (await plain_login(client, user, f"{user}-secret")).error_code == ErrorCode.NONE
    return client


async def test_describe_and_alter_need_cluster_configs_permissions(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    broker = await start_secured(nursery, tmp_path, certs, *ACL_OVERRIDES)
    alice = await login(broker, certs, "alice")
    refused = await alice.call(ALTER, 1, alter_body([("user", "alice")], "producer_byte_rate", 1e9))
    assert refused.entries[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    described = await alice.call(DESCRIBE, 1, request(DESCRIBE, components=[], strict=False))
    assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    admin = await login(broker, certs, "admin")
    done = await admin.call(ALTER, 1, alter_body([("user", None)], "consumer_byte_rate", 4096))
    assert done.entries[0].error_code == ErrorCode.NONE
    bad = await admin.call(ALTER, 1, alter_body([("ip", "1.2.3.4")], "consumer_byte_rate", 4096))
    assert bad.entries[0].error_code == ErrorCode.INVALID_REQUEST
    for value in (-1, float("inf"), float("nan"), 1.5):
        bad = await admin.call(ALTER, 1, alter_body([("user", "x")], "consumer_byte_rate", value))
        assert bad.entries[0].error_code == ErrorCode.INVALID_REQUEST
    component = request(DESCRIBE).ComponentData(entity_type="user", match_type=1, match=None)
    described = await admin.call(DESCRIBE, 1, request(DESCRIBE, components=[component], strict=True))
    assert described.error_code == ErrorCode.NONE
    assert [(e.entity[0].entity_type, e.entity[0].entity_name) for e in described.entries] == [("user", None)]
    assert [(v.key, v.value) for v in described.entries[0].values] == [("consumer_byte_rate", 4096.0)]


async def test_throttled_produce_answers_at_once_then_mutes_the_channel(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    """Quota 10 KB/s on client-id "raw" (the raw client's), but 10 MB/s on user alice, which wins for her."""
    broker = await start_secured(nursery, tmp_path, certs)
    admin = await connect(broker, "PLAINTEXT", certs)
    assert (await create(admin, "quota-wire")).error_code == ErrorCode.NONE
    for entity, rate in (([("client-id", "raw")], 10_000), ([("user", "alice")], 10_000_000)):
        assert (await admin.call(ALTER, 1, alter_body(entity, "producer_byte_rate", rate))).entries[
            0
        ].error_code == 0
    payload = b"x" * 60_000  # twice 60 KB over a minimum window of 10 s x 10 KB/s: 2 s of throttle
    anonymous = await connect(broker, "PLAINTEXT", certs)
    first = await produce(anonymous, "quota-wire", batch(payload))
    assert first.error_code == ErrorCode.NONE
    second = await anonymous.call(0, 11, _produce_body(payload))
    assert second.throttle_time_ms > 1000
    began = trio.current_time()
    await anonymous.call(
        API_VERSIONS, 3, request(API_VERSIONS, client_software_name="t", client_software_version="1")
    )
    assert trio.current_time() - began >= second.throttle_time_ms / 1000 * 0.9  # the muted channel
    alice = await login(broker, certs, "alice")
    for _ in range(3):
        answered = await alice.call(0, 11, _produce_body(payload))
        assert answered.throttle_time_ms == 0  # /users/alice precedes /clients/raw


def _produce_body(payload: bytes) -> Any:
    from kafkacompat.broker._tests.wire_client import produce_request

    return produce_request("quota-wire", batch(payload), acks=1)


async def test_old_produce_is_delayed_and_request_percentage_throttles(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    """Produce v5 (before KIP-219) gets its response only after the throttle; a tiny request_percentage
    throttles a cheap Metadata request too, and ApiVersions is exempt from it."""
    broker = await start_secured(nursery, tmp_path, certs)
    admin = await connect(broker, "PLAINTEXT", certs)
    assert (await create(admin, "quota-wire")).error_code == ErrorCode.NONE
    byte_rate = alter_body([("client-id", "raw")], "producer_byte_rate", 10_000)
    assert (await admin.call(ALTER, 1, byte_rate)).entries[0].error_code == ErrorCode.NONE
    old = await connect(broker, "PLAINTEXT", certs)
    payload = b"x" * 60_000
    first = await old.call(0, 5, _produce_body(payload))
    assert first.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    began = trio.current_time()
    delayed = await old.call(0, 5, _produce_body(payload))
    assert delayed.throttle_time_ms > 1000
    assert trio.current_time() - began >= delayed.throttle_time_ms / 1000 * 0.9
    # request_percentage on another client id, so that the admin connection is not throttled by it
    percentage = alter_body([("client-id", "busy")], "request_percentage", 1e-6)
    assert (await admin.call(ALTER, 1, percentage)).entries[0].error_code == ErrorCode.NONE
    busy = await connect(broker, "PLAINTEXT", certs)
    versions = request(API_VERSIONS, client_software_name="t", client_software_version="1")
    for _ in range(5):
        await busy.send(API_VERSIONS, 3, versions, client_id="busy")
        assert (await busy.receive(API_VERSIONS, 3))[1].throttle_time_ms == 0
    await busy.send(3, 12, request(3, topics=None, allow_auto_topic_creation=False), client_id="busy")
    metadata = (await busy.receive(3, 12))[1]
    assert metadata.throttle_time_ms > 0  # any handler time is over a millionth of a percent of a thread


def test_only_a_followers_fetch_in_cluster_mode_escapes_client_quotas() -> None:
    from types import SimpleNamespace

    from kafkacompat.broker.connection import _is_follower_fetch

    clustered = SimpleNamespace(replicas=SimpleNamespace(serves_followers=True))
    single = SimpleNamespace(replicas=SimpleNamespace(serves_followers=False))
    follower_v12 = request(1, replica_id=2)
    consumer_v12 = request(1, replica_id=-1)
    follower_v15 = request(1, replica_state=request(1).ReplicaState(replica_id=2, replica_epoch=1))
    assert _is_follower_fetch(clustered, 1, 12, follower_v12)  # type: ignore[arg-type]
    assert _is_follower_fetch(clustered, 1, 15, follower_v15)  # type: ignore[arg-type]
    assert not _is_follower_fetch(clustered, 1, 12, consumer_v12)  # type: ignore[arg-type]
    assert not _is_follower_fetch(single, 1, 12, follower_v12)  # type: ignore[arg-type]
    assert not _is_follower_fetch(clustered, 0, 9, follower_v12)  # type: ignore[arg-type]


async def test_throttled_fetch_is_answered_empty_and_its_bytes_are_taken_back(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    """As Kafka's KafkaApis: a fetch whose response would put the client over consumer_byte_rate gets no
    partitions, the throttle time, and the same session; the bytes are not counted, so once the delay is
    over the same fetch gets the data. Window 2 x 1 s, quota 110 KB/s, records of 60 KB."""
    from kafkacompat.broker._tests.wire_client import fetch_request

    window = ("quota.window.num=2", "quota.window.size.seconds=1")
    broker = await start_secured(nursery, tmp_path, certs, *window)
    admin = await connect(broker, "PLAINTEXT", certs)
    assert (await create(admin, "quota-fetch")).error_code == ErrorCode.NONE
    payload = b"f" * 60_000
    for _ in range(2):
        assert (await produce(admin, "quota-fetch", batch(payload))).error_code == ErrorCode.NONE
    rate = alter_body([("client-id", "raw")], "consumer_byte_rate", 110_000)
    assert (await admin.call(ALTER, 1, rate)).entries[0].error_code == ErrorCode.NONE

    consumer = await connect(broker, "PLAINTEXT", certs)
    # before any fetch: only the log's own descriptors (a fetch's duplicate is released after its answer
    # is written, which the client may see first)
    segment_fds = _open_segment_fds("quota-fetch-0")
    one_batch = {"partition_max_bytes": 1, "max_bytes": 1 << 20, "session_epoch": 0}  # opens a session
    first = await consumer.call(1, 12, fetch_request("quota-fetch", 0, **one_batch))
    assert first.throttle_time_ms == 0 and first.session_id != 0
    assert len(first.responses[0].partitions[0].records) > 60_000
    session = {"partition_max_bytes": 1, "max_bytes": 1 << 20, "session_id": first.session_id}
    throttled = await consumer.call(1, 12, fetch_request("quota-fetch", 1, session_epoch=1, **session))
    assert throttled.throttle_time_ms > 0
    assert (throttled.error_code, throttled.session_id, throttled.responses) == (0, first.session_id, [])
    # the records read for the discarded answer held a duplicate of the segment's fd: given back at once
    # (the first fetch's duplicate was released before this request was read)
    assert _open_segment_fds("quota-fetch-0") == segment_fds
    await trio.sleep(throttled.throttle_time_ms / 1000 + 0.5)
    again = await consumer.call(1, 12, fetch_request("quota-fetch", 1, session_epoch=2, **session))
    assert again.throttle_time_ms == 0
    assert again.responses[0].partitions[0].high_watermark == 2  # listed again, with its records
    assert len(again.responses[0].partitions[0].records) > 60_000


def _open_segment_fds(partition_dir: str) -> int:
    """How many of this process's descriptors are open on a .log segment of the partition's dir."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if f"/{partition_dir}/" in target and target.endswith(".log"):
            count += 1
    return count


async def test_ip_quotas_stand_alone_and_refuse_connections_over_their_rate(
    nursery: trio.Nursery, tmp_path: Path, certs: dict[str, Path]
) -> None:
    """KIP-612 ip entities: validated as Kafka validates them, described, and enforced on new connections
    (closed unanswered once their throttle time has passed)."""
    window = ("quota.window.num=2", "quota.window.size.seconds=1")
    broker = await start_secured(nursery, tmp_path, certs, *window)
    admin = await connect(broker, "PLAINTEXT", certs)
    rate = "connection_creation_rate"
    for entity, key, message in (
        ([("ip", "not-an-address")], rate, "is not a valid IP"),
        ([("ip", "10.0.0.1"), ("user", "alice")], rate, "Invalid quota entity combination"),
        ([("ip", "10.0.0.1")], "producer_byte_rate", "Invalid configuration key producer_byte_rate"),
        ([("user", "alice")], rate, "Invalid configuration key connection_creation_rate"),
        ([("ip", "10.0.0.1")], rate, None),
    ):
        answer = (await admin.call(ALTER, 1, alter_body(entity, key, 3))).entries[0]
        if message is None:
            assert answer.error_code == ErrorCode.NONE, answer.error_message
        else:
            assert answer.error_code == ErrorCode.INVALID_REQUEST
            assert message in (answer.error_message or ""), answer.error_message
    component = request(DESCRIBE).ComponentData(entity_type="ip", match_type=2, match=None)
    described = await admin.call(DESCRIBE, 1, request(DESCRIBE, components=[component], strict=False))
    assert [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in described.entries] == [
        [("ip", "10.0.0.1")]
    ]
    # 127.0.0.1 at 2 connections a second: a burst of new connections gets some closed unanswered
    limited = await admin.call(ALTER, 1, alter_body([("ip", "127.0.0.1")], rate, 2))
    assert limited.entries[0].error_code == ErrorCode.NONE
    versions = request(API_VERSIONS, client_software_name="t", client_software_version="1")
    answered = closed = 0
    burst = [await connect(broker, "PLAINTEXT", certs) for _ in range(8)]
    for client in burst:
        try:
            with trio.fail_after(5):
                await client.call(API_VERSIONS, 3, versions)
            answered += 1
        except (AssertionError, trio.BrokenResourceError, OSError):  # closed by the broker, unanswered
            closed += 1
    assert 1 <= answered <= 3 and closed >= 5, (answered, closed)
