"""The coordinator runtime with a core of its own (a counter per key), on a real broker's state: what any
new coordinator (KIP-848 groups, share groups) gets from it — per-partition serialisation, records in
the log before the answer, replay on load, a failed write unloading and reloading the partition, and
loads that follow leadership (a load overtaken by a newer leadership change is abandoned)."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable
from pathlib import Path

import pytest
import trio

from kafkacompat.broker._tests.wire_client import start_broker
from kafkacompat.broker.coordinator_log import create_compacted_internal_topic
from kafkacompat.broker.coordinator_runtime import CoordinatorRuntime
from kafkacompat.broker.state import BrokerState
from kafkacompat.coordinator.api import CoordinatorRecord, Outcome
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import RecordBatchView, iter_records

TOPIC = "__counters"


class CounterCore:
    """A counter per key; each increment is one record `key -> count` in the key's partition."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.counts: dict[str, int] = {}
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        self.epochs: dict[int, int] = {}
        self.deadline: int | None = None
        self.ticks = 0

    def partition_for(self, key: str) -> int:
        return zlib.crc32(key.encode()) % self.partitions

    def begin_loading(self, partition: int, epoch: int | None = None) -> None:
        self.owned_partitions.add(partition)
        self.loading_partitions.add(partition)
        if epoch is not None:
            self.epochs[partition] = epoch

    def set_epoch(self, partition: int, epoch: int) -> None:
        self.epochs[partition] = epoch

    def replay_batch(self, partition: int, batch: RecordBatchView, from_offset: int) -> int:
        replayed = 0
        for record in iter_records(batch):
            if record.offset >= from_offset and record.key is not None and record.value is not None:
                self.counts[bytes(record.key).decode()] = int(bytes(record.value).split()[0])
                replayed += 1
        return replayed

    def finish_loading(self, partition: int, now_ms: int) -> Outcome[None]:
        self.loading_partitions.discard(partition)
        return Outcome()

    def load_empty_partitions(self, partitions: Iterable[int], now_ms: int) -> None:
        self.owned_partitions.update(partitions)

    def unload_partition(self, partition: int, now_ms: int) -> Outcome[None]:
        self.owned_partitions.discard(partition)
        self.loading_partitions.discard(partition)
        self.counts = {k: v for k, v in self.counts.items() if self.partition_for(k) != partition}
        return Outcome()

    def next_deadline(self) -> int | None:
        return self.deadline

    def tick(self, now_ms: int) -> Outcome[None]:
        self.ticks += 1
        self.deadline = None
        return Outcome()

    def increment(self, key: str, padding: int = 0) -> Outcome[int | ErrorCode]:
        partition = self.partition_for(key)
        if partition in self.loading_partitions:
            return Outcome(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        if partition not in self.owned_partitions:
            return Outcome(ErrorCode.NOT_COORDINATOR)
        count = self.counts[key] = self.counts.get(key, 0) + 1
        value = str(count).encode() + b" " * padding
        return Outcome(count, records=[CoordinatorRecord(partition, key.encode(), value)])


class CounterRuntime(CoordinatorRuntime[CounterCore]):
    def __init__(self, broker: BrokerState) -> None:
        super().__init__(
            broker,
            TOPIC,
            configured_partitions=2,
            log=logging.getLogger("kafkacompat.test.counters"),
            load_buffer_option="counters.load.buffer.size",
            what="counter records",
        )

    def _core_for(self, partitions: int) -> CounterCore:
        return CounterCore(partitions)

    def write_timeout(self) -> float:
        return 5.0

    async def _create_topic(self) -> None:
        await create_compacted_internal_topic(self.broker, TOPIC, self.partitions, 1 << 20)


def keys_by_partition(core: CounterCore) -> tuple[str, str]:
    """A key of partition 0 and a key of partition 1."""
    found: dict[int, str] = {}
    for index in range(100):
        found.setdefault(core.partition_for(f"k{index}"), f"k{index}")
    return found[0], found[1]


async def increment(runtime: CounterRuntime, key: str, padding: int = 0) -> int | ErrorCode:
    result: int | ErrorCode = await runtime.call(lambda _now: runtime.core.increment(key, padding), key=key)
    return result


async def started(
    nursery: trio.Nursery, tmp_path: Path, *overrides: str
) -> tuple[BrokerState, CounterRuntime]:
    broker = await start_broker(nursery, tmp_path, *overrides)
    runtime = CounterRuntime(broker.state)
    await nursery.start(runtime.run)
    return broker.state, runtime


async def test_operations_are_serialised_per_partition(nursery: trio.Nursery, tmp_path: Path) -> None:
    _, runtime = await started(nursery, tmp_path)
    k0, k1 = keys_by_partition(runtime.core)
    assert await increment(runtime, k0) == 1  # creates the topic
    done: list[str] = []

    async def bump(key: str) -> None:
        await increment(runtime, key)
        done.append(key)

    async def listing() -> None:
        await runtime.call(lambda _now: Outcome(None))  # no key: every partition
        done.append("all")

    async with runtime._serialised(0):  # partition 0 busy, as while a write waits for its ISR
        nursery.start_soon(bump, k0)
        nursery.start_soon(bump, k1)
        nursery.start_soon(listing)
        await trio.sleep(0.2)
        assert done == [k1]  # the other partition went on; partition 0 and "every partition" wait
    await trio.sleep(0.2)
    assert sorted(done) == sorted([k1, k0, "all"])
    assert runtime.core.counts == {k0: 2, k1: 1}


async def test_records_are_in_the_log_and_replayed_on_load(nursery: trio.Nursery, tmp_path: Path) -> None:
    state, runtime = await started(nursery, tmp_path)
    k0, k1 = keys_by_partition(runtime.core)
    for key in (k0, k0, k1, k0):
        await increment(runtime, key)
    for partition, expected in ((0, 3), (1, 1)):
        partition_log = state.partition_log(TOPIC, partition)
        assert partition_log is not None and partition_log.log_end_offset == expected
    again = CounterRuntime(state)  # a second runtime over the same topic replays it
    assert again.core.loading_partitions == {0, 1}
    assert await increment(again, k0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await nursery.start(again.run)
    with trio.fail_after(10):
        await again.loaded.wait()
    assert again.core.counts == {k0: 3, k1: 1}
    assert await increment(again, k1) == 2


async def test_a_failed_write_unloads_and_reloads_the_partition(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    _, runtime = await started(nursery, tmp_path, "message.max.bytes=10000")
    k0, k1 = keys_by_partition(runtime.core)
    assert await increment(runtime, k0) == 1
    assert await increment(runtime, k1) == 1
    with pytest.raises(KafkaError) as failed:
        await increment(runtime, k0, padding=50_000)  # past message.max.bytes: no retry can cure it
    assert failed.value.code == ErrorCode.UNKNOWN_SERVER_ERROR
    with trio.fail_after(10):  # the timer task loads the partition again, from what the log holds
        while 0 not in runtime.core.owned_partitions or 0 in runtime.core.loading_partitions:
            await trio.sleep(0.01)
    assert runtime.core.counts == {k0: 1, k1: 1}  # the core ran ahead; the log decides
    assert await increment(runtime, k0) == 2


async def test_loads_follow_leadership(nursery: trio.Nursery, tmp_path: Path) -> None:
    _, runtime = await started(nursery, tmp_path)
    k0, k1 = keys_by_partition(runtime.core)
    assert await increment(runtime, k0) == 1
    await runtime.leadership_changed(0, False, 3)
    assert await increment(runtime, k0) == ErrorCode.NOT_COORDINATOR
    assert k0 not in runtime.core.counts
    await runtime.leadership_changed(0, True, 4)
    assert runtime.core.epochs[0] == 4 and runtime.core.counts[k0] == 1
    await runtime.leadership_changed(0, True, 5)  # still the leader, newer epoch: no reload
    assert runtime.core.epochs[0] == 5 and 0 not in runtime.core.loading_partitions

    # a load overtaken by a newer leadership change is abandoned, and leaves nothing of the partition
    await runtime.leadership_changed(0, False, 6)
    async with trio.open_nursery() as loads:
        async with runtime._serialised(0):
            loads.start_soon(runtime.leadership_changed, 0, True, 7)
            await trio.sleep(0.1)
        # the load has marked the partition loading and waits for its replay step
        await runtime.leadership_changed(0, False, 8)
    assert 0 not in runtime.core.owned_partitions and k0 not in runtime.core.counts
    assert await increment(runtime, k1) == 1  # the other partition never stopped
