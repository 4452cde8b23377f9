"""The decisions behind the controller's requests to brokers and a broker's ZooKeeper-session fence.

Theory of operation
-------------------
Pure functions and one small state machine, no I/O, no trio, no clock of their own (every method that
cares takes `now_ms`); the handlers (LeaderAndIsr, UpdateMetadata, StopReplica, AlterPartition) and
the cluster runtime (`cluster/`) feed them facts and act on the answers.

- `check_controller_request(...)`: the order of Kafka's ZooKeeper-mode checks of a controller request
  (after CLUSTER_ACTION authorization, which the handler does): a broker epoch older than this broker's
  registration (the czxid of `/brokers/ids/N`) is STALE_BROKER_EPOCH (-1 = not given, accepted); then a
  controller epoch older than the newest this broker has seen is STALE_CONTROLLER_EPOCH.
- `leader_and_isr_partition(...)`: per partition, a newer leader epoch is applied (when this broker is a
  replica, else UNKNOWN_TOPIC_OR_PARTITION); an older one is STALE_CONTROLLER_EPOCH and the same one
  FENCED_LEADER_EPOCH, as Kafka's ReplicaManager answers.
- `stop_replica_partition(...)`: the same leader-epoch rule, with -2 (a topic being deleted) and -1 (not
  given) always accepted.
- `alter_partition_decision(...)`: the controller's validation of one ISR proposal (Kafka's
  `processAlterPartition` in ZooKeeper mode): a proposal ahead of what the controller knows is
  NOT_CONTROLLER, an older leader epoch FENCED_LEADER_EPOCH, the current state again is answered with it
  (idempotent), an older partition epoch (zk version) INVALID_UPDATE_VERSION, an ISR naming a broker that
  is not live, shutting down, or registered with another broker epoch INELIGIBLE_REPLICA.
- `SessionFence`: whether this broker may act as leader given its ZooKeeper session. LOST fences at
  once and until the broker has registered again; SUSPENDED fences once it lasted longer than
  `zookeeper.session.timeout.ms` (by then ZooKeeper may have expired the session and the controller
  moved leadership) and is lifted by CONNECTED (the same session survived); a pause of the process
  itself (a tick gap longer than the session timeout, e.g. SIGSTOP) fences until ZooKeeper confirms the
  registration is still this session's.

The request builders (`leader_and_isr_request`, `update_metadata_request`, `stop_replica_request`,
`alter_partition_request`) turn the controller's (or leader's) plain values into the generated request
objects, filled for every version the codecs carry (the encoder writes the fields of the negotiated one).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.partition_state import LeaderAndIsr
from kafkacompat.wire._generated.alter_partition_request import AlterPartitionRequest
from kafkacompat.wire._generated.leader_and_isr_request import LeaderAndIsrRequest
from kafkacompat.wire._generated.stop_replica_request import StopReplicaRequest
from kafkacompat.wire._generated.update_metadata_request import UpdateMetadataRequest
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

__all__ = [
    "ALTER_PARTITION",
    "EPOCH_DURING_DELETE",
    "LEADER_AND_ISR",
    "NO_EPOCH",
    "STOP_REPLICA",
    "UPDATE_METADATA",
    "IsrProposal",
    "PartitionInfo",
    "SessionFence",
    "alter_partition_decision",
    "alter_partition_request",
    "check_controller_request",
    "leader_and_isr_partition",
    "leader_and_isr_request",
    "stop_replica_partition",
    "stop_replica_request",
    "update_metadata_request",
]

#: StopReplica's leader epoch for a topic being deleted (Kafka's LeaderAndIsr.EpochDuringDelete)
EPOCH_DURING_DELETE = -2
#: "no leader epoch given" (older StopReplica versions)
NO_EPOCH = -1

LEADER_AND_ISR = ApiKey.LEADER_AND_ISR
STOP_REPLICA = ApiKey.STOP_REPLICA
UPDATE_METADATA = ApiKey.UPDATE_METADATA
ALTER_PARTITION = ApiKey.ALTER_PARTITION
ZERO_UUID = uuid.UUID(int=0)
#: Kafka's SecurityProtocol ids
PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def check_controller_request(
    controller_epoch: int, known_controller_epoch: int, broker_epoch: int, local_broker_epoch: int
) -> ErrorCode:
    """The top-level error of a LeaderAndIsr/UpdateMetadata/StopReplica (NONE: go on)."""
    if broker_epoch != -1 and broker_epoch < local_broker_epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    if controller_epoch < known_controller_epoch:
        return ErrorCode.STALE_CONTROLLER_EPOCH
    return ErrorCode.NONE


def leader_and_isr_partition(
    request_leader_epoch: int, current_leader_epoch: int, replicas: Iterable[int], local_broker: int
) -> ErrorCode:
    """NONE when the partition state is to be applied, else the partition's error."""
    if request_leader_epoch > current_leader_epoch:
        if local_broker in replicas:
            return ErrorCode.NONE
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if request_leader_epoch < current_leader_epoch:
        return ErrorCode.STALE_CONTROLLER_EPOCH
    return ErrorCode.FENCED_LEADER_EPOCH


