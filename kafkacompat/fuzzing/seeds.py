"""A live protocol fuzzer: mutated request frames of every served API, sent to a running broker.

Theory of operation
-------------------
Seeds: `build_seeds()` builds one meaningful request per served API (a produce of a real record batch
to the fuzz topic, a fetch from it, a JoinGroup with consumer-protocol metadata, an AlterConfigs of a
topic config, ...) with the generated codecs and encodes it at every version the broker advertises
(its ApiVersions answer). An API without a hand-written seed (one added later) still gets a seed: its
request object with default field values. Seeds are only the starting point: no seed is ever sent
unmutated.

Mutations (`Mutator.frame()`): one or two of
- structure-aware: the seed body is decoded to a request object, one to three fields anywhere in it are
  replaced by "interesting" values (extreme integers, empty/oversized/path-like/non-ASCII strings,
  emptied or multiplied arrays, damaged record batches, absent nullable fields), and it is encoded again,
  so the frame still parses and the handler itself meets the bad values;
- byte-level on the encoded frame: bit flips, interesting bytes, int16/int32 overwrites with extreme
  values, truncation, garbage appended, chunks deleted or duplicated, a wrong API version or key,
  an overlong varint inserted, a garbage tagged-field section, and length-prefix lies (a size larger
  than the bytes that follow, smaller, negative or beyond `socket.request.max.bytes`).

The run (`fuzz()`): N trio tasks, each with one connection at a time to 127.0.0.1, send one frame and
wait (bounded) for its answer; a frame the broker closes the connection on, or leaves unanswered, ends
that connection and the task opens a new one. A whole run is bounded by a frame count and a time limit,
and may be paced (`rate`). Every answer is checked: its correlation id must be the one sent, and when
the request was a served API and version, the response body must decode with the generated codec.

Outcomes are counted per kind (answered, closed by the broker, no answer in time, bad answer). The
caller (tools/fuzz.py, compat_tests/test_fuzz.py) watches the broker itself: process alive, RSS from
/proc, and its log for tracebacks (`scan_log()`). A well-behaved producer/consumer pair that runs beside
the fuzzer lives in `good_pair()`.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import random
import re
import socket
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from kafkacompat.wire import messages
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.header import (
    RequestHeader,
    decode_response_header,
    encode_request_header,
)
from kafkacompat.wire.primitives import Struct as GeneratedStruct
from kafkacompat.wire.records import CompressionCodec, build_batch

__all__ = [
    "FuzzStats",
    "Mutator",
    "Seed",
    "build_seeds",
    "fuzz",
    "percentile",
    "read_rss_kib",
    "scan_log",
]

INTERESTING_INTS = (
    0, 1, -1, 2, 3, 7, 127, 128, 255, 256, 1000, 0x7FFF, -0x8000, 0xFFFF, 100_000, 1_000_000,
    0x7FFFFFFF, -0x80000000, 0xFFFFFFFF, 2**62, 2**63 - 1, -(2**63),
)  # fmt: skip
INTERESTING_STRINGS = (
    "", ".", "..", "/", "../../../tmp/kafkacompat-fuzz-escape", "a/b", "..\\..\\x", "a" * 249, "b" * 250,
    "c" * 300, "ü-topic", "名前", "topic\x00nul", "with space", "-1", "d" * 5000, "fuzz-t", "fuzz-g",
)  # fmt: skip
# a structure-aware mutation that multiplied nested arrays into a body larger than this is dropped
MAX_STRUCTURED_BODY = 4 << 20
INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
SIZE = struct.Struct(">i")
CORRELATION = struct.Struct(">i")
PREFIX = struct.Struct(">hhi")


@dataclass(frozen=True, slots=True)
class Seed:
    """A well-formed request body of one API at one version (no header, no size)."""

    api_key: int
    version: int
    body: bytes


@dataclass(slots=True)
class FuzzTarget:
    """What the seeds refer to: an existing topic (with its id), a group with a live member."""

    topic: str = "fuzz-t"
    topic_id: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))
    partitions: int = 3
    group: str = "fuzz-g"
    member_id: str = ""
    generation: int = -1
    transactional_id: str = "fuzz-txn"
    txn_producer_id: int = -1
    txn_producer_epoch: int = -1


def _cls(api_key: int) -> Any:
    return messages.request_class(api_key)


def _consumer_subscription(topic: str) -> bytes:
    # ConsumerProtocolSubscription v0: version, topics array, user data (null)
    name = topic.encode()
    return INT16.pack(0) + INT32.pack(1) + INT16.pack(len(name)) + name + INT32.pack(-1)


def _consumer_assignment(topic: str, partitions: int) -> bytes:
    name = topic.encode()
    body = INT16.pack(0) + INT32.pack(1) + INT16.pack(len(name)) + name + INT32.pack(partitions)
    body += b"".join(INT32.pack(p) for p in range(partitions))
    return body + INT32.pack(-1)


def _record_batches() -> list[bytes]:
    stamp = int(time.time() * 1000)
    plain = build_batch([(b"key-%d" % i, b"value-%d" % i * 3) for i in range(5)], base_timestamp=stamp)
    gzipped = build_batch([(None, b"z" * 200)] * 4, compression=CompressionCodec.GZIP, base_timestamp=stamp)
    idempotent = build_batch(
        [(b"k", b"v")], producer_id=0, producer_epoch=0, base_sequence=0, base_timestamp=stamp
    )
    return [plain, gzipped, idempotent]


def _seed_objects(t: FuzzTarget) -> dict[int, list[Callable[[], Any]]]:
    """api key -> builders of meaningful requests (objects, encodable at every version the key has)."""
    batches = _record_batches()

    def produce(records: bytes, acks: int) -> Callable[[], Any]:
        def build() -> Any:
            mod = _module_of(ApiKey.PRODUCE)
            return mod.ProduceRequest(
                acks=acks,
                timeout_ms=5000,
                topic_data=[
                    mod.TopicProduceData(
                        name=t.topic, partition_data=[mod.PartitionProduceData(index=0, records=records)]
                    )
                ],
            )

        return build

    def fetch() -> Any:
        m = _module_of(ApiKey.FETCH)
        partitions = [
            m.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=65536, log_start_offset=-1)
            for p in range(t.partitions)
        ]
        return m.FetchRequest(
            replica_id=-1,
            max_wait_ms=5,
            min_bytes=1,
            max_bytes=1 << 20,
            session_id=0,
            session_epoch=-1,
            topics=[m.FetchTopic(topic=t.topic, topic_id=t.topic_id, partitions=partitions)],
        )

    def list_offsets() -> Any:
        m = _module_of(ApiKey.LIST_OFFSETS)
        return m.ListOffsetsRequest(
            replica_id=-1,
            topics=[
                m.ListOffsetsTopic(
                    name=t.topic,
                    partitions=[m.ListOffsetsPartition(partition_index=0, timestamp=-1, max_num_offsets=1)],
                )
            ],
        )

    def metadata() -> Any:
        m = _module_of(ApiKey.METADATA)
        return m.MetadataRequest(
            topics=[m.MetadataRequestTopic(name=t.topic, topic_id=t.topic_id)],
            allow_auto_topic_creation=False,
        )

    def offset_commit() -> Any:
        m = _module_of(ApiKey.OFFSET_COMMIT)
        return m.OffsetCommitRequest(
            group_id=t.group,
            generation_id_or_member_epoch=t.generation,
            member_id=t.member_id,
            retention_time_ms=-1,
            topics=[
                m.OffsetCommitRequestTopic(
                    name=t.topic,
                    partitions=[
                        m.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=1, committed_metadata=""
                        )
                    ],
                )
            ],
        )

    def offset_fetch() -> Any:
        m = _module_of(ApiKey.OFFSET_FETCH)
        return m.OffsetFetchRequest(
            group_id=t.group,
            topics=[m.OffsetFetchRequestTopic(name=t.topic, partition_indexes=[0, 1])],
            groups=[
                m.OffsetFetchRequestGroup(
                    group_id=t.group, topics=[m.OffsetFetchRequestTopics(name=t.topic, partition_indexes=[0])]
                )
            ],
        )

    def find_coordinator() -> Any:
        return _cls(ApiKey.FIND_COORDINATOR)(key=t.group, key_type=0, coordinator_keys=[t.group])

    def join_group() -> Any:
        m = _module_of(ApiKey.JOIN_GROUP)
        return m.JoinGroupRequest(
            group_id=t.group,
            session_timeout_ms=10000,
            rebalance_timeout_ms=300,
            member_id="",
            protocol_type="consumer",
            protocols=[m.JoinGroupRequestProtocol(name="range", metadata=_consumer_subscription(t.topic))],
        )

    def heartbeat() -> Any:
        return _cls(ApiKey.HEARTBEAT)(group_id=t.group, generation_id=t.generation, member_id=t.member_id)

    def leave_group() -> Any:
        m = _module_of(ApiKey.LEAVE_GROUP)
        return m.LeaveGroupRequest(
            group_id=t.group, member_id="nobody", members=[m.MemberIdentity(member_id="nobody")]
        )

    def sync_group() -> Any:
        m = _module_of(ApiKey.SYNC_GROUP)
        return m.SyncGroupRequest(
            group_id=t.group,
            generation_id=t.generation,
            member_id=t.member_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[
                m.SyncGroupRequestAssignment(
                    member_id=t.member_id, assignment=_consumer_assignment(t.topic, t.partitions)
                )
            ],
        )

    def describe_groups() -> Any:
        return _cls(ApiKey.DESCRIBE_GROUPS)(
            groups=[t.group, "absent-group"], include_authorized_operations=True
        )

    def list_groups() -> Any:
        return _cls(ApiKey.LIST_GROUPS)(states_filter=["Stable"], types_filter=["classic"])

    def api_versions() -> Any:
        return _cls(ApiKey.API_VERSIONS)(
            client_software_name="kafkacompat-fuzz", client_software_version="1.0"
        )

    def create_topics() -> Any:
        m = _module_of(ApiKey.CREATE_TOPICS)
        return m.CreateTopicsRequest(
            timeout_ms=5000,
            validate_only=False,
            topics=[
                m.CreatableTopic(
                    name="fuzz-new",
                    num_partitions=2,
                    replication_factor=1,
                    configs=[m.CreatableTopicConfig(name="retention.ms", value="60000")],
                )
            ],
        )

    def create_topics_assigned() -> Any:
        m = _module_of(ApiKey.CREATE_TOPICS)
        return m.CreateTopicsRequest(
            timeout_ms=5000,
            validate_only=True,
            topics=[
                m.CreatableTopic(
                    name="fuzz-assigned",
                    num_partitions=-1,
                    replication_factor=-1,
                    assignments=[m.CreatableReplicaAssignment(partition_index=0, broker_ids=[1])],
                )
            ],
        )

    def delete_topics() -> Any:
        m = _module_of(ApiKey.DELETE_TOPICS)
        return m.DeleteTopicsRequest(
            topics=[m.DeleteTopicState(name="fuzz-new")], topic_names=["fuzz-new"], timeout_ms=5000
        )

    def delete_records() -> Any:
        m = _module_of(ApiKey.DELETE_RECORDS)
        return m.DeleteRecordsRequest(
            timeout_ms=5000,
            topics=[
                m.DeleteRecordsTopic(
                    name=t.topic, partitions=[m.DeleteRecordsPartition(partition_index=1, offset=1)]
                )
            ],
        )

    def init_producer_id() -> Any:
        return _cls(ApiKey.INIT_PRODUCER_ID)(
            transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
        )

    def offset_for_leader_epoch() -> Any:
        m = _module_of(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        return m.OffsetForLeaderEpochRequest(
            replica_id=-1,
            topics=[
                m.OffsetForLeaderTopic(
                    topic=t.topic,
                    partitions=[
                        m.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)
                    ],
                )
            ],
        )

    def describe_configs() -> Any:
        m = _module_of(ApiKey.DESCRIBE_CONFIGS)
        return m.DescribeConfigsRequest(
            resources=[
                m.DescribeConfigsResource(resource_type=2, resource_name=t.topic, configuration_keys=None),
                m.DescribeConfigsResource(
                    resource_type=4, resource_name="1", configuration_keys=["log.retention.ms"]
                ),
            ],
            include_synonyms=True,
            include_documentation=True,
        )

    def alter_configs() -> Any:
        m = _module_of(ApiKey.ALTER_CONFIGS)
        return m.AlterConfigsRequest(
            resources=[
                m.AlterConfigsResource(
                    resource_type=2,
                    resource_name=t.topic,
                    configs=[m.AlterableConfig(name="retention.ms", value="3600000")],
                )
            ],
            validate_only=False,
        )

    def describe_log_dirs() -> Any:
        m = _module_of(ApiKey.DESCRIBE_LOG_DIRS)
        return m.DescribeLogDirsRequest(topics=[m.DescribableLogDirTopic(topic=t.topic, partitions=[0, 1])])

    def create_partitions() -> Any:
        m = _module_of(ApiKey.CREATE_PARTITIONS)
        return m.CreatePartitionsRequest(
            topics=[m.CreatePartitionsTopic(name=t.topic, count=t.partitions, assignments=None)],
            timeout_ms=5000,
            validate_only=True,
        )

    def delete_groups() -> Any:
        return _cls(ApiKey.DELETE_GROUPS)(groups_names=["fuzz-empty-group"])

    def incremental_alter_configs() -> Any:
        m = _module_of(ApiKey.INCREMENTAL_ALTER_CONFIGS)
        return m.IncrementalAlterConfigsRequest(
            resources=[
                m.AlterConfigsResource(
                    resource_type=2,
                    resource_name=t.topic,
                    configs=[m.AlterableConfig(name="segment.ms", config_operation=0, value="600000")],
                )
            ],
            validate_only=False,
        )

    def offset_delete() -> Any:
        m = _module_of(ApiKey.OFFSET_DELETE)
        return m.OffsetDeleteRequest(
            group_id=t.group,
            topics=[
                m.OffsetDeleteRequestTopic(
                    name=t.topic, partitions=[m.OffsetDeleteRequestPartition(partition_index=0)]
                )
            ],
        )

    def describe_cluster() -> Any:
        return _cls(ApiKey.DESCRIBE_CLUSTER)(include_cluster_authorized_operations=True, endpoint_type=1)

    def describe_producers() -> Any:
        m = _module_of(ApiKey.DESCRIBE_PRODUCERS)
        return m.DescribeProducersRequest(topics=[m.TopicRequest(name=t.topic, partition_indexes=[0, 1, 2])])

    def describe_topic_partitions() -> Any:
        m = _module_of(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
        return m.DescribeTopicPartitionsRequest(
            topics=[m.TopicRequest(name=t.topic)],
            response_partition_limit=2,
            cursor=m.Cursor(topic_name=t.topic, partition_index=1),
        )

    txn = (t.transactional_id, t.txn_producer_id, t.txn_producer_epoch)

    def add_partitions_to_txn() -> Any:
        m = _module_of(ApiKey.ADD_PARTITIONS_TO_TXN)
        topics = [m.AddPartitionsToTxnTopic(name=t.topic, partitions=[0, 1])]
        return m.AddPartitionsToTxnRequest(
            transactions=[
                m.AddPartitionsToTxnTransaction(
                    transactional_id=txn[0], producer_id=txn[1], producer_epoch=txn[2], topics=topics
                )
            ],
            v3_and_below_transactional_id=txn[0],
            v3_and_below_producer_id=txn[1],
            v3_and_below_producer_epoch=txn[2],
            v3_and_below_topics=topics,
        )

    def add_offsets_to_txn() -> Any:
        return _cls(ApiKey.ADD_OFFSETS_TO_TXN)(
            transactional_id=txn[0], producer_id=txn[1], producer_epoch=txn[2], group_id=t.group
        )

    def end_txn(committed: bool) -> Callable[[], Any]:
        return lambda: _cls(ApiKey.END_TXN)(
            transactional_id=txn[0], producer_id=txn[1], producer_epoch=txn[2], committed=committed
        )

    def write_txn_markers() -> Any:
        m = _module_of(ApiKey.WRITE_TXN_MARKERS)
        marker = m.WritableTxnMarker(
            producer_id=txn[1],
            producer_epoch=txn[2],
            transaction_result=True,
            topics=[m.WritableTxnMarkerTopic(name=t.topic, partition_indexes=[0])],
            coordinator_epoch=0,
        )
        return m.WriteTxnMarkersRequest(markers=[marker])

    def txn_offset_commit() -> Any:
        m = _module_of(ApiKey.TXN_OFFSET_COMMIT)
        part = m.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=3, committed_metadata="")
        return m.TxnOffsetCommitRequest(
            transactional_id=txn[0],
            group_id=t.group,
            producer_id=txn[1],
            producer_epoch=txn[2],
            generation_id=t.generation,
            member_id=t.member_id,
            topics=[m.TxnOffsetCommitRequestTopic(name=t.topic, partitions=[part])],
        )

    def describe_transactions() -> Any:
        return _cls(ApiKey.DESCRIBE_TRANSACTIONS)(transactional_ids=[txn[0], "absent-txn"])

    def list_transactions() -> Any:
        return _cls(ApiKey.LIST_TRANSACTIONS)(
            state_filters=["Ongoing"], producer_id_filters=[txn[1]], duration_filter=-1
        )

    return {
        ApiKey.ADD_PARTITIONS_TO_TXN: [add_partitions_to_txn],
        ApiKey.ADD_OFFSETS_TO_TXN: [add_offsets_to_txn],
        ApiKey.END_TXN: [end_txn(True), end_txn(False)],
        ApiKey.WRITE_TXN_MARKERS: [write_txn_markers],
        ApiKey.TXN_OFFSET_COMMIT: [txn_offset_commit],
        ApiKey.DESCRIBE_TRANSACTIONS: [describe_transactions],
        ApiKey.LIST_TRANSACTIONS: [list_transactions],
        ApiKey.PRODUCE: [produce(b, acks) for b in batches for acks in (1, -1)],
        ApiKey.FETCH: [fetch],
        ApiKey.LIST_OFFSETS: [list_offsets],
        ApiKey.METADATA: [metadata],
        ApiKey.OFFSET_COMMIT: [offset_commit],
        ApiKey.OFFSET_FETCH: [offset_fetch],
        ApiKey.FIND_COORDINATOR: [find_coordinator],
        ApiKey.JOIN_GROUP: [join_group],
        ApiKey.HEARTBEAT: [heartbeat],
        ApiKey.LEAVE_GROUP: [leave_group],
        ApiKey.SYNC_GROUP: [sync_group],
        ApiKey.DESCRIBE_GROUPS: [describe_groups],
        ApiKey.LIST_GROUPS: [list_groups],
        ApiKey.API_VERSIONS: [api_versions],
        ApiKey.CREATE_TOPICS: [create_topics, create_topics_assigned],
        ApiKey.DELETE_TOPICS: [delete_topics],
        ApiKey.DELETE_RECORDS: [delete_records],
        ApiKey.INIT_PRODUCER_ID: [init_producer_id],
        ApiKey.OFFSET_FOR_LEADER_EPOCH: [offset_for_leader_epoch],
        ApiKey.DESCRIBE_CONFIGS: [describe_configs],
        ApiKey.ALTER_CONFIGS: [alter_configs],
        ApiKey.DESCRIBE_LOG_DIRS: [describe_log_dirs],
        ApiKey.CREATE_PARTITIONS: [create_partitions],
        ApiKey.DELETE_GROUPS: [delete_groups],
        ApiKey.INCREMENTAL_ALTER_CONFIGS: [incremental_alter_configs],
        ApiKey.OFFSET_DELETE: [offset_delete],
        ApiKey.DESCRIBE_CLUSTER: [describe_cluster],
        ApiKey.DESCRIBE_PRODUCERS: [describe_producers],
        ApiKey.DESCRIBE_TOPIC_PARTITIONS: [describe_topic_partitions],
    }


def _module_of(api_key: int) -> Any:
    import importlib

    return importlib.import_module(
        "kafkacompat.wire._generated." + messages.API_SPECS[api_key].request_module
    )


def build_seeds(served: dict[int, tuple[int, int]], target: FuzzTarget) -> list[Seed]:
    """One or more seeds per (served api key, version). `served`: key -> (min, max), as ApiVersions says."""
    builders = _seed_objects(target)
    seeds: list[Seed] = []
    for api_key, (low, high) in sorted(served.items()):
        spec = messages.API_SPECS.get(api_key)
        if spec is None:
            continue
        low, high = max(low, spec.min_version), min(high, spec.max_version)
        makers = builders.get(api_key) or [spec.request_class]
        for version in range(low, high + 1):
            for make in makers:
                try:
                    body = messages.encode_request(api_key, version, make())
                except Exception:  # a field this version cannot carry: fall back to the defaults
                    body = messages.encode_request(api_key, version, spec.request_class())
                seeds.append(Seed(api_key, version, body))
    return seeds


# --- mutations -----------------------------------------------------------------------------------


def _slots(obj: Any) -> tuple[str, ...]:
    if not isinstance(obj, GeneratedStruct):
        return ()
    return tuple(s for s in getattr(type(obj), "__slots__", ()) if s != "unknown_tags")


def _field_refs(obj: Any, out: list[tuple[Any, str, Any]], depth: int = 0) -> None:
    """Every (owner, attribute, value) reachable from a request object, nested structs included."""
    for name in _slots(obj):
        value = getattr(obj, name, None)
        out.append((obj, name, value))
        if depth > 4:
            continue
        if isinstance(value, list):
            for item in value[:4]:
                if _slots(item):
                    _field_refs(item, out, depth + 1)
        elif _slots(value):
            _field_refs(value, out, depth + 1)


def _damaged_batch(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    choice = rng.randrange(7)
    if not b:
        return bytes(rng.randbytes(rng.randrange(1, 80)))
    if choice == 0 and len(b) > 61:  # compression bits set on an uncompressed payload (or another codec)
        b[22] = (b[22] & ~0x07) | rng.randrange(1, 8)
    elif choice == 1 and len(b) > 12:  # batch length lies
        INT32.pack_into(b, 8, rng.choice(INTERESTING_INTS) & 0x7FFFFFFF if rng.random() < 0.5 else -5)
    elif choice == 2 and len(b) > 16:  # magic
        b[16] = rng.choice((0, 1, 3, 0xFF))
    elif choice == 3 and len(b) > 61:  # record count
        INT32.pack_into(b, 57, rng.choice((0, -1, 0x7FFFFFFF, 1000)))
    elif choice == 4:
        b = b[: rng.randrange(len(b))]
    elif choice == 5 and len(b) > 61:  # a byte of the records, CRC now wrong
        b[rng.randrange(61, len(b))] ^= 1 << rng.randrange(8)
    else:
        b = b + b  # two batches, both with base offset 0
    return bytes(b)


def _mutated_value(rng: random.Random, value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice(INTERESTING_INTS)
    if isinstance(value, str):
        return rng.choice(INTERESTING_STRINGS) if rng.random() < 0.9 else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        if rng.random() < 0.7:
            return _damaged_batch(rng, data)
        return rng.choice((b"", rng.randbytes(rng.randrange(1, 200)), None, data * 50))
    if isinstance(value, uuid.UUID):
        return rng.choice(
            (uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128)), uuid.UUID(int=(1 << 128) - 1))
        )
    if isinstance(value, list):
        choice = rng.randrange(4)
        if choice == 0:
            return []
        if choice == 1:
            return None
        if choice == 2 and value:
            return value * min(rng.choice((2, 10, 1000)), max(1, 1000 // len(value)))
        return value[::-1]
    if value is None:
        return rng.choice(("", -1, [], b"\x00"))
    return None


class Mutator:
    """Turns seeds into mutated request frames (size prefix included). Owns its random generator."""

    def __init__(self, seeds: list[Seed], rng: random.Random, client_id: str = "kafkacompat-fuzz") -> None:
        if not seeds:
            raise ValueError("no seeds")
        self.seeds = seeds
        self.rng = rng
        self.client_id = client_id
        self._correlation = 0
        self._byte_ops: list[Callable[[bytearray], int | None]] = [
            self._bit_flip,
            self._interesting_byte,
            self._interesting_int,
            self._truncate,
            self._append_garbage,
            self._delete_chunk,
            self._duplicate_chunk,
            self._wrong_version,
            self._wrong_key,
            self._overlong_varint,
            self._garbage_tags,
            self._size_lie,
        ]

    def _header(self, seed: Seed) -> bytes:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        header = RequestHeader(
            request_api_key=seed.api_key,
            request_api_version=seed.version,
            correlation_id=self._correlation,
            client_id=self.client_id,
        )
        return encode_request_header(header)

    def _struct_mutation(self, seed: Seed) -> bytes | None:
        rng = self.rng
        try:
            obj = messages.decode_request(seed.api_key, seed.version, memoryview(seed.body))
        except Exception:
            return None
        refs: list[tuple[Any, str, Any]] = []
        _field_refs(obj, refs)
        if not refs:
            return None
        multiplied = False
        for _ in range(rng.randint(1, 3)):
            owner, name, value = rng.choice(refs)
            if isinstance(value, list) and multiplied:
                continue  # one multiplied array per frame: nested ones would multiply into gigabytes
            mutated = _mutated_value(rng, value)
            multiplied = multiplied or (isinstance(mutated, list) and len(mutated) > len(value or ()))
            setattr(owner, name, mutated)
        try:
            body = messages.encode_request(seed.api_key, seed.version, obj)
        except Exception:
            return None
        return body if len(body) <= MAX_STRUCTURED_BODY else None

    def frame(self) -> tuple[bytes, bool]:
        """A mutated frame, and whether its size prefix promises more bytes than follow it."""
        rng = self.rng
        seed = rng.choice(self.seeds)
        payload = bytearray(self._header(seed))
        structural = rng.random() < 0.45
        body = self._struct_mutation(seed) if structural else None
        if body == seed.body:
            body = None  # the fields drawn were replaced by equal values: mutate the bytes instead
        byte_ops = 1 if body is None else (1 if rng.random() < 0.2 else 0)
        payload += body if body is not None else seed.body
        size: int | None = None
        for _ in range(byte_ops + (rng.random() < 0.3)):
            lie = rng.choice(self._byte_ops)(payload)
            if lie is not None:
                size = lie
        if size is None:
            size = len(payload)
        return SIZE.pack(size) + bytes(payload), size > len(payload)

    # Each byte operation edits the payload (header + body) in place; a length-prefix lie returns the
    # size to announce instead of the true one.

    def _bit_flip(self, p: bytearray) -> None:
        for _ in range(self.rng.randint(1, 4)):
            if p:
                p[self.rng.randrange(len(p))] ^= 1 << self.rng.randrange(8)

    def _interesting_byte(self, p: bytearray) -> None:
        if p:
            p[self.rng.randrange(len(p))] = self.rng.choice(INTERESTING_BYTES)

    def _interesting_int(self, p: bytearray) -> None:
        if len(p) < 4:
            return
        at = self.rng.randrange(len(p) - 3)
        value = self.rng.choice(INTERESTING_INTS)
        if self.rng.random() < 0.5:
            INT16.pack_into(p, at, ((value + 0x8000) & 0xFFFF) - 0x8000)
        else:
            INT32.pack_into(p, at, ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000)

    def _truncate(self, p: bytearray) -> None:
        del p[self.rng.randrange(len(p) + 1) :]

    def _append_garbage(self, p: bytearray) -> None:
        p += self.rng.randbytes(self.rng.randrange(1, 64))

    def _delete_chunk(self, p: bytearray) -> None:
        if p:
            at = self.rng.randrange(len(p))
            del p[at : at + self.rng.randrange(1, 16)]

    def _duplicate_chunk(self, p: bytearray) -> None:
        if p:
            at = self.rng.randrange(len(p))
            p[at:at] = p[at : at + self.rng.randrange(1, 32)]

    def _wrong_version(self, p: bytearray) -> None:
        if len(p) >= 4:
            INT16.pack_into(p, 2, self.rng.choice((-1, 0, 1, 5, 13, 18, 100, 0x7FFF)))

    def _wrong_key(self, p: bytearray) -> None:
        if len(p) >= 2:
            INT16.pack_into(p, 0, self.rng.choice((-1, 4, 5, 6, 7, 17, 24, 50, 68, 74, 1000, 0x7FFF)))

    def _overlong_varint(self, p: bytearray) -> None:
        at = self.rng.randrange(len(p) + 1)
        p[at:at] = b"\xff" * self.rng.randint(5, 11)

    def _garbage_tags(self, p: bytearray) -> None:
        # a tagged-field section in place of the last byte (usually the body's empty one): a tag count,
        # then tags with lengths that may lie
        tags = bytearray([self.rng.randint(1, 5)])
        for _ in range(tags[0]):
            tags += bytes([self.rng.randrange(0, 128), self.rng.choice((0, 1, 5, 0x7F))])
            tags += self.rng.randbytes(self.rng.randrange(0, 6))
        if p:
            del p[-1:]
        p += tags

    def _size_lie(self, p: bytearray) -> int:
        choice = self.rng.randrange(4)
        if choice == 0:
            return len(p) + self.rng.randint(1, 100)
        if choice == 1:
            return max(0, len(p) - self.rng.randint(1, 20))
        if choice == 2:
            return self.rng.choice((-1, -0x80000000, 0))
        return self.rng.choice((0x7FFFFFFF, 200 * 1024 * 1024, 100 * 1024 * 1024 + 1))


# --- the run -------------------------------------------------------------------------------------


@dataclass(slots=True)
class FuzzStats:
    """Counts of one fuzz run."""

    frames_sent: int = 0
    answered: int = 0
    closed_by_broker: int = 0
    unanswered: int = 0
    bad_answers: int = 0
    largest_frame: int = 0  # bytes: a connection's request buffer is bounded by it (RSS bound below)
    connections: int = 0
    connect_errors: int = 0
    seconds: float = 0.0
    by_api: dict[int, int] = field(default_factory=dict)
    bad_answer_samples: list[str] = field(default_factory=list)
    #: the slowest answered frames: (seconds, api key, version), a min-heap of at most 10
    slowest: list[tuple[float, int, int]] = field(default_factory=list)
    #: how late each paced frame was sent after its slot (seconds): the load's own steadiness
    pacing_late: list[float] = field(default_factory=list)
    #: answers large enough to be checked in the checker process (AnswerChecker)
    checked_off_loop: int = 0

    def note_pacing(self, late: float) -> None:
        self.pacing_late.append(late)

    def note_latency(self, seconds: float, frame: bytes) -> None:
        if len(frame) < 8:
            return
        api_key, version = INT16.unpack_from(frame, 4)[0], INT16.unpack_from(frame, 6)[0]
        if len(self.slowest) < 10:
            heapq.heappush(self.slowest, (seconds, api_key, version))
        elif seconds > self.slowest[0][0]:
            heapq.heapreplace(self.slowest, (seconds, api_key, version))

    @property
    def rate(self) -> float:
        return self.frames_sent / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "frames_sent": self.frames_sent,
            "answered": self.answered,
            "closed_by_broker": self.closed_by_broker,
            "unanswered": self.unanswered,
            "bad_answers": self.bad_answers,
            "connections": self.connections,
            "connect_errors": self.connect_errors,
            "largest_frame_bytes": self.largest_frame,
            "seconds": round(self.seconds, 1),
            "frames_per_second": round(self.rate),
            "apis_fuzzed": len(self.by_api),
            "bad_answer_samples": self.bad_answer_samples[:5],
            "checked_off_loop": self.checked_off_loop,
            "slowest_answers_ms": [
                (round(seconds * 1000), _api_name(key), version)
                for seconds, key, version in sorted(self.slowest, reverse=True)
            ],
            "pacing_late_ms": {
                "p50": round(percentile(self.pacing_late, 0.50) * 1000, 1),
                "p99": round(percentile(self.pacing_late, 0.99) * 1000, 1),
                "max": round(max(self.pacing_late, default=0.0) * 1000, 1),
            }
            if self.pacing_late
            else None,
        }


def _api_name(api_key: int) -> str:
    spec = messages.API_SPECS.get(api_key)
    return spec.name if spec is not None else str(api_key)


class _ConnectionClosed(Exception):
    pass


async def _receive_exactly(sock: trio.socket.SocketType, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        data = await sock.recv(count - len(chunks))
        if not data:
            raise _ConnectionClosed
        chunks += data
    return bytes(chunks)


def _check_answer(frame: bytes, answer: bytes) -> str | None:
    """Why the answer to `frame` is wrong, or None. `frame` includes its size prefix."""
    if len(frame) < 4 + PREFIX.size:
        return None  # the request had no complete prefix: nothing to match the answer against
    api_key, version, correlation = PREFIX.unpack_from(frame, 4)
    if len(answer) < 4:
        return f"answer of {len(answer)} bytes to api {api_key} v{version}"
    (answered_correlation,) = CORRELATION.unpack_from(answer)
    if answered_correlation != correlation:
        return f"correlation id {answered_correlation} answers {correlation} (api {api_key} v{version})"
    spec = messages.API_SPECS.get(api_key)
    if spec is None or not spec.min_version <= version <= spec.max_version:
        return None
    answer_version = version
    try:
        if api_key == ApiKey.API_VERSIONS and len(answer) >= 6 and INT16.unpack_from(answer, 4)[0] == 35:
            answer_version = 0  # UNSUPPORTED_VERSION answers come in the v0 layout (KIP-511)
        _, offset = decode_response_header(api_key, answer_version, answer)
        messages.decode_response(api_key, answer_version, memoryview(answer)[offset:])
    except Exception as exc:
        return f"undecodable answer to api {api_key} v{version}: {exc}"
    return None


#: answers at least this large are checked in a process of their own (`AnswerChecker`)
CHECK_OFF_LOOP_BYTES = 16 << 10


class AnswerChecker:
    """Checks answers (`_check_answer`): small ones in the calling task, large ones in a worker process.

    Decoding an answer of hundreds of KiB (a Metadata or DescribeGroups answer grows with the broker's
    state) holds the fuzzer's one loop for tens to hundreds of milliseconds, and every worker stalls
    with it: a paced run stops being paced and its sends bunch up behind each check. A thread would not
    do (the decode holds the GIL); a process keeps the loop free, at the cost of copying the answer
    there (small next to decoding it). The process is started on first use, so it inherits the
    fuzzer's niceness. Owned by one `fuzz()` run; its worker tasks call `check()`.
    """

    def __init__(self, off_loop_bytes: int = CHECK_OFF_LOOP_BYTES) -> None:
        self.off_loop_bytes = off_loop_bytes
        self.checked_off_loop = 0
        self._pool: Any = None

    async def check(self, frame: bytes, answer: bytes) -> str | None:
        if len(answer) < self.off_loop_bytes:
            return _check_answer(frame, answer)
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # forkserver, not fork: a fork of this process would copy a running trio loop's threads' state
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver"))
        self.checked_off_loop += 1
        future = self._pool.submit(_check_answer, frame, answer)
        # a cancelled run (the broker died, the time is up) stops waiting at once; the check itself ends
        # in its process, and close() does not wait for it either
        problem: str | None = await trio.to_thread.run_sync(future.result, abandon_on_cancel=True)
        return problem

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


async def fuzz(
    host: str,
    port: int,
    mutator_seeds: list[Seed],
    *,
    frames: int,
    seconds: float,
    connections: int = 64,
    rate: float | None = None,
    answer_timeout: float = 0.5,
    seed: int = 0,
    progress: Callable[[FuzzStats], None] | None = None,
    alternate: float | None = None,
) -> FuzzStats:
    """Send up to `frames` mutated frames for at most `seconds`, over `connections` concurrent tasks.
    With `alternate`, blocks of that many seconds take turns from the start: the first fuzzes, the
    next is quiet (every task waits, its connection open), and so on (see `alternating_split`)."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("the fuzzer only targets this machine")
    stats = FuzzStats()
    started = trio.current_time()
    deadline = started + seconds
    interval = 1.0 / rate if rate else 0.0
    next_slot = [started]

    def more() -> bool:
        return stats.frames_sent < frames and trio.current_time() < deadline

    def fuzzing_at(moment: float) -> float:
        """`moment`, or the start of the next fuzzing block if it falls in a quiet one."""
        if not alternate:
            return moment
        index, _, kind = block_at(moment - started, alternate)
        return moment if kind == "fuzzed" else started + (index + 1) * alternate

    async def pace() -> None:
        # No catching up: slots this process missed (its one loop checking a large answer, or starved
        # at a high niceness) are dropped, not sent at once, and a worker woken over a slot late takes
        # a fresh slot rather than send with every other worker woken by the same stall. With a second
        # of catch-up allowed, a 10-minute run's frames came in bursts of up to 80 in 10 ms by its third
        # minute (the answers it checks grow with the broker's state, and one check of a large answer
        # stalls every worker): a load that was no longer the paced one asked for.
        if not interval:
            if alternate:
                await trio.sleep_until(fuzzing_at(trio.current_time()))
            return
        first_late = None
        while True:
            slot = next_slot[0] = fuzzing_at(max(next_slot[0] + interval, trio.current_time()))
            await trio.sleep_until(slot)
            late = trio.current_time() - slot
            first_late = late if first_late is None else first_late
            if late <= interval:
                break
        stats.note_pacing(first_late)

    async def worker(index: int) -> None:
        mutator = Mutator(mutator_seeds, random.Random(seed * 1_000_003 + index))
        while more():
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                try:
                    await sock.connect((host, port))
                except OSError:
                    stats.connect_errors += 1
                    await trio.sleep(0.05)
                    continue
                stats.connections += 1
                while more():
                    await pace()
                    frame, promises_more = mutator.frame()
                    stats.frames_sent += 1
                    stats.largest_frame = max(stats.largest_frame, len(frame))
                    if len(frame) >= 6:
                        key = INT16.unpack_from(frame, 4)[0]
                        stats.by_api[key] = stats.by_api.get(key, 0) + 1
                    try:
                        await sock.send(frame)
                        if promises_more:
                            sock.shutdown(socket.SHUT_WR)  # the promised bytes never come
                        sent_at = trio.current_time()
                        answer = None
                        with trio.move_on_after(answer_timeout):  # for the answer, not its check
                            (size,) = SIZE.unpack(await _receive_exactly(sock, 4))
                            answer = await _receive_exactly(sock, size)
                            answered_in = trio.current_time() - sent_at
                        if answer is not None:
                            problem = await checker.check(frame, answer)
                            if problem is None:
                                stats.answered += 1
                                stats.note_latency(answered_in, frame)
                            else:
                                stats.bad_answers += 1
                                if len(stats.bad_answer_samples) < 20:
                                    stats.bad_answer_samples.append(problem)
                            if not promises_more:
                                continue
                    except (_ConnectionClosed, OSError):
                        stats.closed_by_broker += 1
                        break
                    stats.unanswered += 1
                    break
            finally:
                # reset, not FIN: no TIME_WAIT pile-up on this side over a million connections
                with contextlib.suppress(OSError):  # already closed by a failed connect
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()

    async def report() -> None:
        while progress is not None:
            await trio.sleep(2)
            stats.seconds = trio.current_time() - started
            progress(stats)

    checker = AnswerChecker()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(report)
            async with trio.open_nursery() as workers:
                for index in range(connections):
                    workers.start_soon(worker, index)
            nursery.cancel_scope.cancel()
    finally:
        checker.close()
    stats.seconds = trio.current_time() - started
    stats.checked_off_loop = checker.checked_off_loop
    return stats


