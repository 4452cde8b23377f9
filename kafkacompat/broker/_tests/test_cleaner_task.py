"""The cleaner task on a real broker: which logs a pass cleans, what survives, tombstones after
delete.retention.ms, logs changed or failing during a clean, cancellation, and __consumer_offsets
compaction that a restarted group coordinator replays to the same committed offsets."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from kafkacompat.broker import cleaner_task
from kafkacompat.broker._tests.test_groups_runtime import (
    FAST,
    OFFSET_COMMIT,
    commit_errors,
    commit_request,
    create_topic,
    fetch_offsets,
)
from kafkacompat.broker._tests.wire_client import RawClient, produce, start_broker
from kafkacompat.broker.cleaner_task import LONG_MAX, _Progress, cleaning_due
from kafkacompat.broker.server import Broker
from kafkacompat.log.partition_log import PartitionLog
from kafkacompat.wire.records import build_batch, iter_batches, iter_records

Record = tuple[int, bytes | None, bytes | None]  # (offset, key, value)

IDLE = "log.cleaner.backoff.ms=3600000"  # no periodic pass: the tests run passes themselves
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "600", "file.delete.delay.ms": "60000"}


def keyed(key: bytes, value: bytes | None, timestamp: int | None = None) -> bytes:
    return build_batch([(key, value, (), int(time.time() * 1000) if timestamp is None else timestamp)])


def records(pl: PartitionLog) -> list[Record]:
    out: list[Record] = []
    offset = pl.log_start_offset
    while offset < pl.log_end_offset:
        result = pl.read(offset, 1 << 20)
        if not result.slices:
            break
        for batch in iter_batches(b"".join(s.read_bytes() for s in result.slices)):
            offset = batch.last_offset + 1
            out.extend((r.offset, r.key, r.value) for r in iter_records(batch))
    return out


def latest_below(recs: list[Record], bound: int) -> list[Record]:
    """What compaction of the offsets below `bound` must leave there: the last record of each key."""
    last: dict[bytes | None, Record] = {}
    for record in recs:
        if record[0] < bound:
            last[record[1]] = record
    return sorted(last.values())


async def fill(
    client: RawClient, topic: str, rounds: int, keys: int, tombstones: set[bytes] = frozenset()
) -> None:
    """`rounds` overwrites of `keys` keys (the last round writes tombstones for `tombstones`), then filler
    records of other keys so the last round lies in inactive segments."""
    for r in range(rounds):
        for k in range(keys):
            key = b"k%d" % k
            value = None if r == rounds - 1 and key in tombstones else b"round %d of %s" % (r, key)
            assert (await produce(client, topic, keyed(key, value))).error_code == 0
    for f in range(10):
        assert (await produce(client, topic, keyed(b"filler%d" % f, b"x" * 40))).error_code == 0


async def compacted_broker(nursery: trio.Nursery, tmp_path: Path, *overrides: str) -> Broker:
    return await start_broker(nursery, tmp_path, IDLE, *overrides)


async def test_pass_keeps_latest_per_key_and_drops_tombstones_after_retention(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    broker = await compacted_broker(nursery, tmp_path)
    await broker.state.create_topic("c", 1, {**COMPACT, "delete.retention.ms": "2500"})
    await broker.state.create_topic("plain", 1, {"segment.bytes": "600"})
    client = await RawClient.connect(broker.port)
    await fill(client, "c", 6, 5, tombstones={b"k0", b"k3"})
    await fill(client, "plain", 3, 5)
    pl = broker.state.partition_log("c", 0)
    assert len(pl.segments) > 4
    before = records(pl)
    in_flight = pl.read(0, 1 << 20).slices[0]  # a fetch answered just before the clean
    in_flight_bytes = in_flight.read_bytes()
    active_base = pl.active_segment.base_offset

    cleaned = await broker.cleaner.run_once()
    assert set(cleaned) == {("c", 0)}  # the delete-policy topic is left alone
    assert cleaned[("c", 0)].records_removed == sum(1 for r in before if r[0] < active_base) - len(
        latest_below(before, active_base)
    )
    after = records(pl)
    assert latest_below(after, active_base) == [r for r in after if r[0] < active_base]  # one per key
    assert [r for r in after if r[0] < active_base] == latest_below(before, active_base)
    assert [r for r in after if r[0] >= active_base] == [r for r in before if r[0] >= active_base]
    assert (pl.log_start_offset, pl.log_end_offset) == (0, before[-1][0] + 1)
    tombstones = [r for r in after if r[2] is None]
    assert sorted(r[1] for r in tombstones) == [b"k0", b"k3"]  # younger than delete.retention.ms: kept
    assert in_flight.read_bytes() == in_flight_bytes

    assert await broker.cleaner.run_once() == {}  # nothing new: the log is not read again
    await trio.sleep(2.6)  # past delete.retention.ms of the newest cleaned segment
    cleaned = await broker.cleaner.run_once()
    assert set(cleaned) == {("c", 0)}
    final = records(pl)
    assert [r for r in final if r[0] < active_base] == [
        r for r in latest_below(before, active_base) if r[2] is not None
    ]
    assert await broker.cleaner.run_once() == {}


async def test_new_dirty_data_below_the_ratio_waits(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await compacted_broker(nursery, tmp_path)
    await broker.state.create_topic("c", 1, {**COMPACT, "min.cleanable.dirty.ratio": "0.9"})
    client = await RawClient.connect(broker.port)
    await fill(client, "c", 4, 4)
    assert set(await broker.cleaner.run_once()) == {("c", 0)}
    await fill(client, "c", 1, 1)  # little new data next to what was cleaned: ratio below 0.9
    assert await broker.cleaner.run_once() == {}
    await fill(client, "c", 30, 6)  # now the dirty part dominates
    assert set(await broker.cleaner.run_once()) == {("c", 0)}


def _segment(base: int, size: int, first_ts: int = 0) -> Any:
    return SimpleNamespace(base_offset=base, size=size, first_batch_timestamp=lambda: first_ts)


def test_cleaning_due_rules() -> None:
    plan = SimpleNamespace(segments=[_segment(0, 100), _segment(10, 100), _segment(20, 50, first_ts=1000)])
    ours: Any = None
    assert cleaning_due(plan, None, 5000, 0.5, LONG_MAX)  # never cleaned: everything is dirty
    assert not cleaning_due(SimpleNamespace(segments=[]), None, 5000, 0.0, LONG_MAX)
    cleaned_to_20 = _Progress(ours, 20, None)
    assert not cleaning_due(plan, cleaned_to_20, 5000, 0.5, LONG_MAX)  # 50 / 250 dirty
    assert cleaning_due(plan, cleaned_to_20, 5000, 0.2, LONG_MAX)
    assert cleaning_due(plan, cleaned_to_20, 5000, 0.5, 3999)  # oldest dirty batch older than max lag
    assert not cleaning_due(plan, cleaned_to_20, 5000, 0.5, 4000)
    all_clean = _Progress(ours, 30, 6000)
    assert not cleaning_due(plan, all_clean, 5999, 0.0, 1)
    assert cleaning_due(plan, all_clean, 6000, 0.0, 1)  # tombstone horizon reached


async def test_one_failing_log_does_not_stop_the_others(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broker = await compacted_broker(nursery, tmp_path)
    for name in ("bad", "good"):
        await broker.state.create_topic(name, 1, COMPACT)
    client = await RawClient.connect(broker.port)
    await fill(client, "bad", 4, 4)
    await fill(client, "good", 4, 4)
    build = cleaner_task._TaskPlan.build

    def failing(plan: Any) -> Any:
        if "bad-0" in plan.segments[0].directory:
            raise OSError(5, "simulated read error")
        return build(plan)

    monkeypatch.setattr(cleaner_task._TaskPlan, "build", failing)
    bad_before = records(broker.state.partition_log("bad", 0))
    with caplog.at_level(logging.WARNING, logger="kafkacompat.cleaner"):
        cleaned = await broker.cleaner.run_once()
    assert set(cleaned) == {("good", 0)}
    assert any("bad-0" in r.getMessage() and "simulated" in r.getMessage() for r in caplog.records)
    assert records(broker.state.partition_log("bad", 0)) == bad_before
    assert not broker.state.partition_log("bad", 0).offline
    monkeypatch.setattr(cleaner_task._TaskPlan, "build", build)
    assert set(await broker.cleaner.run_once()) == {("bad", 0)}  # tried again on the next pass


async def test_log_deleted_and_recreated_during_the_build_is_left_alone(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    broker = await compacted_broker(nursery, tmp_path)
    await broker.state.create_topic("c", 1, COMPACT)
    client = await RawClient.connect(broker.port)
    await fill(client, "c", 4, 4)
    old = broker.state.partition_log("c", 0)

    async def recreate_then_build(build: Callable[[], Any]) -> Any:
        await broker.state.delete_topic("c")
        await broker.state.create_topic("c", 1, COMPACT)
        await fill(client, "c", 2, 2)
        return await trio.to_thread.run_sync(build)  # writes .cleaned files at the old paths

    broker.cleaner._run_in_thread = recreate_then_build
    assert await broker.cleaner.run_once() == {}
    new = broker.state.partition_log("c", 0)
    assert new is not old
    assert not [n for n in os.listdir(new.directory) if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert len(records(new)) == 2 * 2 + 10  # untouched
    broker.cleaner._run_in_thread = cleaner_task._default_runner
    assert set(await broker.cleaner.run_once()) == {("c", 0)}


async def test_cancelled_build_stops_and_leaves_the_log_as_it_was(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    broker = await compacted_broker(nursery, tmp_path)
    await broker.state.create_topic("c", 1, COMPACT)
    client = await RawClient.connect(broker.port)
    await fill(client, "c", 4, 4)
    pl = broker.state.partition_log("c", 0)
    segments = list(pl.segments)
    before = records(pl)
    entered = threading.Event()
    outcome: list[BaseException | None] = []

    async def slow(build: Callable[[], Any]) -> Any:
        def run() -> Any:
            entered.set()
            time.sleep(1.0)  # the cancellation arrives meanwhile
            try:
                result = build()
            except BaseException as exc:
                outcome.append(exc)
                raise
            outcome.append(None)
            return result

        return await trio.to_thread.run_sync(run)

    broker.cleaner._run_in_thread = slow
    with trio.CancelScope() as scope:

        async def cancel_when_entered() -> None:
            while not entered.is_set():
                await trio.sleep(0.01)
            scope.cancel()

        nursery.start_soon(cancel_when_entered)
        await broker.cleaner.run_once()
    assert scope.cancelled_caught
    assert len(outcome) == 1 and isinstance(outcome[0], cleaner_task.CleanerAborted)
    assert pl.segments == segments and records(pl) == before
    assert not [n for n in os.listdir(pl.directory) if n.endswith((".cleaned", ".swap", ".deleted"))]
    broker.cleaner._run_in_thread = cleaner_task._default_runner
    assert set(await broker.cleaner.run_once()) == {("c", 0)}


async def test_leftover_cleaned_file_is_removed_at_start(tmp_path: Path) -> None:
    async with trio.open_nursery() as inner:
        broker = await compacted_broker(inner, tmp_path)
        await broker.state.create_topic("c", 1, COMPACT)
        client = await RawClient.connect(broker.port)
        await fill(client, "c", 4, 4)
        directory = Path(broker.state.partition_log("c", 0).directory)
        before = records(broker.state.partition_log("c", 0))
        await client.aclose()
        broker.request_shutdown()
    # what a crash in the middle of a build leaves: a half-written .cleaned file
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"\x00\x00\x00\x00\x00\x00\x00\x07half")
    async with trio.open_nursery() as inner:
        broker = await compacted_broker(inner, tmp_path)
        assert records(broker.state.partition_log("c", 0)) == before
        assert not [p for p in directory.iterdir() if p.name.endswith(".cleaned")]
        broker.request_shutdown()


async def test_periodic_pass_with_small_backoff(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "log.cleaner.backoff.ms=50")
    await broker.state.create_topic("c", 1, COMPACT)
    client = await RawClient.connect(broker.port)
    await fill(client, "c", 4, 4)
    pl = broker.state.partition_log("c", 0)
    active_base = pl.active_segment.base_offset
    expected = latest_below(records(pl), active_base)
    with trio.fail_after(10):
        while [r for r in records(pl) if r[0] < active_base] != expected:
            await trio.sleep(0.05)


async def test_disabled_cleaner_does_not_run(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "log.cleaner.backoff.ms=20", "log.cleaner.enable=false")
    await broker.state.create_topic("c", 1, COMPACT)
    client = await RawClient.connect(broker.port)
    await fill(client, "c", 4, 4)
    before = records(broker.state.partition_log("c", 0))
    await trio.sleep(0.3)
    assert broker.cleaner.passes == 0 and records(broker.state.partition_log("c", 0)) == before


async def test_consumer_offsets_compaction_replays_to_the_same_offsets(tmp_path: Path) -> None:
    overrides = (*FAST, IDLE, "offsets.topic.num.partitions=1", "offsets.topic.segment.bytes=1024")
    committed: dict[tuple[str, int], int] = {}
    async with trio.open_nursery() as inner:
        broker = await start_broker(inner, tmp_path, *overrides)
        await broker.state.groups.loaded.wait()
        client = await RawClient.connect(broker.port)
        await create_topic(client, "t", 3)
        for i in range(40):
            offsets = {("t", i % 3): 10 * i + i % 3}
            response = await client.call(OFFSET_COMMIT, 8, commit_request("g", offsets))
            assert set(commit_errors(response).values()) == {0}
            committed.update(offsets)
        for i in range(5):  # another group's commits roll the segment holding g's last ones
            await client.call(OFFSET_COMMIT, 8, commit_request("other", {("t", 0): i}))
        pl = broker.state.partition_log("__consumer_offsets", 0)
        count_before = len(records(pl))
        cleaned = await broker.cleaner.run_once()
        assert cleaned[("__consumer_offsets", 0)].records_removed > 0
        assert len(records(pl)) < count_before
        assert await fetch_offsets(client, "g") == committed
        await client.aclose()
        broker.request_shutdown()
    async with trio.open_nursery() as inner:
        broker = await start_broker(inner, tmp_path, *overrides)
        await broker.state.groups.loaded.wait()
        client = await RawClient.connect(broker.port)
        assert await fetch_offsets(client, "g") == committed
        assert await fetch_offsets(client, "other") == {("t", 0): 4}
        await client.aclose()
        broker.request_shutdown()


async def test_compact_delete_topic_keeps_retention_even_during_a_build(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    broker = await compacted_broker(nursery, tmp_path)
    configs = {**COMPACT, "cleanup.policy": "compact,delete", "retention.ms": "600000"}
    await broker.state.create_topic("cd", 1, configs)
    client = await RawClient.connect(broker.port)
    hour_ago = int(time.time() * 1000) - 3_600_000
    for i in range(12):  # past retention.ms: retention removes these segments
        answer = await produce(client, "cd", keyed(b"old%d" % (i % 3), b"o" * 60, timestamp=hour_ago))
        assert answer.error_code == 0
    await fill(client, "cd", 4, 4)
    pl = broker.state.partition_log("cd", 0)
    before = records(pl)
    active_base = pl.active_segment.base_offset

    async def retention_then_build(build: Callable[[], Any]) -> Any:
        await broker.state.enforce_retention()  # deletes planned segments before the commit
        return await trio.to_thread.run_sync(build)

    broker.cleaner._run_in_thread = retention_then_build
    cleaned = await broker.cleaner.run_once()
    assert set(cleaned) == {("cd", 0)}
    assert pl.log_start_offset >= 12 and pl.segments[0].base_offset == pl.log_start_offset
    survivors = [r for r in before if r[0] >= pl.segments[0].base_offset]
    assert [r for r in records(pl) if r[0] < active_base] == latest_below(survivors, active_base)
    assert not [n for n in os.listdir(pl.directory) if n.endswith((".cleaned", ".swap"))]
