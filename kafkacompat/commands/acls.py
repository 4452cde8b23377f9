"""`kafkacompat acls list|add|remove`: ACLs, as `kafka-acls.sh --list|--add|--remove`.

Theory of operation: DescribeAcls, CreateAcls and DeleteAcls through the tools' client
(`--command-config` for a secured broker, typically as a super user). The resource comes from
`--topic`, `--group`, `--transactional-id` or `--cluster`, with `--resource-pattern-type` (literal,
prefixed; `list` and `remove` also take match and any); principals from `--allow-principal` /
`--deny-principal` with `--allow-host` / `--deny-host` (default `*`), operations from `--operation`
(Kafka's names: Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
AlterConfigs, IdempotentWrite, All). `add` makes every principal x operation binding; `remove` deletes
those (or, with no principal and operation, every ACL of the resource, after `--force`); `list` prints
what matches, grouped by resource, in kafka-acls.sh's layout.
"""

from __future__ import annotations

import argparse
from typing import Any

from kafkacompat.client import CommandError, KafkaClient, add_bootstrap_argument, error_name
from kafkacompat.commands._runner import with_client
from kafkacompat.security.acls import Op, Pattern, Permission, Resource
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.messages import request_class

HELP = "list, add and remove ACLs (kafka-acls.sh)"

OPERATIONS = {
    "read": Op.READ, "write": Op.WRITE, "create": Op.CREATE, "delete": Op.DELETE, "alter": Op.ALTER,
    "describe": Op.DESCRIBE, "clusteraction": Op.CLUSTER_ACTION, "describeconfigs": Op.DESCRIBE_CONFIGS,
    "alterconfigs": Op.ALTER_CONFIGS, "idempotentwrite": Op.IDEMPOTENT_WRITE, "all": Op.ALL,
}  # fmt: skip
OPERATION_NAMES = {
    Op.READ: "READ", Op.WRITE: "WRITE", Op.CREATE: "CREATE", Op.DELETE: "DELETE", Op.ALTER: "ALTER",
    Op.DESCRIBE: "DESCRIBE", Op.CLUSTER_ACTION: "CLUSTER_ACTION", Op.DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS",
    Op.ALTER_CONFIGS: "ALTER_CONFIGS", Op.IDEMPOTENT_WRITE: "IDEMPOTENT_WRITE", Op.ALL: "ALL",
    Op.CREATE_TOKENS: "CREATE_TOKENS", Op.DESCRIBE_TOKENS: "DESCRIBE_TOKENS",
}  # fmt: skip
PATTERNS = {
    "literal": Pattern.LITERAL,
    "prefixed": Pattern.PREFIXED,
    "match": Pattern.MATCH,
    "any": Pattern.ANY,
}
PATTERN_NAMES = {Pattern.LITERAL: "LITERAL", Pattern.PREFIXED: "PREFIXED"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["list", "add", "remove"])
    add_bootstrap_argument(parser)
    resource = parser.add_mutually_exclusive_group()
    resource.add_argument("--topic")
    resource.add_argument("--group")
    resource.add_argument("--transactional-id")
    resource.add_argument("--cluster", action="store_true")
    parser.add_argument("--resource-pattern-type", default=None, choices=sorted(PATTERNS))
    parser.add_argument("--allow-principal", action="append", default=[])
    parser.add_argument("--deny-principal", action="append", default=[])
    parser.add_argument("--allow-host", action="append", default=[])
    parser.add_argument("--deny-host", action="append", default=[])
    parser.add_argument("--principal", help="list: only the ACLs of this principal")
    parser.add_argument("--operation", action="append", default=[], help="Read, Write, Describe, All, ...")
    parser.add_argument("--force", action="store_true", help="remove: no confirmation for removing all")


def _resource(args: argparse.Namespace) -> tuple[int, str | None]:
    if args.topic is not None:
        return Resource.TOPIC, args.topic
    if args.group is not None:
        return Resource.GROUP, args.group
    if args.transactional_id is not None:
        return Resource.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return Resource.CLUSTER, Resource.CLUSTER_NAME
    return Resource.ANY, None


def _operations(args: argparse.Namespace) -> list[int]:
    try:
        return [OPERATIONS[name.replace("_", "").replace("-", "").lower()] for name in args.operation]
    except KeyError as exc:
        raise CommandError(f"unknown operation {exc.args[0]}") from None


