"""`kafkacompat configs describe|alter`: topic and broker configs, like kafka-configs.sh.

Theory of operation: `describe` sends DescribeConfigs with synonyms and prints kafka-configs.sh's
layout: a heading ("Dynamic configs for topic T are:", or "All configs for ..." with `--all`) and one
indented `name=value sensitive=... synonyms={SOURCE:name=value, ...}` line per config. Without `--all`
only the entity's own dynamic configs are listed (a topic's overrides, not the broker defaults it
inherits; a broker's dynamic configs; broker-logger levels are all dynamic). `alter` sends
IncrementalAlterConfigs: `--add-config k=v,k2=[a,b]` are SET operations (square brackets keep commas in a
list value), `--delete-config k,k2` DELETE operations; on success it prints "Completed updating config
for topic T." Entities: `--entity-type topics|brokers --entity-name NAME`, or the `--topic NAME` and
`--broker ID` shortcuts; `--entity-type broker-loggers --entity-name ID` lists or sets logger levels
(`--add-config kafkacompat.broker=DEBUG`); `--entity-default` selects the cluster-wide broker defaults.
"""

from __future__ import annotations

import argparse
from typing import Any

from kafkacompat.client import (
    CommandError,
    KafkaClient,
    add_bootstrap_argument,
    command_security,
    error_name,
)
from kafkacompat.commands._runner import reporting_errors
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.messages import request_class

HELP = "describe and alter topic and broker configs, like kafka-configs.sh"

RESOURCE_TYPES = {"topics": 2, "brokers": 4, "broker-loggers": 8}
ENTITY_WORDS = {"topics": "topic", "brokers": "broker", "broker-loggers": "broker-logger"}
SOURCE_NAMES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
DYNAMIC_SOURCES = {1, 2, 3, 6, 7, 8}
SET, DELETE = 0, 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["describe", "alter"])
    add_bootstrap_argument(parser)
    parser.add_argument(
        "--entity-type", choices=sorted(RESOURCE_TYPES), help="topics, brokers or broker-loggers"
    )
    parser.add_argument("--entity-name", help="topic name or broker id (describe: all topics if omitted)")
    parser.add_argument("--entity-default", action="store_true", help="the cluster-wide broker defaults")
    parser.add_argument("--topic", help="shortcut for --entity-type topics --entity-name TOPIC")
    parser.add_argument("--broker", help="shortcut for --entity-type brokers --entity-name ID")
    parser.add_argument(
        "--all", action="store_true", help="describe: list every config, not only dynamic ones"
    )
    parser.add_argument("--add-config", metavar="K=V,K2=[A,B]", help="alter: configs to set")
    parser.add_argument("--delete-config", metavar="K,K2", help="alter: configs to remove")


def run(args: argparse.Namespace) -> int:
    def configure() -> None:
        entity_type, entity_name = _entity(args)  # before connecting: a bad entity needs no broker
        with KafkaClient(
            args.bootstrap_server, timeout=args.timeout, security=command_security(args)
        ) as client:
            action = _describe if args.action == "describe" else _alter
            action(client, args, entity_type, entity_name)

    return reporting_errors(configure, "Error while executing config command : ")


def _entity(args: argparse.Namespace) -> tuple[str, str | None]:
    if args.topic is not None:
        return "topics", args.topic
    if args.broker is not None:
        return "brokers", args.broker
    if args.entity_type is None:
        raise CommandError("--entity-type (topics, brokers or broker-loggers) is required")
    if args.entity_default:
        if args.entity_type != "brokers":
            raise CommandError("--entity-default applies to brokers only here")
        return "brokers", ""
    if args.entity_name is None and (args.action == "alter" or args.entity_type == "broker-loggers"):
        raise CommandError(f"--entity-name is required to {args.action} {args.entity_type}")
    return args.entity_type, args.entity_name


def split_config_list(text: str) -> list[str]:
    """Split "a=1,b=[x,y],c=2" at the commas outside square brackets."""
    items, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]


