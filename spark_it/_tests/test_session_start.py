"""A SparkSession that cannot start fails in one line that says how to get the connector another way,
not in py4j's traceback repeated for every test."""

from __future__ import annotations

import pytest

from spark_it.session import SparkStartError, start_session


class _Builder:
    def __init__(self, error: Exception | None) -> None:
        self.error = error

    def getOrCreate(self) -> str:
        if self.error is not None:
            raise self.error
        return "session"


def test_a_started_session_is_returned() -> None:
    assert start_session(_Builder(None)) == "session"


def test_a_jvm_that_does_not_start_is_one_line_with_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKACOMPAT_SPARK_PACKAGES", "1")
    gateway = RuntimeError("Java gateway process exited before sending its port number\n" + "ivy\n" * 3000)
    with pytest.raises(SparkStartError) as failed:
        start_session(_Builder(gateway))
    message = str(failed.value)
    assert "\n" not in message and len(message) < 400
    assert "Java gateway process exited" in message and "spark.jars.packages" in message
    assert "KAFKACOMPAT_SPARK_JARS" in message
    monkeypatch.delenv("KAFKACOMPAT_SPARK_PACKAGES")
    with pytest.raises(SparkStartError) as offline:
        start_session(_Builder(gateway))
    assert "spark.jars.packages" not in str(offline.value)  # no Maven resolution was asked for
