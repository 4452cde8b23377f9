"""The fuzzer's seeds: one meaningful request per served API at every version, and what they refer to.

Theory of operation: `build_seeds()` builds one meaningful request per served API (a produce of a real
record batch to the fuzz topic, a fetch from it, a JoinGroup with consumer-protocol metadata, an
AlterConfigs of a topic config, ...) with the generated codecs and encodes it at every version the broker
advertises (its ApiVersions answer). An API without a hand-written seed (one added later) still gets a
seed: its request object with default field values. Seeds are only the starting point: no seed is ever
sent unmutated (kafkacompat.fuzzing.mutations).

The seeds name what `prepare_target()` makes on the broker before a run, with the project's own small
client at the versions the broker advertises: the fuzz topic with records in it, a member of the fuzz
group, and a transactional producer id for the transaction seeds. The frame layout (size prefix,
request header prefix) is here too, for the modules that build and read frames.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafkacompat.wire import messages
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.records import CompressionCodec, build_batch

__all__ = [
    "CORRELATION",
    "INT16",
    "INT32",
    "PREFIX",
    "SIZE",
    "FuzzTarget",
    "Seed",
    "build_seeds",
    "module_of",
    "prepare_target",
]


# the frame layout: a frame's size prefix, and the api key, version and correlation id that open a request
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
            mod = module_of(ApiKey.PRODUCE)
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
        m = module_of(ApiKey.FETCH)
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
        m = module_of(ApiKey.LIST_OFFSETS)
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
        m = module_of(ApiKey.METADATA)
        return m.MetadataRequest(
            topics=[m.MetadataRequestTopic(name=t.topic, topic_id=t.topic_id)],
            allow_auto_topic_creation=False,
        )

    def offset_commit() -> Any:
        m = module_of(ApiKey.OFFSET_COMMIT)
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
        m = module_of(ApiKey.OFFSET_FETCH)
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
        m = module_of(ApiKey.JOIN_GROUP)
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
        m = module_of(ApiKey.LEAVE_GROUP)
        return m.LeaveGroupRequest(
            group_id=t.group, member_id="nobody", members=[m.MemberIdentity(member_id="nobody")]
        )

    def sync_group() -> Any:
        m = module_of(ApiKey.SYNC_GROUP)
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
        m = module_of(ApiKey.CREATE_TOPICS)
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
        m = module_of(ApiKey.CREATE_TOPICS)
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
        m = module_of(ApiKey.DELETE_TOPICS)
        return m.DeleteTopicsRequest(
            topics=[m.DeleteTopicState(name="fuzz-new")], topic_names=["fuzz-new"], timeout_ms=5000
        )

    def delete_records() -> Any:
        m = module_of(ApiKey.DELETE_RECORDS)
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
        m = module_of(ApiKey.OFFSET_FOR_LEADER_EPOCH)
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
        m = module_of(ApiKey.DESCRIBE_CONFIGS)
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
        m = module_of(ApiKey.ALTER_CONFIGS)
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
        m = module_of(ApiKey.DESCRIBE_LOG_DIRS)
        return m.DescribeLogDirsRequest(topics=[m.DescribableLogDirTopic(topic=t.topic, partitions=[0, 1])])

    def create_partitions() -> Any:
        m = module_of(ApiKey.CREATE_PARTITIONS)
        return m.CreatePartitionsRequest(
            topics=[m.CreatePartitionsTopic(name=t.topic, count=t.partitions, assignments=None)],
            timeout_ms=5000,
            validate_only=True,
        )

    def delete_groups() -> Any:
        return _cls(ApiKey.DELETE_GROUPS)(groups_names=["fuzz-empty-group"])

    def incremental_alter_configs() -> Any:
        m = module_of(ApiKey.INCREMENTAL_ALTER_CONFIGS)
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
        m = module_of(ApiKey.OFFSET_DELETE)
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
        m = module_of(ApiKey.DESCRIBE_PRODUCERS)
        return m.DescribeProducersRequest(topics=[m.TopicRequest(name=t.topic, partition_indexes=[0, 1, 2])])

    def describe_topic_partitions() -> Any:
        m = module_of(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
        return m.DescribeTopicPartitionsRequest(
            topics=[m.TopicRequest(name=t.topic)],
            response_partition_limit=2,
            cursor=m.Cursor(topic_name=t.topic, partition_index=1),
        )

    txn = (t.transactional_id, t.txn_producer_id, t.txn_producer_epoch)

    def add_partitions_to_txn() -> Any:
        m = module_of(ApiKey.ADD_PARTITIONS_TO_TXN)
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
        m = module_of(ApiKey.WRITE_TXN_MARKERS)
        marker = m.WritableTxnMarker(
            producer_id=txn[1],
            producer_epoch=txn[2],
            transaction_result=True,
            topics=[m.WritableTxnMarkerTopic(name=t.topic, partition_indexes=[0])],
            coordinator_epoch=0,
        )
        return m.WriteTxnMarkersRequest(markers=[marker])

    def txn_offset_commit() -> Any:
        m = module_of(ApiKey.TXN_OFFSET_COMMIT)
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


def module_of(api_key: int) -> Any:
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
        create = module_of(ApiKey.CREATE_TOPICS)
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
        produce = module_of(ApiKey.PRODUCE)
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
        join = module_of(ApiKey.JOIN_GROUP)
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
