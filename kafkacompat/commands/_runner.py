"""How the admin commands (`topics`, `configs`, `groups`, ...) run, report failure and print tables.

A broken stdout pipe (`kafkacompat topics list | head`) ends the command quietly with status 0; a
client or command error is printed on stderr after the command's own prefix (the wording of the Kafka
tool it imitates) and gives status 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from kafkacompat.client import ClientError, CommandError, KafkaClient, command_security, silence_stdout

__all__ = ["print_table", "reporting_errors", "with_client"]


def reporting_errors(action: Callable[[], object], error_prefix: str) -> int:
    """Run `action`; the exit status, with errors reported as described in the module docstring."""
    try:
        action()
    except BrokenPipeError:
        silence_stdout()
        return 0
    except (ClientError, CommandError) as exc:
        print(f"{error_prefix}{exc}", file=sys.stderr)
        return 1
    return 0


def with_client(args: argparse.Namespace, action: Callable[[KafkaClient], object], error_prefix: str) -> int:
    """`reporting_errors` around `action(client)`, the client connected to `--bootstrap-server`."""

    def connected() -> None:
        with KafkaClient(
            args.bootstrap_server, timeout=args.timeout, security=command_security(args)
        ) as client:
            action(client)

    return reporting_errors(connected, error_prefix)


def print_table(rows: list[list[Any]]) -> None:
    """Print `rows` (the first is the header) as left-aligned columns one space apart."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(" ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