# --- watching the broker -------------------------------------------------------------------------

_UNHANDLED = re.compile(r"Traceback \(most recent call last\)|unexpected error|Unhandled|CRITICAL")


def scan_log(path: str | Path, start: int = 0) -> list[str]:
    """Lines of the broker's log from byte `start` that show an unhandled error (tracebacks and the like)."""
    with open(path, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    lines = text.splitlines()
    found: list[str] = []
    covered = -1  # a traceback right after its "unexpected error" line is the same problem
    for i, line in enumerate(lines):
        if i > covered and _UNHANDLED.search(line):
            found.append("\n".join(lines[i : i + 12]))
            covered = i + 2
    return found


def loop_probe_windows(path: str | Path, start: int) -> list[dict[str, Any]]:
    """The loop probe's windows (KAFKACOMPAT_LOOP_PROBE, broker/loop_probe.py) in the broker's log from byte
    `start`, in order; garbled lines are skipped. Read once per log, then shared out by phase."""
    import json

    from kafkacompat.broker.loop_probe import LOG_MARKER

    with open(path, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    windows: list[dict[str, Any]] = []
    for line in text.splitlines():
        _, marker, payload = line.partition(LOG_MARKER)
        if not marker:
            continue
        try:
            windows.append(json.loads(payload))
        except ValueError:
            continue
    return windows


def loop_probe_phase(windows: list[dict[str, Any]], began: float, ended: float) -> dict[str, Any] | None:
    """The loop probe over one phase: the windows that lie wholly between the monotonic times `began` and
    `ended`, merged. None when there is no such window (the probe was off)."""
    return _merge_loop_probe(
        [
            row
            for row in windows
            if row["end_monotonic"] - row["seconds"] >= began and row["end_monotonic"] <= ended
        ]
    )


def loop_probe_alternating(
    windows: list[dict[str, Any]], began: float, ended: float, block_seconds: float
) -> dict[str, dict[str, Any] | None]:
    """The loop probe over an alternating fuzzer's blocks (as `alternating_split`, but in monotonic
    time): the windows that lie wholly inside one fuzzed block, merged, and those wholly inside one quiet
    block; a window across two blocks, or one that starts in a block's first second, counts for neither.
    A block holds a whole window for sure only when it is twice the window, margin aside."""
    rows: dict[str, list[dict[str, Any]]] = {"fuzzed_blocks": [], "quiet_blocks": []}
    for row in windows:
        start, end = row["end_monotonic"] - row["seconds"], row["end_monotonic"]
        block = alternating_block(start, began, block_seconds)
        if block is None or end > ended or end > began + (block[1] + 1) * block_seconds:
            continue
        rows[f"{block[0]}_blocks"].append(row)
    return {kind: _merge_loop_probe(chosen) for kind, chosen in rows.items()}


def _merge_loop_probe(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Loop-probe windows merged into one summary; None for no window."""
    from kafkacompat.broker.loop_probe import Histogram

    if not rows:
        return None
    turns, wakeups = Histogram(), Histogram()
    busy_seconds = seconds = 0.0
    for row in rows:
        seconds += row["seconds"]
        busy_seconds += row["busy"] * row["seconds"]
        turns.merge(row["turns_buckets"], row["turns_max_ms"] / 1000)
        wakeups.merge(row["wakeups_buckets"], row["wakeups_max_ms"] / 1000)
    summary: dict[str, Any] = {"windows": len(rows), "seconds": round(seconds, 1),
                               "busy": round(busy_seconds / seconds, 3) if seconds else 0.0}  # fmt: skip
    for name, histogram in (("turns", turns), ("wakeups", wakeups)):
        summary.update({key: value for key, value in histogram.summary(name).items() if "buckets" not in key})
    return summary


def read_rss_kib(pid: int) -> int | None:
    """Resident set size of a process in KiB (VmRSS from /proc), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def descriptor_census(pid: int) -> dict[str, int] | None:
    """The process's open descriptors by kind: sockets, partition-log files (.log/.index/.timeindex under
    a partition dir), other files, other (pipes, eventfds...); None if it is gone."""
    counts = {"total": 0, "sockets": 0, "log_files": 0, "deleted_log_files": 0, "other_files": 0, "other": 0}
    base = f"/proc/{pid}/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return None
    for name in names:
        try:
            target = os.readlink(f"{base}/{name}")
        except OSError:
            continue
        counts["total"] += 1
        if target.startswith("socket:"):
            counts["sockets"] += 1
        elif target.startswith("/"):
            if target.endswith((".log", ".index", ".timeindex", ".txnindex")):
                deleted = "-delete/" in target or target.endswith(" (deleted)") or ".deleted" in target
                counts["deleted_log_files" if deleted else "log_files"] += 1
            else:
                counts["other_files"] += 1
        else:
            counts["other"] += 1
    return counts


def read_threads(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def broker_state_counts(bootstrap: str, data_dir: Path | None) -> dict[str, int]:
    """What the run made the broker keep, as the broker itself reports it: partition logs (the data dir's
    partition dirs, deleted ones waiting for file.delete.delay.ms included; from Metadata when the data
    dir is unknown), groups and their members (ListGroups, DescribeGroups) with the bytes each member
    holds (ids, protocol metadata, assignment), and transactional ids (ListTransactions)."""
    from kafkacompat.client import KafkaClient

    counts = {"partition_logs": 0, "groups": 0, "members": 0, "member_bytes": 0, "transactional_ids": 0}
    if data_dir is not None:
        with contextlib.suppress(OSError):
            partition_dir = re.compile(r"-\d+(\.\w+-delete)?$")
            entries = os.scandir(data_dir)
            counts["partition_logs"] = sum(1 for e in entries if e.is_dir() and partition_dir.search(e.name))
    with KafkaClient(bootstrap, client_id="kafkacompat-fuzz-census", timeout=60) as client:
        if data_dir is None:
            answer = client.send(ApiKey.METADATA, _module_of(ApiKey.METADATA).MetadataRequest(topics=None))
            counts["partition_logs"] = sum(len(t.partitions) for t in answer.topics)
        listed = client.send(ApiKey.LIST_GROUPS, _module_of(ApiKey.LIST_GROUPS).ListGroupsRequest())
        groups = [g.group_id for g in listed.groups]
        counts["groups"] = len(groups)
        describe = _module_of(ApiKey.DESCRIBE_GROUPS).DescribeGroupsRequest
        for start in range(0, len(groups), 100):
            for group in client.send(
                ApiKey.DESCRIBE_GROUPS, describe(groups=groups[start : start + 100])
            ).groups:
                for member in group.members:
                    counts["members"] += 1
                    held = [member.member_metadata, member.member_assignment, member.member_id]
                    held += [member.client_id, member.client_host]
                    counts["member_bytes"] += sum(len(value or b"") for value in held)
        if ApiKey.LIST_TRANSACTIONS in client.connection().versions:
            counts["transactional_ids"] = len(
                client.send(
                    ApiKey.LIST_TRANSACTIONS, _module_of(ApiKey.LIST_TRANSACTIONS).ListTransactionsRequest()
                ).transaction_states
            )
    return counts


# The fuzz run's RSS bound (docs/RELIABILITY.md, "Live fuzzing"), in KiB: the connection terms of the
# "Connections" section, then costs per piece of state measured on this broker (an empty partition log
# 2.7 KiB, a group with one committed offset 1.2 KiB, a transactional id 0.6 KiB: about 3x is allowed
# for indexes, producer state and allocator overhead), plus a fixed slack for the interpreter's caches
# and heap fragmentation.
RSS_PER_CONNECTION_KIB = 16
RSS_SCRATCH_BUFFERS_KIB = 256 * 64
RSS_PER_PARTITION_LOG_KIB = 8
RSS_PER_GROUP_KIB = 4
RSS_PER_MEMBER_KIB = 4
RSS_PER_TRANSACTIONAL_ID_KIB = 2
RSS_SLACK_KIB = 64 * 1024


def rss_bound_kib(
    rss_idle_kib: int, sockets: int, fuzz_connections: int, largest_frame: int, state: dict[str, int]
) -> int:
    """RSS_idle + sockets x 16 KiB + 256 x 64 KiB + fuzzing connections x (64 KiB + 2 x largest frame +
    1 MiB) + partition logs x 8 KiB + groups x 4 KiB + members x 4 KiB + 2 x member bytes +
    transactional ids x 2 KiB + 64 MiB."""
    return int(
        rss_idle_kib
        + sockets * RSS_PER_CONNECTION_KIB
        + RSS_SCRATCH_BUFFERS_KIB
        + fuzz_connections * (64 + 2 * largest_frame / 1024 + 1024)
        + state.get("partition_logs", 0) * RSS_PER_PARTITION_LOG_KIB
        + state.get("groups", 0) * RSS_PER_GROUP_KIB
        + state.get("members", 0) * RSS_PER_MEMBER_KIB
        + 2 * state.get("member_bytes", 0) / 1024
        + state.get("transactional_ids", 0) * RSS_PER_TRANSACTIONAL_ID_KIB
        + RSS_SLACK_KIB
    )


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def now_ms() -> float:
    return time.time() * 1000


# --- preparing a run -----------------------------------------------------------------------------


def prepare_target(
    bootstrap: str, target: FuzzTarget | None = None
) -> tuple[dict[int, tuple[int, int]], FuzzTarget]:
    """Create the fuzz topic (with data), join the fuzz group once; return the served versions and target.

    Uses the project's own small client (kafkacompat.client), at the versions the broker advertises.
    """
    from kafkacompat.client import KafkaClient

    target = target or FuzzTarget()
    with KafkaClient(bootstrap, client_id="kafkacompat-fuzz-setup", timeout=30) as client:
        served = dict(client.connection().versions)
        create = _module_of(ApiKey.CREATE_TOPICS)
        client.send(
            ApiKey.CREATE_TOPICS,
            create.CreateTopicsRequest(
                topics=[
                    create.CreatableTopic(
                        name=target.topic, num_partitions=target.partitions, replication_factor=1
                    )
                ],
                timeout_ms=10000,
            ),
        )
        answer = client.metadata([target.topic])
        for topic in answer.topics:
            if topic.name == target.topic and getattr(topic, "topic_id", None) is not None:
                target.topic_id = topic.topic_id
        produce = _module_of(ApiKey.PRODUCE)
        for partition in range(target.partitions):
            client.send(
                ApiKey.PRODUCE,
                produce.ProduceRequest(
                    acks=-1,
                    timeout_ms=10000,
                    topic_data=[
                        produce.TopicProduceData(
                            name=target.topic,
                            partition_data=[
                                produce.PartitionProduceData(index=partition, records=_record_batches()[0])
                            ],
                        )
                    ],
                ),
            )
        join = _module_of(ApiKey.JOIN_GROUP)
        request = join.JoinGroupRequest(
            group_id=target.group,
            session_timeout_ms=30000,
            rebalance_timeout_ms=30000,
            member_id="",
            protocol_type="consumer",
            protocols=[
                join.JoinGroupRequestProtocol(name="range", metadata=_consumer_subscription(target.topic))
            ],
        )
        joined = client.send(ApiKey.JOIN_GROUP, request)
        if joined.error_code == 79:  # MEMBER_ID_REQUIRED: join again with the id given
            request.member_id = joined.member_id
            joined = client.send(ApiKey.JOIN_GROUP, request)
        if joined.error_code == 0:
            target.member_id, target.generation = joined.member_id, joined.generation_id
        # a transactional producer id for the transaction seeds
        if ApiKey.INIT_PRODUCER_ID in served and ApiKey.ADD_PARTITIONS_TO_TXN in served:
            init = _cls(ApiKey.INIT_PRODUCER_ID)(
                transactional_id=target.transactional_id, transaction_timeout_ms=60000
            )
            for _ in range(50):
                answer = client.send(ApiKey.INIT_PRODUCER_ID, init)
                if answer.error_code == 0:
                    target.txn_producer_id, target.txn_producer_epoch = (
                        answer.producer_id,
                        answer.producer_epoch,
                    )
                    break
                time.sleep(0.1)  # the coordinator is loading (__transaction_state just made)
    return served, target


# --- the well-behaved pair -----------------------------------------------------------------------


def good_pair(
    bootstrap: str, topic: str, seconds: float, rate: float, stop: Callable[[], bool]
) -> dict[str, Any]:
    """A confluent-kafka producer (acks=all) and a group consumer on `topic`, side by side for `seconds`.

    Each value carries its send time; the consumer measures end-to-end latency. Returns the latency
    percentiles, the produce acknowledgement latency, and every error either side saw. Every
    acknowledged record must be consumed (`lost` counts those that were not).
    """
    from confluent_kafka import Consumer, KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    for future in futures.values():
        try:
            future.result(15)
        except Exception as exc:  # TOPIC_ALREADY_EXISTS on a second phase
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    errors: list[str] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"good-pair-{topic}",
            "auto.offset.reset": "latest",
            "enable.auto.commit": True,
            "fetch.wait.max.ms": 100,
            "error_cb": lambda err: errors.append(f"consumer: {err}"),
        }
    )
    assigned: list[bool] = []
    consumer.subscribe([topic], on_assign=lambda c, parts: assigned.append(True))
    deadline = time.monotonic() + 30
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.1)
    if not assigned:
        errors.append("consumer: no assignment within 30 s")
    e2e: list[float] = []
    e2e_at: list[float] = []  # when each e2e sample was sent (ms), for the timeline
    seen: set[int] = set()
    sent_at: dict[int, float] = {}

    def drain(timeout: float) -> None:
        message = consumer.poll(timeout)
        while message is not None:
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(f"consume: {message.error()}")
            else:
                sequence = int(message.key())
                if sequence in sent_at and sequence not in seen:
                    seen.add(sequence)
                    e2e.append(now_ms() - sent_at[sequence])
                    e2e_at.append(sent_at[sequence])
            message = consumer.poll(0)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "enable.idempotence": True,
            "error_cb": lambda err: errors.append(f"producer: {err}"),
        }
    )
    # warm-up: producer id, metadata and connection are in place before anything is measured
    producer.produce(topic, key=b"-1", value=b"warm-up")
    producer.flush(30)
    drain(1.0)
    acked: set[int] = set()
    ack_latency: list[float] = []

    def delivered(err: Any, msg: Any) -> None:
        sequence = int(msg.key())
        if err is not None:
            errors.append(f"delivery: {err}")
            return
        acked.add(sequence)
        ack_latency.append(now_ms() - sent_at[sequence])

    started = time.monotonic()
    interval = 1.0 / rate
    next_send = started
    sequence = 0
    while time.monotonic() - started < seconds and not stop():
        now = time.monotonic()
        if now >= next_send:
            sent_at[sequence] = now_ms()
            producer.produce(topic, key=str(sequence).encode(), value=b"x" * 100, on_delivery=delivered)
            sequence += 1
            next_send += interval
        producer.poll(0)
        drain(max(0.0, min(next_send - time.monotonic(), 0.01)))
    producer.flush(30)
    settle = time.monotonic() + 15
    while len(seen & acked) < len(acked) and time.monotonic() < settle:
        drain(0.1)
    consumer.close()
    return {
        "records_sent": sequence,
        "acked": len(acked),
        "consumed": len(seen),
        "lost": len(acked - seen),
        "errors": errors[:20],
        "error_count": len(errors),
        "e2e_p50_ms": round(percentile(e2e, 0.50), 2),
        "e2e_p99_ms": round(percentile(e2e, 0.99), 2),
        "ack_p99_ms": round(percentile(ack_latency, 0.99), 2),
        "e2e_by_window": latency_windows(e2e_at, e2e, PAIR_WINDOW_SECONDS),
        # every sample (wall ms sent, ms taken), for a campaign that splits them by block; it takes
        # them out of its summary
        "e2e_samples": [[round(at, 1), round(took, 3)] for at, took in zip(e2e_at, e2e, strict=True)],
    }


