"""Every broker option marked HONOURED is read by the broker, and no other option is.

"Read" means: the option's name is looked up outside kafkacompat/config.py; or a BrokerConfig property
that resolves it (e.g. `listeners`, `log_dirs`, `retention_ms`) is used outside config.py; or it is
the broker-wide default of a topic-level config (TOPIC_CONFIG_SOURCES, DERIVED_TOPIC_DEFAULTS) that the
log or a handler reads: by name, or through the LogConfig attribute set from it. admin_support.py only
names settings for DescribeConfigs (synonym tables), and dynamic_config.py only names and validates the
dynamic ones (which may change, thread counts by at most half or double), so mentions there do not count.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from kafkacompat import config
from kafkacompat.config import BROKER_OPTIONS, HONOURED, NO_EFFECT_SINGLE_NODE, NOT_IMPLEMENTED

PACKAGE = Path(config.__file__).parent
NOT_READERS = {
    PACKAGE / "config.py",
    PACKAGE / "log" / "config.py",
    PACKAGE / "broker" / "admin_support.py",
    PACKAGE / "dynamic_config.py",
    # the command line tools' client properties (--command-config) share some names with broker settings
    PACKAGE / "security" / "client_auth.py",
}


@cache
def reader_sources() -> str:
    """The non-test, non-generated modules that may read settings, concatenated."""
    texts = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_tests" in path.parts or "_generated" in path.parts or path in NOT_READERS:
            continue
        texts.append(path.read_text())
    return "\n".join(texts)


def mentioned(name: str) -> bool:
    return f'"{name}"' in reader_sources() or f"'{name}'" in reader_sources()


def attribute_used(attribute: str) -> bool:
    return re.search(rf"\.{re.escape(attribute)}\b", reader_sources()) is not None


@cache
def broker_config_accessors() -> dict[str, set[str]]:
    """BrokerConfig property/method name -> option names it reads (directly or through other ones)."""
    tree = ast.parse((PACKAGE / "config.py").read_text())
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BrokerConfig"]
    options = {o.name for o in BROKER_OPTIONS}
    direct: dict[str, set[str]] = {}
    calls: dict[str, set[str]] = {}
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("__"):
            continue
        nodes = list(ast.walk(fn))
        direct[fn.name] = {n.value for n in nodes if isinstance(n, ast.Constant) and n.value in options}
        calls[fn.name] = {
            n.attr for n in nodes if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "self"
        }
    resolved = {name: set(names) for name, names in direct.items()}
    changed = True
    while changed:
        changed = False
        for name, callees in calls.items():
            for callee in callees & resolved.keys():
                if not resolved[callee] <= resolved[name]:
                    resolved[name] |= resolved[callee]
                    changed = True
    return resolved


@cache
def log_config_attributes() -> dict[str, set[str]]:
    """Topic config name -> LogConfig attributes assigned from it (LogConfig.__init__)."""
    tree = ast.parse((PACKAGE / "log" / "config.py").read_text())
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LogConfig"]
    [init] = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    local_names: dict[str, str] = {}
    result: dict[str, set[str]] = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    local_names[target.id] = node.value.value
    for node in ast.walk(init):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        attributes = [t.attr for t in targets if isinstance(t, ast.Attribute)]
        for sub in ast.walk(node.value) if node.value is not None else ():
            reads_merged = isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name)
            if reads_merged and sub.value.id == "merged":
                key = sub.slice
                name = key.value if isinstance(key, ast.Constant) else local_names.get(getattr(key, "id", ""))
                if isinstance(name, str):
                    result.setdefault(name, set()).update(attributes)
    return result


def topic_config_read(topic_name: str) -> bool:
    attributes = log_config_attributes().get(topic_name, set())
    return mentioned(topic_name) or any(attribute_used(a) for a in attributes)


def how_read(name: str) -> str | None:
    if mentioned(name):
        return "by name"
    for accessor, names in broker_config_accessors().items():
        if name in names and accessor != "topic_defaults" and attribute_used(accessor):
            return f"through BrokerConfig.{accessor}"
    topic_names = [t for t, b in config.TOPIC_CONFIG_SOURCES.items() if b == name]
    if name in config.DERIVED_TOPIC_DEFAULTS:
        topic_names.append(config.DERIVED_TOPIC_DEFAULTS[name])
    for topic_name in topic_names:
        if topic_config_read(topic_name):
            return f"as the default of topic config {topic_name}"
    return None


@pytest.mark.parametrize("option", [o for o in BROKER_OPTIONS if o.effect == HONOURED], ids=lambda o: o.name)
def test_honoured_option_is_read(option: config.Option) -> None:
    assert how_read(option.name) is not None, f"{option.name} is marked honoured but nothing reads it"


@pytest.mark.parametrize("option", [o for o in BROKER_OPTIONS if o.effect != HONOURED], ids=lambda o: o.name)
def test_option_marked_accepted_only_is_not_read(option: config.Option) -> None:
    # the other way round: once something starts reading a setting, the table must say "honoured"
    assert how_read(option.name) is None, f"{option.name} is read ({how_read(option.name)}): mark it honoured"


def test_effects_are_the_three_kinds_and_name_real_options() -> None:
    assert {o.effect for o in BROKER_OPTIONS} == {HONOURED, NO_EFFECT_SINGLE_NODE, NOT_IMPLEMENTED}
    names = {o.name for o in BROKER_OPTIONS}
    assert config._NO_EFFECT_SINGLE_NODE <= names and config._NOT_IMPLEMENTED <= names
    assert not config._NO_EFFECT_SINGLE_NODE & config._NOT_IMPLEMENTED
    # the checker itself can tell: an option nothing reads is found out
    assert how_read("log.cleaner.io.buffer.size") is None
    assert how_read("num.partitions") == "by name"
    assert how_read("log.dirs") == "through BrokerConfig.log_dirs"
    assert how_read("log.segment.bytes") == "as the default of topic config segment.bytes"
