"""The README's quick-start examples, run as written, one after another, against a default broker.

Each ```python block of the README's "Quick start" section runs in its own interpreter, in README order,
with only the bootstrap address and the topic name substituted (a fresh topic, so an external broker's
`events` does not change what they print); then the ```sh block runs line by line with kcat. Every
example must finish on its own (no Ctrl-C, no dead group member left for the next one to wait out) and
print the record it produced.

They run against `default_bootstrap` (conftest): without `--bootstrap`, a broker with Kafka's defaults
as `make run` starts it, in particular the 3 s `group.initial.rebalance.delay.ms` (the suite's shared
broker sets it to 0).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
README_BOOTSTRAP = "localhost:9092"
README_TOPIC = "events"
# Generous (a loaded CI machine), yet well below what a stall on a dead group member costs (a session
# timeout of 10-45 s, or a rebalance that waits for it).
EXAMPLE_TIMEOUT = 40.0


def quick_start_blocks() -> list[tuple[str, str, str]]:
    """(label, language, code) of every fenced block in the README's "Quick start" section, in order;
    the label is the line ending in ':' before the block ("kafka-python", "kcat", ...)."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    blocks = []
    for match in re.finditer(r"(?m)^([^\n`]+):\n\n```(\w+)\n(.*?)^```$", section, re.S):
        blocks.append((match.group(1).strip(), match.group(2), match.group(3)))
    return blocks


BLOCKS = quick_start_blocks()
PYTHON_BLOCKS = [(label, code) for label, language, code in BLOCKS if language == "python"]
SHELL_BLOCKS = [(label, code) for label, language, code in BLOCKS if language == "sh"]


def test_the_quick_start_has_the_examples_this_test_runs() -> None:
    assert [label for label, _ in PYTHON_BLOCKS] == ["kafka-python", "confluent-kafka", "aiokafka"]
    assert [label for label, _ in SHELL_BLOCKS] == ["kcat"]
    group_id = re.compile(r"group[._]id[\"']?\s*[:=]\s*\"([^\"]+)\"")
    groups = [name for _, code in PYTHON_BLOCKS for name in group_id.findall(code)]
    assert len(groups) == len(PYTHON_BLOCKS) == len(set(groups))  # one group each: no shared membership


@pytest.fixture(scope="module")
def quick_start_topic() -> str:
    return f"readme-events-{uuid.uuid4().hex[:8]}"


def _substitute(code: str, bootstrap: str, topic: str) -> str:
    assert README_BOOTSTRAP in code and f"{README_TOPIC}" in code
    code = code.replace(README_BOOTSTRAP, bootstrap)
    return re.sub(rf"(?<![\w-]){README_TOPIC}(?![\w-])", topic, code)


@pytest.mark.parametrize("label, code", PYTHON_BLOCKS, ids=[label for label, _ in PYTHON_BLOCKS])
def test_python_example_runs_and_prints_its_record(
    default_bootstrap: str, quick_start_topic: str, label: str, code: str, tmp_path: Path
) -> None:
    script = tmp_path / "example.py"
    script.write_text(_substitute(code, default_bootstrap, quick_start_topic), encoding="utf-8")
    started = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the {label} example did not finish in {EXAMPLE_TIMEOUT:.0f} s: {exc.stderr!r}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines, f"the {label} example printed nothing ({time.monotonic() - started:.1f} s)"
    for line in lines:  # "<offset> b'user-1' b'hello'" for every record it read
        assert re.fullmatch(r"\d+ b'user-1' b'hello'", line), line


def test_kcat_example_runs_and_prints_every_record(default_bootstrap: str, quick_start_topic: str) -> None:
    if shutil.which("kcat") is None:
        pytest.skip("kcat not installed (CI installs it)")
    ((_, code),) = SHELL_BLOCKS
    commands = [line for line in _substitute(code, default_bootstrap, quick_start_topic).splitlines() if line]
    outputs = []
    for command in commands:
        result = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {command}"],
            capture_output=True,
            text=True,
            timeout=EXAMPLE_TIMEOUT,
        )
        assert result.returncode == 0, f"{command}: {result.stderr}"
        outputs.append(result.stdout)
    produced, consumed, listing = outputs
    assert produced == ""
    lines = consumed.splitlines()
    # the records of the examples that ran before (this one's comes last), "<offset> <key> <value>"
    assert lines == [f"{offset} user-1 hello" for offset in range(len(lines))] and lines
    assert "1 brokers:" in listing and f'topic "{quick_start_topic}"' in listing
