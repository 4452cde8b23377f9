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


# Full collections after settling: what each walks (tracked objects not frozen, counted by a callback
# that runs before the broker's), and whether a cycle that died while frozen is ever collected.
FREEZE = """
import gc, json, weakref
from kafkacompat.commands import serve
serve.settle_garbage_collector()
walked = []
def count(phase, info):
    if phase == "start" and info["generation"] == 2:
        walked.append(sum(len(gc.get_objects(generation)) for generation in range(3)))
gc.callbacks.insert(0, count)

class Node:
    def __init__(self):
        self.me = self
long_lived = [Node() for _ in range(50_000)]  # a broker's partition logs, say: cycles that live on
doomed = Node()
died = []
weakref.finalize(doomed, died.append, True)
gc.collect()  # walks them all, then freezes the survivors
gc.collect()  # walks what survived since
del doomed  # cyclic garbage, frozen
gc.collect()
died_while_frozen = bool(died)
serve.THAW_SECONDS = 0.0  # due: this collection's callback thaws instead of freezing
gc.collect()
gc.collect()  # walks everything again, and collects the dead cycle
print(json.dumps({"walked": walked, "died_while_frozen": died_while_frozen, "died": bool(died),
                  "frozen": gc.get_freeze_count(), "long_lived": len(long_lived)}))
"""


def test_full_collections_walk_only_what_survived_since_the_last_and_a_thaw_collects_frozen_garbage() -> None:
    out = subprocess.run(
        [sys.executable, "-c", FREEZE], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out)
    first, second, third, thawing, thawed = result["walked"]
    assert first >= 50_000, result  # the long-lived objects, once
    assert second < 1_000 and third < 1_000, result  # then only what came since: they are frozen
    assert not result["died_while_frozen"], result  # the price, until the thaw
    assert thawing < 1_000 and thawed >= 50_000 and result["died"], result
    assert result["frozen"] >= 50_000, result  # and the survivors are frozen again
