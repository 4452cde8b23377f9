"""`kafkacompat users list|describe|add|delete`: SCRAM credentials, as `kafka-configs.sh --entity-type users`.

Theory of operation: DescribeUserScramCredentials and AlterUserScramCredentials through the tools'
client (`--command-config` for a secured broker). `add` salts the password here, as Kafka's tools do
(16 random bytes, PBKDF2 with the given iterations, default 4096), so only the salted password travels;
the password comes from `--password` or, without it, from the terminal (or one line of stdin), and is read
before connecting: an empty one is refused there (status 1).
One request per mechanism: Kafka 3.9 refuses two changes of one user in one request.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import os
import sys

from kafkacompat.client import CommandError, KafkaClient, add_bootstrap_argument, error_name
from kafkacompat.commands._runner import with_client
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.messages import request_class

HELP = "list, describe, add and delete SCRAM users (kafka-configs.sh --entity-type users)"

MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
NAMES = {number: name for name, number in MECHANISMS.items()}
ERROR_PREFIX = "Error while executing user command : "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["list", "describe", "add", "delete"])
    add_bootstrap_argument(parser)
    parser.add_argument("--user", action="append", default=[], help="user name (repeatable for describe)")
    parser.add_argument(
        "--mechanism",
        action="append",
        choices=sorted(MECHANISMS),
        help="add/delete: SCRAM mechanism (repeatable; add defaults to both)",
    )
    parser.add_argument("--password", help="add: the password (default: asked for, or one line of stdin)")
    parser.add_argument("--iterations", type=int, default=4096, help="add: PBKDF2 iterations (4096-16384)")


def _describe(client: KafkaClient, users: list[str] | None) -> None:
    describe = request_class(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
    body = describe(users=None if users is None else [describe.UserName(name=user) for user in users])
    connection = client.connection()
    response = connection.send(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        connection.version_for(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS),
        body,
    )
    if response.error_code:
        raise CommandError(f"{error_name(response.error_code)}: {response.error_message}")
    for result in response.results:
        if result.error_code:
            print(f"{result.user}: {error_name(result.error_code)}: {result.error_message}", file=sys.stderr)
            continue
        credentials = ",".join(
            f"{NAMES.get(info.mechanism, info.mechanism)}=[iterations={info.iterations}]"
            for info in result.credential_infos
        )
        print(f"SCRAM credential configs for user-principal '{result.user}' are {credentials}")


def _alter(client: KafkaClient, deletions: list[object], upsertions: list[object]) -> None:
    connection = client.connection()
    body = request_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)(deletions=deletions, upsertions=upsertions)
    response = connection.send(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, connection.version_for(ApiKey.ALTER_USER_SCRAM_CREDENTIALS), body
    )
    for result in response.results:
        if result.error_code:
            raise CommandError(f"{result.user}: {error_name(result.error_code)}: {result.error_message}")


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return str(args.password)
    if sys.stdin.isatty():
        return getpass.getpass("Password: ")
    return sys.stdin.readline().rstrip("\n")


def run(args: argparse.Namespace) -> int:
    password = ""
    if args.action == "add" and len(args.user) == 1:  # other counts are refused below, no prompt first
        password = _password(args)
        if not password:
            print(f"{ERROR_PREFIX}the password must not be empty", file=sys.stderr)
            return 1

    def act(client: KafkaClient) -> None:
        if args.action == "list":
            _describe(client, None)
            return
        if not args.user:
            raise CommandError("--user is required")
        if args.action == "describe":
            _describe(client, args.user)
            return
        if len(args.user) != 1:
            raise CommandError("add and delete take one --user")
        user = args.user[0]
        alter = request_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
        if args.action == "delete":
            for mechanism in args.mechanism or sorted(MECHANISMS):
                _alter(
                    client, [alter.ScramCredentialDeletion(name=user, mechanism=MECHANISMS[mechanism])], []
                )
                print(f"Deleted {mechanism} credential of user-principal '{user}'.")
            return
        for mechanism in args.mechanism or sorted(MECHANISMS):
            salt = os.urandom(16)
            digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
            salted = hashlib.pbkdf2_hmac(digest, password.encode("utf-8"), salt, args.iterations)
            upsertion = alter.ScramCredentialUpsertion(
                name=user,
                mechanism=MECHANISMS[mechanism],
                iterations=args.iterations,
                salt=salt,
                salted_password=salted,
            )
            _alter(client, [], [upsertion])
            print(f"Completed updating {mechanism} credential of user-principal '{user}'.")

    return with_client(args, act, ERROR_PREFIX)
