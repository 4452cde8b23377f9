"""The checked-in generated codecs match what tools/gen_messages.py produces from Kafka's specs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SPECS = REPO.parent / "shared" / "kafka-protocol" / "messages"
BARE_VERSION = re.compile(r"(?<![.\w'])_?version\b")


@pytest.mark.skipif(not SPECS.is_dir(), reason="Kafka spec directory ../shared/kafka-protocol not present")
def test_generated_files_are_fresh() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "gen_messages.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not SPECS.is_dir(), reason="Kafka spec directory ../shared/kafka-protocol not present")
def test_check_detects_a_stale_file(tmp_path: Path) -> None:
    gen = [sys.executable, str(REPO / "tools" / "gen_messages.py"), "--out", str(tmp_path)]
    subprocess.run(gen, check=True, capture_output=True)
    target = tmp_path / "produce_request.py"
    target.write_text(target.read_text() + "\n# edited by hand\n")
    proc = subprocess.run([*gen, "--check"], capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "produce_request.py" in proc.stderr


def _gen_module():  # type: ignore[no-untyped-def]
    from kafkacompat.wire._tests.test_messages import gen

    return gen


def test_comments_are_stripped_outside_strings_only() -> None:
    gen = _gen_module()
    text = '{ // a comment\n "about": "see http://x//y", // another\n "n": 1 }'
    import json

    assert json.loads(gen.strip_comments(text)) == {"about": "see http://x//y", "n": 1}


def test_version_ranges() -> None:
    gen = _gen_module()
    v = gen.Versions.parse
    assert (v("0-3").lo, v("0-3").hi) == (0, 3)
    assert 500 in v("3+") and 2 not in v("3+")
    assert v("none").empty and 0 not in v("none")
    assert 7 in v("7") and 8 not in v("7")


def test_names_and_defaults() -> None:
    gen = _gen_module()
    assert gen.snake("ProducerId") == "producer_id"
    assert gen.snake("ZkMigrationReady") == "zk_migration_ready"
    assert gen.snake("KRaftVersion") == "k_raft_version"
    assert gen.parse_int("0x7fffffff") == 2**31 - 1
    assert gen.parse_int("-2147483648") == -(2**31)
    assert gen.parse_int(-1) == -1
    field = gen.parse_field(
        {"name": "Rack", "type": "string", "versions": "1+", "nullableVersions": "1+", "default": "null"},
        gen.Versions(0, 5),
    )
    assert gen.default_literal(field) == "None"
    spec = {"name": "On", "type": "bool", "versions": "0+", "default": "true"}
    field = gen.parse_field(spec, gen.Versions(0, 1))
    assert gen.default_literal(field) == "True"
    field = gen.parse_field(
        {"name": "S", "type": "Sub", "versions": "0+", "nullableVersions": "0+", "default": None,
         "fields": [{"name": "A", "type": "int8", "versions": "0+"}]},
        gen.Versions(0, 1),
    )
    assert gen.default_literal(field) == "None"  # a JSON null default is null


@pytest.mark.skipif(not SPECS.is_dir(), reason="Kafka spec directory ../shared/kafka-protocol not present")
def test_generated_code_has_no_version_conditions() -> None:
    gen_dir = REPO / "kafkacompat" / "wire" / "_generated"
    for path in gen_dir.glob("*.py"):
        if path.name in ("error_codes.py", "api_index.py", "__init__.py"):
            continue
        in_codec = False
        for line in path.read_text().splitlines():
            if not line.startswith((" ", "\t")):
                in_codec = line.startswith(("def _d_", "def _e_"))
            elif in_codec:
                # a bare `version` name (not a field attribute such as `o.version`, not a string)
                assert not BARE_VERSION.search(line), f"{path.name}: {line}"
