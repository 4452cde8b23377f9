"""Cluster mode's trio edge: the broker's view of ZooKeeper, the controller's duties, replica roles.

Theory of operation
-------------------
Only built when `zookeeper.connect` is set (`server.Broker` imports this package then and only then;
single-node mode never loads it, kazoo or a JVM). `ClusterRuntime` owns the broker's `ZooKeeperStore`,
the replica manager (`replicas`, which holds one `PartitionState` per hosted partition),
`num.replica.fetchers` `FetcherTask`s per broker it follows and, while it is the controller, the
`ControllerChannel` to every live broker. It reaches the broker only through `broker_host.BrokerHost`.

How brokers learn leadership: as in Kafka's ZooKeeper mode, the controller writes every state change to
ZooKeeper first (versioned, fenced by the controller epoch) and then tells the brokers with Kafka's
inter-broker requests over its channel (one ordered queue and connection per live broker, requests
retried on reconnect): LeaderAndIsr to the replicas of the changed partitions, UpdateMetadata to every
live broker, StopReplica (with deletion) to replicas that must go. A broker acts on those requests.
What each broker still reads from ZooKeeper itself is the whole tree once per session, then only what a
watch names (`zk_view`): the live brokers, the controller, the topic listing and a changed topic's
assignment, the deletions asked for, and a topic's configs when a change notification names it;
partition states it learns from the controller's requests alone. An idle cluster reads nothing. The
leader's side of replication is the replica manager's (`replica_manager.ClusterReplicaManager`);
leaders never write ZooKeeper, their ISR changes go to the controller as AlterPartition.

The parts, one job each, in the order a reconcile uses them:

- `zk_view`: the reads of ZooKeeper (`ZkSnapshot`, the full `read_snapshot`, `read_changes` of what
  the watches name);
- `shared.ClusterState`: what the parts share (the view of ZooKeeper, the replica states, the session's
  facts, the reconcile triggers, connections to other brokers), plus `ClusterMetadataCache`, the topic
  table handlers read;
- `session.Session`: registration, the ZooKeeper session and its fence, the liveness tick, the reconcile
  loop;
- `controller_duties.ControllerDuties`: the controller's decisions and writes (first states, failover,
  deletions, reassignments, elections, controlled shutdown and AlterPartition as controller);
- `controller_requests.ControllerRequests`: the controller's requests to the brokers (`announce`,
  `sync_channel`, StopReplica) on its `ControllerChannel`;
- `replica_roles.ReplicaRoles`: the broker side of those requests (LeaderAndIsr, UpdateMetadata,
  StopReplica), mirroring ZooKeeper's view locally, following with fetchers;
- `controller_client.ControllerClient`: this broker's requests to the controller (AlterPartition for
  the replica manager, ControlledShutdown);
- `metadata_view.MetadataView`: what clients are told (live brokers, controller, partition leaders,
  topic ids, reassignments in progress);
- `topic_admin.TopicAdmin`: create and delete topics, add partitions, change topic configs;
- `runtime.ClusterRuntime`: the facade that builds them and forwards the public names.

Composition, not mixins: each part is an object holding a reference to the one `ClusterState` (and to
the few parts it calls), so a part's dependencies are its constructor's arguments and the shared state
is written down in one class, where mixins would have kept one object whose every method could touch
every attribute. The facade keeps the names `BrokerState.cluster`'s callers use (handlers, metrics, the
server, the replica manager's `ClusterLink`), so none of them changed with the split.
"""

from kafkacompat.replication.cluster.runtime import ClusterRuntime
from kafkacompat.replication.cluster.shared import ClusterMetadataCache, ZkSnapshot, read_snapshot

__all__ = ["ClusterMetadataCache", "ClusterRuntime", "ZkSnapshot", "read_snapshot"]
