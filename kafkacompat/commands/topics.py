"""`kafkacompat topics create|list|describe|alter|delete`: topic administration like kafka-topics.sh.

Theory of operation: each action is one or two requests through `kafkacompat.client.KafkaClient`
(CreateTopics, Metadata, DescribeConfigs, CreatePartitions, DeleteTopics) and prints what
kafka-topics.sh prints, so that habits and scripts carry over: `list` prints one name per line,
`describe` a topic line (id, partition count, replication factor, the topic's own config overrides)
followed by one tab-indented line per partition. `--topic` names a topic exactly or, for
list/describe/delete/alter, is a regular expression matched against whole names, as in kafka-topics.sh.
Failures print "Error while executing topic command : <message>" and exit with status 1.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from kafkacompat.client import (
    CommandError,
    KafkaClient,
    add_bootstrap_argument,
    error_name,
    uuid_to_kafka_string,
)
from kafkacompat.commands._runner import with_client
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.messages import request_class

HELP = "create, list, describe, alter (add partitions) and delete topics, like kafka-topics.sh"

RESOURCE_TOPIC = 2
SOURCE_DYNAMIC_TOPIC = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["create", "list", "describe", "alter", "delete"])
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", help="topic name (a regular expression for list/describe/alter/delete)")
    parser.add_argument("--partitions", type=int, help="partition count (create), new total (alter)")
    parser.add_argument("--replication-factor", type=int, help="replication factor (create)")
    parser.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="topic config override (create)"
    )
    parser.add_argument("--if-not-exists", action="store_true", help="create: no error if the topic exists")
    parser.add_argument("--if-exists", action="store_true", help="alter/delete/describe: no error if absent")
    parser.add_argument("--exclude-internal", action="store_true", help="list/describe: skip internal topics")


def run(args: argparse.Namespace) -> int:
    return with_client(
        args, lambda client: ACTIONS[args.action](client, args), "Error while executing topic command : "
    )


def _fail(code: int, message: str | None) -> CommandError:
    return CommandError(message or error_name(code))


def _create(client: KafkaClient, args: argparse.Namespace) -> None:
    if not args.topic:
        raise CommandError("--topic is required to create a topic")
    cls = request_class(ApiKey.CREATE_TOPICS)
    configs = []
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"--config {item!r} is not key=value")
        configs.append(cls.CreatableTopicConfig(name=key.strip(), value=value.strip()))
    topic = cls.CreatableTopic(
        name=args.topic,
        num_partitions=-1 if args.partitions is None else args.partitions,
        replication_factor=-1 if args.replication_factor is None else args.replication_factor,
        assignments=[],
        configs=configs,
    )
    response = client.send(ApiKey.CREATE_TOPICS, cls(topics=[topic], timeout_ms=30000, validate_only=False))
    for result in response.topics:
        if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
            return
        if result.error_code != ErrorCode.NONE:
            raise _fail(result.error_code, result.error_message)
    print(f"Created topic {args.topic}.")


def _matching(client: KafkaClient, args: argparse.Namespace, *, must_exist: bool) -> list[Any]:
    """Metadata topic entries selected by --topic (exact name or whole-name regex), sorted by name."""
    topics = [t for t in client.metadata(None).topics if t.error_code == ErrorCode.NONE]
    if args.exclude_internal:
        topics = [t for t in topics if not t.is_internal]
    if args.topic:
        exact = [t for t in topics if t.name == args.topic]
        if exact:
            topics = exact
        else:
            try:
                pattern = re.compile(args.topic)
            except re.error:
                topics = []
            else:
                topics = [t for t in topics if pattern.fullmatch(t.name)]
        if not topics and must_exist and not args.if_exists:
            raise CommandError(f"Topic '{args.topic}' does not exist as expected")
    return sorted(topics, key=lambda t: t.name)


def _list(client: KafkaClient, args: argparse.Namespace) -> None:
    for topic in _matching(client, args, must_exist=False):
        print(topic.name)


def _overrides(client: KafkaClient, names: list[str]) -> dict[str, list[tuple[str, str | None]]]:
    if not names:
        return {}
    cls = request_class(ApiKey.DESCRIBE_CONFIGS)
    resources = [
        cls.DescribeConfigsResource(resource_type=RESOURCE_TOPIC, resource_name=n, configuration_keys=None)
        for n in names
    ]
    response = client.send(ApiKey.DESCRIBE_CONFIGS, cls(resources=resources, include_synonyms=False))
    result: dict[str, list[tuple[str, str | None]]] = {}
    for entry in response.results:
        if entry.error_code != ErrorCode.NONE:
            continue
        result[entry.resource_name] = [
            (c.name, c.value) for c in entry.configs if c.config_source == SOURCE_DYNAMIC_TOPIC
        ]
    return result


def _describe(client: KafkaClient, args: argparse.Namespace) -> None:
    topics = _matching(client, args, must_exist=True)
    configs = _overrides(client, [t.name for t in topics])
    for topic in topics:
        partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
        replication = len(partitions[0].replica_nodes) if partitions else 0
        rendered = ",".join(f"{k}={v}" for k, v in configs.get(topic.name, []))
        print(
            f"Topic: {topic.name}\tTopicId: {uuid_to_kafka_string(topic.topic_id)}\t"
            f"PartitionCount: {len(partitions)}\tReplicationFactor: {replication}\tConfigs: {rendered}"
        )
        for p in partitions:
            print(
                f"\tTopic: {topic.name}\tPartition: {p.partition_index}\tLeader: "
                f"{p.leader_id if p.leader_id >= 0 else 'none'}\t"
                f"Replicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}"
            )


def _alter(client: KafkaClient, args: argparse.Namespace) -> None:
    if args.partitions is None:
        raise CommandError("--partitions is required to alter a topic (configs: use `kafkacompat configs`)")
    topics = _matching(client, args, must_exist=True)
    if not topics:
        return
    cls = request_class(ApiKey.CREATE_PARTITIONS)
    wanted = [cls.CreatePartitionsTopic(name=t.name, count=args.partitions, assignments=None) for t in topics]
    response = client.send(
        ApiKey.CREATE_PARTITIONS, cls(topics=wanted, timeout_ms=30000, validate_only=False)
    )
    for result in response.results:
        if result.error_code != ErrorCode.NONE:
            raise _fail(result.error_code, result.error_message)


def _delete(client: KafkaClient, args: argparse.Namespace) -> None:
    if not args.topic:
        raise CommandError("--topic is required to delete topics")
    topics = _matching(client, args, must_exist=True)
    if not topics:
        return
    cls = request_class(ApiKey.DELETE_TOPICS)
    response = client.send(
        ApiKey.DELETE_TOPICS,
        cls(topic_names=[t.name for t in topics], timeout_ms=30000),
        version=min(5, client.version_for(ApiKey.DELETE_TOPICS)),
    )
    for result in response.responses:
        if result.error_code != ErrorCode.NONE:
            raise _fail(result.error_code, getattr(result, "error_message", None))


ACTIONS = {"create": _create, "list": _list, "describe": _describe, "alter": _alter, "delete": _delete}
