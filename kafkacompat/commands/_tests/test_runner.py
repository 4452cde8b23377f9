"""The shared run-and-report wrapper of the admin commands."""

from __future__ import annotations

import argparse

import pytest

from kafkacompat.client import ClientError, CommandError
from kafkacompat.commands import _runner, configs


def test_errors_are_reported_with_the_commands_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    def fail(error: Exception) -> None:
        raise error

    assert _runner.reporting_errors(lambda: None, "X: ") == 0
    assert _runner.reporting_errors(lambda: fail(CommandError("no such topic")), "Error: ") == 1
    assert capsys.readouterr().err == "Error: no such topic\n"
    assert _runner.reporting_errors(lambda: fail(ClientError("connection refused")), "T : ") == 1
    assert capsys.readouterr().err == "T : connection refused\n"
    with pytest.raises(ValueError):  # anything else is a bug and not swallowed
        _runner.reporting_errors(lambda: fail(ValueError("bug")), "Error: ")


def test_broken_pipe_ends_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    silenced = []
    monkeypatch.setattr(_runner, "silence_stdout", lambda: silenced.append(True))

    def write_to_closed_pipe() -> None:
        raise BrokenPipeError

    assert _runner.reporting_errors(write_to_closed_pipe, "Error: ") == 0
    assert silenced == [True]


def test_configs_refuses_a_bad_entity_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    configs.add_arguments(parser)
    # nothing listens on port 9 here: had it connected first, the error would be a connection error
    args = parser.parse_args(["describe", "--bootstrap-server", "127.0.0.1:9"])
    assert configs.run(args) == 1
    assert capsys.readouterr().err == (
        "Error while executing config command : "
        "--entity-type (topics, brokers or broker-loggers) is required\n"
    )
