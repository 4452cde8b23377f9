"""The command line refuses what it cannot use, in one line that says what and where: run as processes
(`python -m kafkacompat ...`), as a user runs them."""

from __future__ import annotations

import subprocess
import sys

from kafkacompat import __version__


def kafkacompat(
    *args: str, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkacompat", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_version_is_printed() -> None:
    result = kafkacompat("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{__version__}\n", "")


def test_users_add_refuses_an_empty_password() -> None:
    # refused before any connection is tried (nothing listens on port 1)
    for args, stdin in ((["--password", ""], None), ([], "\n"), ([], "")):
        result = kafkacompat(
            "users", "add", "--user", "alice", *args, "--bootstrap-server", "127.0.0.1:1", input=stdin
        )
        assert result.returncode == 1, result
        assert result.stderr == "Error while executing user command : the password must not be empty\n"


def test_serve_refuses_an_unknown_log_level() -> None:
    result = kafkacompat("serve", "--log-level", "LOUD")
    assert result.returncode == 2
    error = result.stderr.splitlines()[-1]
    assert "--log-level" in error and "'LOUD'" in error
    assert all(level in error for level in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR"))