#: the well-behaved pair's latency is also summed up per window of this many seconds, so a long run
#: tells a tail that grows with the broker's age from one spread evenly or from bursts
PAIR_WINDOW_SECONDS = 30.0


#: samples sent in a block's first this many seconds are left out of `alternating_split`: the fuzzer's
#: last answers (0.5 s at most) and the broker's work for them straddle the change
ALTERNATE_MARGIN_SECONDS = 1.0


def block_at(since: float, block_seconds: float) -> tuple[int, float, str]:
    """The index of the block that `since` seconds after the start fall in, how far into it, and its kind:
    blocks take turns from the start, the first "fuzzed", the next "quiet", and so on."""
    block, into = divmod(since, block_seconds)
    return int(block), into, ("fuzzed" if int(block) % 2 == 0 else "quiet")


def alternating_block(moment: float, began: float, block_seconds: float) -> tuple[str, int] | None:
    """The kind ("fuzzed" or "quiet") and index of the block that `moment` falls in, for a fuzzer that
    alternated (`fuzz(alternate=...)`) from `began`, fuzzing first; None before `began` and in a block's
    first ALTERNATE_MARGIN_SECONDS."""
    if block_seconds <= ALTERNATE_MARGIN_SECONDS:
        raise ValueError(
            f"blocks of {block_seconds} s leave nothing after their first {ALTERNATE_MARGIN_SECONDS} s"
        )
    if moment < began:
        return None
    index, into, kind = block_at(moment - began, block_seconds)
    if into < ALTERNATE_MARGIN_SECONDS:
        return None
    return kind, index


