"""The controller's requests to the brokers: LeaderAndIsr, UpdateMetadata and StopReplica.

Theory of operation
-------------------
After the controller wrote a state change to ZooKeeper it tells the brokers (as Kafka's ZooKeeper-mode
controller does): `announce` sends LeaderAndIsr to every live replica of the changed partitions and
UpdateMetadata to every live broker; `send_stop_replica` asks replicas to stop (and delete). The
requests are built by `broker_requests.py` and queued on the `ControllerChannel`, one ordered queue and
connection per live broker, retried on reconnect.

`sync_channel`, on every reconcile as controller, keeps one queue per live broker: a broker new to this
controller (just registered, back with a new session, or every broker right after a controller
failover) gets a full LeaderAndIsr for its partitions, and every broker a full UpdateMetadata when the
live set changed. The queues stop when this broker stops being the controller (`stop`).
"""

from __future__ import annotations

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.broker_requests import (
    LEADER_AND_ISR,
    STOP_REPLICA,
    UPDATE_METADATA,
    PartitionInfo,
    leader_and_isr_request,
    stop_replica_request,
    update_metadata_request,
)
from kafkacompat.replication.cluster.shared import ClusterState, ZkSnapshot
from kafkacompat.replication.controller_channel import ControllerChannel
from kafkacompat.replication.partition_state import LeaderAndIsr

__all__ = ["ControllerRequests"]


class ControllerRequests:
    """The controller's side of its requests to the brokers (see module docstring)."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        #: as controller: the request queues to the live brokers
        self.channel = ControllerChannel(cluster)

    def stop(self) -> None:
        """No longer the controller (or stopping): stop every queue."""
        self.channel.stop_all()

    def _partition_info(
        self,
        snapshot: ZkSnapshot,
        key: tuple[str, int],
        state: LeaderAndIsr,
        replicas: list[int] | None = None,
        new: bool = False,
    ) -> PartitionInfo:
        assignment = snapshot.topics.get(key[0])
        if replicas is None:
            replicas = list(assignment.partitions.get(key[1], [])) if assignment is not None else []
        adding = tuple(assignment.adding.get(key[1], [])) if assignment is not None else ()
        removing = tuple(assignment.removing.get(key[1], [])) if assignment is not None else ()
        return PartitionInfo(
            key[0],
            assignment.topic_id if assignment is not None else None,
            key[1],
            state,
            tuple(replicas),
            adding,
            removing,
            tuple(r for r in replicas if r not in snapshot.brokers),
            new,
        )

    def announce(
        self,
        snapshot: ZkSnapshot,
        states: dict[tuple[str, int], LeaderAndIsr],
        *,
        replicas: dict[tuple[str, int], list[int]] | None = None,
        new: set[tuple[str, int]] | None = None,
        leader_and_isr: bool = True,
    ) -> None:
        """After a state change was written: LeaderAndIsr to every live replica of the changed
        partitions (unless `leader_and_isr` is False), UpdateMetadata to every live broker."""
        if not states or not self.cluster.is_controller:
            return
        infos = [
            self._partition_info(snapshot, key, state, (replicas or {}).get(key), key in (new or set()))
            for key, state in sorted(states.items())
        ]
        if leader_and_isr:
            per_broker: dict[int, list[PartitionInfo]] = {}
            for info in infos:
                for replica in info.replicas:
                    per_broker.setdefault(replica, []).append(info)
            for broker_id, partitions in sorted(per_broker.items()):
                self._send_leader_and_isr(snapshot, broker_id, partitions, full=False)
        self._send_update_metadata(snapshot, infos)

    def _send_update_metadata(self, snapshot: ZkSnapshot, infos: list[PartitionInfo]) -> None:
        """UpdateMetadata with `infos` and the live brokers to every broker with a queue."""
        epoch = self.cluster.store.controller_epoch
        brokers = self._brokers_of(snapshot)
        for broker_id in sorted(self.channel.queues):
            request = update_metadata_request(
                self.cluster.node_id, epoch, self.channel.broker_epoch(broker_id), infos, brokers
            )
            self.channel.send(broker_id, UPDATE_METADATA, request)

    def _brokers_of(self, snapshot: ZkSnapshot) -> list[zd.BrokerRegistration]:
        return [snapshot.brokers[b] for b in sorted(snapshot.brokers)]

    def _send_leader_and_isr(
        self, snapshot: ZkSnapshot, broker_id: int, partitions: list[PartitionInfo], *, full: bool
    ) -> None:
        if broker_id not in self.channel.queues or not partitions:
            return
        leaders = {p.state.leader for p in partitions}
        request = leader_and_isr_request(
            self.cluster.node_id,
            self.cluster.store.controller_epoch,
            self.channel.broker_epoch(broker_id),
            partitions,
            [snapshot.brokers[b] for b in sorted(leaders) if b in snapshot.brokers],
            self.cluster.inter_broker_listener(),
            full,
        )
        self.channel.send(broker_id, LEADER_AND_ISR, request)

    def send_stop_replica(self, stops: dict[int, list[tuple[str, int, int, bool]]]) -> list[trio.Event]:
        """StopReplica to each broker; the events of their answers."""
        answered = []
        for broker_id, partitions in sorted(stops.items()):
            if broker_id in self.channel.queues:
                request = stop_replica_request(
                    self.cluster.node_id,
                    self.cluster.store.controller_epoch,
                    self.channel.broker_epoch(broker_id),
                    partitions,
                )
                event = self.channel.send(broker_id, STOP_REPLICA, request)
                if event is not None:
                    answered.append(event)
        return answered

    def sync_channel(self, snapshot: ZkSnapshot) -> None:
        """One queue per live broker. A broker that is new to this controller (just registered, came
        back with a new session, or this broker just became controller) gets a full LeaderAndIsr for
        its partitions; every broker gets a full UpdateMetadata when the set of live brokers changed."""
        assert self.cluster.nursery is not None
        before = set(self.channel.queues)
        fresh = self.channel.sync(self.cluster.nursery, dict(snapshot.broker_epochs))
        self.cluster.shutting_down_brokers &= set(snapshot.brokers)
        if not fresh and before == set(self.channel.queues):
            return
        infos = [
            self._partition_info(snapshot, key, state)
            for key, state in sorted(snapshot.states.items())
            if key[0] in snapshot.topics and key[0] not in snapshot.deletions
        ]
        for broker_id in sorted(fresh):
            hosted = [info for info in infos if broker_id in info.replicas]
            self._send_leader_and_isr(snapshot, broker_id, hosted, full=True)
        self._send_update_metadata(snapshot, infos)