def stop_replica_partition(request_leader_epoch: int, current_leader_epoch: int) -> ErrorCode:
    if request_leader_epoch in (EPOCH_DURING_DELETE, NO_EPOCH) or request_leader_epoch > current_leader_epoch:
        return ErrorCode.NONE
    if request_leader_epoch < current_leader_epoch:
        return ErrorCode.STALE_CONTROLLER_EPOCH
    return ErrorCode.FENCED_LEADER_EPOCH


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """One partition of an AlterPartition request."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    #: the broker epoch given for each ISR member (v3+; -1 = not given)
    isr_broker_epochs: Mapping[int, int]
    partition_epoch: int


def alter_partition_decision(
    proposal: IsrProposal,
    current: LeaderAndIsr | None,
    live_broker_epochs: Mapping[int, int],
    shutting_down: Iterable[int] = (),
) -> tuple[ErrorCode, LeaderAndIsr | None]:
    """(NONE, the state to write), (NONE, `current` itself: already so, answered as it is), or
    (error, None)."""
    if current is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if proposal.partition_epoch > current.zk_version or proposal.leader_epoch > current.leader_epoch:
        return ErrorCode.NOT_CONTROLLER, None
    if proposal.leader_epoch < current.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH, None
    if proposal.leader == current.leader and tuple(proposal.isr) == tuple(current.isr):
        return ErrorCode.NONE, current
    if proposal.partition_epoch < current.zk_version:
        return ErrorCode.INVALID_UPDATE_VERSION, None
    if proposal.leader != current.leader or not proposal.isr:
        return ErrorCode.INVALID_REQUEST, None
    stopping = set(shutting_down)
    for replica in proposal.isr:
        epoch = live_broker_epochs.get(replica)
        given = proposal.isr_broker_epochs.get(replica, -1)
        if epoch is None or replica in stopping or (given != -1 and given != epoch):
            return ErrorCode.INELIGIBLE_REPLICA, None
    return ErrorCode.NONE, current.with_isr(proposal.isr)


class SessionFence:
    """Whether this broker's ZooKeeper session lets it act as leader (see module docstring)."""

    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        #: the session ended: fenced until the broker has registered again with a new session
        self.lost = False
        self.suspended_since_ms: int | None = None
        #: the process itself stood still longer than the session timeout: fenced until verified
        self.paused = False
        self.last_tick_ms: int | None = None

    def on_state(self, state: str, now_ms: int) -> None:
        """kazoo's LOST / SUSPENDED / CONNECTED."""
        if state == "LOST":
            self.lost = True
            self.suspended_since_ms = None
        elif state == "SUSPENDED":
            if self.suspended_since_ms is None:
                self.suspended_since_ms = now_ms
        elif state == "CONNECTED":
            self.suspended_since_ms = None

    def on_tick(self, now_ms: int) -> bool:
        """The broker's liveness tick; True when it reveals a pause past the session timeout."""
        previous, self.last_tick_ms = self.last_tick_ms, now_ms
        if previous is not None and now_ms - previous > self.session_timeout_ms:
            self.paused = True
            return True
        return False

    def registration_confirmed(self) -> None:
        """ZooKeeper shows this broker registered by its current session (after a pause or a rejoin)."""
        self.paused = False

    def rejoined(self) -> None:
        """Registered again with a new session after LOST."""
        self.lost = False
        self.paused = False

    def fenced(self, now_ms: int) -> bool:
        if self.lost or self.paused:
            return True
        if self.suspended_since_ms is not None and now_ms - self.suspended_since_ms > self.session_timeout_ms:
            return True
        # a pause not yet seen by the tick (the request path runs first after SIGCONT)
        return self.last_tick_ms is not None and now_ms - self.last_tick_ms > self.session_timeout_ms


