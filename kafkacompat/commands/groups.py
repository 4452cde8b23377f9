"""`kafkacompat groups list|describe|reset-offsets|delete`: consumer groups like kafka-consumer-groups.sh.

Theory of operation: each action is a few requests through `kafkacompat.client.KafkaClient`.
Groups are listed with ListGroups sent to every broker; per-group work goes to the group's coordinator
(FindCoordinator, then DescribeGroups / OffsetFetch / OffsetCommit / DeleteGroups on that node). Log
end offsets (and the offsets for `--to-earliest` / `--to-datetime`) come from ListOffsets at each
partition's leader. The output follows kafka-consumer-groups.sh: `list` one group per line (with
`--state`, a GROUP/STATE table); `describe` the offsets table (GROUP TOPIC PARTITION CURRENT-OFFSET
LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID), `--members` the members table, `--state` the state
table; `reset-offsets` the planned NEW-OFFSET table, committed only with `--execute` (a dry run
otherwise, which says so on stderr unless `--dry-run` asked for it) and only while the group is inactive
(Empty or Dead), as Kafka insists; `delete` deletes inactive groups. Failures print "Error: <message>"
on stderr and exit with status 1; so does `describe` of a group that does not exist (after describing
the other groups asked for).

Requests are built at versions whose shapes this module fills in (FindCoordinator <= 3, OffsetFetch
<= 7), so the tool also works against other Kafka brokers.
"""

from __future__ import annotations

import argparse
import datetime
import struct
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafkacompat.client import (
    CommandError,
    KafkaClient,
    add_bootstrap_argument,
    error_name,
)
from kafkacompat.commands._runner import print_table, with_client
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.messages import request_class

HELP = "list, describe, reset offsets of and delete consumer groups, like kafka-consumer-groups.sh"


EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
INACTIVE_STATES = ("Empty", "Dead")
#: reset-offsets with neither --execute nor --dry-run (kafka-consumer-groups.sh warns likewise)
DRY_RUN_WARNING = (
    "WARN: nothing was changed: the offsets above are only a plan, and reset-offsets commits them only "
    "with --execute (give --dry-run to show the plan without this warning)."
)
COORDINATOR_RETRIES = 20  # COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE right after a broker start
RETRIABLE_COORDINATOR_ERRORS = (
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["list", "describe", "reset-offsets", "delete"])
    add_bootstrap_argument(parser)
    parser.add_argument("--group", action="append", default=[], help="group id (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="act on every group")
    parser.add_argument("--members", action="store_true", help="describe: the members table")
    parser.add_argument("--state", action="store_true", help="list/describe: group states")
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC[:P,P]",
        help="reset-offsets: topic, optionally with partitions (repeatable)",
    )
    parser.add_argument("--all-topics", action="store_true", help="reset-offsets: every topic with offsets")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true", help="reset to the log start offset")
    target.add_argument("--to-latest", action="store_true", help="reset to the log end offset")
    target.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N")
    target.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="reset to the first offset at or after this time (local time unless it carries an offset)",
    )
    run_mode = parser.add_mutually_exclusive_group()
    run_mode.add_argument("--execute", action="store_true", help="reset-offsets: commit the new offsets")
    run_mode.add_argument("--dry-run", action="store_true", help="reset-offsets: only show (the default)")


def run(args: argparse.Namespace) -> int:
    missing: list[str] = []  # groups `describe` found not to exist: reported, then status 1

    def act(client: KafkaClient) -> None:
        missing.extend(ACTIONS[args.action](client, args) or ())

    status = with_client(args, act, "Error: ")
    return status or (1 if missing else 0)


# --- requests ----------------------------------------------------------------------------------------


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[Any]
    coordinator: int


def list_groups(client: KafkaClient) -> list[tuple[str, str, str]]:
    """(group id, protocol type, state) of every group of every broker."""
    brokers = client.metadata([]).brokers
    cls = request_class(ApiKey.LIST_GROUPS)
    found: dict[str, tuple[str, str, str]] = {}
    for broker in brokers:
        response = client.send(
            ApiKey.LIST_GROUPS, cls(states_filter=[], types_filter=[]), node_id=broker.node_id
        )
        if response.error_code != ErrorCode.NONE:
            raise CommandError(f"ListGroups at broker {broker.node_id}: {error_name(response.error_code)}")
        for group in response.groups:
            state = getattr(group, "group_state", "") or ""
            found[group.group_id] = (group.group_id, group.protocol_type, state)
    return [found[g] for g in sorted(found)]