def _bindings(args: argparse.Namespace) -> list[tuple[str, str, int, int]]:
    """(principal, host, operation, permission) for every binding `add`/`remove` names."""
    operations = _operations(args)
    if not operations:
        raise CommandError("--operation is required")
    result = []
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host or ["*"], Permission.ALLOW),
        (args.deny_principal, args.deny_host or ["*"], Permission.DENY),
    ):
        for principal in principals:
            for host in hosts:
                result.extend((principal, host, op, permission) for op in operations)
    if not result:
        raise CommandError("--allow-principal or --deny-principal is required")
    return result


def _send(client: KafkaClient, api_key: int, body: Any) -> Any:
    connection = client.connection()
    return connection.send(api_key, connection.version_for(api_key), body)


def _list(client: KafkaClient, args: argparse.Namespace) -> None:
    rtype, name = _resource(args)
    pattern = PATTERNS[args.resource_pattern_type or ("literal" if name is not None else "any")]
    body = request_class(ApiKey.DESCRIBE_ACLS)(
        resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=pattern,
        principal_filter=args.principal, host_filter=None, operation=Op.ANY, permission_type=Permission.ANY,
    )  # fmt: skip
    response = _send(client, ApiKey.DESCRIBE_ACLS, body)
    if response.error_code:
        raise CommandError(f"{error_name(response.error_code)}: {response.error_message or ''}".rstrip(": "))
    for resource in response.resources:
        kind = Resource.NAMES.get(resource.resource_type, str(resource.resource_type))
        pattern_name = PATTERN_NAMES.get(resource.pattern_type, str(resource.pattern_type))
        print(
            f"Current ACLs for resource `ResourcePattern(resourceType={kind}, name={resource.resource_name}, "
            f"patternType={pattern_name})`: "
        )
        for acl in resource.acls:
            permission = "ALLOW" if acl.permission_type == Permission.ALLOW else "DENY"
            print(
                f" \t(principal={acl.principal}, host={acl.host}, "
                f"operation={OPERATION_NAMES.get(acl.operation, acl.operation)}, permissionType={permission})"
            )
        print()


def _add(client: KafkaClient, args: argparse.Namespace) -> None:
    rtype, name = _resource(args)
    if name is None:
        raise CommandError("a resource is required (--topic, --group, --transactional-id or --cluster)")
    pattern = PATTERNS[args.resource_pattern_type or "literal"]
    if pattern not in (Pattern.LITERAL, Pattern.PREFIXED):
        raise CommandError("add takes --resource-pattern-type literal or prefixed")
    creation = request_class(ApiKey.CREATE_ACLS).AclCreation
    creations = [
        creation(resource_type=rtype, resource_name=name, resource_pattern_type=pattern, principal=principal,
                 host=host, operation=op, permission_type=permission)
        for principal, host, op, permission in _bindings(args)
    ]  # fmt: skip
    response = _send(client, ApiKey.CREATE_ACLS, request_class(ApiKey.CREATE_ACLS)(creations=creations))
    for result in response.results:
        if result.error_code:
            raise CommandError(f"{error_name(result.error_code)}: {result.error_message or ''}".rstrip(": "))
    print(f"Adding ACLs for resource `{Resource.NAMES[rtype]} {name}`: {len(creations)} ACL(s) added.")


def _remove(client: KafkaClient, args: argparse.Namespace) -> None:
    rtype, name = _resource(args)
    if name is None:
        raise CommandError("a resource is required (--topic, --group, --transactional-id or --cluster)")
    pattern = PATTERNS[args.resource_pattern_type or "literal"]
    filter_class = request_class(ApiKey.DELETE_ACLS).DeleteAclsFilter

    def one(principal: str | None, host: str | None, op: int, permission: int) -> Any:
        return filter_class(
            resource_type_filter=rtype,
            resource_name_filter=name,
            pattern_type_filter=pattern,
            principal_filter=principal,
            host_filter=host,
            operation=op,
            permission_type=permission,
        )

    if args.allow_principal or args.deny_principal:
        filters = [one(*binding) for binding in _bindings(args)]
    else:
        if not args.force:
            raise CommandError("removing every ACL of the resource needs --force")
        filters = [one(None, None, Op.ANY, Permission.ANY)]
    response = _send(client, ApiKey.DELETE_ACLS, request_class(ApiKey.DELETE_ACLS)(filters=filters))
    removed = 0
    for result in response.filter_results:
        if result.error_code:
            raise CommandError(f"{error_name(result.error_code)}: {result.error_message or ''}".rstrip(": "))
        removed += len(result.matching_acls)
    print(f"Removed {removed} ACL(s) of resource `{Resource.NAMES[rtype]} {name}`.")


def run(args: argparse.Namespace) -> int:
    actions = {"list": _list, "add": _add, "remove": _remove}
    return with_client(
        args, lambda client: actions[args.action](client, args), "Error while executing ACL command: "
    )
