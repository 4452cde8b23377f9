"""`kafkacompat produce`: a console producer, like kafka-console-producer.sh.

Theory of operation: standard input is read in chunks straight from its file descriptor and split into
lines; each line becomes one record, parsed as Kafka's line reader does it: with
`--property parse.headers=true` the line starts with headers (`k:v,k2:v2`) up to `headers.delimiter`
(tab), then with `parse.key=true` a key up to `key.separator` (tab), then the value; `null.marker` turns
a matching key, value or header value into null. Keyed records go to Kafka's default partition
(murmur2 of the key, as the Java client computes it); unkeyed ones stick to one partition per flush and
rotate between flushes. Records are sent as one batch per partition whenever no more input is waiting
or `--batch-size` lines are buffered, so interactive typing is sent line by line while piped input goes
in large batches. A topic that does not exist is created by the broker through Metadata
(`auto.create.topics.enable`), as for the Java producer. `--request-required-acks` 0 sends without
waiting. Any error is printed and ends the command with status 1 (with `ignore.error=true`, lines
that cannot be parsed are sent whole as values).
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time

from kafkacompat.client import (
    ClientError,
    CommandError,
    KafkaClient,
    add_bootstrap_argument,
    command_security,
    error_name,
    parse_property_args,
)
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.messages import request_class
from kafkacompat.wire.records import RecordInput, build_batch

HELP = "send lines from standard input as records, like kafka-console-producer.sh"

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", required=True, help="topic to produce to")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="line reader settings: parse.key, key.separator, parse.headers, headers.delimiter, "
        "headers.separator, headers.key.separator, null.marker, ignore.error",
    )
    parser.add_argument("--request-required-acks", default="-1", help="-1/all (default), 1 or 0")
    parser.add_argument("--request-timeout-ms", type=int, default=30000)
    parser.add_argument("--compression-codec", choices=sorted(CODECS), default="none")
    parser.add_argument("--batch-size", type=int, default=500, help="lines per request at most (default 500)")
    parser.add_argument("--partition", type=int, help="send every record to this partition")


def murmur2(data: bytes) -> int:
    """The Java client's murmur2 hash of a key (a signed 32-bit int)."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def default_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class LineReader:
    """Kafka's console line format -> (key, value, headers). Raises CommandError for a malformed line."""

    def __init__(self, props: dict[str, str]) -> None:
        self.parse_key = props.get("parse.key", "false").lower() == "true"
        self.key_separator = props.get("key.separator", "\t")
        self.parse_headers = props.get("parse.headers", "false").lower() == "true"
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.header_key_separator = props.get("headers.key.separator", ":")
        self.null_marker = props.get("null.marker")
        self.ignore_error = props.get("ignore.error", "false").lower() == "true"

    def _bytes(self, text: str) -> bytes | None:
        if self.null_marker is not None and text == self.null_marker:
            return None
        return text.encode("utf-8", "surrogateescape")

    def parse(
        self, line: str, number: int
    ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, sep, rest = line.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise CommandError(f"No headers delimiter found on line number {number}: '{line}'")
                rest = line
            else:
                for pair in head.split(self.headers_separator):
                    if not pair:
                        continue
                    name, sep2, value = pair.partition(self.header_key_separator)
                    if not sep2 and not self.ignore_error:
                        raise CommandError(
                            f"No header key separator found in pair '{pair}' on line number {number}"
                        )
                    headers.append((name, self._bytes(value) if sep2 else None))
        key = None
        if self.parse_key:
            key_text, sep, value_text = rest.partition(self.key_separator)
            if not sep:
                if not self.ignore_error:
                    raise CommandError(f"No key separator found on line number {number}: '{line}'")
                return None, self._bytes(rest), headers
            key = self._bytes(key_text)
            rest = value_text
        return key, self._bytes(rest), headers


class Producer:
    """Buffers parsed records per partition and sends them one request per leader."""

    def __init__(self, client: KafkaClient, args: argparse.Namespace) -> None:
        self.client = client
        self.topic = args.topic
        acks = args.request_required_acks.strip().lower()
        self.acks = -1 if acks == "all" else int(acks)
        self.timeout_ms = args.request_timeout_ms
        self.codec = CODECS[args.compression_codec]
        self.fixed_partition = args.partition
        # a missing topic is created through Metadata, as kafka-console-producer's client does
        self.leaders = client.partition_leaders(self.topic, auto_create=True)
        if not self.leaders:
            raise CommandError(f"topic {self.topic} has no partitions")
        if self.fixed_partition is not None and self.fixed_partition not in self.leaders:
            raise CommandError(f"topic {self.topic} has no partition {self.fixed_partition}")
        self.sticky = 0
        self.pending: dict[int, list[RecordInput]] = {}
        self.buffered = 0
        self.sent = 0

    def add(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> None:
        count = len(self.leaders)
        if self.fixed_partition is not None:
            partition = self.fixed_partition
        elif key is not None:
            partition = default_partition(key, count)
        else:
            partition = sorted(self.leaders)[self.sticky % count]
        self.pending.setdefault(partition, []).append(
            RecordInput(key, value, headers, int(time.time() * 1000))
        )
        self.buffered += 1

    def flush(self) -> None:
        if not self.pending:
            return
        cls = request_class(ApiKey.PRODUCE)
        by_leader: dict[int, list[tuple[int, bytes]]] = {}
        for partition, records in sorted(self.pending.items()):
            batch = build_batch(records, compression=self.codec)
            by_leader.setdefault(self.leaders[partition], []).append((partition, batch))
        for leader, batches in by_leader.items():
            request = cls(
                transactional_id=None,
                acks=self.acks,
                timeout_ms=self.timeout_ms,
                topic_data=[
                    cls.TopicProduceData(
                        name=self.topic,
                        partition_data=[cls.PartitionProduceData(index=p, records=b) for p, b in batches],
                    )
                ],
            )
            if self.acks == 0:
                connection = self.client.connection(leader)
                connection.send_without_answer(
                    ApiKey.PRODUCE, connection.version_for(ApiKey.PRODUCE), request
                )
                continue
            response = self.client.send(ApiKey.PRODUCE, request, node_id=leader)
            for topic in response.responses:
                for answer in topic.partition_responses:
                    if answer.error_code != ErrorCode.NONE:
                        message = getattr(answer, "error_message", None) or ""
                        raise CommandError(
                            f"{self.topic}-{answer.index}: {error_name(answer.error_code)} {message}".rstrip()
                        )
        self.sent += self.buffered
        self.pending.clear()
        self.buffered = 0
        self.sticky += 1


def _input_waiting(fd: int) -> bool:
    try:
        ready, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):
        return False
    return bool(ready)


def run(args: argparse.Namespace) -> int:
    try:
        reader = LineReader(parse_property_args(args.property))
        with KafkaClient(
            args.bootstrap_server, timeout=args.timeout, security=command_security(args)
        ) as client:
            producer = Producer(client, args)
            fd = sys.stdin.fileno()
            pending = b""
            number = 0
            while True:
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                else:
                    lines, pending = ([pending] if pending else []), b""
                for raw in lines:
                    number += 1
                    line = raw.decode("utf-8", "surrogateescape").removesuffix("\r")
                    try:
                        parsed = reader.parse(line, number)
                    except CommandError:
                        producer.flush()  # the lines before the bad one are sent, as Kafka's producer would
                        raise
                    producer.add(*parsed)
                    if producer.buffered >= args.batch_size:
                        producer.flush()
                if not chunk:
                    producer.flush()
                    break
                if not _input_waiting(fd):
                    producer.flush()
    except (ClientError, CommandError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
