"""Serving code knows no tools: what `kafkacompat serve` imports leaves out the fuzzer, the local-broker
helpers and pytest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kafkacompat.testing import env_without_pytest

#: what `kafkacompat serve` imports before its loop starts (kafkacompat/commands/serve.py), the request
#: path included
SERVING = (
    "kafkacompat.cli",
    "kafkacompat.commands.serve",
    "kafkacompat.config",
    "kafkacompat.broker.connection",
    "kafkacompat.broker.dispatch",
    "kafkacompat.broker.server",
)
TOOLS = ("kafkacompat.fuzzing", "kafkacompat.local_brokers", "kafkacompat.testing", "pytest", "_pytest")


def test_the_serving_code_imports_no_tool(tmp_path: Path) -> None:
    program = (
        "import importlib, sys\n"
        f"for name in {SERVING!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {TOOLS!r} or m.startswith({TOOLS!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], env=env_without_pytest(tmp_path), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"
