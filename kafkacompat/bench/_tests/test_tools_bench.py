"""tools/bench.py's choice of interpreter: go on, re-exec with the checkout's .venv, or stop and say why."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "bench.py"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="tools/bench.py is only in a source checkout")


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tools_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the functions only: the check runs under __main__
    return module


def test_interpreter_plan() -> None:
    plan = _load().interpreter_plan
    assert plan([], venv_python_exists=True, running_in_venv=False) is None  # this python will do
    assert plan([], venv_python_exists=False, running_in_venv=False) is None
    assert plan(["confluent_kafka"], venv_python_exists=True, running_in_venv=False) == "reexec"
    # already the venv's python (e.g. after the re-exec): no loop, a message instead
    for in_venv, exists in ((True, True), (False, False)):
        message = plan(["trio", "confluent_kafka"], venv_python_exists=exists, running_in_venv=in_venv)
        assert message not in (None, "reexec")
        assert "\n" not in message
        assert "trio, confluent_kafka" in message and "make test" in message and "`test` extras" in message


def _copy(tmp_path: Path) -> Path:
    """tools/bench.py in a checkout of its own (tmp_path), so its .venv is ours to fake."""
    (tmp_path / "tools").mkdir()
    script = tmp_path / "tools" / "bench.py"
    shutil.copy(SCRIPT, script)
    return script


def _run_without_confluent_kafka(script: Path) -> subprocess.CompletedProcess[str]:
    # find_spec() reports a module set to None in sys.modules as missing, like an absent package
    code = (
        "import runpy, sys; sys.modules['confluent_kafka'] = None; "
        f"sys.argv = [{str(script)!r}, '--quick', '--no-progress']; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_without_a_venv_it_exits_2_with_one_line(tmp_path: Path) -> None:
    done = _run_without_confluent_kafka(_copy(tmp_path))
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "confluent_kafka" in line and "make test" in line


def test_with_a_venv_it_re_executes_with_the_same_arguments(tmp_path: Path) -> None:
    script = _copy(tmp_path)
    venv_python = tmp_path / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text('#!/bin/sh\necho "venv python: $*"\nexit 7\n')
    venv_python.chmod(0o755)
    done = _run_without_confluent_kafka(script)
    assert (done.returncode, done.stdout) == (7, f"venv python: {script.resolve()} --quick --no-progress\n")
