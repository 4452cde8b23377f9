"""The checked-in generated codecs match what tools/gen_messages.py produces from Kafka's specs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SPECS = REPO.parent / "shared" / "kafka-protocol" / "messages"


@pytest.mark.skipif(not SPECS.is_dir(), reason="Kafka spec directory ../shared/kafka-protocol not present")
def test_generated_files_are_fresh() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "gen_messages.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not SPECS.is_dir(), reason="Kafka spec directory ../shared/kafka-protocol not present")
def test_check_detects_a_stale_file(tmp_path: Path) -> None:
    gen = [sys.executable, str(REPO / "tools" / "gen_messages.py"), "--out", str(tmp_path)]
    subprocess.run(gen, check=True, capture_output=True)
    target = tmp_path / "produce_request.py"
    target.write_text(target.read_text() + "\n# edited by hand\n")
    proc = subprocess.run([*gen, "--check"], capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "produce_request.py" in proc.stderr
