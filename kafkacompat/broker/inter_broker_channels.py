"""Reusable connections from this broker to the others, for requests the coordinators send.

Theory of operation: the transaction coordinator sends WriteTxnMarkers to partition leaders and, for
KIP-890's produce-path verification, AddPartitionsToTxn(verify_only) to other coordinators. Each
purpose keeps one connection per peer broker (an async `InterBrokerConnection`,
`replication/inter_broker_client.py`, from `ClusterRuntime.connect_inter_broker`), opened on first use and
closed and dropped on any failure, timeout or cancellation (the next request opens a new one); each
request is bounded by `replica.socket.timeout.ms`, and a failure to connect or to get an answer is
KafkaError(BROKER_NOT_AVAILABLE). Requests to one broker go one at a time (a lock per broker), and a
request waiting for that lock holds no request slot (lock_wait.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.broker.lock_wait import holding
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.broker.state import BrokerState
    from kafkacompat.replication.inter_broker_client import InterBrokerConnection

__all__ = ["InterBrokerChannels"]


class InterBrokerChannels:
    """One reusable connection per other broker for the coordinator's requests (markers, verification);
    requests to one broker go one at a time (a lock per broker)."""

    def __init__(self, broker: BrokerState, purpose: str) -> None:
        self.broker = broker
        self.purpose = purpose
        self._connections: dict[int, InterBrokerConnection] = {}
        self._locks: dict[int, trio.Lock] = {}

    async def send(self, broker_id: int, api_key: int, request_for: Callable[[int], Any]) -> Any:
        """`request_for(version)` sent to `broker_id` with the highest version both serve. Raises
        KafkaError(BROKER_NOT_AVAILABLE) when it cannot be reached."""
        lock = self._locks.setdefault(broker_id, trio.Lock())
        # a request (a produce's KIP-890 verification) waits without its slot (lock_wait.py)
        async with holding(lock):
            try:
                return await self._exchange(broker_id, api_key, request_for)
            except KafkaError:
                raise
            except Exception as exc:  # connection refused, reset, timed out, undecodable answer
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id}: {exc}") from exc

    async def _exchange(self, broker_id: int, api_key: int, request_for: Callable[[int], Any]) -> Any:
        connection = self._connections.get(broker_id)
        if connection is None:
            cluster = self.broker.cluster
            assert cluster is not None
            timeout = self.broker.config["replica.socket.timeout.ms"] / 1000
            connection = await cluster.connect_inter_broker(broker_id, self.purpose, timeout)
            self._connections[broker_id] = connection
        try:
            version = connection.version_for(api_key)
            return await connection.send(api_key, version, request_for(version))
        except BaseException:
            if self._connections.get(broker_id) is connection:
                del self._connections[broker_id]
            connection.close()
            raise

    def close(self) -> None:
        """Close every connection at once (a request waiting on one fails with BROKER_NOT_AVAILABLE)."""
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