def alternating_split(
    samples: list[list[float]], began: float, ended: float, block_seconds: float
) -> dict[str, Any]:
    """A pair's samples ([wall ms sent, ms taken]) split by the block their send time fell in, for a fuzzer
    that alternated (`fuzz(alternate=...)`): blocks of `block_seconds` from `began` to `ended` (wall
    seconds), the first fuzzing, the next quiet, and so on. Both kinds of block share the machine's
    conditions of the same minutes, which a quiet run before the fuzzing does not: on this 2-core VM the
    quiet p99 swung 1.6-7.2 ms between runs of the same code."""
    taken: dict[str, list[float]] = {"quiet": [], "fuzzed": []}
    by_block: dict[tuple[int, str], list[float]] = {}  # (index, kind): index first, so sorted is in order
    for sent_ms, took in samples:
        sent = sent_ms / 1000
        block = alternating_block(sent, began, block_seconds)
        if block is None or sent >= ended:
            continue
        kind, index = block
        taken[kind].append(took)
        by_block.setdefault((index, kind), []).append(took)
    split: dict[str, Any] = {"block_seconds": block_seconds}
    for kind, values in taken.items():
        split[kind] = {
            "blocks": sum(1 for _, each in by_block if each == kind),
            "records": len(values),
            "e2e_p50_ms": round(percentile(values, 0.50), 2) if values else None,
            "e2e_p99_ms": round(percentile(values, 0.99), 2) if values else None,
        }
    ratio = _p99_ratio(split["quiet"], split["fuzzed"])
    if ratio is not None:
        split["p99_ratio"] = ratio
    # each block's own p99, in order: whether the quiet blocks drift with the broker's growing state
    split["per_block_p99_ms"] = [
        [index, round(percentile(values, 0.99), 2)] for (index, _), values in sorted(by_block.items())
    ]
    return split


