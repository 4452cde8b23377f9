"""pip install builds the compiled record walk wherever a C compiler is; elsewhere the broker falls back
to the pure-Python walk (test_record_walk.py holds the two to the same verdicts)."""

from __future__ import annotations

import shutil

import pytest

from kafkacompat.log import record_walk


def test_pip_install_built_the_compiled_walk() -> None:
    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler here: the broker uses the pure-Python walk")
    assert record_walk.COMPILED, record_walk.walk_in_use()
