"""The broker process's garbage-collector settings (serve.settle_garbage_collector), in a child process:
they change interpreter-wide state that a test process must not keep."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# Request-like churn: bursts of objects that live while a request is in flight (a response of many
# items, a parked fetch) and are then dropped together. Counts the collections of each generation.
CHURN = """
import gc, json, sys
from kafkacompat.commands import serve
if sys.argv[1] == "settled":
    serve.settle_garbage_collector()
before = [generation["collections"] for generation in gc.get_stats()]
for burst in range(300):
    in_flight = [{"item": i} for i in range(5000)]
    del in_flight
counts = [generation["collections"] - b for generation, b in zip(gc.get_stats(), before)]
print(json.dumps({"collections": counts, "threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def _churn(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHURN, mode], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)


def test_the_settled_collector_freezes_start_up_and_collects_older_generations_rarely() -> None:
    default = _churn("default")
    settled = _churn("settled")
    assert settled["threshold"][0] == 10_000 and settled["frozen"] > 0, settled
    # the middle generation is collected ~14 times less often, and with it the full collections that
    # come every 10 of its collections (a pause of the event loop proportional to every tracked object);
    # objects that live as long as a request die before they are promoted
    assert default["collections"][1] >= 50, default
    assert settled["collections"][1] * 5 <= default["collections"][1], (default, settled)
    assert settled["collections"][2] <= default["collections"][2], (default, settled)