# --- request builders ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """What the controller tells about one partition."""

    topic: str
    topic_id: uuid.UUID | None
    partition: int
    state: LeaderAndIsr
    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    offline: tuple[int, ...] = ()
    is_new: bool = False


def _by_topic(partitions: Sequence[PartitionInfo]) -> list[tuple[str, uuid.UUID, list[PartitionInfo]]]:
    """LeaderAndIsr's and UpdateMetadata's partition states come both ways their versions carry them:
    one flat list (LeaderAndIsr v0-1, UpdateMetadata v0-4) and grouped by topic with the topic's id
    (LeaderAndIsr v2+, UpdateMetadata v5+); the codec writes the one the request's version has. This is
    the grouping: (topic, topic id, its partitions)."""
    grouped: dict[str, list[PartitionInfo]] = {}
    for info in partitions:
        grouped.setdefault(info.topic, []).append(info)
    return [(topic, infos[0].topic_id or ZERO_UUID, infos) for topic, infos in grouped.items()]


def leader_and_isr_request(
    controller_id: int,
    controller_epoch: int,
    broker_epoch: int,
    partitions: Sequence[PartitionInfo],
    live_leaders: Sequence[zd.BrokerRegistration],
    listener: str,
    full: bool = False,
) -> LeaderAndIsrRequest:
    cls = LeaderAndIsrRequest

    def state(info: PartitionInfo) -> LeaderAndIsrRequest.LeaderAndIsrPartitionState:
        return cls.LeaderAndIsrPartitionState(
            topic_name=info.topic,
            partition_index=info.partition,
            controller_epoch=info.state.controller_epoch,
            leader=info.state.leader,
            leader_epoch=info.state.leader_epoch,
            isr=list(info.state.isr),
            partition_epoch=info.state.zk_version,
            replicas=list(info.replicas),
            adding_replicas=list(info.adding),
            removing_replicas=list(info.removing),
            is_new=info.is_new,
        )

    leaders: list[LeaderAndIsrRequest.LeaderAndIsrLiveLeader] = []
    for broker in live_leaders:
        endpoint = broker.endpoint(listener) or next(iter(broker.endpoints.values()), None)
        if endpoint is not None:
            leaders.append(
                cls.LeaderAndIsrLiveLeader(
                    broker_id=broker.broker_id, host_name=endpoint[0], port=endpoint[1]
                )
            )
    return cls(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        type=2 if full else 1,
        ungrouped_partition_states=[state(info) for info in partitions],
        topic_states=[
            cls.LeaderAndIsrTopicState(
                topic_name=topic, topic_id=topic_id, partition_states=[state(info) for info in infos]
            )
            for topic, topic_id, infos in _by_topic(partitions)
        ],
        live_leaders=leaders,
    )


