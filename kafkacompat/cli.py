"""Command line entry point: `kafkacompat <command> ...`.

Theory of operation: each command lives in its own module under `kafkacompat.commands`, which exposes
`HELP: str`, `add_arguments(parser)` and `run(args) -> int`. The table below is the one place that names
them; modules are imported only when their command runs, so `kafkacompat serve` does not pay for the
imports of the admin tools and vice versa. `kafkacompat --version` prints the installed package's version
(its metadata; `kafkacompat.__version__` when run from a source tree that is not installed).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command name -> module implementing it
COMMANDS: dict[str, str] = {
    "dump-log": "kafkacompat.commands.dump_log",
    "topics": "kafkacompat.commands.topics",
    "configs": "kafkacompat.commands.configs",
    "produce": "kafkacompat.commands.produce",
    "consume": "kafkacompat.commands.consume",
    "groups": "kafkacompat.commands.groups",
    "transactions": "kafkacompat.commands.transactions",
    "serve": "kafkacompat.commands.serve",
    "bench": "kafkacompat.commands.bench",
    "doctor": "kafkacompat.commands.doctor",
    "dev-certs": "kafkacompat.commands.dev_certs",
    "users": "kafkacompat.commands.users",
    "acls": "kafkacompat.commands.acls",
    "cluster": "kafkacompat.commands.cluster",
    "quotas": "kafkacompat.commands.quotas",
}


def version() -> str:
    """The installed kafkacompat's version, as its package metadata states it."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("kafkacompat")
    except PackageNotFoundError:
        from kafkacompat import __version__

        return __version__


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafkacompat", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=version(), help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        if selected is not None and name != selected:
            sub.add_parser(name)
            continue
        module = importlib.import_module(module_name)
        command_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--version"]:  # without importing every command's module for the full parser
        print(version())
        return 0
    selected = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(selected)
    args = parser.parse_args(argv)
    if selected is None:
        parser.print_help()
        return 2
    return int(args._module.run(args) or 0)