def latency_windows(
    sent_ms: list[float], latency_ms: list[float], window_seconds: float
) -> list[dict[str, Any]]:
    """Per window of send time: how many records, their p50/p99/max latency, and how many took over 10 ms."""
    if not sent_ms:
        return []
    first = min(sent_ms)
    windows: dict[int, list[float]] = {}
    for sent, latency in zip(sent_ms, latency_ms, strict=True):
        windows.setdefault(int((sent - first) / (window_seconds * 1000)), []).append(latency)
    return [
        {
            "t": round(index * window_seconds),
            "records": len(values),
            "p50_ms": round(percentile(values, 0.50), 2),
            "p99_ms": round(percentile(values, 0.99), 2),
            "max_ms": round(max(values), 2),
            "over_10_ms": sum(1 for value in values if value > 10),
        }
        for index, values in sorted(windows.items())
    ]


# --- a campaign: quiet pair, then pair beside the fuzzer -----------------------------------------


@dataclass(slots=True)
class Campaign:
    """What one run asks for."""

    bootstrap: str
    broker_pid: int | None = None
    broker_log: str | None = None
    frames: int = 10_000
    seconds: float = 60.0
    connections: int = 64
    rate: float | None = None
    quiet_seconds: float = 10.0
    pair_rate: float = 100.0
    seed: int = 0
    progress: bool = False
    apis: list[int] | None = None  # fuzz only these api keys (default: every served one)
    #: niceness the fuzzer process takes once the broker and the pair are started (0: none): a hostile
    #: client normally runs on another machine, and its own CPU use on a small shared box is not broker
    #: unfairness; the broker and the pair keep their priority
    fuzzer_nice: int = 0
    #: CPUs the fuzzer process is confined to once the broker and the pair are started (None: any), for
    #: the same reason: so that it competes with the broker and the pair on those CPUs only
    fuzzer_cpus: list[int] | None = None
    #: run the fuzzer under SCHED_IDLE (see `idle_process`)
    fuzzer_idle: bool = False
    #: alternate fuzzing and quiet blocks of this many seconds beside the pair (`fuzz(alternate=...)`,
    #: `alternating_split`); None: fuzz throughout
    alternate: float | None = None
    data_dir_is_log_dir: bool = False  # the broker log lies in the broker's data dir (a broker we started)
    #: a second, idle broker: a second pair runs against it (alone for its quiet figure, then beside the
    #: first pair and the fuzzer), so that what the fuzzer's load on the machine costs any client is
    #: measured apart from what the fuzzed broker's serving of it costs
    control_bootstrap: str | None = None
    control_log: str | None = None  # the control broker's log (its loop probe, when on)


