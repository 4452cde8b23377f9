"""What cluster mode uses of the broker it runs in: `BrokerHost`, a structural type.

Theory of operation
-------------------
The cluster runtime and `ConfigSync` are trio edges of the broker, yet replication sits below the
serving package and imports nothing from `kafkacompat/broker/` (the import rule of docs/ARCHITECTURE.md,
checked by `kafkacompat/_tests/test_import_rule.py`). They reach the broker's state through this
`typing.Protocol` instead: `BrokerState` satisfies it without naming it, and a test may hand any object
with these members. The protocol names every member replication touches, and no more, so what cluster
mode depends on is written down in one place; a job that needs the broker's private state (dropping a
deleted topic's logs and cached configs) is a public method of the broker's (`drop_topic_locally`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.dynamic_config import DynamicBrokerConfigs
    from kafkacompat.log.config import LogConfig
    from kafkacompat.log.manager import LogManager
    from kafkacompat.replication.metadata import LocalMetadata, TopicInfo
    from kafkacompat.replication.replica_manager import Watchers
    from kafkacompat.replication.throttle import ReplicationThrottle
    from kafkacompat.security.acls import Authorizer
    from kafkacompat.security.credentials import ScramCredentialStore
    from kafkacompat.security.quotas import QuotaManager

__all__ = ["BrokerHost"]


class BrokerHost(Protocol):
    """The broker's state as cluster mode sees it (`kafkacompat.broker.state.BrokerState` is one)."""

    #: the effective broker config (replaced, never mutated, by a dynamic change: read it each time)
    config: BrokerConfig
    node_id: int
    logs: LogManager
    #: the topic table handlers read; in cluster mode a `ClusterMetadataCache` the runtime fills
    metadata: LocalMetadata
    #: listener name -> (host, port) as advertised, filled in once the listeners are bound
    endpoints: dict[str, tuple[str, int]]
    #: set at shutdown: the end of the ZooKeeper session is then our own doing
    closing: bool
    follower_throttle: ReplicationThrottle
    scram_credentials: ScramCredentialStore
    quotas: QuotaManager
    authorizer: Authorizer | None
    dynamic: DynamicBrokerConfigs

    @property
    def watchers(self) -> Watchers:
        """The parked-request registry (read-only here, so the broker's own registry type fits)."""
        ...

    def now_ms(self) -> int: ...

    def topic_log_config(self, topic: TopicInfo) -> LogConfig: ...

    def drop_topic_locally(self, topic: TopicInfo) -> None:
        """Forget a topic ZooKeeper no longer has: its table entry, cached log config, logs (to the
        delayed delete), fetch sessions, and wake whatever is parked on it."""
        ...

    async def apply_stored_broker_configs(self, entities: dict[str, dict[str, str]]) -> None: ...
