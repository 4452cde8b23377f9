"""Topic administration in cluster mode: create, delete, add partitions, change configs.

Theory of operation
-------------------
As Kafka's AdminZkClient does, any broker writes topic changes to ZooKeeper itself (the assignment and
topic id under `/brokers/topics/T`, configs under `/config/topics/T` with a change notification, a
deletion request under `/admin/delete_topics`); the controller then acts on them in its reconcile. The
writing broker reads what it wrote at once (`ClusterState.mark`), every other broker when its watch
fires. Replica assignment (`controller.assign_replicas`) counts the live brokers of the view.

CreateTopics and DeleteTopics work on a whole request at once (`TopicCreations`, `TopicDeletions`, which
the handlers fill topic by topic and then `commit`): every topic of a request is written in one
ZooKeeper transaction (deletion requests in one), so the controller and every broker's watch see them
together and the controller answers them with one LeaderAndIsr and one UpdateMetadata per broker, not
one per topic.

When they answer: Kafka's ZooKeeper mode answers CreateTopics (`DelayedCreatePartitions`) once the
receiving broker's own metadata cache has a leader for every new partition, so another broker may still
answer for the topic with UNKNOWN_TOPIC_OR_PARTITION. Here a success means every live broker knows: the
request waits (`_settle`, bounded by the request's `timeout_ms`) until this broker's view has the change
and then until every other live broker's own Metadata answer shows it, asked over the inter-broker
listener (`_confirmed_by`): every partition of every new topic led, under its new topic id; every
deleted topic unknown. A broker leads a partition in its Metadata answers only once it acts on the
leader's state (`MetadataView.partition_metadata`), so "led at every broker" includes "its leader
leads". A broker that cannot be connected to (the registration of a dead process, until its session
expires) serves no client either and is not waited for; one that goes away meanwhile neither. A wait
that runs out answers REQUEST_TIMED_OUT for the topics not yet everywhere, as Kafka does; with
`timeout_ms` 0 (answer at once, in Kafka) the wait still runs, bounded by `UNBOUNDED_REQUEST_SECONDS`,
and its end answers success, the change being made.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.cluster.metadata_view import MetadataView
from kafkacompat.replication.cluster.shared import ClusterState
from kafkacompat.replication.cluster.zk_view import DELETIONS, TOPICS
from kafkacompat.replication.controller import BrokerMetadata, assign_replicas
from kafkacompat.replication.inter_broker_client import (
    InterBrokerConnection,
    InterBrokerError,
    InterBrokerTimeout,
)
from kafkacompat.replication.metadata import TopicInfo
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.messages import request_class

__all__ = ["TopicAdmin", "TopicCreations", "TopicDeletions"]

log = logging.getLogger("kafkacompat.cluster")

#: the wait for every broker when the request gave no timeout (timeout_ms <= 0)
UNBOUNDED_REQUEST_SECONDS = 30.0
#: how often another broker is asked again while it does not show the change yet
PEER_RECHECK_SECONDS = 0.02
#: each Metadata request to another broker (and its connection) at most
PEER_REQUEST_SECONDS = 5.0
#: Metadata v12: topic ids in the answer (a recreated topic's old incarnation is told apart)
METADATA_VERSION_CAP = 12


def _deadline(timeout_ms: int) -> tuple[float, bool]:
    """(trio deadline, whether running out is an error) of a request's timeout_ms."""
    if timeout_ms > 0:
        return trio.current_time() + timeout_ms / 1000, True
    return trio.current_time() + UNBOUNDED_REQUEST_SECONDS, False


