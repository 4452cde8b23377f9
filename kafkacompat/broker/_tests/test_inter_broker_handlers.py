"""LeaderAndIsr, UpdateMetadata, StopReplica and AlterPartition on the wire: served only in cluster mode,
and their error answers (authorization, broker epoch, controller epoch, per-partition leader epochs).

The broker state is the admin harness's (a real BrokerState in a temp dir) with a `ClusterRuntime`
attached whose ZooKeeper session is never started: these requests act on the broker's own state, so no
ZooKeeper is needed for their answers (the cluster compat tests run them between real brokers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafkacompat.broker import dispatch
from kafkacompat.broker._tests.test_admin_harness import AdminHarness
from kafkacompat.broker.handlers import (
    alter_partition,
    create_topics,
    leader_and_isr,
    stop_replica,
    update_metadata,
)
from kafkacompat.replication.cluster import ClusterRuntime
from kafkacompat.replication.zookeeper import ZooKeeperStore
from kafkacompat.security.acls import AclStore, Authorizer
from kafkacompat.wire._generated.create_topics_request import CreatableTopic
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.messages import request_class

INTER_BROKER = {4: (0, 7), 5: (0, 4), 6: (0, 8), 56: (0, 3)}
BROKER_EPOCH = 500
CONTROLLER_EPOCH = 3


def test_served_and_advertised_only_in_cluster_mode() -> None:
    single = {key: (low, high) for key, low, high in dispatch.supported_versions()}
    cluster = {key: (low, high) for key, low, high in dispatch.supported_versions(cluster_mode=True)}
    for key, expected in INTER_BROKER.items():
        assert key not in single and dispatch.lookup(key, expected[1]) is None
        assert cluster[key] == expected and dispatch.lookup(key, expected[1], cluster_mode=True) is not None
    assert {k: v for k, v in cluster.items() if k not in INTER_BROKER} == single


@pytest.fixture
async def harness(tmp_path: Path) -> Any:
    h = AdminHarness(tmp_path / "data")
    topic = CreatableTopic(name="t", num_partitions=2, replication_factor=1)
    created = await h.call(create_topics, 7, topics=[topic], timeout_ms=1000, validate_only=False)
    assert created.topics[0].error_code == ErrorCode.NONE
    runtime = ClusterRuntime(h.state, ZooKeeperStore("127.0.0.1:1"))
    runtime.broker_epoch = BROKER_EPOCH
    runtime.known_controller_epoch = CONTROLLER_EPOCH
    single_node, single_node_topics = h.state.replicas, h.state.topic_admin
    h.state.attach_cluster(runtime)
    yield h
    h.state.cluster = None
    h.state.replicas, h.state.topic_admin = single_node, single_node_topics
    h.close()


LeaderAndIsr = request_class(4)


def partition_state(partition: int, leader: int, epoch: int, replicas: list[int]) -> Any:
    return LeaderAndIsr.LeaderAndIsrPartitionState(
        topic_name="t",
        partition_index=partition,
        controller_epoch=CONTROLLER_EPOCH,
        leader=leader,
        leader_epoch=epoch,
        isr=list(replicas),
        partition_epoch=epoch,
        replicas=list(replicas),
    )


async def send_leader_and_isr(
    h: AdminHarness,
    states: list[Any],
    *,
    version: int = 7,
    controller_epoch: int = CONTROLLER_EPOCH,
    broker_epoch: int = BROKER_EPOCH,
) -> tuple[int, list[int]]:
    fields: dict[str, Any] = {
        "controller_id": 2,
        "controller_epoch": controller_epoch,
        "broker_epoch": broker_epoch,
    }
    if version < 2:
        fields["ungrouped_partition_states"] = states
    else:
        fields["topic_states"] = [
            LeaderAndIsr.LeaderAndIsrTopicState(topic_name="t", partition_states=states)
        ]
    response = await h.call(leader_and_isr, version, **fields)
    if version < 5:
        return response.error_code, [p.error_code for p in response.partition_errors]
    return response.error_code, [p.error_code for t in response.topics for p in t.partition_errors]


@pytest.mark.parametrize("version", [1, 4, 7])
async def test_leader_and_isr_takes_roles_by_leader_epoch(harness: AdminHarness, version: int) -> None:
    cluster = harness.state.cluster
    assert cluster is not None
    assert await send_leader_and_isr(harness, [partition_state(0, 1, 4, [1, 2])], version=version) == (0, [0])
    assert cluster.partitions[("t", 0)].is_leader and cluster.partitions[("t", 0)].leader_epoch == 4
    # the same epoch again, an older one, and a partition this broker is not a replica of
    same = await send_leader_and_isr(harness, [partition_state(0, 1, 4, [1, 2])], version=version)
    assert same == (0, [ErrorCode.FENCED_LEADER_EPOCH])
    older = await send_leader_and_isr(harness, [partition_state(0, 2, 3, [1, 2])], version=version)
    assert older == (0, [ErrorCode.STALE_CONTROLLER_EPOCH])
    assert await send_leader_and_isr(harness, [partition_state(1, 2, 0, [2, 3])], version=version) == (
        0,
        [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION],
    )
    # a newer epoch led by another broker makes this one a follower
    assert await send_leader_and_isr(harness, [partition_state(0, 2, 5, [1, 2])], version=version) == (0, [0])
    assert cluster.partitions[("t", 0)].role.name == "FOLLOWER"


@pytest.mark.parametrize(
    ("controller_epoch", "broker_epoch", "expected"),
    [
        (CONTROLLER_EPOCH - 1, BROKER_EPOCH, ErrorCode.STALE_CONTROLLER_EPOCH),
        (CONTROLLER_EPOCH, BROKER_EPOCH - 1, ErrorCode.STALE_BROKER_EPOCH),
    ],
)
async def test_stale_epochs_are_refused_by_every_controller_request(
    harness: AdminHarness, controller_epoch: int, broker_epoch: int, expected: ErrorCode
) -> None:
    answer = await send_leader_and_isr(
        harness, [partition_state(0, 1, 9, [1])], controller_epoch=controller_epoch, broker_epoch=broker_epoch
    )
    assert answer == (expected, [expected])
    assert ("t", 0) not in harness.state.cluster.partitions  # type: ignore[union-attr]
    response = await harness.call(
        update_metadata, 8, controller_id=2, controller_epoch=controller_epoch, broker_epoch=broker_epoch
    )
    assert response.error_code == expected
    stop = request_class(5)
    response = await harness.call(
        stop_replica,
        4,
        controller_id=2,
        controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        topic_states=[
            stop.StopReplicaTopicState(
                topic_name="t",
                partition_states=[
                    stop.StopReplicaPartitionState(partition_index=0, leader_epoch=-2, delete_partition=True)
                ],
            )
        ],
    )
    assert (response.error_code, [p.error_code for p in response.partition_errors]) == (expected, [expected])
    assert harness.state.logs.get_log("t", 0) is not None


async def test_cluster_action_is_required(harness: AdminHarness) -> None:
    harness.state.authorizer = Authorizer(AclStore(), set(), False)
    answer = await send_leader_and_isr(harness, [partition_state(0, 1, 9, [1])])
    assert answer == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [ErrorCode.CLUSTER_AUTHORIZATION_FAILED])
    response = await harness.call(update_metadata, 8, controller_id=2, controller_epoch=CONTROLLER_EPOCH)
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    response = await harness.call(stop_replica, 4, controller_id=2, controller_epoch=CONTROLLER_EPOCH)
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    response = await harness.call(alter_partition, 3, broker_id=2, broker_epoch=1)
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def test_stop_replica_by_leader_epoch_and_deletion(harness: AdminHarness) -> None:
    assert await send_leader_and_isr(harness, [partition_state(0, 1, 4, [1])]) == (0, [0])
    stop = request_class(5)

    async def send(epoch: int, delete: bool) -> int:
        response = await harness.call(
            stop_replica,
            4,
            controller_id=2,
            controller_epoch=CONTROLLER_EPOCH,
            broker_epoch=BROKER_EPOCH,
            topic_states=[
                stop.StopReplicaTopicState(
                    topic_name="t",
                    partition_states=[
                        stop.StopReplicaPartitionState(
                            partition_index=0, leader_epoch=epoch, delete_partition=delete
                        )
                    ],
                )
            ],
        )
        assert response.error_code == 0
        return int(response.partition_errors[0].error_code)

    assert await send(3, True) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert await send(4, True) == ErrorCode.FENCED_LEADER_EPOCH
    assert harness.state.logs.get_log("t", 0) is not None
    assert await send(-2, True) == ErrorCode.NONE  # a topic deletion
    assert harness.state.logs.get_log("t", 0) is None
    assert ("t", 0) not in harness.state.cluster.partitions  # type: ignore[union-attr]


async def test_update_metadata_fills_brokers_and_keeps_newer_states(harness: AdminHarness) -> None:
    cls = request_class(6)
    cluster = harness.state.cluster
    assert cluster is not None

    def state(epoch: int, version: int) -> Any:
        return cls.UpdateMetadataPartitionState(
            partition_index=1,
            controller_epoch=CONTROLLER_EPOCH,
            leader=2,
            leader_epoch=epoch,
            isr=[2],
            zk_version=version,
            replicas=[2],
        )

    async def send(*states: Any) -> int:
        response = await harness.call(
            update_metadata,
            8,
            controller_id=2,
            controller_epoch=CONTROLLER_EPOCH,
            broker_epoch=BROKER_EPOCH,
            topic_states=[cls.UpdateMetadataTopicState(topic_name="t", partition_states=list(states))],
            live_brokers=[
                cls.UpdateMetadataBroker(
                    id=2,
                    endpoints=[
                        cls.UpdateMetadataEndpoint(
                            port=9093, host="127.0.0.2", listener="PLAINTEXT", security_protocol=0
                        )
                    ],
                    rack="r2",
                )
            ],
        )
        return int(response.error_code)

    assert await send(state(3, 7)) == 0
    assert [(b.broker_id, b.endpoint("PLAINTEXT"), b.rack) for b in cluster.live_brokers()] == [
        (2, ("127.0.0.2", 9093), "r2")
    ]
    assert cluster.controller_id() == 2
    assert await send(state(2, 9)) == 0  # an older leader epoch: ignored
    assert cluster.snapshot.states[("t", 1)].leader_epoch == 3
    assert await send(state(3, 8)) == 0  # same epoch, newer zk version (an ISR change): taken
    assert cluster.snapshot.states[("t", 1)].zk_version == 8


async def test_alter_partition_is_answered_by_the_controller_only(harness: AdminHarness) -> None:
    cls = request_class(56)
    request = {
        "broker_id": 2,
        "broker_epoch": 1,
        "topics": [
            cls.TopicData(
                topic_name="t",
                partitions=[
                    cls.PartitionData(partition_index=0, leader_epoch=1, new_isr=[2], partition_epoch=1)
                ],
            )
        ],
    }
    for version in (0, 3):
        response = await harness.call(alter_partition, version, **request)
        assert (response.error_code, response.topics) == (ErrorCode.NOT_CONTROLLER, [])


async def test_follower_fetch_needs_cluster_action_not_read(harness: AdminHarness) -> None:
    from kafkacompat.broker.handlers import fetch
    from kafkacompat.security.acls import AclBinding, Op, Pattern, Permission, Resource

    assert await send_leader_and_isr(harness, [partition_state(0, 1, 4, [1, 2])]) == (0, [0])
    store = AclStore()
    store.add(
        AclBinding(Resource.TOPIC, "t", Pattern.LITERAL, "User:ANONYMOUS", "*", Op.READ, Permission.ALLOW)
    )
    harness.state.authorizer = Authorizer(store, set(), False)
    cls = request_class(1)

    async def fetch_as(replica_id: int) -> int:
        response = await harness.call(
            fetch,
            12,
            replica_id=replica_id,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                cls.FetchTopic(
                    topic="t",
                    partitions=[
                        cls.FetchPartition(
                            partition=0, current_leader_epoch=-1, fetch_offset=0, partition_max_bytes=1 << 16
                        )
                    ],
                )
            ],
            rack_id="",
        )
        return int(response.responses[0].partitions[0].error_code)

    assert await fetch_as(-1) == ErrorCode.NONE  # a consumer with READ
    assert await fetch_as(2) == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # a follower without CLUSTER_ACTION
    store.add(
        AclBinding(
            Resource.CLUSTER,
            Resource.CLUSTER_NAME,
            Pattern.LITERAL,
            "User:ANONYMOUS",
            "*",
            Op.CLUSTER_ACTION,
            Permission.ALLOW,
        )
    )
    harness.state.authorizer = Authorizer(store, set(), False)
    assert await fetch_as(2) == ErrorCode.NONE
