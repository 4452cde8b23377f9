"""Topic administration in cluster mode: create, delete, add partitions, change configs.

Theory of operation
-------------------
As Kafka's AdminZkClient does, any broker writes topic changes to ZooKeeper itself (the assignment and
topic id under `/brokers/topics/T`, configs under `/config/topics/T` with a change notification, a
deletion request under `/admin/delete_topics`); the controller then acts on them in its reconcile. The
writing broker reads what it wrote at once (`ClusterState.mark`), every other broker when its watch
fires. Each request answers once this broker's own view shows the change
(`ClusterState.wait_for_view`), as Kafka's CreateTopics and DeleteTopics wait as delayed operations, so
a client's next Metadata request finds the topic (led) or finds it gone. Replica assignment
(`controller.assign_replicas`) counts the live brokers of the view.
"""

from __future__ import annotations

import uuid

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.cluster.metadata_view import MetadataView
from kafkacompat.replication.cluster.shared import ClusterState
from kafkacompat.replication.cluster.zk_view import TOPICS
from kafkacompat.replication.controller import BrokerMetadata, assign_replicas
from kafkacompat.replication.metadata import TopicInfo
from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = ["TopicAdmin"]


class TopicAdmin:
    """Topic changes written to ZooKeeper from this broker (see module docstring)."""

    def __init__(self, cluster: ClusterState, view: MetadataView) -> None:
        self.cluster = cluster
        self.view = view

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        replication_factor: int,
        assignment: dict[int, list[int]] | None = None,
    ) -> TopicInfo:
        """Write a new topic to ZooKeeper (as Kafka's AdminZkClient does from any broker) and wait until
        this broker's view has it."""
        if assignment is None:
            brokers = [BrokerMetadata(b.broker_id, b.rack) for b in self.view.live_brokers()]
            assignment = assign_replicas(brokers, partitions, replication_factor)
        topic_id = uuid.uuid4()
        await trio.to_thread.run_sync(self.cluster.store.create_topic, name, assignment, topic_id, configs)
        self.cluster.mark(TOPICS)  # read it now rather than when the watch fires
        # as Kafka's CreateTopics (a delayed operation), answer once this broker sees every partition
        # with a leader, so a client's next Metadata request finds them led
        await self.cluster.wait_for_view(
            lambda: (
                self.cluster.broker.metadata.topic(name) is not None
                and all(self.view.partition_metadata(name, p)[0] >= 0 for p in assignment)
            )
        )
        topic = self.cluster.broker.metadata.topic(name)
        if topic is None:
            return TopicInfo(name, topic_id, partitions, dict(configs))
        return topic

    async def delete_topic(self, name: str) -> None:
        """Request the deletion and answer once this broker's view no longer has the topic (Kafka's
        DeleteTopics waits for the controller the same way)."""
        await trio.to_thread.run_sync(self.cluster.store.request_topic_deletion, name)
        await self.cluster.wait_for_view(lambda: self.cluster.broker.metadata.topic(name) is None)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        await trio.to_thread.run_sync(self.cluster.store.set_topic_configs, name, configs)
        self.cluster.mark(("config", name))  # every other broker reads it on the change notification

    async def add_partitions(
        self, name: str, total: int, replicas: dict[int, list[int]] | None = None
    ) -> None:
        """Extend the topic's assignment to `total` partitions, the new ones on `replicas` (partition ->
        brokers, checked by the caller) or assigned as a new topic's, and wait until this broker sees
        them."""
        assignment = self.cluster.snapshot.topics.get(name)
        if assignment is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        current = max(assignment.partitions) + 1 if assignment.partitions else 0
        factor = len(next(iter(assignment.partitions.values()), [])) or 1
        brokers = [BrokerMetadata(b.broker_id, b.rack) for b in self.view.live_brokers()]
        added = (
            {p: list(r) for p, r in replicas.items()}
            if replicas is not None
            else assign_replicas(brokers, total - current, factor, start_partition=current)
        )
        grown = zd.TopicAssignment(
            name,
            assignment.topic_id,
            {**assignment.partitions, **added},
            assignment.adding,
            assignment.removing,
        )
        await trio.to_thread.run_sync(self.cluster.store.set_assignment, grown)
        self.cluster.mark(("topic", name))

        def grown_here() -> bool:
            topic = self.cluster.broker.metadata.topic(name)
            return topic is None or topic.partitions >= total

        await self.cluster.wait_for_view(grown_here, timeout=10)

    async def allocate_producer_id_block(self, size: int) -> int:
        return await trio.to_thread.run_sync(
            self.cluster.store.allocate_producer_id_block, self.cluster.node_id, size
        )
