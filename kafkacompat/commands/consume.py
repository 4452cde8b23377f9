"""`kafkacompat consume`: a console consumer without consumer groups, like kafka-console-consumer.sh.

Theory of operation: the consumer assigns itself every partition of the topic (or the one given with
`--partition`), finds its start offsets with ListOffsets (latest by default; earliest with
`--from-beginning`; `--offset earliest|latest|N` for a single partition) and then sends Fetch requests,
one per partition leader, in a loop. Record batches from the answers are walked with
`kafkacompat.wire.records.iter_batches`/`iter_records` (control batches and records before the fetch
position are skipped; with `--isolation-level read_committed` so are the records of the aborted
transactions the answer lists, `AbortedTransactions`) and printed with the layout of Kafka's default
message formatter, driven by the same `--property` names: print.timestamp, print.partition, print.offset,
print.headers, print.key, print.value, key.separator, line.separator, headers.separator,
headers.key.separator, null.literal. It stops after `--max-messages`, or when no record arrived for
`--timeout-ms`, and prints "Processed a total of N messages" on standard error. An out-of-range position
is reset to the start (`--from-beginning` or `--offset earliest`) or the end of the log, as
auto.offset.reset would.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, BinaryIO

from kafkacompat.client import (
    ClientError,
    CommandError,
    KafkaClient,
    add_bootstrap_argument,
    command_security,
    error_name,
    parse_property_args,
    silence_stdout,
)
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.messages import request_class
from kafkacompat.wire.records import (
    ABORT_MARKER,
    TimestampType,
    iter_batches,
    iter_records,
    parse_control_record_key,
)

HELP = "print records of a topic (all partitions, no consumer group), like kafka-console-consumer.sh"

EARLIEST, LATEST = -2, -1
# unknown partition, leader moves, epochs: refresh and retry
RETRIABLE_FETCH_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", required=True, help="topic to read")
    parser.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    parser.add_argument("--partition", type=int, help="read only this partition")
    parser.add_argument("--offset", help="earliest, latest or an offset (needs --partition)")
    parser.add_argument("--max-messages", type=int, help="stop after this many records")
    parser.add_argument("--timeout-ms", type=int, help="stop when no record arrived for this long")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="formatter settings (print.key=true ...)",
    )
    parser.add_argument(
        "--isolation-level", choices=["read_uncommitted", "read_committed"], default="read_uncommitted"
    )
    parser.add_argument("--max-wait-ms", type=int, default=500, help="Fetch max wait (default 500)")


def _flag(props: dict[str, str], name: str, default: bool = False) -> bool:
    return props.get(name, "true" if default else "false").strip().lower() == "true"


class Formatter:
    """Kafka's default message formatter: selected fields joined by key.separator, one record a line."""

    def __init__(self, props: dict[str, str]) -> None:
        self.print_timestamp = _flag(props, "print.timestamp")
        self.print_partition = _flag(props, "print.partition")
        self.print_offset = _flag(props, "print.offset")
        self.print_headers = _flag(props, "print.headers")
        self.print_key = _flag(props, "print.key")
        self.print_value = _flag(props, "print.value", True)
        self.key_separator = props.get("key.separator", "\t").encode()
        self.line_separator = props.get("line.separator", "\n").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.header_key_separator = props.get("headers.key.separator", ":").encode()
        self.null_literal = props.get("null.literal", "null").encode()

    def _bytes(self, data: bytes | None) -> bytes:
        return self.null_literal if data is None else bytes(data)

    def format(self, partition: int, record: Any, log_append_time: bool) -> bytes:
        fields: list[bytes] = []
        if self.print_timestamp:
            if record.timestamp < 0:
                fields.append(b"NO_TIMESTAMP")
            else:
                kind = "LogAppendTime" if log_append_time else "CreateTime"
                fields.append(f"{kind}:{record.timestamp}".encode())
        if self.print_partition:
            fields.append(f"Partition:{partition}".encode())
        if self.print_offset:
            fields.append(f"Offset:{record.offset}".encode())
        if self.print_headers:
            if record.headers:
                fields.append(
                    self.headers_separator.join(
                        name.encode("utf-8", "surrogateescape")
                        + self.header_key_separator
                        + self._bytes(value)
                        for name, value in record.headers
                    )
                )
            else:
                fields.append(b"NO_HEADERS")
        if self.print_key:
            fields.append(self._bytes(record.key))
        if self.print_value:
            fields.append(self._bytes(record.value))
        return self.key_separator.join(fields) + self.line_separator


