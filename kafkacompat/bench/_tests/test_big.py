"""The large-partition workload without a broker: the consume worker's configuration and back-off
pause count (fake client, fake clock), and the runner's plan of two reads per broker and run."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkacompat.bench import runner, workers
from kafkacompat.bench.runner import Settings

# the settings that shape the Fetch requests a broker sees: the large-partition reads leave them alone
FETCH_SHAPING = ("fetch.max.bytes", "max.partition.fetch.bytes", "fetch.min.bytes", "fetch.wait.max.ms")


class _Message:
    def error(self) -> None:
        return None


class _Clock:
    """Stands in for the time module inside workers: advances only when the fake consumer says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now


def _fake_kafka(
    monkeypatch: pytest.MonkeyPatch, clock: _Clock, script: list[tuple[float, int | None]]
) -> list[dict[str, Any]]:
    """Install a fake confluent_kafka whose consume() follows `script`: (seconds the call takes,
    records it returns; None: all it was asked for). Returns the list the consumers' configs go to."""
    configs: list[dict[str, Any]] = []
    steps: Iterator[tuple[float, int | None]] = iter(script)

    class Consumer:
        def __init__(self, conf: dict[str, Any]) -> None:
            configs.append(conf)

        def list_topics(self, topic: str, timeout: float) -> None:
            pass

        def assign(self, partitions: list[Any]) -> None:
            pass

        def consume(self, num_messages: int, timeout: float) -> list[_Message]:
            seconds, count = next(steps)
            assert seconds <= timeout
            clock.now += seconds
            return [_Message() for _ in range(num_messages if count is None else count)]

        def close(self) -> None:
            pass

    module = types.ModuleType("confluent_kafka")
    module.Consumer = Consumer  # type: ignore[attr-defined]
    module.KafkaException = type("KafkaException", (Exception,), {})  # type: ignore[attr-defined]
    module.TopicPartition = lambda *args: args  # type: ignore[attr-defined]
    module.OFFSET_BEGINNING = -2  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "confluent_kafka", module)
    monkeypatch.setattr(workers, "time", clock)
    return configs


def _params(**extra: Any) -> dict[str, Any]:
    return {
        "bootstrap": "127.0.0.1:1",
        "topic": "t",
        "messages": 25_000,
        "size": 1024,
        "timeout": 60.0,
    } | extra


def test_consume_counts_the_client_back_off_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    script = [
        (0.01, None),  # 10,000 at once
        (0.5, 0),  # empty after the whole timeout: a pause
        (0.45, 300),  # short after 0.45 s: the tail of a pause
        (0.3, 0),  # empty but quick: not a pause
        (0.39, 200),  # short, just under the threshold: not a pause
        (0.01, None),  # 10,000
        (0.45, None),  # slow but complete (the last 4,500): not a pause
    ]
    configs = _fake_kafka(monkeypatch, clock, script)
    result = workers._consume(_params())
    assert result["ok"] and result["messages"] == 25_000 and result["bytes"] == 25_000 * 1024
    assert result["pauses"] == 2
    assert result["paused_seconds"] == pytest.approx(0.95)
    assert result["seconds"] == pytest.approx(sum(seconds for seconds, _ in script))
    (conf,) = configs
    assert "fetch.queue.backoff.ms" not in conf  # not given: librdkafka's default (1 s)


def test_consume_sets_only_the_fetch_queue_back_off_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = _fake_kafka(monkeypatch, _Clock(), [(0.01, None)] * 3)
    result = workers._consume(_params(fetch_queue_backoff_ms=1))
    assert result["ok"] and result["pauses"] == 0
    (conf,) = configs
    assert conf["fetch.queue.backoff.ms"] == 1
    assert not [key for key in conf if key in FETCH_SHAPING or key.startswith("queued.")]


