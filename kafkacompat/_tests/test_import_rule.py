"""The import rule (docs/ARCHITECTURE.md): the cores and replication import nothing from the serving
package `kafkacompat/broker/`, not at the top, not inside a function, not under TYPE_CHECKING.

Every module is parsed with `ast` rather than imported, so an import that only runs in a function or
only for the type checker counts as well; `_tests` directories are left out (tests may build a broker)."""

from __future__ import annotations

import ast
from pathlib import Path

import kafkacompat

ROOT = Path(kafkacompat.__file__).parent
#: the packages below the serving code
BELOW_BROKER = ("replication", "log", "groups", "txn", "coordinator", "wire", "security")
FORBIDDEN = "kafkacompat.broker"


def _package_of(path: Path) -> str:
    """The package relative imports in `path` are resolved against (a package's __init__: itself)."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    parts.pop()  # the module's own name, or __init__
    return ".".join(parts)


def _resolve(package: str, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_broker(name: str) -> bool:
    return name == FORBIDDEN or name.startswith(FORBIDDEN + ".")


def broker_imports(source: str, package: str) -> list[str]:
    """`line: statement` for each import of kafkacompat.broker in `source`, a module of `package`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(package, node)
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        if any(_is_broker(name) for name in names):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def _modules() -> list[Path]:
    return sorted(
        path
        for package in BELOW_BROKER
        for path in (ROOT / package).rglob("*.py")
        if "_tests" not in path.relative_to(ROOT).parts
    )


def test_the_packages_below_the_broker_import_nothing_from_it() -> None:
    modules = _modules()
    assert len(modules) > 50  # the walk found the packages
    offenders = {}
    for path in modules:
        found = broker_imports(path.read_text(encoding="utf-8"), _package_of(path))
        if found:
            offenders[str(path.relative_to(ROOT.parent))] = found
    assert offenders == {}


def test_the_check_sees_every_form_of_import() -> None:
    sample = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import kafkacompat.broker.state\n"
        "from kafkacompat import broker\n"
        "from ..broker.delayed import PartitionWatchers\n"
        "if TYPE_CHECKING:\n"
        "    from kafkacompat.broker.state import BrokerState\n"
        "def later():\n"
        "    from kafkacompat.broker import dispatch\n"
        "    import importlib\n"
        "    return importlib.import_module('kafkacompat.broker.server')\n"
        "from kafkacompat.brokers_elsewhere import fine\n"
        "from kafkacompat.replication import metadata\n"
        "from . import zk_data\n"
    )
    found = broker_imports(sample, "kafkacompat.replication")
    assert [line.split(":")[0] for line in found] == ["3", "4", "5", "7", "9", "11"]