class AbortedTransactions:
    """Which batches of one fetched partition a read_committed consumer leaves out, as Kafka's does.

    The Fetch answer lists the aborted transactions that reach into the range it returns (producer id,
    first offset). Walking the batches in offset order, a producer becomes "aborted" at the first of
    its batches at or past the transaction's first offset, and stops being so at its ABORT marker; its
    transactional batches in between are the aborted records. Control batches (the markers) are never
    records for a reader. With `aborted` None (read_uncommitted) only control batches are left out.
    """

    def __init__(self, aborted: list[Any] | None) -> None:
        self.pending = sorted(((t.first_offset, t.producer_id) for t in aborted or ()), reverse=True)
        self.aborting: set[int] = set()

    def skip(self, batch: Any) -> bool:
        """Whether `batch` holds no record for the reader; call for every batch, in offset order."""
        if batch.has_producer_id:
            while self.pending and self.pending[-1][0] <= batch.last_offset:
                self.aborting.add(self.pending.pop()[1])
            if batch.is_control:
                if self.aborting and batch.producer_id in self.aborting and self._is_abort(batch):
                    self.aborting.discard(batch.producer_id)
            elif batch.is_transactional and batch.producer_id in self.aborting:
                return True
        return bool(batch.is_control)

    @staticmethod
    def _is_abort(batch: Any) -> bool:
        for record in iter_records(batch):
            return parse_control_record_key(record.key)[1] == ABORT_MARKER
        return False


