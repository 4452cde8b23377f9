"""tools/reference_kafka.py's pure parts: the pom, the node configs, overrides, properties, cluster ids."""

from __future__ import annotations

import base64
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference_kafka", ROOT / "tools" / "reference_kafka.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


rk = _load()


def test_makefile_and_tool_pin_the_same_version() -> None:
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(r"^KAFKA_VERSION \?= (\S+)$", makefile, re.MULTILINE)
    assert match is not None
    assert match.group(1) == rk.KAFKA_VERSION


def test_pom_names_the_broker_and_the_log4j_binding() -> None:
    pom = rk.generate_pom("4.4.0")
    assert "<artifactId>kafka_2.13</artifactId>\n      <version>4.4.0</version>" in pom
    assert "<artifactId>log4j-slf4j-impl</artifactId>" in pom


def test_single_node_is_combined_with_quickstart_replication_factors() -> None:
    node = rk.Node(1, 9092, 9093)
    config = rk.node_config(node, [node], Path("/d"), {"num.partitions": "3"})
    assert config["process.roles"] == "broker,controller"
    assert config["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert config["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert config["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert config["offsets.topic.replication.factor"] == "1"
    assert config["transaction.state.log.min.isr"] == "1"
    assert config["auto.create.topics.enable"] == "true"
    assert config["num.partitions"] == "3"  # an override replaces a default
    assert config["log.dirs"] == "/d"


def test_three_nodes_share_a_static_quorum_and_keep_kafkas_replication_defaults() -> None:
    nodes = [rk.Node(i, 10000 + i, 20000 + i) for i in (1, 2, 3)]
    configs = [rk.node_config(n, nodes, Path(f"/d{n.node_id}"), {}) for n in nodes]
    voters = {c["controller.quorum.voters"] for c in configs}
    assert voters == {"1@127.0.0.1:20001,2@127.0.0.1:20002,3@127.0.0.1:20003"}
    assert [c["node.id"] for c in configs] == ["1", "2", "3"]
    assert all("offsets.topic.replication.factor" not in c for c in configs)


def test_overrides_parse_and_refuse_a_missing_equals() -> None:
    assert rk.parse_overrides(["a.b=1", "c = x=y"]) == {"a.b": "1", "c": "x=y"}
    with pytest.raises(rk.ReferenceError):
        rk.parse_overrides(["novalue"])


def test_properties_escape_backslashes_and_key_separators() -> None:
    text = rk.render_properties({"log.dirs": "C:\\data", "odd key:x": "a=b"})
    assert text == "log.dirs=C:\\\\data\nodd\\ key\\:x=a=b\n"


def test_cluster_ids_are_kafka_uuids() -> None:
    for _ in range(50):
        text = rk.kafka_uuid()
        assert len(text) == 22 and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16