class TopicCreations:
    """The topics of one CreateTopics request, checked by the handler, written and awaited together."""

    def __init__(self, admin: TopicAdmin) -> None:
        self.admin = admin
        #: name -> (assignment, topic id, configs)
        self.topics: dict[str, tuple[dict[int, list[int]], uuid.UUID, dict[str, str]]] = {}

    def add(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        replication_factor: int,
        assignment: dict[int, list[int]] | None = None,
    ) -> TopicInfo:
        """A checked topic to create at `commit`; what it will be."""
        if assignment is None:
            brokers = [BrokerMetadata(b.broker_id, b.rack) for b in self.admin.view.live_brokers()]
            assignment = assign_replicas(brokers, partitions, replication_factor)
        topic_id = uuid.uuid4()
        self.topics[name] = (assignment, topic_id, dict(configs))
        return TopicInfo(name, topic_id, len(assignment), dict(configs))

    async def commit(self, timeout_ms: int) -> dict[str, KafkaError]:
        """Write every topic in one ZooKeeper transaction, then wait until every live broker has each
        one led (see module docstring); the topics that failed, with why."""
        if not self.topics:
            return {}
        cluster = self.admin.cluster
        deadline, strict = _deadline(timeout_ms)
        entries = [(name, a, topic_id, c) for name, (a, topic_id, c) in self.topics.items()]
        failed = await trio.to_thread.run_sync(cluster.store.create_topics, entries)
        cluster.mark(TOPICS)  # read them now rather than when the watch fires
        created = {name: self.topics[name] for name in self.topics if name not in failed}

        def led_here(name: str) -> bool:
            assignment, topic_id, _ = created[name]
            topic = cluster.broker.metadata.topic(name)
            return (
                topic is not None
                and topic.topic_id == topic_id
                and all(self.admin.view.partition_metadata(name, p)[0] >= 0 for p in assignment)
            )

        expected = {name: (topic_id, len(a)) for name, (a, topic_id, _) in created.items()}
        late = await self.admin._settle(created, led_here, expected, present=True, deadline=deadline)
        errors: dict[str, KafkaError] = dict(failed)
        if late:
            message = "Timed out waiting for every broker to know the topic"
            log.info("CreateTopics: %d topic(s) not yet known at every broker: %s", len(late), sorted(late))
            if strict:
                errors.update({n: KafkaError(ErrorCode.REQUEST_TIMED_OUT, message) for n in late})
        return errors


class TopicDeletions:
    """The topics of one DeleteTopics request, checked by the handler, asked for and awaited together."""

    def __init__(self, admin: TopicAdmin) -> None:
        self.admin = admin
        #: name -> topic id
        self.topics: dict[str, uuid.UUID] = {}

    def add(self, topic: TopicInfo) -> None:
        self.topics[topic.name] = topic.topic_id

    async def commit(self, timeout_ms: int) -> dict[str, KafkaError]:
        """Ask for every deletion at once, then wait until no live broker lists the topics (see module
        docstring); the topics that failed, with why."""
        if not self.topics:
            return {}
        cluster = self.admin.cluster
        deadline, strict = _deadline(timeout_ms)
        await trio.to_thread.run_sync(cluster.store.request_topic_deletions, list(self.topics))
        cluster.mark(DELETIONS)

        def gone_here(name: str) -> bool:
            topic = cluster.broker.metadata.topic(name)
            return topic is None or topic.topic_id != self.topics[name]

        expected = {name: (topic_id, 0) for name, topic_id in self.topics.items()}
        late = await self.admin._settle(self.topics, gone_here, expected, present=False, deadline=deadline)
        if late:
            log.info("DeleteTopics: %d topic(s) still known somewhere: %s", len(late), sorted(late))
            if strict:
                message = "Timed out waiting for every broker to forget the topic"
                return {n: KafkaError(ErrorCode.REQUEST_TIMED_OUT, message) for n in late}
        return {}


