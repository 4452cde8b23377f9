"""The broker's replica roles: the controller's requests applied, ZooKeeper's view mirrored, followers.

Theory of operation
-------------------
A broker learns what it leads and follows from the controller's requests, checked by
`broker_requests.py` (broker epoch = the czxid of its `/brokers/ids/N`, controller epoch, per-partition
leader epoch) and served by the handlers leader_and_isr.py, update_metadata.py and stop_replica.py:

- `apply_leader_and_isr` takes the role each newer partition state gives (`_take_role`): as leader the
  replica manager is told (`leadership_changed`) and the high watermark may move; as follower the
  partition is handed to the `FetcherTask` of (leader, `fetcher_id`), `num.replica.fetchers` per leader;
- `apply_update_metadata` keeps the live brokers and partition states clients are answered from;
- `apply_stop_replica` stops following (and deletes) partitions.

After each read of ZooKeeper, `apply_view` mirrors what changed (`zk_view`: only the topics a watch
named, every topic after a full read) as every broker: the topic table (`ClusterMetadataCache`) and topic
configs, the logs of assigned partitions (created; a replica reassigned away, or a topic gone, has its
logs deleted), followers whose leader became known start fetching. Partition states and roles come
from the controller's requests alone, as in Kafka's ZooKeeper mode: a request lost with its connection
is sent again by the controller's channel, a broker that registers again (a new session) and every
broker after a controller failover get a full LeaderAndIsr, so nothing here re-reads states to repair
a missed one.

Each applied request and read wakes what waits for the view (`ClusterState.changed`).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.broker_requests import (
    check_controller_request,
    leader_and_isr_partition,
    stop_replica_partition,
)
from kafkacompat.replication.cluster.shared import ClusterState, ZkSnapshot
from kafkacompat.replication.cluster.zk_view import TOPICS
from kafkacompat.replication.metadata import TopicInfo
from kafkacompat.replication.partition_state import NO_LEADER, LeaderAndIsr, PartitionState
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.log.partition_log import PartitionLog
    from kafkacompat.replication.fetcher_task import FetcherTask

__all__ = ["INTERNAL", "ReplicaRoles"]

log = logging.getLogger("kafkacompat.cluster")

INTERNAL = frozenset({"__consumer_offsets", "__transaction_state"})


class ReplicaRoles:
    """This broker's side of the controller's requests and of ZooKeeper's view (see module docstring)."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster

    def resign_all(self) -> None:
        """The ZooKeeper session ended: stop leading every partition at once."""
        for key, state in self.cluster.partitions.items():
            if state.is_leader:
                state.resign()
                self.cluster.replicas.leadership_changed(key, False)
                self.cluster.broker.watchers.notify(*key)

    def check_controller_request(self, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        """The top-level checks of LeaderAndIsr/UpdateMetadata/StopReplica; remembers the epoch."""
        error = check_controller_request(
            controller_epoch, self.cluster.known_controller_epoch, broker_epoch, self.cluster.broker_epoch
        )
        if error == ErrorCode.NONE:
            self.cluster.known_controller_epoch = max(self.cluster.known_controller_epoch, controller_epoch)
        return error

    async def apply_leader_and_isr(
        self,
        controller_id: int,
        controller_epoch: int,
        states: list[tuple[str, uuid.UUID | None, int, LeaderAndIsr, tuple[int, ...]]],
    ) -> dict[tuple[str, int], ErrorCode]:
        """LeaderAndIsr: take the role each newer partition state gives (see leader_and_isr.py)."""
        metadata = self.cluster.broker.metadata

        def known() -> bool:
            for topic, topic_id, partition, _, _ in states:
                info = metadata.topic(topic)
                if info is None or info.partitions <= partition:
                    return False
                if topic_id is not None and topic_id.int != 0 and info.topic_id != topic_id:
                    return False  # a recreated topic whose old incarnation this broker still holds
            return True

        if not known():
            # a topic (or partitions) this broker's ZooKeeper view has not seen yet: read it first (its
            # watch is about to fire; marking it reads it now)
            self.cluster.mark(TOPICS)
            for topic in {s[0] for s in states}:
                self.cluster.mark(("topic", topic))
            await self.cluster.wait_for_view(known, timeout=10)
        now = self.cluster.broker.now_ms()
        results: dict[tuple[str, int], ErrorCode] = {}
        for topic, topic_id, partition, state, replicas in states:
            key = (topic, partition)
            current = self.cluster.partitions.get(key)
            info = metadata.topic(topic)
            if topic_id is not None and topic_id.int != 0 and info is not None and info.topic_id != topic_id:
                error = ErrorCode.INCONSISTENT_TOPIC_ID
            else:
                error = leader_and_isr_partition(
                    state.leader_epoch,
                    current.leader_epoch if current is not None else -1,
                    replicas,
                    self.cluster.node_id,
                )
            if error == ErrorCode.NONE and (info is None or info.partitions <= partition):
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if error == ErrorCode.NONE and info is not None:
                partition_log = self.cluster.broker.logs.get_log(topic, partition)
                if partition_log is None:
                    partition_log = self.cluster.broker.logs.create_log(
                        topic, partition, self.cluster.broker.topic_log_config(info), now_ms=now
                    )
                self.cluster.remember(key, state)
                self._take_role(
                    key, state, replicas, partition_log, now, f"LeaderAndIsr of controller {controller_id}"
                )
            results[key] = error
        self.cluster.changed()
        return results

    def apply_update_metadata(
        self,
        controller_id: int,
        brokers: dict[int, zd.BrokerRegistration],
        states: list[tuple[str, int, LeaderAndIsr, tuple[int, ...]]],
    ) -> None:
        """UpdateMetadata: the live brokers and partition states clients are answered from. The live
        brokers are the request's plus those this broker's own last read of `/brokers/ids` found (a
        request built before a registration can arrive after this broker read it; a broker that went
        away leaves with the next read, which its watch triggers)."""
        self.cluster.snapshot.brokers = {**self.cluster.read_brokers, **brokers}
        self.cluster.snapshot.controller = controller_id
        for topic, partition, state, _ in states:
            self.cluster.remember((topic, partition), state)
        self._ensure_following()
        self.cluster.changed()

    def apply_stop_replica(
        self, entries: list[tuple[str, int, int, bool]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """StopReplica: stop following (and delete) partitions (see stop_replica.py)."""
        now = self.cluster.broker.now_ms()
        results: dict[tuple[str, int], ErrorCode] = {}
        for topic, partition, leader_epoch, delete in entries:
            key = (topic, partition)
            current = self.cluster.partitions.get(key)
            error = ErrorCode.NONE
            if current is not None:
                error = stop_replica_partition(leader_epoch, current.leader_epoch)
            if error == ErrorCode.NONE:
                self._stop_replica(key)
                if delete and self.cluster.broker.logs.get_log(topic, partition) is not None:
                    self.cluster.broker.logs.delete_log(topic, partition, now)
                    log.info("broker %d deleted its replica of %s-%d", self.cluster.node_id, topic, partition)
                self.cluster.broker.watchers.notify(*key)
            results[key] = error
        self.cluster.changed()
        return results

    def apply_view(self, snapshot: ZkSnapshot, topics: set[str] | None = None) -> None:
        """Trio thread: mirror topics (those named in `topics`, every one when None) and their
        configs, create the logs of assigned partitions, drop the logs of partitions reassigned away and
        of topics gone, hand followers whose leader became known to fetchers."""
        broker = self.cluster.broker
        metadata = broker.metadata
        now = broker.now_ms()
        # a topic whose deletion is requested stays until the controller removes it, after its replicas
        # answered StopReplica with deletion (as in Kafka, brokers do not act on the request themselves)
        live_topics = snapshot.topics
        for topic in list(metadata.topics()):
            if topics is not None and topic.name not in topics:
                continue
            assignment = live_topics.get(topic.name)
            if assignment is None or (
                assignment.topic_id is not None and assignment.topic_id != topic.topic_id
            ):
                self._drop_topic(topic)
        names = live_topics if topics is None else [n for n in topics if n in live_topics]
        for name in names:
            assignment = live_topics[name]
            configs = snapshot.configs.get(name, {})
            info = metadata.topic(name)
            count = max(assignment.partitions) + 1 if assignment.partitions else 0
            if info is None:
                info = metadata.create_topic(
                    name,
                    count,
                    configs,
                    topic_id=assignment.topic_id or uuid.uuid4(),
                    internal=name in INTERNAL,
                )
                broker.logs.set_topic_config(name, broker.topic_log_config(info))
            else:
                if count > info.partitions:
                    metadata.add_partitions(name, count)
                if info.configs != configs:
                    metadata.set_topic_configs(name, configs)
                    broker.logs.set_topic_config(name, broker.topic_log_config(info))
            if name in snapshot.deletions:
                continue  # no logs created for a topic being deleted
            for partition, replicas in assignment.partitions.items():
                key = (name, partition)
                if self.cluster.node_id not in replicas:
                    self._stop_replica(key)
                    if broker.logs.get_log(name, partition) is not None:
                        # reassigned away (Kafka's StopReplica with deletion): the files go after
                        # file.delete.delay.ms, as a deleted topic's do
                        broker.logs.delete_log(name, partition, now)
                        log.info(
                            "broker %d is no longer a replica of %s-%d", self.cluster.node_id, name, partition
                        )
                    continue
                if broker.logs.get_log(name, partition) is None:
                    broker.logs.create_log(name, partition, broker.topic_log_config(info), now_ms=now)
        metadata.commit()
        self._ensure_following()

    def _ensure_following(self) -> None:
        """Followers whose leader was not known live when they became followers start fetching now."""
        if self.cluster.shutting_down:
            return
        followed = self._followed()
        for key, state in self.cluster.partitions.items():
            if (
                state.role.name == "FOLLOWER"
                and key not in followed
                and state.leader in self.cluster.snapshot.brokers
            ):
                self._fetcher_for(state.leader, key).add(key, state.leader_epoch)

    def _take_role(
        self,
        key: tuple[str, int],
        state: LeaderAndIsr,
        replicas: tuple[int, ...],
        partition_log: PartitionLog,
        now: int,
        source: str,
    ) -> None:
        current = self.cluster.partitions.get(key)
        if current is None:
            current = self.cluster.partitions[key] = PartitionState(key[0], key[1], self.cluster.node_id)
            current.high_watermark = partition_log.high_watermark
        if state.leader_epoch < current.leader_epoch:
            return
        if state.leader == self.cluster.node_id:
            was_leader = current.is_leader
            if current.become_leader(state, replicas, partition_log.log_end_offset, now):
                partition_log.leader_epochs.assign(state.leader_epoch, partition_log.log_end_offset)
                self._unfollow(key)
                self.cluster.replicas.leadership_changed(key, True)
                log.info(
                    "broker %d leads %s-%d at epoch %d (from %s)",
                    self.cluster.node_id,
                    key[0],
                    key[1],
                    state.leader_epoch,
                    source,
                )
            if not was_leader:
                current.high_watermark = partition_log.high_watermark
            if current.maybe_advance_high_watermark(partition_log.log_end_offset):
                partition_log.update_high_watermark(current.high_watermark)
        else:
            if current.become_follower(state, replicas) or key not in self._followed():
                self._unfollow(key)
                self.cluster.replicas.leadership_changed(key, False)
                if (
                    state.leader != NO_LEADER
                    and state.leader in self.cluster.snapshot.brokers
                    and not self.cluster.shutting_down
                ):
                    self._fetcher_for(state.leader, key).add(key, state.leader_epoch)
        self.cluster.broker.watchers.notify(*key)  # parked produces and fetches look at the new role

    def _followed(self) -> set[tuple[str, int]]:
        return {key for fetcher in self.cluster.fetchers.values() for key in fetcher.partitions}

    def _fetcher_for(self, leader: int, key: tuple[str, int]) -> FetcherTask:
        """The fetcher task of `key` on `leader`: one of num.replica.fetchers per leader, by Kafka's hash."""
        from kafkacompat.replication.fetcher import fetcher_id
        from kafkacompat.replication.fetcher_task import FetcherTask

        slot = (leader, fetcher_id(key[0], key[1], int(self.cluster.broker.config["num.replica.fetchers"])))
        fetcher = self.cluster.fetchers.get(slot)
        if fetcher is None or fetcher.stopped:
            fetcher = self.cluster.fetchers[slot] = FetcherTask(self.cluster, leader)
            assert self.cluster.nursery is not None
            self.cluster.nursery.start_soon(fetcher.run)
        return fetcher

    def _unfollow(self, key: tuple[str, int]) -> None:
        for fetcher in self.cluster.fetchers.values():
            fetcher.remove(key)

    def _stop_replica(self, key: tuple[str, int]) -> None:
        self._unfollow(key)
        if self.cluster.partitions.pop(key, None) is not None:
            self.cluster.replicas.leadership_changed(key, False)

    def _drop_topic(self, topic: TopicInfo) -> None:
        for index in range(topic.partitions):
            self._stop_replica((topic.name, index))
        self.cluster.broker.drop_topic_locally(topic)
        log.info("broker %d dropped topic %s", self.cluster.node_id, topic.name)