class Consumer:
    """Positions per assigned partition and the fetch loop."""

    def __init__(self, client: KafkaClient, args: argparse.Namespace, out: BinaryIO) -> None:
        self.client = client
        self.args = args
        self.topic = args.topic
        self.out = out
        self.formatter = Formatter(parse_property_args(args.property))
        self.isolation = 1 if args.isolation_level == "read_committed" else 0
        self.reset_to = (
            EARLIEST if args.from_beginning or (args.offset or "").lower() == "earliest" else LATEST
        )
        self.leaders = client.partition_leaders(self.topic)
        if args.partition is not None:
            if args.partition not in self.leaders:
                raise CommandError(f"topic {self.topic} has no partition {args.partition}")
            self.leaders = {args.partition: self.leaders[args.partition]}
        elif args.offset is not None:
            raise CommandError("--offset needs --partition")
        self.positions: dict[int, int] = {}
        self.consumed = 0

    def start(self) -> None:
        offset = self.args.offset
        if offset is not None and offset.lower() not in ("earliest", "latest"):
            try:
                value = int(offset)
            except ValueError:
                raise CommandError(f"--offset {offset!r} is not earliest, latest or a number") from None
            if value < 0:
                raise CommandError("--offset must not be negative")
            self.positions = dict.fromkeys(self.leaders, value)
            return
        self.positions = self.list_offsets(list(self.leaders), self.reset_to)

    def list_offsets(self, partitions: list[int], timestamp: int) -> dict[int, int]:
        cls = request_class(ApiKey.LIST_OFFSETS)
        result: dict[int, int] = {}
        by_leader: dict[int, list[int]] = {}
        for p in partitions:
            by_leader.setdefault(self.leaders[p], []).append(p)
        for leader, mine in by_leader.items():
            request = cls(
                replica_id=-1,
                isolation_level=self.isolation,
                topics=[
                    cls.ListOffsetsTopic(
                        name=self.topic,
                        partitions=[
                            cls.ListOffsetsPartition(
                                partition_index=p,
                                current_leader_epoch=-1,
                                timestamp=timestamp,
                                max_num_offsets=1,
                            )
                            for p in mine
                        ],
                    )
                ],
                timeout_ms=30000,
            )
            response = self.client.send(ApiKey.LIST_OFFSETS, request, node_id=leader)
            for topic in response.topics:
                for answer in topic.partitions:
                    if answer.error_code != ErrorCode.NONE:
                        raise CommandError(
                            f"{self.topic}-{answer.partition_index}: {error_name(answer.error_code)}"
                        )
                    offset = answer.offset
                    if offset < 0 and answer.old_style_offsets:
                        offset = answer.old_style_offsets[0]
                    result[answer.partition_index] = max(offset, 0)
        return result

    def done(self) -> bool:
        return self.args.max_messages is not None and self.consumed >= self.args.max_messages

    def fetch_once(self) -> int:
        """One Fetch round over every leader; returns how many records were printed."""
        cls = request_class(ApiKey.FETCH)
        printed = 0
        by_leader: dict[int, list[int]] = {}
        for p in sorted(self.positions):
            by_leader.setdefault(self.leaders[p], []).append(p)
        for leader, mine in by_leader.items():
            if self.done():
                break
            request = cls(
                replica_id=-1,
                max_wait_ms=self.args.max_wait_ms,
                min_bytes=1,
                max_bytes=52428800,
                isolation_level=self.isolation,
                session_id=0,
                session_epoch=-1,
                topics=[
                    cls.FetchTopic(
                        topic=self.topic,
                        partitions=[
                            cls.FetchPartition(
                                partition=p,
                                current_leader_epoch=-1,
                                fetch_offset=self.positions[p],
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=1048576,
                            )
                            for p in mine
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
            )
            response = self.client.send(ApiKey.FETCH, request, node_id=leader)
            if response.error_code != ErrorCode.NONE:
                raise CommandError(f"Fetch failed: {error_name(response.error_code)}")
            for topic in response.responses:
                for data in topic.partitions:
                    printed += self._partition(data)
        self.out.flush()
        return printed

    def _partition(self, data: Any) -> int:
        partition = data.partition_index
        if self.done():  # --max-messages reached in an earlier partition of this answer: print no more
            return 0
        if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            self.positions.update(self.list_offsets([partition], self.reset_to))
            return 0
        if data.error_code in RETRIABLE_FETCH_ERRORS:
            time.sleep(0.1)
            return 0
        if data.error_code != ErrorCode.NONE:
            raise CommandError(f"{self.topic}-{partition}: {error_name(data.error_code)}")
        records = data.records
        if not records:
            return 0
        printed = 0
        position = self.positions[partition]
        aborted = AbortedTransactions(data.aborted_transactions if self.isolation else None)
        try:
            for batch in iter_batches(records, allow_partial_tail=True):
                skip = aborted.skip(batch)  # in offset order: it tracks which transactions are open
                if batch.last_offset < position:
                    continue
                if not skip:
                    log_append_time = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
                    for record in iter_records(batch):
                        if record.offset < position:
                            continue
                        self.out.write(self.formatter.format(partition, record, log_append_time))
                        position = record.offset + 1
                        printed += 1
                        self.consumed += 1
                        if self.done():
                            self.positions[partition] = position
                            return printed
                position = max(position, batch.last_offset + 1)
        except KafkaError as exc:
            raise CommandError(f"{self.topic}-{partition} at offset {position}: {exc}") from exc
        self.positions[partition] = position
        return printed


def run(args: argparse.Namespace) -> int:
    consumer = None
    status = 0
    try:
        with KafkaClient(
            args.bootstrap_server, timeout=args.timeout, security=command_security(args)
        ) as client:
            consumer = Consumer(client, args, sys.stdout.buffer)
            consumer.start()
            last_record = time.monotonic()
            while not consumer.done():
                if consumer.fetch_once():
                    last_record = time.monotonic()
                elif (
                    args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms
                ):
                    print(
                        f"ERROR: no record received for {args.timeout_ms} ms (TimeoutException)",
                        file=sys.stderr,
                    )
                    break
    except (ClientError, CommandError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:
        status = 0
    except BrokenPipeError:
        silence_stdout()
        return 0
    if consumer is not None:
        print(f"Processed a total of {consumer.consumed} messages", file=sys.stderr)
    return status
