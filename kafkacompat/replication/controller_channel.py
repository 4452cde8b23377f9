"""The controller's channel to the brokers: one ordered request queue and connection per live broker.

Theory of operation: the controller decides and writes ZooKeeper first, then tells the brokers with
LeaderAndIsr / UpdateMetadata / StopReplica (`broker_requests.py` builds them). `ControllerChannel`
owns one `BrokerQueue` per live broker (Kafka's ControllerChannelManager): requests to one broker are
sent one at a time, in the order they were queued, over one connection to its inter-broker listener
(`ClusterState.connect_inter_broker`, an async `InterBrokerConnection` on the trio loop, each request
bounded by `replica.socket.timeout.ms`). A request whose connection fails or times out is sent again,
in place, after a backoff and a reconnect, until it is answered or its queue is stopped (the broker's
registration ended or changed, or this broker stopped being controller).
An error answer is logged and not retried: the next state change of the partition corrects it, and a
broker that registers again (and every broker after a controller failover) gets a full LeaderAndIsr +
UpdateMetadata anyway.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any, TypeAlias

import trio

from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.replication.cluster.shared import ClusterState
    from kafkacompat.replication.inter_broker_client import InterBrokerConnection
    from kafkacompat.wire._generated.leader_and_isr_request import LeaderAndIsrRequest
    from kafkacompat.wire._generated.stop_replica_request import StopReplicaRequest
    from kafkacompat.wire._generated.update_metadata_request import UpdateMetadataRequest

#: what the controller sends a broker (`broker_requests.py` builds them)
ControllerRequest: TypeAlias = "LeaderAndIsrRequest | UpdateMetadataRequest | StopReplicaRequest"

__all__ = ["BrokerQueue", "ControllerChannel"]

log = logging.getLogger("kafkacompat.controller")

API_NAMES: dict[ApiKey, str] = {
    ApiKey.LEADER_AND_ISR: "LeaderAndIsr",
    ApiKey.STOP_REPLICA: "StopReplica",
    ApiKey.UPDATE_METADATA: "UpdateMetadata",
}


def _errors(api_key: ApiKey, response: Any) -> list[int]:
    """The non-zero error codes of an answer (top level and per partition)."""
    codes = [response.error_code]
    if api_key == ApiKey.LEADER_AND_ISR:
        codes += [p.error_code for p in getattr(response, "partition_errors", [])]
        codes += [p.error_code for t in getattr(response, "topics", []) for p in t.partition_errors]
    elif api_key == ApiKey.STOP_REPLICA:
        codes += [p.error_code for p in response.partition_errors]
    return [c for c in codes if c != ErrorCode.NONE]


class BrokerQueue:
    """The ordered requests to one broker (registered with `broker_epoch`) and its connection."""

    def __init__(self, cluster: ClusterState, broker_id: int, broker_epoch: int) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.pending: deque[tuple[ApiKey, ControllerRequest, trio.Event]] = deque()
        self.stopped = False
        self.sent = 0
        self._wake = trio.Event()
        self._connection: InterBrokerConnection | None = None

    def put(self, api_key: ApiKey, request: ControllerRequest) -> trio.Event:
        """Queue a request; the event is set once it is answered (or the queue stopped)."""
        done = trio.Event()
        self.pending.append((api_key, request, done))
        self._wake.set()
        return done

    def stop(self) -> None:
        self.stopped = True
        self._wake.set()
        for _, _, done in self.pending:
            done.set()

    async def run(self) -> None:
        backoff = 0.1
        try:
            while not self.stopped:
                if not self.pending:
                    self._wake = trio.Event()
                    await self._wake.wait()
                    continue
                api_key, request, done = self.pending[0]
                try:
                    response = await self._send(api_key, request)
                except Exception as exc:
                    log.info("controller request to broker %d: %r; retrying", self.broker_id, exc)
                    self._disconnect()
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
                    continue
                backoff = 0.1
                if self.pending and self.pending[0][1] is request:
                    self.pending.popleft()
                done.set()
                self.sent += 1
                errors = _errors(api_key, response)
                if errors:
                    log.info(
                        "%s to broker %d answered %s",
                        API_NAMES.get(api_key, api_key),
                        self.broker_id,
                        sorted({ErrorCode(c).name for c in errors}),
                    )
        finally:
            self._disconnect()

    async def _send(self, api_key: ApiKey, request: ControllerRequest) -> Any:
        if self._connection is None:
            timeout = self.cluster.broker.config["replica.socket.timeout.ms"] / 1000
            self._connection = await self.cluster.connect_inter_broker(self.broker_id, "controller", timeout)
        connection = self._connection
        return await connection.send(api_key, connection.version_for(api_key), request)

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class ControllerChannel:
    """One `BrokerQueue` per live broker while this broker is the controller."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.queues: dict[int, BrokerQueue] = {}

    def sync(self, nursery: trio.Nursery, live: dict[int, int]) -> set[int]:
        """Match the queues to the live brokers (id -> broker epoch); the ids new or re-registered."""
        for broker_id, queue in list(self.queues.items()):
            if live.get(broker_id) != queue.broker_epoch:
                queue.stop()
                del self.queues[broker_id]
        fresh = set()
        for broker_id, epoch in live.items():
            if broker_id not in self.queues:
                queue = self.queues[broker_id] = BrokerQueue(self.cluster, broker_id, epoch)
                nursery.start_soon(queue.run)
                fresh.add(broker_id)
        return fresh

    def send(self, broker_id: int, api_key: ApiKey, request: ControllerRequest) -> trio.Event | None:
        """Queue `request` for `broker_id`; the event of its answer (None: no such live broker)."""
        queue = self.queues.get(broker_id)
        if queue is not None:
            return queue.put(api_key, request)
        return None

    def broker_epoch(self, broker_id: int) -> int:
        queue = self.queues.get(broker_id)
        return queue.broker_epoch if queue is not None else -1

    def stop_all(self) -> None:
        for queue in self.queues.values():
            queue.stop()
        self.queues.clear()