def update_metadata_request(
    controller_id: int,
    controller_epoch: int,
    broker_epoch: int,
    partitions: Sequence[PartitionInfo],
    brokers: Sequence[zd.BrokerRegistration],
) -> UpdateMetadataRequest:
    cls = UpdateMetadataRequest

    def state(info: PartitionInfo) -> UpdateMetadataRequest.UpdateMetadataPartitionState:
        return cls.UpdateMetadataPartitionState(
            topic_name=info.topic,
            partition_index=info.partition,
            controller_epoch=info.state.controller_epoch,
            leader=info.state.leader,
            leader_epoch=info.state.leader_epoch,
            isr=list(info.state.isr),
            zk_version=info.state.zk_version,
            replicas=list(info.replicas),
            offline_replicas=list(info.offline),
        )

    live: list[UpdateMetadataRequest.UpdateMetadataBroker] = []
    for broker in brokers:
        plain = next(
            (
                e
                for n, e in broker.endpoints.items()
                if broker.security_protocols.get(n, "PLAINTEXT") == "PLAINTEXT"
            ),
            next(iter(broker.endpoints.values()), ("", -1)),
        )
        live.append(
            cls.UpdateMetadataBroker(
                id=broker.broker_id,
                v0_host=plain[0],
                v0_port=plain[1],
                endpoints=[
                    cls.UpdateMetadataEndpoint(
                        port=port,
                        host=host,
                        listener=name,
                        security_protocol=PROTOCOL_IDS.get(
                            broker.security_protocols.get(name, "PLAINTEXT"), 0
                        ),
                    )
                    for name, (host, port) in broker.endpoints.items()
                ],
                rack=broker.rack,
            )
        )
    return cls(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        ungrouped_partition_states=[state(info) for info in partitions],
        topic_states=[
            cls.UpdateMetadataTopicState(
                topic_name=topic, topic_id=topic_id, partition_states=[state(info) for info in infos]
            )
            for topic, topic_id, infos in _by_topic(partitions)
        ],
        live_brokers=live,
    )


def stop_replica_request(
    controller_id: int,
    controller_epoch: int,
    broker_epoch: int,
    partitions: Sequence[tuple[str, int, int, bool]],
) -> StopReplicaRequest:
    """`partitions`: (topic, partition, leader epoch, delete). Versions 0-2 carry one delete flag for
    the whole request: callers send deletions and plain stops in separate requests."""
    cls = StopReplicaRequest
    grouped: dict[str, list[tuple[int, int, bool]]] = {}
    for topic, partition, epoch, delete in partitions:
        grouped.setdefault(topic, []).append((partition, epoch, delete))
    return cls(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        delete_partitions=any(delete for *_, delete in partitions),
        ungrouped_partitions=[
            cls.StopReplicaPartitionV0(topic_name=t, partition_index=p) for t, p, _, _ in partitions
        ],
        topics=[
            cls.StopReplicaTopicV1(name=t, partition_indexes=[p for p, _, _ in ps])
            for t, ps in grouped.items()
        ],
        topic_states=[
            cls.StopReplicaTopicState(
                topic_name=t,
                partition_states=[
                    cls.StopReplicaPartitionState(partition_index=p, leader_epoch=e, delete_partition=d)
                    for p, e, d in ps
                ],
            )
            for t, ps in grouped.items()
        ],
    )


def alter_partition_request(
    broker_id: int,
    broker_epoch: int,
    topic: str,
    topic_id: uuid.UUID | None,
    partition: int,
    proposal: LeaderAndIsr,
    broker_epochs: Mapping[int, int],
) -> AlterPartitionRequest:
    cls = AlterPartitionRequest
    return cls(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        topics=[
            cls.TopicData(
                topic_name=topic,
                topic_id=topic_id or ZERO_UUID,
                partitions=[
                    cls.PartitionData(
                        partition_index=partition,
                        leader_epoch=proposal.leader_epoch,
                        new_isr=list(proposal.isr),
                        new_isr_with_epochs=[
                            cls.BrokerState(broker_id=r, broker_epoch=broker_epochs.get(r, -1))
                            for r in proposal.isr
                        ],
                        partition_epoch=proposal.zk_version,
                    )
                ],
            )
        ],
    )
