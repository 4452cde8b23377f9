"""tools/step_sweep.py against its in-process broker: every step is seen at a threshold of 0 ms, and
each is named after the request being swept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "step_sweep.py"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="tools/ is only in a source checkout")


def test_the_sweep_names_the_steps_of_each_multiplied_array() -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--apis", "42", "--elements", "300", "--threshold-ms", "0",
         "--top", "1000"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    rows = [line.split(None, 2) for line in run.stdout.splitlines()]
    assert rows and all(float(ms) >= 0 and unit == "ms" for ms, unit, _ in rows), run.stdout
    swept = [rest for _, _, rest in rows if rest.startswith("DeleteGroups v2")]
    assert swept and all(rest.endswith("key 42 v2 groups_names") for rest in swept), run.stdout