def parse_add_config(text: str) -> list[tuple[str, str]]:
    result = []
    for item in split_config_list(text):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"invalid entry {item!r} in --add-config (expected key=value)")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        result.append((key.strip(), value))
    return result


def _format_entry(entry: Any) -> str:
    value = "null" if entry.value is None else entry.value
    synonyms = ", ".join(
        f"{SOURCE_NAMES.get(s.source, s.source)}:{s.name}={'null' if s.value is None else s.value}"
        for s in entry.synonyms
    )
    return f"  {entry.name}={value} sensitive={str(entry.is_sensitive).lower()} synonyms={{{synonyms}}}"


def _heading(entity_type: str, name: str, everything: bool) -> str:
    if entity_type == "brokers" and name == "":
        return "Default configs for brokers in the cluster are:"
    word = ENTITY_WORDS[entity_type]
    return f"{'All' if everything else 'Dynamic'} configs for {word} {name} are:"


def _dynamic_sources(entity_type: str, name: str) -> set[int]:
    """The sources kafka-configs.sh lists without --all: a broker's own dynamic configs (not the
    cluster-wide defaults it inherits), the default entity's, a topic's own overrides (not the dynamic
    broker configs a topic's values fall back to), every logger."""
    if entity_type == "brokers":
        return {3} if name == "" else {2}
    if entity_type == "topics":
        return {1}
    return DYNAMIC_SOURCES


def _describe(client: KafkaClient, args: argparse.Namespace, entity_type: str, name: str | None) -> None:
    if name is None:
        if entity_type == "topics":
            names = sorted(t.name for t in client.metadata(None).topics if t.error_code == ErrorCode.NONE)
        else:
            names = sorted(str(b.node_id) for b in client.metadata([]).brokers)
    else:
        names = [name]
    if not names:
        return
    cls = request_class(ApiKey.DESCRIBE_CONFIGS)
    resources = [
        cls.DescribeConfigsResource(
            resource_type=RESOURCE_TYPES[entity_type], resource_name=n, configuration_keys=None
        )
        for n in names
    ]
    response = client.send(
        ApiKey.DESCRIBE_CONFIGS, cls(resources=resources, include_synonyms=True, include_documentation=False)
    )
    for result in response.results:
        if result.error_code != ErrorCode.NONE:
            raise CommandError(result.error_message or error_name(result.error_code))
        # every logger level counts as dynamic, so broker-loggers always list everything
        print(_heading(entity_type, result.resource_name, args.all or entity_type == "broker-loggers"))
        wanted = _dynamic_sources(entity_type, result.resource_name)
        for entry in sorted(result.configs, key=lambda e: e.name):
            if args.all or entry.config_source in wanted:
                print(_format_entry(entry))


def _alter(client: KafkaClient, args: argparse.Namespace, entity_type: str, name: str | None) -> None:
    if not args.add_config and not args.delete_config:
        raise CommandError("alter needs --add-config and/or --delete-config")
    cls = request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS)
    operations = []
    if args.add_config:
        for key, value in parse_add_config(args.add_config):
            operations.append(cls.AlterableConfig(name=key, config_operation=SET, value=value))
    if args.delete_config:
        for key in split_config_list(args.delete_config):
            operations.append(cls.AlterableConfig(name=key, config_operation=DELETE, value=None))
    assert name is not None
    resource = cls.AlterConfigsResource(
        resource_type=RESOURCE_TYPES[entity_type], resource_name=name, configs=operations
    )
    response = client.send(ApiKey.INCREMENTAL_ALTER_CONFIGS, cls(resources=[resource], validate_only=False))
    for result in response.responses:
        if result.error_code != ErrorCode.NONE:
            raise CommandError(f"{error_name(result.error_code)}: {result.error_message or ''}".rstrip(": "))
    if entity_type == "brokers" and name == "":
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {ENTITY_WORDS[entity_type]} {name}.")