def _pair_subprocess(bootstrap: str, topic: str, seconds: float, rate: float) -> Any:
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "kafkacompat.fuzzing.seeds", "good-pair", "--bootstrap", bootstrap,
         "--topic", topic, "--seconds", str(seconds), "--rate", str(rate)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _pair_result(process: Any, *, interrupt: bool = True) -> dict[str, Any]:
    import json
    import signal

    if interrupt and process.poll() is None:
        process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=120 if interrupt else 300)
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"errors": [f"good pair exited with {process.returncode} and no summary"], "error_count": 1}


def _every_thread(action: Callable[[int], None]) -> None:
    """Apply `action` to each thread of this process (Linux keeps affinity and scheduling policy per
    thread; the threads started later inherit them from the one that starts them)."""
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            action(int(task))


def confine_process(cpus: list[int]) -> None:
    """Confine every thread of this process, and the threads it starts later, to `cpus`."""
    _every_thread(lambda tid: os.sched_setaffinity(tid, cpus))


def idle_process() -> None:
    """Put every thread of this process, and the threads it starts later, under SCHED_IDLE: it runs
    only on a CPU that nothing else wants, and any other task that wakes takes the CPU from it at once
    (a niced task keeps a small weight, and the scheduler may let it finish its slice first)."""
    _every_thread(lambda tid: os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0)))


