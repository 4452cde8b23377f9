"""This broker's requests to the controller: AlterPartition for the replica manager, ControlledShutdown.

Theory of operation
-------------------
Leaders never write ZooKeeper. An ISR shrink (`replica.lag.time.max.ms`) or expansion decided by the
replica manager (`replica_manager.ClusterReplicaManager`) reaches the controller as AlterPartition
(`alter_partition`, on a connection of its own to the controller's inter-broker listener, opened with
`ClusterState.connect_inter_broker` and closed after the answer);
the controller validates it against ZooKeeper's state, writes it with the compare-and-set and answers
with the new state, which the leader then applies (`isr_committed` keeps it in the view). A refusal
leaves the proposal (`isr_refused`): the newer state it lost to reaches this broker in the controller's
LeaderAndIsr or UpdateMetadata.

At shutdown `controlled_shutdown` asks the controller (itself, when this broker is the controller) to
move this broker's leaderships away first (Kafka's `controlled.shutdown.*`), so clients switch leaders
without waiting for the session to expire, then stops fetching, so no leader takes this broker back into
an ISR in the moments before its session ends.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from kafkacompat.replication.cluster.controller_duties import ControllerDuties
from kafkacompat.replication.cluster.metadata_view import MetadataView
from kafkacompat.replication.cluster.shared import ClusterState
from kafkacompat.replication.partition_state import LeaderAndIsr
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = ["ControllerClient"]

log = logging.getLogger("kafkacompat.cluster")

CONTROLLED_SHUTDOWN = ApiKey.CONTROLLED_SHUTDOWN


class ControllerClient:
    """The requests this broker sends the controller, and the replica manager's link (see module
    docstring)."""

    def __init__(self, cluster: ClusterState, view: MetadataView, duties: ControllerDuties) -> None:
        self.cluster = cluster
        self.view = view
        self.duties = duties

    def known_leader_epoch(self, topic: str, partition: int) -> int:
        known = self.cluster.snapshot.states.get((topic, partition))
        return known.leader_epoch if known is not None else -1

    def isr_committed(self, key: tuple[str, int], state: LeaderAndIsr) -> None:
        self.cluster.remember(key, state)

    def isr_refused(self, key: tuple[str, int]) -> None:
        """The controller's requests bring the state that won; nothing to read."""

    async def alter_partition(self, key: tuple[str, int], proposal: LeaderAndIsr) -> LeaderAndIsr | None:
        """Send one AlterPartition to the controller; the state it answers with, None on an error."""
        from kafkacompat.replication.broker_requests import ALTER_PARTITION, alter_partition_request

        controller_id = self.view.controller_id()
        if controller_id < 0 or self.cluster.is_fenced():
            return None
        request = alter_partition_request(
            self.cluster.node_id,
            self.cluster.broker_epoch,
            key[0],
            self.view.topic_id(key[0]),
            key[1],
            proposal,
            self.cluster.snapshot.broker_epochs,
        )
        response = await self._ask(controller_id, "alter-partition", ALTER_PARTITION, request)
        if response.error_code != ErrorCode.NONE:
            log.info("AlterPartition for %s-%d: %s", key[0], key[1], ErrorCode(response.error_code).name)
            return None
        for topic in response.topics:
            for answer in topic.partitions:
                if answer.partition_index != key[1]:
                    continue
                if answer.error_code != ErrorCode.NONE:
                    log.info(
                        "AlterPartition for %s-%d: %s", key[0], key[1], ErrorCode(answer.error_code).name
                    )
                    return None
                return LeaderAndIsr(
                    answer.leader_id,
                    answer.leader_epoch,
                    tuple(answer.isr),
                    self.cluster.known_controller_epoch,
                    answer.partition_epoch,
                )
        return None

    async def controlled_shutdown(self) -> bool:
        """This broker is stopping: ask the controller to move its leaderships away first (Kafka's
        controlled.shutdown.*), so clients switch leaders without waiting for the session to expire.
        True once nothing is left to move."""
        config = self.cluster.broker.config
        if not config["controlled.shutdown.enable"]:
            return False
        attempts = max(int(config["controlled.shutdown.max.retries"]), 0) + 1
        for attempt in range(attempts):
            try:
                remaining = await self._request_controlled_shutdown()
            except Exception as exc:
                log.warning("controlled shutdown attempt %d failed: %r", attempt + 1, exc)
                remaining = None
            if remaining == []:
                # wait until this broker's own view shows the moves, so no request is answered as leader
                await self.cluster.wait_for_view(
                    lambda: (
                        not any(s.is_leader and len(s.replicas) > 1 for s in self.cluster.partitions.values())
                    ),
                    timeout=5,
                )
                # as Kafka's StopReplica to a stopping broker: stop fetching, so no leader takes this
                # broker back into an ISR in the moments before its session ends
                self.cluster.shutting_down = True
                for fetcher in self.cluster.fetchers.values():
                    fetcher.stop()
                log.info("controlled shutdown of broker %d complete", self.cluster.node_id)
                return True
            if remaining is not None:
                log.info("controlled shutdown: %d partition(s) could not move yet", len(remaining))
            if attempt + 1 < attempts:
                await trio.sleep(config["controlled.shutdown.retry.backoff.ms"] / 1000)
        return False

    async def _request_controlled_shutdown(self) -> list[tuple[str, int]]:
        if self.cluster.is_controller:
            return await self.duties.controlled_shutdown_as_controller(self.cluster.node_id)
        from kafkacompat.wire.messages import request_class

        controller_id = self.view.controller_id()
        if controller_id not in self.cluster.snapshot.brokers:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller")
        request = request_class(CONTROLLED_SHUTDOWN)(broker_id=self.cluster.node_id, broker_epoch=-1)
        response = await self._ask(controller_id, "shutdown", CONTROLLED_SHUTDOWN, request)
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(response.error_code), "controlled shutdown refused")
        return [(p.topic_name, p.partition_index) for p in response.remaining_partitions]

    async def _ask(self, controller_id: int, purpose: str, api_key: int, request: Any) -> Any:
        """One request to the controller on a connection of its own (`replica.socket.timeout.ms` to
        connect and for the answer), in the highest version both serve."""
        timeout = self.cluster.broker.config["replica.socket.timeout.ms"] / 1000
        connection = await self.cluster.connect_inter_broker(controller_id, purpose, timeout)
        try:
            return await connection.send(api_key, connection.version_for(api_key), request)
        finally:
            connection.close()