def find_coordinator(client: KafkaClient, group_id: str) -> int:
    cls = request_class(ApiKey.FIND_COORDINATOR)
    version = min(3, client.version_for(ApiKey.FIND_COORDINATOR))
    for attempt in range(COORDINATOR_RETRIES):
        response = client.send(ApiKey.FIND_COORDINATOR, cls(key=group_id, key_type=0), version=version)
        if response.error_code == ErrorCode.NONE:
            return int(response.node_id)
        if response.error_code not in RETRIABLE_COORDINATOR_ERRORS or attempt == COORDINATOR_RETRIES - 1:
            raise CommandError(f"no coordinator for group {group_id}: {error_name(response.error_code)}")
        _backoff()
    raise AssertionError("unreachable")


def _backoff() -> None:
    import time

    time.sleep(0.25)


def describe_group(client: KafkaClient, group_id: str) -> GroupDescription:
    cls = request_class(ApiKey.DESCRIBE_GROUPS)
    for attempt in range(COORDINATOR_RETRIES):
        node = find_coordinator(client, group_id)
        response = client.send(
            ApiKey.DESCRIBE_GROUPS, cls(groups=[group_id], include_authorized_operations=False), node_id=node
        )
        group = response.groups[0]
        if group.error_code == ErrorCode.NONE:
            return GroupDescription(
                group_id,
                group.group_state,
                group.protocol_type,
                group.protocol_data,
                list(group.members),
                node,
            )
        if group.error_code not in RETRIABLE_COORDINATOR_ERRORS or attempt == COORDINATOR_RETRIES - 1:
            raise CommandError(f"cannot describe group {group_id}: {error_name(group.error_code)}")
        _backoff()
    raise AssertionError("unreachable")


def committed_offsets(client: KafkaClient, group_id: str, node: int) -> dict[tuple[str, int], int]:
    """Every committed offset of the group: (topic, partition) -> offset."""
    cls = request_class(ApiKey.OFFSET_FETCH)
    version = min(7, client.version_for(ApiKey.OFFSET_FETCH, node))
    if version < 2:
        raise CommandError("the coordinator does not support fetching all offsets (OffsetFetch v2+)")
    for attempt in range(COORDINATOR_RETRIES):
        response = client.send(
            ApiKey.OFFSET_FETCH,
            cls(group_id=group_id, topics=None, require_stable=False),
            node_id=node,
            version=version,
        )
        if response.error_code == ErrorCode.NONE:
            return {
                (topic.name, p.partition_index): p.committed_offset
                for topic in response.topics
                for p in topic.partitions
                if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
            }
        if response.error_code not in RETRIABLE_COORDINATOR_ERRORS or attempt == COORDINATOR_RETRIES - 1:
            raise CommandError(f"cannot fetch offsets of {group_id}: {error_name(response.error_code)}")
        _backoff()
    raise AssertionError("unreachable")


def list_offsets(
    client: KafkaClient, partitions: Iterable[tuple[str, int]], timestamp: int
) -> dict[tuple[str, int], int]:
    """ListOffsets at each partition's leader: (topic, partition) -> offset (-1 when none)."""
    cls = request_class(ApiKey.LIST_OFFSETS)
    by_leader: dict[int, dict[str, list[int]]] = {}
    leaders: dict[str, dict[int, int]] = {}
    for topic, partition in partitions:
        if topic not in leaders:
            leaders[topic] = client.partition_leaders(topic)
        leader = leaders[topic].get(partition)
        if leader is None:
            raise CommandError(f"{topic}-{partition} does not exist")
        by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
    result: dict[tuple[str, int], int] = {}
    for leader, topics in by_leader.items():
        request = cls(
            replica_id=-1,
            isolation_level=0,
            topics=[
                cls.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        cls.ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in parts
                    ],
                )
                for topic, parts in topics.items()
            ],
        )
        response = client.send(ApiKey.LIST_OFFSETS, request, node_id=leader)
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code != ErrorCode.NONE:
                    raise CommandError(
                        f"ListOffsets {topic.name}-{p.partition_index}: {error_name(p.error_code)}"
                    )
                offset = p.offset
                if offset == -1 and p.old_style_offsets:
                    offset = p.old_style_offsets[0]
                result[(topic.name, p.partition_index)] = offset
    return result