class TopicAdmin:
    """Topic changes written to ZooKeeper from this broker (see module docstring)."""

    def __init__(self, cluster: ClusterState, view: MetadataView) -> None:
        self.cluster = cluster
        self.view = view

    def creations(self) -> TopicCreations:
        """The topics of one CreateTopics request, to fill and then commit."""
        return TopicCreations(self)

    def deletions(self) -> TopicDeletions:
        """The topics of one DeleteTopics request, to fill and then commit."""
        return TopicDeletions(self)

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        replication_factor: int,
        assignment: dict[int, list[int]] | None = None,
        timeout_ms: int = 0,
    ) -> TopicInfo:
        """Create one topic (as a request of one topic: auto-creation, the coordinators' topics)."""
        batch = self.creations()
        topic = batch.add(name, partitions, configs, replication_factor, assignment)
        failed = await batch.commit(timeout_ms)
        if name in failed:
            raise failed[name]
        return self.cluster.broker.metadata.topic(name) or topic

    async def delete_topic(self, name: str, timeout_ms: int = 0) -> None:
        """Delete one topic (as a request of one topic)."""
        topic = self.cluster.broker.metadata.topic(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        batch = self.deletions()
        batch.add(topic)
        failed = await batch.commit(timeout_ms)
        if name in failed:
            raise failed[name]

    async def _settle(
        self,
        names: Iterable[str],
        here: Callable[[str], bool],
        expected: dict[str, tuple[uuid.UUID, int]],
        *,
        present: bool,
        deadline: float,
    ) -> set[str]:
        """Wait (until `deadline`) for this broker's view (`here`) and then every other live broker's
        Metadata answer to show the change; the topics that do not yet."""
        names = set(names)
        with trio.move_on_after(max(deadline - trio.current_time(), 0)):
            await self.cluster.wait_for_view(lambda: all(here(n) for n in names), timeout=float("inf"))
        late = {n for n in names if not here(n)}
        settled = {n: e for n, e in expected.items() if n not in late}
        if not settled:
            return late
        peers = sorted(b for b in self.cluster.snapshot.brokers if b != self.cluster.node_id)
        unconfirmed: set[str] = set()

        async def ask(broker_id: int) -> None:
            unconfirmed.update(await self._confirmed_by(broker_id, settled, present, deadline))

        async with trio.open_nursery() as nursery:
            for broker_id in peers:
                nursery.start_soon(ask, broker_id)
        return late | unconfirmed

    async def _confirmed_by(
        self,
        broker_id: int,
        expected: dict[str, tuple[uuid.UUID, int]],
        present: bool,
        deadline: float,
    ) -> set[str]:
        """Ask `broker_id` for the topics' metadata until its answer shows them (`present`: every
        partition led, under the expected topic id) or gone, or until `deadline`; the topics it does not
        show yet. A broker that cannot be connected to, or is no longer live, is not waited for."""
        pending = dict(expected)
        connection: InterBrokerConnection | None = None
        cls: Any = request_class(ApiKey.METADATA)
        try:
            while pending and trio.current_time() < deadline:
                if broker_id not in self.cluster.snapshot.brokers:
                    return set()
                try:
                    if connection is None:
                        try:
                            connection = await self.cluster.connect_inter_broker(
                                broker_id, "admin", PEER_REQUEST_SECONDS
                            )
                        except InterBrokerTimeout:
                            raise
                        except (InterBrokerError, KafkaError) as exc:
                            log.info("broker %d not asked about %s: %s", broker_id, sorted(pending), exc)
                            return set()
                    version = connection.version_for(ApiKey.METADATA, METADATA_VERSION_CAP)
                    request = cls(
                        topics=[cls.MetadataRequestTopic(name=name) for name in sorted(pending)],
                        allow_auto_topic_creation=False,
                    )
                    response = await connection.send(ApiKey.METADATA, version, request)
                except InterBrokerError:
                    if connection is not None:
                        connection.close()
                        connection = None
                else:
                    for topic in response.topics:
                        if topic.name in pending and _shows(topic, pending[topic.name], present):
                            del pending[topic.name]
                if pending:
                    await trio.sleep(PEER_RECHECK_SECONDS)
        finally:
            if connection is not None:
                connection.close()
        return set(pending)

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


def _shows(topic: Any, expected: tuple[uuid.UUID, int], present: bool) -> bool:
    """Whether a Metadata answer's topic shows it created (`present`) or deleted, as expected."""
    topic_id, partitions = expected
    zero = uuid.UUID(int=0)
    same = topic.topic_id in (None, zero) or topic.topic_id == topic_id
    if not present:
        return topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or not same
    return (
        topic.error_code == ErrorCode.NONE
        and same
        and len(topic.partitions) == partitions
        and all(p.error_code == ErrorCode.NONE and p.leader_id >= 0 for p in topic.partitions)
    )
