"""Connection behaviour on the wire: version negotiation, ordering, acks=0, bad input, idle and caps."""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from kafkacompat.broker import dispatch
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
from kafkacompat.wire.messages import API_SPECS

API_VERSIONS, METADATA, PRODUCE, FETCH, CREATE_TOPICS = 18, 3, 0, 1, 19
TELEMETRY_KEYS = {71, 72}


def hello() -> object:
    return request(API_VERSIONS, client_software_name="raw-test", client_software_version="1.0")


async def test_api_versions_lists_the_dispatch_table(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    for version in range(5):
        response = await client.call(API_VERSIONS, version, hello())
        assert response.error_code == ErrorCode.NONE
        listed = {(k.api_key, k.min_version, k.max_version) for k in response.api_keys}
        assert listed == set(dispatch.supported_versions())
    keys = {k for k, _, _ in dispatch.supported_versions()}
    assert {0, 1, 2, 3, 18, 19, 20, 22} <= keys
    assert not keys & TELEMETRY_KEYS
    for key, low, high in dispatch.supported_versions():
        spec = API_SPECS[key]
        assert spec.min_version <= low <= high <= spec.max_version
    assert (1, 4, 17) in dispatch.supported_versions()
    for name, version in (("", "1"), ("bad name", "1"), ("ok", "-1"), ("ok", "1.")):
        body = request(API_VERSIONS, client_software_name=name, client_software_version=version)
        refused = await client.call(API_VERSIONS, 3, body)
        assert (refused.error_code, refused.api_keys) == (ErrorCode.INVALID_REQUEST, []), (name, version)


async def test_api_versions_answers_share_one_key_list_and_nothing_else() -> None:
    """ApiVersions' key list is built once per mode (handlers/api_versions.py: it depends only on the
    dispatch table): each answer is still a response of its own, lists the table of its mode, and encodes
    as one built afresh would, in every version."""
    from kafkacompat.broker.handlers import api_versions
    from kafkacompat.wire import messages

    def ctx(version: int, cluster_mode: bool = False) -> Any:
        return SimpleNamespace(api_version=version, broker=SimpleNamespace(cluster_mode=cluster_mode))

    first = await api_versions.handle(ctx(3), hello())
    second = await api_versions.handle(ctx(3), hello())
    assert first is not second and first.api_keys is second.api_keys
    first.throttle_time_ms = 100  # as the quota path sets it on one response
    assert second.throttle_time_ms == 0
    assert isinstance(first.api_keys, tuple)  # no answer can change what the next one lists
    listed = [(k.api_key, k.min_version, k.max_version) for k in second.api_keys]
    assert listed == dispatch.supported_versions(False)
    clustered = await api_versions.handle(ctx(3, cluster_mode=True), hello())
    listed = [(k.api_key, k.min_version, k.max_version) for k in clustered.api_keys]
    assert listed == dispatch.supported_versions(True) != dispatch.supported_versions(False)
    unsupported = api_versions.unsupported_version_response(False)
    assert unsupported.error_code == ErrorCode.UNSUPPORTED_VERSION and unsupported.api_keys == second.api_keys
    for version in range(5):
        fresh = type(second)(
            error_code=ErrorCode.NONE,
            api_keys=[
                type(second).ApiVersion(api_key=key, min_version=low, max_version=high)
                for key, low, high in dispatch.supported_versions(False)
            ],
        )
        answer = await api_versions.handle(ctx(version), hello())
        assert messages.encode_response(API_VERSIONS, version, answer) == messages.encode_response(
            API_VERSIONS, version, fresh
        )


async def test_api_versions_unknown_version_gets_v0_error_and_list(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    # ApiVersions v9 from a future client: header v2 (flexible), body unknown to us
    header = struct.pack(">hhih", API_VERSIONS, 9, 77, 3) + b"cli" + b"\x00"
    body = b"\x05future\x020\x00"
    await client.send_raw(struct.pack(">i", len(header) + len(body)) + header + body)
    correlation_id, response = await client.receive(API_VERSIONS, 0)
    assert correlation_id == 77
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {(k.api_key, k.min_version, k.max_version) for k in response.api_keys} == set(
        dispatch.supported_versions()
    )
    # the connection stays usable
    assert (await client.call(API_VERSIONS, 3, hello())).error_code == ErrorCode.NONE


async def test_unsupported_version_of_other_api_closes_connection(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await client.send(FETCH, 3, request(FETCH, max_wait_ms=0, min_bytes=0, topics=[]))  # Fetch v3: not served
    assert await client.is_closed()
    other = await RawClient.connect(broker.port)
    assert (await other.call(METADATA, 12, request(METADATA, topics=[]))).brokers[0].port == broker.port


async def test_undecodable_frames_close_only_that_connection(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "socket.request.max.bytes=1000")
    bystander = await RawClient.connect(broker.port)
    cases = [
        struct.pack(">i", 3) + b"\x00\x03\x00",  # shorter than a header
        struct.pack(">i", 12) + struct.pack(">hhi", METADATA, 1, 1) + b"\x00\x00\xff\xff",  # truncated body
        struct.pack(">i", 5000) + b"x" * 10,  # above socket.request.max.bytes
        struct.pack(">i", -3),  # negative size
        struct.pack(">i", 10) + struct.pack(">hhi", 999, 0, 1) + b"\x00\x00",  # unknown api key
    ]
    for payload in cases:
        client = await RawClient.connect(broker.port)
        await client.send_raw(payload)
        assert await client.is_closed(), payload
    assert (await bystander.call(API_VERSIONS, 3, hello())).error_code == ErrorCode.NONE


async def test_pipelined_requests_answered_in_order_acks0_silent(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    assert (await create(client, "ordered")).error_code == ErrorCode.NONE
    silent = produce_request("ordered", batch(b"silent"), acks=0)
    sent = [
        await client.send(API_VERSIONS, 3, hello()),
        await client.send(PRODUCE, 9, silent),
        await client.send(METADATA, 12, request(METADATA, topics=None)),
        await client.send(PRODUCE, 11, silent),
        await client.send(API_VERSIONS, 0, hello()),
    ]
    received = [
        (await client.receive(API_VERSIONS, 3))[0],
        (await client.receive(METADATA, 12))[0],
        (await client.receive(API_VERSIONS, 0))[0],
    ]
    assert received == [sent[0], sent[2], sent[4]]
    log = broker.state.partition_log("ordered", 0)
    assert log.log_end_offset == 2  # both acks=0 batches were appended, in order


async def test_idle_connections_are_closed(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "connections.max.idle.ms=200")
    client = await RawClient.connect(broker.port)
    await client.call(API_VERSIONS, 3, hello())
    with trio.fail_after(5):
        assert await client.is_closed(timeout=5)


async def test_max_connections(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "max.connections=1")
    first = await RawClient.connect(broker.port)
    await first.call(API_VERSIONS, 3, hello())
    # as Kafka: the broker stops accepting; the second client waits in the listen backlog
    second = await RawClient.connect(broker.port)
    waiting = await second.send(API_VERSIONS, 3, hello())
    with trio.move_on_after(0.3):
        await second.receive(API_VERSIONS, 3)
        raise AssertionError("a connection beyond max.connections was served")
    await first.aclose()
    correlation_id, response = await second.receive(API_VERSIONS, 3, timeout=5)
    assert (correlation_id, response.error_code) == (waiting, ErrorCode.NONE)


async def test_max_connections_per_ip(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "max.connections.per.ip=2")
    first = await RawClient.connect(broker.port)
    second = await RawClient.connect(broker.port)
    await first.call(API_VERSIONS, 3, hello())
    await second.call(API_VERSIONS, 3, hello())
    third = await RawClient.connect(broker.port)
    assert await third.is_closed()
    await first.aclose()
    with trio.fail_after(5):
        while True:  # the slot frees once the broker has seen the close
            fourth = await RawClient.connect(broker.port)
            if not await fourth.is_closed(timeout=0.2):
                break
    assert (await fourth.call(API_VERSIONS, 3, hello())).error_code == ErrorCode.NONE


async def test_trailing_bytes_after_a_request_are_ignored(nursery: trio.Nursery, tmp_path: Path) -> None:
    # librdkafka 2.x sends three stray bytes after an all-topics Metadata v12 request; Kafka accepts it
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    payload = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    await client.send_raw(struct.pack(">i", len(payload)) + payload)
    correlation_id, response = await client.receive(METADATA, 12)
    assert correlation_id == 3 and response.brokers[0].node_id == 1


async def test_shutdown_finishes_in_flight_request(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    assert (await create(client, "drain")).error_code == ErrorCode.NONE
    await client.send(FETCH, 12, fetch_request("drain", 0, max_wait_ms=60_000, min_bytes=1))
    await trio.sleep(0.05)
    broker.request_shutdown()
    # the parked fetch is answered at once (not after max_wait), then the connection closes
    _, response = await client.receive(FETCH, 12, timeout=5)
    assert response.responses[0].partitions[0].error_code == ErrorCode.NONE
    assert await client.is_closed()
    with trio.fail_after(10):
        await broker.stopped.wait()
    assert (tmp_path / ".kafka_cleanshutdown").exists()


async def test_large_fetch_goes_out_with_sendfile(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kafkacompat.broker import connection

    calls: list[int] = []
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        sent = real_sendfile(out_fd, in_fd, offset, count)
        calls.append(sent)
        return sent

    monkeypatch.setattr(connection.os, "sendfile", counting_sendfile)
    broker = await start_broker(
        nursery, tmp_path, "message.max.bytes=9000000", "socket.send.buffer.bytes=65536"
    )
    client = await RawClient.connect(broker.port)
    assert (await create(client, "big")).error_code == ErrorCode.NONE
    assert (await produce(client, "big", batch(os.urandom(4_000_000)), acks=1)).error_code == 0
    big_fetch = fetch_request("big", 0, partition_max_bytes=10_000_000, max_bytes=10_000_000)
    await client.send(FETCH, 12, big_fetch)
    await trio.sleep(0.3)  # let the socket buffers fill so that the broker meets EAGAIN and partial sends
    _, response = await client.receive(FETCH, 12)
    records = response.responses[0].partitions[0].records
    log = broker.state.partition_log("big", 0)
    on_disk = log.read(0, 10_000_000).slices[0].read_bytes()
    assert bytes(records) == on_disk and len(on_disk) > 4_000_000
    assert sum(calls) == len(on_disk) and len(calls) > 1


async def test_parked_fetch_of_a_departed_client_is_dropped(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    assert (await create(client, "gone")).error_code == ErrorCode.NONE
    await client.send(FETCH, 12, fetch_request("gone", 0, max_wait_ms=600_000, min_bytes=1))
    with trio.fail_after(5):
        while broker.state.watchers.waiting_count("gone", 0) == 0:
            await trio.sleep(0.01)
        await client.aclose()
        while broker.state.watchers.waiting_count("gone", 0) or broker._connections:
            await trio.sleep(0.01)


async def test_parked_fetch_buffers_but_does_not_run_the_next_request(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    assert (await create(client, "later")).error_code == ErrorCode.NONE
    parked = fetch_request("later", 0, max_wait_ms=300, min_bytes=1)
    fetch_id = await client.send(FETCH, 12, parked)
    hello_id = await client.send(API_VERSIONS, 3, hello())
    assert (await client.receive(FETCH, 12))[0] == fetch_id
    assert (await client.receive(API_VERSIONS, 3))[0] == hello_id
    await client.send(FETCH, 12, parked)
    await client.send_raw(struct.pack(">i", -1))  # garbage after a parked fetch: fetch answered, then close
    assert (await client.receive(FETCH, 12))[0] == fetch_id + 2
    assert await client.is_closed()


async def test_idle_timer_counts_only_time_spent_waiting_for_bytes(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    broker = await start_broker(nursery, tmp_path, "connections.max.idle.ms=300")
    client = await RawClient.connect(broker.port)
    assert (await create(client, "slow")).error_code == ErrorCode.NONE
    # a request handled for longer than the idle limit (a parked fetch) is answered, not cut off
    started = trio.current_time()
    response = await client.call(FETCH, 12, fetch_request("slow", 0, max_wait_ms=700, min_bytes=1))
    assert trio.current_time() - started >= 0.6
    assert response.responses[0].partitions[0].error_code == ErrorCode.NONE
    # requests spaced below the limit keep the connection open well past it
    for _ in range(5):
        await trio.sleep(0.15)
        assert (await client.call(API_VERSIONS, 3, hello())).error_code == ErrorCode.NONE
    # silence past the limit closes it
    assert await client.is_closed(timeout=5)


async def test_a_request_that_never_arrives_whole_is_closed(nursery: trio.Nursery, tmp_path: Path) -> None:
    """Slow-loris: bytes of an unfinished request do not count as activity; a request must arrive whole
    within connections.max.idle.ms. One arriving in pieces within the limit is answered."""
    broker = await start_broker(nursery, tmp_path, "connections.max.idle.ms=1500")
    # ApiVersions v0, correlation id 0x63, client id "raw"
    payload = bytes.fromhex("00120000000000630003") + b"raw"
    framed = struct.pack(">i", len(payload)) + payload
    client = await RawClient.connect(broker.port)
    for index in range(0, len(framed), 4):  # 5 pieces, 0.05 s apart: whole well within the limit
        await client.send_raw(framed[index : index + 4])
        await trio.sleep(0.05)
    correlation_id, response = await client.receive(API_VERSIONS, 0)
    assert correlation_id == 0x63 and response.error_code == ErrorCode.NONE
    loris = await RawClient.connect(broker.port)
    started = trio.current_time()
    closed = False
    for index in range(len(framed) - 1):  # one byte every 0.4 s: 6.4 s for the request, never finished
        try:
            await loris.send_raw(framed[index : index + 1])
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            closed = True
            break
        if await loris.is_closed(timeout=0.4):
            closed = True
            break
    assert closed, "a request trickling in for longer than connections.max.idle.ms kept its connection"
    assert 1.4 <= trio.current_time() - started < 6


async def test_a_slow_sender_is_read_less_often_and_still_answered(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection whose reads each bring a few bytes of a request and complete none is read at most
    once per (doubling) delay after _TRICKLE_READS such reads: 19,000 lorises trickling a byte a second
    otherwise cost 19,000 task steps a second. Its request, once whole, is still answered."""
    from kafkacompat.broker import connection

    broker = await start_broker(nursery, tmp_path, "connections.max.idle.ms=20000")
    reads = 0
    real_readv = os.readv

    def counting_readv(fd: int, buffers: Any) -> int:
        nonlocal reads
        reads += 1
        return real_readv(fd, buffers)

    monkeypatch.setattr(connection.os, "readv", counting_readv)
    payload = bytes.fromhex("00120000000000630003") + b"raw"
    framed = struct.pack(">i", len(payload)) + payload
    client = await RawClient.connect(broker.port)
    for byte in range(len(framed)):  # 17 bytes, 0.15 s apart: 2.4 s
        await client.send_raw(framed[byte : byte + 1])
        await trio.sleep(0.15)
    correlation_id, response = await client.receive(API_VERSIONS, 0)
    assert correlation_id == 0x63 and response.error_code == ErrorCode.NONE
    # one read per byte without the delays (17 and the reads that find nothing); with them: 4 reads,
    # then delays of 0.25, 0.5, 1 s...
    assert reads <= 12, reads


async def test_queued_max_request_bytes_mutes_connections_while_the_budget_is_spent(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """queued.max.request.bytes (KIP-72): a request is charged the size its prefix announces before the
    rest of it is read or it is handled; while the budget is spent, other connections' requests wait
    (Kafka mutes them), and the budget comes back when the holder's connection closes."""
    broker = await start_broker(nursery, tmp_path, "queued.max.request.bytes=1000")
    holder = await RawClient.connect(broker.port)
    await holder.send_raw(struct.pack(">i", 100_000) + bytes(10))  # charged 100,000 of 1,000: spent
    await trio.sleep(0.2)
    assert broker.state.request_memory.depleted
    client = await RawClient.connect(broker.port)
    await client.send(API_VERSIONS, 3, hello())
    with pytest.raises(trio.TooSlowError):
        await client.read_frame(timeout=0.5)  # muted: neither answered nor closed
    await holder.aclose()
    _, response = await client.receive(API_VERSIONS, 3)
    assert response.error_code == ErrorCode.NONE
    with trio.fail_after(5):  # every charge released (the last one just after its answer went out)
        while broker.state.request_memory.available != 1000:
            await trio.sleep(0.01)


async def test_a_request_unread_only_because_the_loop_lagged_is_not_idle(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client whose next request sits in the kernel past connections.max.idle.ms, unread only because
    the event loop was held (an overloaded broker), is not closed as idle.

    The reaper's deadline check must come before the connection reads the request, or the test guards
    nothing (the request would be read first, and no socket check be needed): the connection's readability
    wait is lagged (a short sleep, then a checkpoint), so once the loop is released the reaper, woken by
    its own deadline in the same pass, always looks first and finds the request in the kernel."""
    real_wait_readable = trio.lowlevel.wait_readable

    async def lagging_wait_readable(sock: Any) -> None:
        await real_wait_readable(sock)
        await trio.sleep(0.05)  # spans the hold below even if readability was seen before it
        await trio.lowlevel.checkpoint()  # woken with the reaper, it still runs after it

    broker = await start_broker(nursery, tmp_path, "connections.max.idle.ms=1000")
    # the connection's loop looks the function up when it starts: patched before the client connects
    monkeypatch.setattr(trio.lowlevel, "wait_readable", lagging_wait_readable)
    client = await RawClient.connect(broker.port)
    for _ in range(4):
        assert (await client.call(API_VERSIONS, 3, hello())).error_code == ErrorCode.NONE
        # sent well within the idle limit (a loaded machine may wake this sleep late: 0.9 s to spare)
        await trio.sleep(0.1)
        await client.send(API_VERSIONS, 3, hello())
        time.sleep(1.2)  # holds the whole event loop past the idle deadline, the request already sent
        _, response = await client.receive(API_VERSIONS, 3)
        assert response.error_code == ErrorCode.NONE


async def test_a_response_write_behind_only_because_the_loop_lagged_is_not_stalled(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A response write that made no progress for connections.max.idle.ms only because the event loop was
    held (the socket has room: the client reads) is not closed as a stalled write.

    The hold is in the middle of the write (writer.sending, progress_at before the hold), and the write goes
    on only after two checkpoints, so the reaper, woken by its own deadline, always looks first."""
    from kafkacompat.broker import connection

    real_send_buffers = connection.ResponseWriter._send_buffers
    held = {"writes": 0}

    async def held_send_buffers(self: connection.ResponseWriter, buffers: list[memoryview]) -> None:
        if held["writes"]:
            held["writes"] -= 1
            time.sleep(1.2)  # holds the whole event loop past the idle deadline, mid-write
            await trio.lowlevel.checkpoint()  # woken in the same pass as the reaper ...
            await trio.lowlevel.checkpoint()  # ... and on only after it has looked
        await real_send_buffers(self, buffers)

    monkeypatch.setattr(connection.ResponseWriter, "_send_buffers", held_send_buffers)
    broker = await start_broker(nursery, tmp_path, "connections.max.idle.ms=1000")
    client = await RawClient.connect(broker.port)
    for _ in range(4):
        assert (await client.call(API_VERSIONS, 3, hello())).error_code == ErrorCode.NONE
        held["writes"] = 1
        assert (await client.call(API_VERSIONS, 3, hello())).error_code == ErrorCode.NONE
        assert held["writes"] == 0


async def test_shutdown_closes_an_idle_connection_at_once(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    assert (await client.call(API_VERSIONS, 3, hello())).error_code == ErrorCode.NONE
    broker.request_shutdown()
    assert await client.is_closed(timeout=5)
    with trio.fail_after(10):
        await broker.stopped.wait()


async def test_only_a_fetch_that_waits_parks(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kafkacompat.broker import connection

    parks: list[float] = []
    real_park = connection.Connection.park

    async def counting_park(self: connection.Connection, event: trio.Event, deadline: float) -> None:
        parks.append(deadline)
        await real_park(self, event, deadline)

    monkeypatch.setattr(connection.Connection, "park", counting_park)
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    assert (await create(client, "parks")).error_code == ErrorCode.NONE
    # nothing to read yet: the fetch parks (through the connection, which watches the socket)
    empty = await client.call(FETCH, 12, fetch_request("parks", 0, max_wait_ms=50, min_bytes=1))
    assert empty.responses[0].partitions[0].error_code == ErrorCode.NONE
    assert len(parks) == 1
    assert (await produce(client, "parks", batch(b"x" * 100), acks=1)).error_code == 0
    # data is there: answered at once, no park
    full = await client.call(FETCH, 12, fetch_request("parks", 0, max_wait_ms=5_000, min_bytes=1))
    assert len(bytes(full.responses[0].partitions[0].records)) > 100
    assert len(parks) == 1


async def test_request_log_has_one_line_per_completed_request_at_debug(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    assert (await create(client, "logged")).error_code == ErrorCode.NONE
    await client.call(METADATA, 12, request(METADATA, topics=None))  # logger still at its default: silent
    assert not [r for r in caplog.records if r.name == "kafkacompat.request"]
    caplog.set_level(logging.DEBUG, logger="kafkacompat.request")
    metadata_id = await client.send(METADATA, 12, request(METADATA, topics=None))
    await client.receive(METADATA, 12)
    silent = produce_request("logged", batch(b"quiet"), acks=0)
    produce_id = await client.send(PRODUCE, 9, silent)
    await client.call(API_VERSIONS, 3, hello())  # answered after the acks=0 produce was handled

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "kafkacompat.request"]

    # a line is written once the response is out, so the client can see the answer a moment earlier
    with trio.fail_after(5):
        while len(lines()) < 3:
            await trio.sleep(0.005)
    await trio.sleep(0.05)
    logged = lines()
    assert len(logged) == 3
    assert logged[0].startswith(f"Completed request: Metadata v12 correlation_id={metadata_id} ")
    assert "listener PLAINTEXT" in logged[0] and " answered in " in logged[0]
    assert logged[1].startswith(f"Completed request: Produce v9 correlation_id={produce_id} ")
    assert "no response due" in logged[1]
    assert logged[2].startswith("Completed request: ApiVersions v3 ")


async def test_a_short_park_leaves_the_socket_alone_and_a_longer_one_watches_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from kafkacompat.broker.connection import _UNWATCHED_PARK_SECONDS, Connection, PeerGone

    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    ours, theirs = trio.socket.from_stdlib_socket(accepted), trio.socket.from_stdlib_socket(client)
    # the connection reads only its frame limit and the shared limits (none here) from the broker state
    state: Any = SimpleNamespace(
        config={"socket.request.max.bytes": 1 << 20},
        request_slots=None,
        pipeline_gate=None,
        request_memory=None,
    )
    connection = Connection(state, trio.SocketStream(ours), "PLAINTEXT", 1)
    await theirs.send(struct.pack(">i", 5) + b"hello")  # a pipelined request, waiting in the socket
    woken = trio.Event()

    async def wake_soon() -> None:
        await trio.sleep(_UNWATCHED_PARK_SECONDS / 2)
        woken.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wake_soon)
        await connection.park(woken, trio.current_time() + 1)
    assert connection._frames.buffered == 0  # ended before any watcher: the socket was not read
    await connection.park(trio.Event(), trio.current_time() + 10 * _UNWATCHED_PARK_SECONDS)
    assert connection._frames.buffered == 9  # the watcher buffered the next request, unprocessed
    theirs.close()
    started = trio.current_time()
    with pytest.raises(PeerGone):
        await connection.park(trio.Event(), started + 1)
    assert trio.current_time() - started < 2 * _UNWATCHED_PARK_SECONDS  # not the whole second
    ours.close()


async def test_handlers_see_the_connections_principal_and_protocol(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kafkacompat.broker.handlers import metadata

    seen: list[tuple[str, str, str, str | None]] = []
    real_handle = metadata.handle

    async def recording_handle(ctx: Any, body: Any) -> Any:
        info = ctx.connection
        seen.append((info.listener_name, info.security_protocol, info.principal, info.sasl_mechanism))
        return await real_handle(ctx, body)

    monkeypatch.setattr(metadata, "handle", recording_handle)
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await client.call(METADATA, 12, request(METADATA, topics=None))
    assert seen == [("PLAINTEXT", "PLAINTEXT", "User:ANONYMOUS", None)]


async def test_a_client_that_stops_reading_is_closed_and_others_are_unaffected(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A consumer that never reads its socket: the response write stalls, the connection is closed after
    connections.max.idle.ms without write progress; a producer on another connection keeps going."""
    broker = await start_broker(
        nursery, tmp_path, "connections.max.idle.ms=1000", "socket.send.buffer.bytes=65536"
    )
    producer = await RawClient.connect(broker.port)
    assert (await create(producer, "stall")).error_code == ErrorCode.NONE
    value = b"v" * (900 * 1024)
    for _ in range(24):  # ~21 MB: far more than the kernel buffers of one connection hold
        assert (await produce(producer, "stall", batch(value))).error_code == ErrorCode.NONE
    reader = await RawClient.connect(broker.port)
    reader.stream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    await reader.send(
        FETCH, 12, fetch_request("stall", 0, max_wait_ms=0, partition_max_bytes=64 << 20, max_bytes=64 << 20)
    )
    started = trio.current_time()
    while trio.current_time() - started < 2.5:  # the reader reads nothing for longer than the limit
        # the producer is served as usual meanwhile (and stays within its own idle limit)
        assert (await produce(producer, "stall", batch(b"x"))).error_code == ErrorCode.NONE
        await trio.sleep(0.2)
    # The broker closed it mid-response: reading now yields less than the announced frame, then EOF (a
    # close cannot be seen earlier without reading: the FIN waits behind the unsent bytes).
    received = bytearray()
    with trio.fail_after(10):
        while True:
            data = await reader.stream.receive_some(1 << 20)
            if not data:
                break
            received += data
    (announced,) = struct.unpack_from(">i", received)
    assert len(received) < 4 + announced, "the stalled response was written whole: the connection was kept"
    assert (await produce(producer, "stall", batch(b"y"))).error_code == ErrorCode.NONE


@pytest.mark.parametrize("slots", [1, 500])
async def test_queued_max_requests_bounds_requests_handled_at_once(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slots: int
) -> None:
    """queued.max.requests=1: while one produce waits for its (slow) fsync, another connection's request
    waits for the slot; with the default 500 it is answered at once."""
    broker = await start_broker(
        nursery, tmp_path, f"queued.max.requests={slots}", "log.flush.interval.messages=1"
    )
    producer = await RawClient.connect(broker.port)
    assert (await create(producer, "slots")).error_code == ErrorCode.NONE
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        if "/slots-0/" in os.readlink(f"/proc/self/fd/{fd}"):
            time.sleep(1.0)  # a slow disk (this runs in a worker thread)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    produced = trio.Event()

    async def produce_slowly() -> None:
        assert (await produce(producer, "slots", batch(b"v"))).error_code == ErrorCode.NONE
        produced.set()

    nursery.start_soon(produce_slowly)
    other = await RawClient.connect(broker.port)
    await trio.sleep(0.3)  # the produce is in its handler, waiting for the fsync
    assert not produced.is_set()
    assert (await other.call(API_VERSIONS, 3, hello())).error_code == ErrorCode.NONE
    # one slot: the answer had to wait for the produce; 500: it came while the fsync was still running
    assert produced.is_set() == (slots == 1)
    with trio.fail_after(10):
        await produced.wait()


async def test_max_connections_per_ip_holds_for_a_burst(nursery: trio.Nursery, tmp_path: Path) -> None:
    """Connections that arrive together (all in the accept backlog at once) are counted as they are
    accepted: exactly max.connections.per.ip of them are served. They used to be counted when their
    task started, and trio may run the next accept first (it shuffles each batch of runnable tasks):
    about one burst in two then got one connection more. Eight bursts make a miss all but certain."""
    for burst in range(8):
        broker = await start_broker(nursery, tmp_path / str(burst), "max.connections.per.ip=5")
        # plain blocking connects: the kernel completes them from the backlog before any accept
        sockets = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(12)]
        clients = [RawClient(trio.SocketStream(trio.socket.from_stdlib_socket(s))) for s in sockets]
        served = 0
        for client in clients:
            try:
                await client.send(API_VERSIONS, 3, hello())
                await client.receive(API_VERSIONS, 3, timeout=2)
                served += 1
            except (AssertionError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
                pass
        assert served == 5, f"burst {burst}: {served} connections served"
        for client in clients:
            await client.aclose()
        broker.request_shutdown()
        with trio.fail_after(15):
            await broker.stopped.wait()


async def test_a_single_node_closes_a_connection_sending_a_controller_request(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """LeaderAndIsr is served in cluster mode only; a single node treats it as an API it does not enable
    on the listener (as a Kafka broker does): the connection closes, nothing is answered."""
    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await client.send(4, 7, request(4, controller_id=1, controller_epoch=1, broker_epoch=-1))
    assert await client.is_closed()


async def test_waiting_joins_hold_no_request_slot(nursery: trio.Nursery, tmp_path: Path) -> None:
    """queued.max.requests=1: a JoinGroup waiting for its rebalance (group.initial.rebalance.delay.ms)
    is parked, not handled, so it holds no slot, as in Kafka: another connection's request and a second
    member's join are served meanwhile (before, the first join held the only slot for its whole wait)."""
    broker = await start_broker(
        nursery, tmp_path, "queued.max.requests=1", "group.initial.rebalance.delay.ms=3000"
    )
    protocol = request(11).JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00\x00\x00\x00\x00")
    joined: list[Any] = []

    async def join(client: RawClient) -> None:
        body = request(11, group_id="slots-group", session_timeout_ms=30000, rebalance_timeout_ms=30000,
                       member_id="", protocol_type="consumer", protocols=[protocol])  # fmt: skip
        joined.append(await client.call(11, 3, body, timeout=30))

    first, second, other = [await RawClient.connect(broker.port) for _ in range(3)]
    nursery.start_soon(join, first)
    await trio.sleep(0.5)  # the first join is parked for the rebalance delay
    with trio.fail_after(2):  # well within the 3 s the join waits
        assert (await other.call(API_VERSIONS, 3, hello())).error_code == ErrorCode.NONE
    nursery.start_soon(join, second)
    with trio.fail_after(20):
        while len(joined) < 2:
            await trio.sleep(0.05)
    assert [answer.error_code for answer in joined] == [ErrorCode.NONE, ErrorCode.NONE]
    assert len({answer.generation_id for answer in joined}) == 1  # both in the same generation


async def test_closed_connections_leave_no_reference_cycles(nursery: trio.Nursery, tmp_path: Path) -> None:
    """A connection's objects (task, context, streams, buffers) are freed by reference counting when it
    closes, not left in a cycle for the garbage collector: the fuzzer's ~200 closed connections a second
    otherwise made each young collection free thousands of objects, pausing the loop 3-10 ms. Both ways
    a connection ends are checked: a client that hangs up, and a frame whose size prefix is refused (the
    frame buffer keeps its error, whose traceback held the buffer)."""
    import gc

    from kafkacompat.broker.connection import Connection
    from kafkacompat.wire.framing import FrameBuffer

    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)  # warm: first-use imports and caches made here
    await client.call(API_VERSIONS, 3, hello())
    await client.stream.aclose()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(10):
            client = await RawClient.connect(broker.port)
            await client.call(API_VERSIONS, 3, hello())
            await client.stream.aclose()
        for _ in range(10):
            client = await RawClient.connect(broker.port)
            await client.send_raw(struct.pack(">i", -5))
            assert await client.read_frame() is None  # closed for the bad size
            await client.stream.aclose()
        with trio.fail_after(10):
            while broker._connections:
                await trio.sleep(0.01)
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage if type(o) in (Connection, FrameBuffer)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []


async def test_a_response_goes_out_whole_without_giving_the_loop_back(tmp_path: Path) -> None:
    """trio's socket methods give the loop back after every call that succeeds, so a fetch answer (its
    header bytes, then a file slice) reached the client a whole turn of the loop after its header: beside
    64 busy connections, 10-50 ms. The writer now calls the socket's fd itself and yields only when the
    socket is full; the pipe below has room for the whole response, so it must go out with no checkpoint."""
    from kafkacompat.broker.connection import ResponseWriter
    from kafkacompat.log import FileSlice

    records = tmp_path / "segment"
    records.write_bytes(b"R" * 5000)
    ours, theirs = trio.socket.socketpair()
    fd = os.open(records, os.O_RDONLY)
    try:
        writer = ResponseWriter(trio.SocketStream(ours))
        chunks = [b"head", FileSlice(fd, 1000, 3000), b"middle", FileSlice(fd, 0, 10), b"tail"]
        with trio.testing.assert_no_checkpoints():
            await writer.send(chunks)
        expected = b"head" + b"R" * 3000 + b"middle" + b"R" * 10 + b"tail"
        received = b""
        while len(received) < len(expected):
            received += await theirs.recv(65536)
        assert received == expected
    finally:
        os.close(fd)
        ours.close()
        theirs.close()


async def test_a_response_to_a_peer_that_left_raises_broken_resource(tmp_path: Path) -> None:
    from kafkacompat.broker.connection import ResponseWriter

    ours, theirs = trio.socket.socketpair()
    theirs.close()
    writer = ResponseWriter(trio.SocketStream(ours))
    with pytest.raises(trio.BrokenResourceError):
        await writer.send([b"x" * 100])
    ours.close()


def test_a_large_response_body_is_framed_without_being_copied() -> None:
    """The size prefix and header are merged with a small first body chunk (one piece to write); a large
    body chunk is framed as it is (merging copied a 13 MB DescribeGroups answer twice in one loop step)."""
    from kafkacompat.broker.connection import MERGED_FIRST_CHUNK_BYTES, frame_response

    small, large = bytearray(b"s" * 100), bytearray(b"L" * (MERGED_FIRST_CHUNK_BYTES + 1))
    for body in ([small, b"rest"], [large, b"rest"]):
        framed = frame_response(b"HEAD", body)
        joined = b"".join(bytes(piece) for piece in framed)
        assert joined == struct.pack(">i", 4 + len(body[0]) + 4) + b"HEAD" + bytes(body[0]) + b"rest"
    assert len(frame_response(b"HEAD", [small, b"rest"])) == 2
    framed = frame_response(b"HEAD", [large, b"rest"])
    assert len(framed) == 3 and framed[1] is large


async def test_a_request_handled_in_one_step_is_named_by_the_loop_lag_monitor(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A request whose whole handling takes one task step (no yield from its arrival to its answer) is
    that step's kind, not the connection task's: the connection clears the label only when the next
    step of its read loop begins."""
    from kafkacompat.diagnostics import loop_lag

    broker = await start_broker(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    await client.call(API_VERSIONS, 3, hello())
    monitor = loop_lag.install(0.0, log_each=False)  # every step is counted by its kind
    try:
        for _ in range(3):
            await client.call(API_VERSIONS, 3, hello())
    finally:
        loop_lag.uninstall(monitor)
    kinds = {row["kind"]: row["count"] for row in monitor.summary()}
    assert kinds.get("ApiVersions v3", 0) >= 3, kinds