def parse_assignment(data: bytes | memoryview | None) -> list[tuple[str, int]]:
    """The partitions of a consumer-protocol assignment (empty for anything unreadable)."""
    if not data:
        return []
    buf = bytes(data)
    try:
        pos = 2  # version
        (count,) = struct.unpack_from(">i", buf, pos)
        pos += 4
        result = []
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", buf, pos)
            pos += 2
            if length < 0 or pos + length > len(buf):
                return []
            topic = buf[pos : pos + length].decode("utf-8", "replace")
            pos += length
            (n,) = struct.unpack_from(">i", buf, pos)
            pos += 4
            if n < 0 or pos + 4 * n > len(buf):
                return []
            result.extend((topic, p) for p in struct.unpack_from(f">{n}i", buf, pos))
            pos += 4 * n
        return result
    except struct.error:
        return []


# --- actions -----------------------------------------------------------------------------------------


def _groups(client: KafkaClient, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        return [g for g, _, _ in list_groups(client)]
    if not args.group:
        raise CommandError("--group or --all-groups is required")
    return list(args.group)


def _list(client: KafkaClient, args: argparse.Namespace) -> None:
    groups = list_groups(client)
    if args.state:
        print_table([["GROUP", "STATE"], *[[g, state] for g, _, state in groups]])
        return
    for group_id, _, _ in groups:
        print(group_id)


def _describe(client: KafkaClient, args: argparse.Namespace) -> list[str]:
    """Describe each group; returns the groups that do not exist (each reported on stderr)."""
    missing = []
    first = True
    for group_id in _groups(client, args):
        description = describe_group(client, group_id)
        if description.state == "Dead" and not description.members:
            offsets = committed_offsets(client, group_id, description.coordinator)
            if not offsets:
                print(f"Error: Consumer group '{group_id}' does not exist.", file=sys.stderr)
                missing.append(group_id)
                continue
        if not first:
            print()
        first = False
        if args.state:
            print_table(
                [
                    ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                    [
                        group_id,
                        f"{_address(client, description.coordinator)} ({description.coordinator})",
                        description.protocol or "",
                        description.state,
                        len(description.members),
                    ],
                ]
            )
            continue
        if args.members:
            if not description.members:
                print(f"Consumer group '{group_id}' has no active members.")
                continue
            rows: list[list[Any]] = [["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]]
            for m in description.members:
                assigned = parse_assignment(m.member_assignment)
                rows.append([group_id, m.member_id, m.client_host, m.client_id, len(assigned)])
            print_table(rows)
            continue
        _describe_offsets(client, description)
    return missing


def _describe_offsets(client: KafkaClient, description: GroupDescription) -> None:
    group_id = description.group_id
    offsets = committed_offsets(client, group_id, description.coordinator)
    owners: dict[tuple[str, int], Any] = {}
    for member in description.members:
        for tp in parse_assignment(member.member_assignment):
            owners[tp] = member
    partitions = sorted(set(offsets) | set(owners))
    if not description.members:
        print(f"Consumer group '{group_id}' has no active members.")
    if not partitions:
        return
    ends = list_offsets(client, partitions, LATEST_TIMESTAMP)
    rows: list[list[Any]] = [
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
    ]
    for tp in partitions:
        current = offsets.get(tp)
        end = ends.get(tp, -1)
        lag = end - current if current is not None and end >= 0 else "-"
        owner = owners.get(tp)
        rows.append(
            [
                group_id,
                tp[0],
                tp[1],
                current if current is not None else "-",
                end if end >= 0 else "-",
                lag,
                owner.member_id if owner else "-",
                owner.client_host if owner else "-",
                owner.client_id if owner else "-",
            ]
        )
    print_table(rows)


def _address(client: KafkaClient, node_id: int) -> str:
    for broker in client.metadata([]).brokers:
        if broker.node_id == node_id:
            return f"{broker.host}:{broker.port}"
    return "?"


def _parse_datetime(text: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(f"--to-datetime {text!r} is not YYYY-MM-DDTHH:mm:SS[.sss][+HH:MM]") from exc
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as kafka-consumer-groups.sh reads it
    return int(moment.timestamp() * 1000)


def _reset_partitions(
    client: KafkaClient, args: argparse.Namespace, committed: dict[tuple[str, int], int]
) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed)
    if not args.topic:
        raise CommandError("--topic or --all-topics is required")
    result: list[tuple[str, int]] = []
    for item in args.topic:
        topic, _, spec = item.partition(":")
        if spec:
            try:
                result.extend((topic, int(p)) for p in spec.split(","))
            except ValueError as exc:
                raise CommandError(f"--topic {item!r}: partitions must be numbers") from exc
        else:
            result.extend((topic, p) for p in sorted(client.partition_leaders(topic)))
    return sorted(set(result))


def _reset_offsets(client: KafkaClient, args: argparse.Namespace) -> None:
    if not (args.to_earliest or args.to_latest or args.to_offset is not None or args.to_datetime):
        raise CommandError("one of --to-earliest, --to-latest, --to-offset, --to-datetime is required")
    for group_id in _groups(client, args):
        description = describe_group(client, group_id)
        if description.state not in INACTIVE_STATES:
            raise CommandError(
                f"Assignments can only be reset if the group '{group_id}' is inactive, but the current "
                f"state is {description.state}."
            )
        committed = committed_offsets(client, group_id, description.coordinator)
        partitions = _reset_partitions(client, args, committed)
        if not partitions:
            continue
        starts = list_offsets(client, partitions, EARLIEST_TIMESTAMP)
        ends = list_offsets(client, partitions, LATEST_TIMESTAMP)
        if args.to_earliest:
            planned = dict(starts)
        elif args.to_latest:
            planned = dict(ends)
        elif args.to_offset is not None:
            # clamp into the log's range, as kafka-consumer-groups.sh does
            planned = {tp: min(max(args.to_offset, starts[tp]), ends[tp]) for tp in partitions}
        else:
            found = list_offsets(client, partitions, _parse_datetime(args.to_datetime))
            planned = {tp: (offset if offset >= 0 else ends[tp]) for tp, offset in found.items()}
        rows: list[list[Any]] = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
        rows += [[group_id, tp[0], tp[1], planned[tp]] for tp in partitions]
        print_table(rows)
        if args.execute:
            _commit(client, group_id, description.coordinator, planned)
    if not args.execute and not args.dry_run:
        print(DRY_RUN_WARNING, file=sys.stderr)


def _commit(client: KafkaClient, group_id: str, node: int, offsets: dict[tuple[str, int], int]) -> None:
    cls = request_class(ApiKey.OFFSET_COMMIT)
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        topics.setdefault(topic, []).append(
            cls.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=""
            )
        )
    request = cls(
        group_id=group_id,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[cls.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )
    response = client.send(ApiKey.OFFSET_COMMIT, request, node_id=node)
    failures = [
        f"{topic.name}-{p.partition_index}: {error_name(p.error_code)}"
        for topic in response.topics
        for p in topic.partitions
        if p.error_code != ErrorCode.NONE
    ]
    if failures:
        raise CommandError(f"committing offsets of {group_id} failed: {', '.join(failures)}")


def _delete(client: KafkaClient, args: argparse.Namespace) -> None:
    groups = _groups(client, args)
    cls = request_class(ApiKey.DELETE_GROUPS)
    failed: list[tuple[str, str]] = []
    done: list[str] = []
    for group_id in groups:
        node = find_coordinator(client, group_id)
        response = client.send(ApiKey.DELETE_GROUPS, cls(groups_names=[group_id]), node_id=node)
        for result in response.results:
            if result.error_code == ErrorCode.NONE:
                done.append(result.group_id)
            else:
                failed.append((result.group_id, error_name(result.error_code)))
    if done:
        names = ", ".join(f"'{g}'" for g in done)
        print(f"Deletion of requested consumer groups ({names}) was successful.")
    if failed:
        lines = "\n".join(f"* Group '{g}' could not be deleted due to: {why}" for g, why in failed)
        raise CommandError(f"Deletion of some consumer groups failed:\n{lines}")


ACTIONS = {"list": _list, "describe": _describe, "reset-offsets": _reset_offsets, "delete": _delete}
