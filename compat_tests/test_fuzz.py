"""Live fuzzing, short form (the CI run of tools/fuzz.py; the long form is in docs/RELIABILITY.md).

A broker process of its own gets mutated request frames of every API it serves (kafkacompat/fuzzer.py)
over many connections, while a well-behaved confluent-kafka producer (acks=all, idempotent) and group
consumer run beside the fuzzer. The broker must stay up, log no traceback, answer every frame it
answers with the right correlation id and a decodable body; the pair must see no error and lose no
acknowledged record; RSS must stay bounded. Latency under fuzzing is recorded by the long form, not
asserted here (two shared cores make it noise in CI).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkacompat.broker import dispatch
from kafkacompat.fuzzer import Campaign, run_campaign
from kafkacompat.testing import BrokerProcess

pytestmark = pytest.mark.restarts_broker

pytest.importorskip("confluent_kafka", reason="the well-behaved pair is a confluent-kafka client")


def test_short_fuzz_run_beside_a_good_pair(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", ["group.initial.rebalance.delay.ms=0"]).start()
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
            )
        )
    finally:
        status = broker.stop()
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
    assert result["rss_mib"]["peak"] < 400, result["rss_mib"]
