"""BrokerConfig: Java-properties parsing, types, defaults, precedence, unknown keys, topic defaults."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kafkacompat.config import BrokerConfig, ConfigError, parse_listeners, parse_properties


def test_properties_syntax() -> None:
    text = (
        "# comment\n"
        "! also a comment\n"
        "   \n"
        "a=1\n"
        "b: two\n"
        "c three\n"
        "d = spaced value  \n"
        "e=first \\\n"
        "    second\n"
        "f=tab\\there\n"
        "g\\=key=x\n"
        "h=\\u0041\n"
        "i=\n"
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "two",
        "c": "three",
        "d": "spaced value  ",
        "e": "first second",
        "f": "tab\there",
        "g=key": "x",
        "h": "A",
        "i": "",
    }


def test_even_backslashes_do_not_continue() -> None:
    assert parse_properties("a=x\\\\\nb=y\n") == {"a": "x\\", "b": "y"}


def test_defaults_are_kafkas() -> None:
    config = BrokerConfig.load()
    assert config["num.partitions"] == 1
    assert config["message.max.bytes"] == 1048588
    assert config["socket.request.max.bytes"] == 104857600
    assert config["connections.max.idle.ms"] == 600000
    assert config["offsets.topic.num.partitions"] == 50
    assert config["group.initial.rebalance.delay.ms"] == 3000
    assert config["log.retention.check.interval.ms"] == 300000
    assert config["auto.create.topics.enable"] is True
    assert config.node_id == 1
    assert config.log_dirs == [Path("./data")]
    assert config.retention_ms == 168 * 3_600_000
    assert [str(listener) for listener in config.listeners] == ["PLAINTEXT://:9092"]


def test_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nlog.dirs=/a,/b\nbroker.id=7\n")
    config = BrokerConfig.load(path, ["num.partitions=5"])
    assert config["num.partitions"] == 5
    assert config.log_dirs == [Path("/a"), Path("/b")]
    assert config.node_id == 7


def test_retention_precedence() -> None:
    assert BrokerConfig.load(None, ["log.retention.minutes=2"]).retention_ms == 120_000
    both = BrokerConfig.load(None, ["log.retention.minutes=2", "log.retention.ms=5"])
    assert both.retention_ms == 5
    assert BrokerConfig.load(None, ["log.retention.hours=-1"]).retention_ms == -1


def test_topic_defaults_follow_broker_log_settings() -> None:
    config = BrokerConfig.load(
        None, ["log.retention.ms=1000", "log.segment.bytes=4096", "log.roll.hours=2", "message.max.bytes=99"]
    )
    defaults = config.topic_defaults()
    assert defaults["retention.ms"] == "1000"
    assert defaults["segment.bytes"] == "4096"
    assert defaults["segment.ms"] == str(2 * 3_600_000)
    assert defaults["max.message.bytes"] == "99"
    assert defaults["cleanup.policy"] == "delete"


@pytest.mark.parametrize(
    "override",
    [
        "num.partitions=0",
        "num.partitions=x",
        "auto.create.topics.enable=yes",
        "compression.type=brotli",
        "log.cleanup.policy=delete,shred",
        "message.max.bytes=99999999999",
        "listeners=nonsense",
        "listener.security.protocol.map=PLAINTEXT:TLS",
        "listener.name.plaintext.ssl.client.auth=sometimes",
        "node.id=2",  # disagrees with broker.id below
    ],
)
def test_bad_values_are_refused(override: str) -> None:
    with pytest.raises(ConfigError):
        BrokerConfig.load(None, [override, "broker.id=3"] if override.startswith("node.id") else [override])


def test_unknown_keys_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kafkacompat.config"):
        config = BrokerConfig.load(None, ["no.such.key=1", "another.unknown=2", "num.partitions=2"])
    assert config.unknown == {"no.such.key": "1", "another.unknown": "2"}
    assert "another.unknown, no.such.key" in caplog.text


def test_bad_override_syntax() -> None:
    with pytest.raises(ConfigError):
        BrokerConfig.load(None, ["novalue"])


def test_listeners_and_advertised() -> None:
    config = BrokerConfig.load(
        None,
        [
            "listeners=PLAINTEXT://0.0.0.0:9092,CONTROLLER://:9093",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "advertised.listeners=PLAINTEXT://kafka.example:19092",
        ],
    )
    assert [listener.name for listener in config.listeners] == ["PLAINTEXT"]
    assert config.advertised_listeners["PLAINTEXT"].host == "kafka.example"
    assert parse_listeners(["PLAINTEXT://[::1]:9092"])[0].host == "::1"
    with pytest.raises(ConfigError):
        BrokerConfig.load(None, ["listeners=PLAINTEXT://0.0.0.0:9092"])  # nothing routable to advertise


def test_kraft_style_combined_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "process.roles=broker,controller\n"
        "node.id=4\n"
        "controller.quorum.voters=4@localhost:9093\n"
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
        "advertised.listeners=PLAINTEXT://localhost:9092\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
        "inter.broker.listener.name=PLAINTEXT\n"
        "offsets.topic.replication.factor=1\n"
        "transaction.state.log.min.isr=1\n"
    )
    config = BrokerConfig.load(path)
    assert config.node_id == 4
    assert [listener.name for listener in config.listeners] == ["PLAINTEXT"]  # no controller quorum here
    assert config.advertised_listeners["PLAINTEXT"].host == "localhost"
    assert config.unknown == {}
