"""Live fuzzing, short form (the CI run of tools/fuzz.py; the long form is in docs/RELIABILITY.md).

A broker process of its own gets mutated request frames of every API it serves (kafkacompat/fuzzing)
over many connections, while a well-behaved confluent-kafka producer (acks=all, idempotent) and group
consumer run beside the fuzzer. The broker must stay up, log no traceback, answer every frame it
answers with the right correlation id and a decodable body; the pair must see no error and lose no
acknowledged record; RSS must stay bounded.

Latency: the issue's criterion (the pair's p99 within 2x of a quiet run) cannot be asserted robustly on
a loaded 2-core CI machine (the quiet p99 alone varies from 6 ms to 800 ms there with the load of other
jobs), so this form asserts its structural cause instead, in CPU time, which the machine's load does not
change: with the broker's loop-lag monitor on (diagnostics/loop_lag.py), no request held the event loop for
more than LOOP_HELD_LIMIT_MS of CPU (before the fairness work, 1,000-item admin requests held it for
100-300 ms), plus a loose bound on the pair's p99. docs/RELIABILITY.md has the measured latencies.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kafkacompat.broker import dispatch
from kafkacompat.fuzzing.campaign import Campaign, run_campaign
from kafkacompat.local_brokers import BrokerProcess

pytestmark = pytest.mark.restarts_broker

pytest.importorskip("confluent_kafka", reason="the well-behaved pair is a confluent-kafka client")

LOOP_HELD_LIMIT_MS = 100
PAIR_P99_LIMIT_MS = 5000
_HELD_BY_REQUEST = re.compile(r"event loop held ([\d.]+) ms by (\w+ v\d+), \d+ bytes")


def test_short_fuzz_run_beside_a_good_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the broker process logs every task step over the limit (CPU time), naming its request
    monkeypatch.setenv("KAFKACOMPAT_LOOP_LAG_MS", str(LOOP_HELD_LIMIT_MS))
    broker = BrokerProcess(tmp_path / "data", ["group.initial.rebalance.delay.ms=0"]).start()
    # an idle second broker with a pair of its own (`tools/fuzz.py run --control-pair`)
    control = BrokerProcess(tmp_path / "control", ["group.initial.rebalance.delay.ms=0"]).start()
    try:
        assert broker.process is not None
        result = run_campaign(
            Campaign(
                bootstrap=broker.bootstrap,
                broker_pid=broker.process.pid,
                broker_log=str(broker.log_path),
                frames=12_000,
                seconds=16,
                connections=24,
                quiet_seconds=3,
                pair_rate=50,
                seed=18,
                control_bootstrap=control.bootstrap,
            )
        )
    finally:
        status = broker.stop()
        control.stop()
    assert result["broker_alive"], "the broker died under fuzzing"
    assert status == 0, f"the broker exited with {status} after fuzzing"
    assert result["log_problems"] == []
    fuzz = result["fuzz"]
    served = {key for key, _, _ in dispatch.supported_versions()}
    assert result["apis"] == len(served), "a served API has no seed"
    assert fuzz["frames_sent"] >= 5_000, fuzz
    assert fuzz["bad_answers"] == 0, fuzz["bad_answer_samples"]
    assert fuzz["answered"] > 0 and fuzz["closed_by_broker"] > 0, fuzz
    for phase in ("quiet_pair", "fuzzed_pair"):
        pair = result[phase]
        assert pair["error_count"] == 0, (phase, pair["errors"])
        assert pair["acked"] == pair["records_sent"] > 0, (phase, pair)
        assert pair["lost"] == 0, (phase, pair)
    for phase in ("quiet", "fuzzed"):
        pair = result["control_pair"][phase]
        assert pair["error_count"] == 0 and pair["lost"] == 0, (phase, pair)
        assert pair["acked"] == pair["records_sent"] > 0, (phase, pair)
    assert result["p99_ratio_beyond_control"] == pytest.approx(
        result["p99_ratio"] / result["control_pair"]["p99_ratio"], rel=0.05
    )
    assert result["rss_mib"]["peak"] < 400, result["rss_mib"]
    broker_log = broker.log_path.read_text(errors="replace")
    assert "loop-lag monitor on" in broker_log  # the assertion below can fail
    held = _HELD_BY_REQUEST.findall(broker_log)
    assert held == [], f"requests held the event loop over {LOOP_HELD_LIMIT_MS} ms of CPU: {held[:10]}"
    pair = result["fuzzed_pair"]
    assert pair["e2e_p99_ms"] < PAIR_P99_LIMIT_MS, (result["quiet_pair"], pair)
