"""A whole (tiny) benchmark run against a kafkacompat broker started by the runner itself."""

from __future__ import annotations

import json
import sys

import pytest

from kafkacompat.bench.brokers import kafkacompat_spec, parse_peer
from kafkacompat.bench.report import evaluate_goals, render_table
from kafkacompat.bench.runner import Settings, run_benchmark

pytest.importorskip("confluent_kafka", reason="the benchmark's clients are confluent-kafka")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")]


def test_tiny_run_against_kafkacompat(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(
        messages=300,
        sizes=(1024,),
        acks=("all",),
        runs=1,
        e2e_rate=1000,
        e2e_seconds=1.0,
        group_sizes=(1,),
        timeout=60.0,
        workloads=("startup", "produce", "consume", "e2e", "groups"),
    )
    results = run_benchmark(settings, [kafkacompat_spec()], work_dir=str(tmp_path))
    json.dumps(results)  # the report must be JSON-ready
    broker = results["brokers"]["kafkacompat"]
    assert broker["errors"] == []
    assert 0 < broker["startup_s"]["median"] < 30
    assert broker["idle_rss_mib"] > 5 and broker["peak_rss_mib"] >= 5
    produce = results["throughput"]["produce-1024-acksall"]["per_broker"]["kafkacompat"]
    assert produce["failures"] == [] and len(produce["runs"]) == 1
    run = produce["runs"][0]
    assert run["mb_s"] == pytest.approx(300 * 1024 / run["seconds"] / 1e6)
    # 300 records take a few clock ticks of broker CPU at most: not reported unless measurable
    assert run["broker_cpu_cores"] is None or run["broker_cpu_cores"] > 0
    consume = results["throughput"]["consume-1024"]["per_broker"]["kafkacompat"]
    assert consume["failures"] == [] and consume["mb_s"]["median"] > 0
    latency = results["latency"]["kafkacompat"]
    assert "error" not in latency and latency["samples"] == 1000  # 1 s at 1000/s, warm-up not counted
    assert 0 < latency["p50"]["median"] <= latency["p99"]["median"] <= latency["max"]["median"]
    # the paced producer sleeps between sends (a spinning one would show about a whole core here)
    assert 0 < latency["producer_cpu_cores"]["median"] < 0.5
    assert latency["broker_cpu_cores"]["median"] >= 0  # the broker's processes were found and read
    join = results["groups"]["1"]["kafkacompat"]
    assert join["failures"] == [] and 0 < join["seconds"]["median"] < 30
    assert "produce 1 KiB acks=all" in render_table(results)
    assert len(evaluate_goals(results)) == 10
    assert not list(tmp_path.iterdir())  # the run's temp dir (broker data, logs) is gone


def test_a_peer_that_exits_at_once_is_reported_and_left_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = parse_peer(f"dud={sys.executable} -c 'raise SystemExit(3)' {{port}}")
    settings = Settings(runs=2, messages=10, sizes=(100,), acks=("1",), workloads=("startup", "produce"))
    results = run_benchmark(settings, [spec], work_dir=str(tmp_path))
    (error,) = results["brokers"]["dud"]["errors"]  # tried once, not once per run
    assert "exited with 3" in error
    assert results["brokers"]["dud"]["startup_s"] is None
    assert results["throughput"]["produce-100-acks1"]["per_broker"] == {}


def test_produce_runs_leave_no_topic_behind(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kafkacompat.bench.brokers import RunningBroker
    from kafkacompat.bench.runner import Progress, _BrokerState, _produce_runs
    from kafkacompat.client import KafkaClient

    broker = RunningBroker(kafkacompat_spec(), tmp_path)
    broker.start()
    try:
        settings = Settings(messages=200, sizes=(1024,), acks=("1",), runs=2, timeout=60.0)
        out: dict = {}
        _produce_runs(settings, [_BrokerState(broker)], Progress(4, enabled=False), print, out)
        record = out["produce-1024-acks1"]["per_broker"]["kafkacompat"]
        assert record["failures"] == [] and len(record["runs"]) == 2
        with KafkaClient(broker.bootstrap, client_id="test") as client:
            names = [t.name for t in client.metadata().topics]
        # each run's topic went as soon as the run was over: a broker holds one run's data at most
        assert not [name for name in names if name.startswith("bench-")]
    finally:
        broker.stop()


def test_consume_reads_stop_after_two_failures(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from kafkacompat.bench import runner
    from kafkacompat.bench.brokers import RunningBroker
    from kafkacompat.client import KafkaClient

    calls = []

    def failing_read(state, kind, params, timeout):  # type: ignore[no-untyped-def]
        calls.append(params["topic"])
        return {"ok": False, "error": "no record for 20 s"}, None, 0

    monkeypatch.setattr(runner, "_run_one", failing_read)
    broker = RunningBroker(kafkacompat_spec(), tmp_path)
    broker.start()
    try:
        settings = Settings(messages=200, sizes=(1024,), runs=4, timeout=60.0)
        out: dict = {}
        state = runner._BrokerState(broker)
        runner._consume_runs(settings, [state], runner.Progress(5, enabled=False), print, out)
        record = out["consume-1024"]["per_broker"]["kafkacompat"]
        assert record["failures"] == ["no record for 20 s"] * 2 and record["skipped_runs"] == 2
        assert len(calls) == 2 and calls[0] == calls[1]  # both reads took the one loaded topic
        with KafkaClient(broker.bootstrap, client_id="test") as client:
            names = [t.name for t in client.metadata().topics]
        assert calls[0] not in names  # the loaded topic is deleted after the reads
    finally:
        broker.stop()


def test_group_members_start_only_once_their_clients_have_found_the_coordinator(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kafkacompat.bench import runner
    from kafkacompat.bench.brokers import RunningBroker

    broker = RunningBroker(kafkacompat_spec(), tmp_path)
    broker.start()
    try:
        seconds, unsettled = runner._join_once(Settings(timeout=60.0), runner._BrokerState(broker), 3)
    finally:
        broker.stop()
    # every member's client had its coordinator connection up before the start signal, so the time
    # measured is the group protocol's, not a FindCoordinator retry's
    assert unsettled == 0
    assert 0 < seconds < 30