def _p99_ratio(quiet: dict[str, Any], fuzzed: dict[str, Any]) -> float | None:
    """A pair's end-to-end p99 beside the fuzzer over its quiet one (None when either run measured none)."""
    quiet_p99, fuzzed_p99 = quiet.get("e2e_p99_ms"), fuzzed.get("e2e_p99_ms")
    if not quiet_p99 or not fuzzed_p99:
        return None
    return round(fuzzed_p99 / quiet_p99, 2)


def run_campaign(c: Campaign) -> dict[str, Any]:
    """Prepare, run the pair alone (quiet), then the pair beside the fuzzer; watch the broker throughout."""
    import json
    import sys

    host, _, port_text = c.bootstrap.rpartition(":")
    log_start = Path(c.broker_log).stat().st_size if c.broker_log else 0
    control_log_start = Path(c.control_log).stat().st_size if c.control_log else 0
    phases: dict[str, tuple[float, float]] = {}  # monotonic bounds of the quiet and the fuzzed phase
    served, target = prepare_target(c.bootstrap)
    if c.apis:
        served = {key: versions for key, versions in served.items() if key in c.apis}
    seeds = build_seeds(served, target)
    result: dict[str, Any] = {"seeds": len(seeds), "apis": len({s.api_key for s in seeds})}
    run_tag = f"{os.getpid()}-{int(time.time())}"  # a pair of an earlier run must never share names
    if c.quiet_seconds > 0:
        quiet_began = time.monotonic()
        quiet = _pair_subprocess(c.bootstrap, f"good-pair-quiet-{run_tag}", c.quiet_seconds, c.pair_rate)
        result["quiet_pair"] = _pair_result_wait(quiet)
        phases["quiet"] = (quiet_began, time.monotonic())
        if c.control_bootstrap:
            # after the pair's quiet run, not beside it: each quiet figure is one pair alone on the
            # machine, as without a control (beside the fuzzer both pairs run, which weighs on both)
            control_began = time.monotonic()
            control_quiet = _pair_subprocess(
                c.control_bootstrap, f"control-pair-quiet-{run_tag}", c.quiet_seconds, c.pair_rate
            )
            result["control_pair"] = {"quiet": _pair_result_wait(control_quiet)}
            phases["control_quiet"] = (control_began, time.monotonic())
    rss: list[int] = []
    fds: list[int] = []
    timeline: list[dict[str, Any]] = []  # every 10 s: RSS, descriptors by kind, threads
    state_peak: dict[str, int] = {}  # every 30 s: the largest of each count of broker_state_counts
    data_dir = Path(c.broker_log).parent if c.broker_log and c.data_dir_is_log_dir else None

    async def census() -> None:
        while True:
            try:
                counts = await trio.to_thread.run_sync(
                    broker_state_counts, c.bootstrap, data_dir, abandon_on_cancel=True
                )
            except Exception as exc:  # a busy broker may time the census out: try again
                print(f"\nstate census failed: {exc}", file=sys.stderr)
            else:
                for key, value in counts.items():
                    state_peak[key] = max(state_peak.get(key, 0), value)
                if c.progress:
                    print(f"\nstate {json.dumps(counts)}", file=sys.stderr, flush=True)
            await trio.sleep(30)

    alive = [True]
    began = time.monotonic()

    async def watch_broker(cancel: trio.CancelScope) -> None:
        while c.broker_pid is not None:
            sample = read_rss_kib(c.broker_pid)
            if sample is None:
                alive[0] = False
                cancel.cancel()
                return
            rss.append(sample)
            with contextlib.suppress(OSError):
                fds.append(len(os.listdir(f"/proc/{c.broker_pid}/fd")))
            if not timeline or time.monotonic() - began >= timeline[-1]["t"] + 10:
                census = descriptor_census(c.broker_pid) or {}
                timeline.append({"t": round(time.monotonic() - began), "rss_mib": sample // 1024,
                                 "threads": read_threads(c.broker_pid), **census})  # fmt: skip
                if c.progress:
                    print(f"\n{json.dumps(timeline[-1])}", file=sys.stderr, flush=True)
            await trio.sleep(0.5)

    def show(stats: FuzzStats) -> None:
        line = (f"\r{stats.frames_sent:>9} frames {stats.rate:>7.0f}/s  answered {stats.answered}  closed "
                f"{stats.closed_by_broker}  unanswered {stats.unanswered}  bad {stats.bad_answers}  rss "
                f"{(rss[-1] if rss else 0) // 1024} MiB")  # fmt: skip
        print(line, end="", file=sys.stderr, flush=True)

    fuzz_wall: list[float] = []  # wall seconds when the fuzzing began and ended (alternating blocks)

    async def main() -> FuzzStats:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_broker, nursery.cancel_scope)
            nursery.start_soon(census)
            fuzz_wall.append(time.time())
            stats = await fuzz(
                host,
                int(port_text),
                seeds,
                frames=c.frames,
                seconds=c.seconds,
                connections=c.connections,
                rate=c.rate,
                seed=c.seed,
                progress=show if c.progress else None,
                alternate=c.alternate,
            )
            fuzz_wall.append(time.time())
            nursery.cancel_scope.cancel()
        return stats

    pair = _pair_subprocess(c.bootstrap, f"good-pair-fuzzed-{run_tag}", c.seconds + 60, c.pair_rate)
    control = None
    if c.control_bootstrap:
        control = _pair_subprocess(
            c.control_bootstrap, f"control-pair-fuzzed-{run_tag}", c.seconds + 60, c.pair_rate
        )
    try:
        time.sleep(3)  # the pair has joined its group and is producing before the fuzzing starts
        if c.fuzzer_nice:
            os.nice(c.fuzzer_nice)  # this process only: the broker and the pair were started before
        if c.fuzzer_cpus:
            confine_process(c.fuzzer_cpus)
        if c.fuzzer_idle:
            idle_process()
        fuzz_began = time.monotonic()
        stats = trio.run(main)
        phases["fuzzed"] = (fuzz_began, time.monotonic())
    except BaseException:
        pair.kill()
        if control is not None:
            control.kill()
        raise
    if c.progress:
        print(file=sys.stderr)
    result["fuzzed_pair"] = _pair_result(pair)
    if control is not None:
        control_result = result.setdefault("control_pair", {})
        control_result["fuzzed"] = _pair_result(control)
        control_ratio = _p99_ratio(control_result.get("quiet", {}), control_result["fuzzed"])
        if control_ratio is not None and not c.alternate:  # alternating: see control_pair.alternating
            control_result["p99_ratio"] = control_ratio
    # each pair's samples: split by block when the fuzzer alternated, then out of the summary
    control_pair = result.get("control_pair", {})
    result.get("quiet_pair", {}).pop("e2e_samples", None)
    control_pair.get("quiet", {}).pop("e2e_samples", None)
    samples = result["fuzzed_pair"].pop("e2e_samples", [])
    control_samples = control_pair.get("fuzzed", {}).pop("e2e_samples", [])
    if c.alternate and len(fuzz_wall) == 2:
        result["alternating"] = alternating_split(samples, *fuzz_wall, c.alternate)
        # the fuzzed blocks against the quiet run before the fuzzing too: the quiet blocks follow fuzzed
        # ones, on a broker whose state the fuzzer grew (the loop probe's quiet_blocks say how busy it is)
        over_quiet_run = _p99_ratio(result.get("quiet_pair", {}), result["alternating"]["fuzzed"])
        if over_quiet_run is not None:
            result["alternating"]["fuzzed_blocks_over_quiet_run"] = over_quiet_run
        if control is not None:
            control_split = alternating_split(control_samples, *fuzz_wall, c.alternate)
            result["control_pair"]["alternating"] = control_split
            if result["alternating"].get("p99_ratio") and control_split.get("p99_ratio"):
                result["alternating"]["p99_ratio_beyond_control"] = round(
                    result["alternating"]["p99_ratio"] / control_split["p99_ratio"], 2
                )
    result["fuzz"] = stats.as_dict()
    result["broker_alive"] = alive[0] and (c.broker_pid is None or read_rss_kib(c.broker_pid) is not None)
    if rss:
        result["rss_mib"] = {"start": rss[0] // 1024, "peak": max(rss) // 1024, "end": rss[-1] // 1024}
    if fds:
        result["open_fds"] = {"start": fds[0], "peak": max(fds), "end": fds[-1]}
    result["timeline"] = timeline
    with contextlib.suppress(Exception):  # the state at the end counts too (it may be the largest)
        for key, value in broker_state_counts(c.bootstrap, data_dir).items():
            state_peak[key] = max(state_peak.get(key, 0), value)
    if rss and timeline:
        sockets_peak = max(sample.get("sockets", 0) for sample in timeline)
        bound = rss_bound_kib(rss[0], sockets_peak, c.connections, stats.largest_frame, state_peak)
        result["rss_bound"] = {
            "state_peak": state_peak,
            "sockets_peak": sockets_peak,
            "bound_mib": bound // 1024,
            "rss_peak_mib": max(rss) // 1024,
            "within": max(rss) <= bound,
        }
    if c.alternate:
        # the whole run's figures mix fuzzed and quiet blocks: labelled, and no ratio made of them
        result["fuzzed_pair"]["mixes_fuzzed_and_quiet_blocks"] = True
    ratio = _p99_ratio(result.get("quiet_pair", {}), result["fuzzed_pair"])
    if ratio is not None and not c.alternate:
        result["p99_ratio"] = ratio
        control_ratio = result.get("control_pair", {}).get("p99_ratio")
        if control_ratio:
            # the part of the ratio that the broker's own serving of the fuzzer accounts for
            result["p99_ratio_beyond_control"] = round(result["p99_ratio"] / control_ratio, 2)
    result["load_average"] = os.getloadavg()
    result["fuzzer_nice"] = c.fuzzer_nice
    result["fuzzer_cpus"] = c.fuzzer_cpus
    result["fuzzer_idle"] = c.fuzzer_idle
    result["alternate"] = c.alternate
    if c.broker_log:
        result["log_problems"] = scan_log(c.broker_log, log_start)[:10]
    # the loop probe, when the brokers run it: the fuzzed broker's turns and wake-ups against the idle
    # control broker's (the machine's share of a wake-up's delay), each per phase
    for key, path, start, quiet_phase in (
        ("loop_probe", c.broker_log, log_start, "quiet"),
        ("control_loop_probe", c.control_log, control_log_start, "control_quiet"),
    ):
        if path:
            windows = loop_probe_windows(path, start)
            probe: dict[str, dict[str, Any] | None] = {}
            if quiet_phase in phases:
                probe["quiet"] = loop_probe_phase(windows, *phases[quiet_phase])
            if c.alternate and "fuzzed" in phases:
                # the blocks as the loop probe's windows see them (monotonic): the fuzzed phase began
                # a trio start-up before the blocks did, well inside the margin of alternating_block
                probe.update(loop_probe_alternating(windows, *phases["fuzzed"], c.alternate))
            elif "fuzzed" in phases:
                probe["fuzzed"] = loop_probe_phase(windows, *phases["fuzzed"])
            if any(probe.values()):
                result[key] = probe
    return result


def _pair_result_wait(process: Any) -> dict[str, Any]:
    """The summary of a pair that runs out its time. Read while it runs, not after it exits: a summary
    larger than the pipe's buffer (64 KiB; every sample is in it) would block the pair's exit."""
    return _pair_result(process, interrupt=False)


# --- command line --------------------------------------------------------------------------------

HELP = """Live protocol fuzzing of a kafkacompat (or any Kafka) broker on this machine.

  run        start a broker in a temp dir (or use --bootstrap/--broker-pid/--broker-log), run the
             well-behaved pair alone, then beside the fuzzer; print a JSON summary
  good-pair  the well-behaved producer/consumer pair alone (used by `run`, in its own process)
"""


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import signal
    import sys
    import tempfile

    parser = argparse.ArgumentParser(prog="tools/fuzz.py", description=HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run")
    run.add_argument("--bootstrap", help="an already running broker on 127.0.0.1 (default: start one)")
    run.add_argument("--broker-pid", type=int, help="pid of that broker, for RSS and liveness")
    run.add_argument("--broker-log", help="its log file, scanned for tracebacks")
    run.add_argument("--frames", type=int, default=1_000_000)
    run.add_argument("--seconds", type=float, default=3600)
    run.add_argument(
        "--connections", type=int, default=64, help="concurrent connections (the rate grows with them)"
    )
    run.add_argument("--rate", type=float, help="frames per second (default: as fast as possible)")
    run.add_argument("--quiet-seconds", type=float, default=30)
    run.add_argument("--pair-rate", type=float, default=100, help="records per second of the good pair")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--json", help="also write the summary here")
    run.add_argument(
        "--data-dir", help="the started broker's data dir, kept afterwards (default: a temp dir)"
    )
    run.add_argument("--apis", help="comma-separated api keys to fuzz (default: every served api)")
    run.add_argument(
        "--fuzzer-nice",
        type=int,
        default=0,
        help="run the fuzzer itself at this niceness (the broker and the pair keep theirs): on a small"
        " shared machine its own CPU use is not broker unfairness",
    )
    run.add_argument(
        "--fuzzer-cpus",
        help="comma-separated CPUs the fuzzer itself is confined to (the broker and the pair may use"
        " any): as --fuzzer-nice, so that its own CPU use weighs on those CPUs only",
    )
    run.add_argument(
        "--alternate",
        type=float,
        metavar="SECONDS",
        help="fuzz and pause in turns, blocks of SECONDS, beside the same pair (and the control pair):"
        " the summary's `alternating` compares the pair's p99 in the quiet blocks with the fuzzed ones,"
        " both taken in the same minutes of the machine",
    )
    run.add_argument(
        "--fuzzer-idle",
        action="store_true",
        help="run the fuzzer itself under SCHED_IDLE (the broker and the pair keep theirs): it takes only"
        " CPU time nothing else wants, as a hostile client on another machine would",
    )
    run.add_argument(
        "--control-pair",
        action="store_true",
        help="also start a second, idle broker and a second pair against it (quiet alone after the"
        " first, then beside it and the fuzzer): its p99 ratio is what the fuzzer's load on the machine"
        " costs any client",
    )
    run.add_argument(
        "--loop-probe",
        type=float,
        metavar="SECONDS",
        help="start the brokers with their loop probe on (KAFKACOMPAT_LOOP_PROBE, a window of this many"
        " seconds): the summary then has each broker's loop turns and socket wake-up delays per phase",
    )
    pair = commands.add_parser("good-pair")
    pair.add_argument("--bootstrap", required=True)
    pair.add_argument("--topic", required=True)
    pair.add_argument("--seconds", type=float, default=30)
    pair.add_argument("--rate", type=float, default=100)
    args = parser.parse_args(argv)

    if args.command == "run" and args.alternate is not None:
        if args.alternate <= ALTERNATE_MARGIN_SECONDS:
            parser.error(f"--alternate must exceed {ALTERNATE_MARGIN_SECONDS} s: each block's first"
                         f" {ALTERNATE_MARGIN_SECONDS} s is left out of the figures")  # fmt: skip
        if args.loop_probe and args.alternate - ALTERNATE_MARGIN_SECONDS < 2 * args.loop_probe:
            print(
                f"warning: with --loop-probe {args.loop_probe:g} a block of {args.alternate:g} s may hold"
                " no whole probe window (those across two blocks count for neither)",
                file=sys.stderr,
            )

    if args.command == "good-pair":
        stopping: list[bool] = []
        signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
        print(
            json.dumps(good_pair(args.bootstrap, args.topic, args.seconds, args.rate, lambda: bool(stopping)))
        )
        return 0

    campaign = Campaign(
        bootstrap=args.bootstrap or "",
        broker_pid=args.broker_pid,
        broker_log=args.broker_log,
        frames=args.frames,
        seconds=args.seconds,
        connections=args.connections,
        rate=args.rate,
        quiet_seconds=args.quiet_seconds,
        pair_rate=args.pair_rate,
        seed=args.seed,
        progress=True,
        apis=[int(key) for key in args.apis.split(",")] if args.apis else None,
        fuzzer_nice=args.fuzzer_nice,
        fuzzer_cpus=[int(cpu) for cpu in args.fuzzer_cpus.split(",")] if args.fuzzer_cpus else None,
        fuzzer_idle=args.fuzzer_idle,
        alternate=args.alternate,
    )
    broker = control_broker = None
    if args.loop_probe:
        from kafkacompat.broker.loop_probe import ENVIRONMENT_VARIABLE

        os.environ[ENVIRONMENT_VARIABLE] = str(args.loop_probe)  # the brokers started below inherit it
    with tempfile.TemporaryDirectory(prefix="kafkacompat-fuzz-") as tmp:
        if args.control_pair:
            from kafkacompat.local_brokers import BrokerProcess

            control_broker = BrokerProcess(
                Path(tmp) / "control", ["group.initial.rebalance.delay.ms=0"]
            ).start()
            campaign.control_bootstrap = control_broker.bootstrap
            campaign.control_log = str(control_broker.log_path)
        if not args.bootstrap:
            from kafkacompat.local_brokers import BrokerProcess

            data_dir = Path(args.data_dir) if args.data_dir else Path(tmp) / "data"
            broker = BrokerProcess(data_dir, ["group.initial.rebalance.delay.ms=0"]).start()
            assert broker.process is not None
            campaign.bootstrap = broker.bootstrap
            campaign.broker_pid = broker.process.pid
            campaign.broker_log = str(broker.log_path)
            campaign.data_dir_is_log_dir = True
        try:
            result = run_campaign(campaign)
        finally:
            if broker is not None:
                result_exit = broker.stop()
                print(f"broker exit status {result_exit}", file=sys.stderr)
            if control_broker is not None:
                control_broker.stop()
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    ok = result["broker_alive"] and not result.get("log_problems") and result["fuzz"]["bad_answers"] == 0
    ok = ok and result.get("rss_bound", {}).get("within", True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
