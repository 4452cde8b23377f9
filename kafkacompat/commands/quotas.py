"""`kafkacompat quotas describe|alter`: client quotas, as `kafka-configs.sh --entity-type users/clients`.

Theory of operation: DescribeClientQuotas and AlterClientQuotas through the tools' client
(`--command-config` for a secured broker). The entity is named as kafka-configs names it: `--user NAME`
or `--user-defaults`, `--client-id NAME` or `--client-defaults`, either or both; or `--ip ADDRESS` or
`--ip-defaults` alone (connection_creation_rate, as `--entity-type ips`). `describe` without an
entity lists every quota; with one it lists that entity exactly (strict). `alter` takes
`--add-config key=value,...` and `--delete-config key,...` in one request.
"""

from __future__ import annotations

import argparse

from kafkacompat.client import CommandError, KafkaClient, add_bootstrap_argument, error_name
from kafkacompat.commands._runner import with_client
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.messages import request_class

HELP = "describe and alter client quotas (kafka-configs.sh --entity-type users/clients)"

MATCH_EXACT, MATCH_DEFAULT = 0, 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["describe", "alter"])
    add_bootstrap_argument(parser)
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", help="the user principal's name (entity type user)")
    user.add_argument("--user-defaults", action="store_true", help="the default user")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client-id", help="the client id (entity type client-id)")
    client.add_argument("--client-defaults", action="store_true", help="the default client id")
    ip = parser.add_mutually_exclusive_group()
    ip.add_argument("--ip", help="an IP address (entity type ip: connection_creation_rate)")
    ip.add_argument("--ip-defaults", action="store_true", help="the default IP address")
    parser.add_argument("--add-config", default="", help="alter: key=value,... (producer_byte_rate, ...)")
    parser.add_argument("--delete-config", default="", help="alter: key,... to remove")


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """[(entity type, name or None for the default)] named on the command line."""
    entity: list[tuple[str, str | None]] = []
    if args.user is not None or args.user_defaults:
        entity.append(("user", args.user))
    if args.client_id is not None or args.client_defaults:
        entity.append(("client-id", args.client_id))
    if args.ip is not None or args.ip_defaults:
        entity.append(("ip", args.ip))
    return entity


def describe_entity(entity: list[tuple[str, str | None]]) -> str:
    words = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
    return ", ".join(
        f"the default {words[kind]}" if name is None else f"{words[kind]} '{name}'" for kind, name in entity
    )


def _describe(client: KafkaClient, entity: list[tuple[str, str | None]]) -> None:
    request = request_class(ApiKey.DESCRIBE_CLIENT_QUOTAS)
    components = [
        request.ComponentData(
            entity_type=kind, match_type=MATCH_DEFAULT if name is None else MATCH_EXACT, match=name
        )
        for kind, name in entity
    ]
    connection = client.connection()
    response = connection.send(
        ApiKey.DESCRIBE_CLIENT_QUOTAS,
        connection.version_for(ApiKey.DESCRIBE_CLIENT_QUOTAS),
        request(components=components, strict=bool(entity)),
    )
    if response.error_code:
        raise CommandError(f"{error_name(response.error_code)}: {response.error_message}")
    for entry in response.entries:
        named = [(item.entity_type, item.entity_name) for item in entry.entity]
        values = ", ".join(f"{value.key}={value.value}" for value in entry.values)
        print(f"Quota configs for {describe_entity(named)} are {values}")


def _parse_additions(text: str) -> list[tuple[str, float]]:
    additions = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = item.partition("=")
        if not equals:
            raise CommandError(f"--add-config needs key=value, got '{item}'")
        try:
            additions.append((key.strip(), float(value)))
        except ValueError:
            raise CommandError(f"--add-config: '{value}' is not a number") from None
    return additions


def _alter(client: KafkaClient, args: argparse.Namespace, entity: list[tuple[str, str | None]]) -> None:
    if not entity:
        raise CommandError(
            "alter needs an entity: --user/--user-defaults and/or --client-id/--client-defaults, or "
            "--ip/--ip-defaults"
        )
    request = request_class(ApiKey.ALTER_CLIENT_QUOTAS)
    ops = [
        request.OpData(key=key, value=value, remove=False) for key, value in _parse_additions(args.add_config)
    ]
    ops += [
        request.OpData(key=key.strip(), value=0.0, remove=True)
        for key in args.delete_config.split(",")
        if key.strip()
    ]
    if not ops:
        raise CommandError("alter needs --add-config and/or --delete-config")
    entry = request.EntryData(
        entity=[request.EntityData(entity_type=kind, entity_name=name) for kind, name in entity], ops=ops
    )
    connection = client.connection()
    response = connection.send(
        ApiKey.ALTER_CLIENT_QUOTAS,
        connection.version_for(ApiKey.ALTER_CLIENT_QUOTAS),
        request(entries=[entry], validate_only=False),
    )
    for result in response.entries:
        if result.error_code:
            message = f": {result.error_message}" if result.error_message else ""
            raise CommandError(f"{error_name(result.error_code)}{message}")
    print(f"Completed updating quota configs for {describe_entity(entity)}.")


def run(args: argparse.Namespace) -> int:
    def act(client: KafkaClient) -> None:
        entity = _entity(args)
        if args.action == "describe":
            _describe(client, entity)
        else:
            _alter(client, args, entity)

    return with_client(args, act, "Error while executing quota command : ")