def test_big_reads_each_partition_twice_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, int | None]] = []
    deleted: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(runner, "create_topic", lambda bootstrap, name, partitions, **_: None)
    monkeypatch.setattr(runner, "delete_topics", lambda bootstrap, names: deleted.append((bootstrap, names)))

    def run_one(
        state: Any, kind: str, params: dict[str, Any], timeout: float
    ) -> tuple[dict[str, Any], Any, int]:
        name = state.broker.spec.name
        if kind == "produce":
            return {"ok": True, "bytes": params["messages"] * 1024, "seconds": 2.0}, None, 0
        backoff = params["fetch_queue_backoff_ms"]
        calls.append((name, kind, backoff))
        if name == "flaky" and backoff == 1:
            return {"ok": False, "error": "no record for 20 s"}, None, 0
        runs_so_far = sum(1 for c in calls if c[0] == name and c[2] == backoff)
        # distinct figures per read so the summaries can be told apart: default 1-3 s, backoff1 4-6 s
        seconds = runs_so_far + (0 if backoff is None else 3)
        result = {"ok": True, "bytes": params["messages"] * 1024, "seconds": float(seconds)}
        result |= {"pauses": 4 - runs_so_far if backoff is None else 0, "paused_seconds": 0.0}
        return result, 0.5, 3 * runner.MIB

    monkeypatch.setattr(runner, "_run_one", run_one)
    states = [
        types.SimpleNamespace(
            broker=types.SimpleNamespace(spec=types.SimpleNamespace(name=name), bootstrap=name)
        )
        for name in ("kafkacompat", "flaky")
    ]
    settings = Settings(runs=3, big_partition_mib=1, workloads=("big",))
    progress = runner.Progress(runner.count_steps(settings, 2), enabled=False)
    out: dict[str, Any] = {}
    notes: list[str] = []
    runner._big(settings, states, progress, notes.append, out)  # type: ignore[arg-type]
    assert progress.done == progress.total  # the step count matches the plan
    # alternated: run r reads every broker (default, then backoff=1) before run r+1
    assert calls[:4] == [
        ("kafkacompat", "consume", None),
        ("kafkacompat", "consume", 1),
        ("flaky", "consume", None),
        ("flaky", "consume", 1),
    ]
    # the failing read is dropped after two failures; the other read of that broker goes on
    assert calls.count(("flaky", "consume", 1)) == 2 and calls.count(("flaky", "consume", None)) == 3
    ours, flaky = out["kafkacompat"], out["flaky"]
    mb = 1 * runner.MIB / 1e6  # 1 MiB read
    assert ours["consume_mb_s"]["median"] == pytest.approx(mb / 2)
    assert ours["backoff1_mb_s"]["runs"] == pytest.approx([mb / 4, mb / 5, mb / 6])
    assert ours["pauses"]["runs"] == [3, 2, 1]
    assert [r["pauses"] for r in ours["backoff1_reads"]] == [0, 0, 0]
    assert (
        ours["reads"][0]["broker_cpu_cores"] == pytest.approx(0.5) and ours["reads"][0]["peak_rss_mib"] == 3
    )
    assert flaky["backoff1_mb_s"] is None and flaky["backoff1_error"] == "no record for 20 s"
    assert "error" not in flaky and flaky["consume_mb_s"] is not None
    assert len(notes) == 2
    assert sorted(bootstrap for bootstrap, _ in deleted) == ["flaky", "kafkacompat"]


def test_old_results_file_still_renders(tmp_path: Path) -> None:
    """A results file saved before the second read (no backoff1_* fields) still renders as a report."""
    import json

    from kafkacompat.bench._tests.test_report import _s, make_results
    from kafkacompat.bench.report import evaluate_goals, render_table

    old = {"mib": 1024, "reads": [{"mb_s": 400.0}], "consume_mb_s": _s(400.0, 380.0, 420.0)}
    path = tmp_path / "big1.json"
    path.write_text(json.dumps(make_results(big={"kafkacompat": old})))
    results = json.loads(path.read_text())
    lines = render_table(results).splitlines()
    row = next(line for line in lines if "fetch.queue.backoff.ms=1" in line)
    assert row.split()[-3:] == ["-", "-", "-"]
    default_row = next(line for line in lines if "default consumer (MB/s)" in line)
    assert "400" in default_row
    big = next(e for g, s, e in evaluate_goals(results) if g.startswith("A large"))
    assert "fully default consumer" in big
