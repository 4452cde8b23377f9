"""The cluster as clients see it: live brokers, the controller, partition leaders, topic ids.

Theory of operation
-------------------
Metadata, DescribeCluster, FindCoordinator, Produce and Fetch answer from the broker's view of the
cluster (`ClusterState.snapshot`: the last read of ZooKeeper, with the newer states the controller's
requests brought). A partition's leader, epoch and ISR come from that view, or from this broker's own
`PartitionState` when it acts on a state at least as new, by leader epoch then partition epoch (a
leader learns its own ISR changes first, from the controller's AlterPartition answer; a follower's own
ISR is the one its last LeaderAndIsr gave, so the controller's UpdateMetadata of a later ISR change
wins). A leader that is not live is answered as none, and replicas that are
not live as offline. `refresh_live_brokers` reads `/brokers/ids` at once, for replica assignment of a
new topic.
"""

from __future__ import annotations

import uuid

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.cluster.shared import ClusterState, newer
from kafkacompat.replication.partition_state import NO_LEADER

__all__ = ["MetadataView"]


class MetadataView:
    """Reads of the broker's view of the cluster (see module docstring)."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster

    def live_brokers(self) -> list[zd.BrokerRegistration]:
        return [self.cluster.snapshot.brokers[b] for b in sorted(self.cluster.snapshot.brokers)]

    def controller_id(self) -> int:
        return self.cluster.snapshot.controller if self.cluster.snapshot.controller is not None else -1

    def partition_metadata(
        self, topic: str, partition: int
    ) -> tuple[int, int, list[int], list[int], list[int]]:
        """(leader, leader epoch, replicas, isr, offline replicas) as ZooKeeper says."""
        assignment = self.cluster.snapshot.topics.get(topic)
        replicas = list(assignment.partitions.get(partition, [])) if assignment else []
        state = self.cluster.snapshot.states.get((topic, partition))
        local = self.cluster.partitions.get((topic, partition))
        if local is not None and state is not None and not newer(state, local.leader_and_isr()):
            state = local.leader_and_isr()
        offline = [r for r in replicas if r not in self.cluster.snapshot.brokers]
        if state is None:
            return NO_LEADER, -1, replicas, [], offline
        leader = state.leader if state.leader in self.cluster.snapshot.brokers else NO_LEADER
        if leader == self.cluster.node_id and (
            local is None or not local.is_leader or local.leader_epoch < state.leader_epoch
        ):
            leader = NO_LEADER  # this broker does not lead it yet (its LeaderAndIsr is on the way)
        return leader, state.leader_epoch, replicas, list(state.isr), offline

    def topic_names_by_id(self) -> dict[uuid.UUID, str]:
        return {
            a.topic_id: name for name, a in self.cluster.snapshot.topics.items() if a.topic_id is not None
        }

    def topic_id(self, name: str) -> uuid.UUID:
        assignment = self.cluster.snapshot.topics.get(name)
        if assignment is None or assignment.topic_id is None:
            return uuid.UUID(int=0)
        return assignment.topic_id

    def reassignments(self) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """(replicas, adding, removing) of every partition being reassigned."""
        result = {}
        for name, assignment in self.cluster.snapshot.topics.items():
            for partition in sorted(set(assignment.adding) | set(assignment.removing)):
                result[(name, partition)] = (
                    list(assignment.partitions.get(partition, [])),
                    list(assignment.adding.get(partition, [])),
                    list(assignment.removing.get(partition, [])),
                )
        return result

    async def refresh_live_brokers(self) -> None:
        """Read the registered brokers now (replica assignment counts them, as Kafka's controller reads
        `/brokers/ids` when it assigns a new topic's replicas)."""
        epochs: dict[int, int] = {}
        brokers = await trio.to_thread.run_sync(self.cluster.store.live_brokers, None, epochs)
        self.cluster.read_brokers = dict(brokers)
        self.cluster.snapshot.brokers = dict(brokers)
        self.cluster.snapshot.broker_epochs = epochs
