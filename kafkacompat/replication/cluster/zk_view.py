"""The broker's reads of ZooKeeper: one full read per session, then only what a watch names.

Theory of operation
-------------------
`read_snapshot` reads the whole tree kafkacompat uses (live brokers, the controller and its epoch,
pending deletions, every topic's assignment and configs, every partition's state, the newest config
change notification). A broker does it once per ZooKeeper session (at start-up, and after a session
expired, when every watch of the old one is gone) and when it becomes the controller (Kafka's
`initializeControllerContext`: a new controller trusts nothing it learnt before).

Every read arms a watch named by a `WatchKey`, the thing to read again when it fires:

- `("brokers",)`: the children of `/brokers/ids` (a broker registered or went away);
- `("controller",)`: `/controller` (an election, or the controller resigned);
- `("deletions",)`: the children of `/admin/delete_topics`;
- `("topics",)`: the children of `/brokers/topics` (a topic created or removed);
- `("topic", T)`: the data of `/brokers/topics/T` (partitions added, a reassignment, the node gone);
- `("config_changes",)`: the children of `/config/changes`; a new notification naming `topics/T` is
  read as `("config", T)`, `/config/topics/T` (Kafka's `TopicConfigHandler`, for the entity named);
- `("state", T, P)`: one partition's state, read only when the controller's compare-and-set found it
  changed (partition states are not watched: only the controller writes them, and it tells the brokers
  in its requests);
- `("duties",)`: nothing to read, the controller's duties are due (a reassigned partition's ISR
  changed, a reassignment was asked for).

A kazoo thread only records the key (`ClusterState.watch_for`); `read_changes` reads what the keys
name, in a worker thread, and returns a `ZkChanges` that `Session` applies on the trio thread. An idle
cluster therefore reads nothing, and a change costs reads of what changed: creating a topic is one
listing of `/brokers/topics` and the new topic's znodes, whatever the number of topics.

Order of a read: the live brokers are read last, so they are at least as new as any partition state
read before them (the controller takes an ISR member missing from them for lost; read first, a broker
that registered again during the read, a zombie back with a new session put back in an ISR by
AlterPartition meanwhile, would be shrunk out of it again, with a needless leader epoch bump).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.partition_state import LeaderAndIsr
from kafkacompat.replication.zookeeper import ZooKeeperStore

__all__ = [
    "BROKERS",
    "CONFIG_CHANGES",
    "CONTROLLER",
    "DELETIONS",
    "DUTIES",
    "TOPICS",
    "WatchFor",
    "WatchKey",
    "ZkChanges",
    "ZkSnapshot",
    "read_changes",
    "read_snapshot",
]

WatchKey = tuple[Any, ...]
#: the kazoo watch callback that records `key` when it fires
WatchFor = Callable[[WatchKey], Callable[[Any], None] | None]

BROKERS: WatchKey = ("brokers",)
CONTROLLER: WatchKey = ("controller",)
DELETIONS: WatchKey = ("deletions",)
TOPICS: WatchKey = ("topics",)
CONFIG_CHANGES: WatchKey = ("config_changes",)
#: no read: the controller's duties are due (a reassigned partition's ISR changed)
DUTIES: WatchKey = ("duties",)


def _no_watch(_key: WatchKey) -> None:
    return None


@dataclass(slots=True)
class ZkSnapshot:
    """The broker's view of the tree: a full read, kept current by changes and controller requests."""

    brokers: dict[int, zd.BrokerRegistration] = field(default_factory=dict)
    #: broker id -> broker epoch (the czxid of its registration)
    broker_epochs: dict[int, int] = field(default_factory=dict)
    controller: int | None = None
    #: /controller_epoch: the epoch of the newest controller (older controllers' requests are refused)
    controller_epoch: int = 0
    topics: dict[str, zd.TopicAssignment] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    states: dict[tuple[str, int], LeaderAndIsr] = field(default_factory=dict)
    deletions: list[str] = field(default_factory=list)
    #: the newest config change notification read (older ones were acted on, or predate the read)
    last_config_change: str = ""


@dataclass(slots=True)
class ZkChanges:
    """What `read_changes` read; None (or absent) for what it did not read."""

    brokers: dict[int, zd.BrokerRegistration] | None = None
    broker_epochs: dict[int, int] = field(default_factory=dict)
    controller: int | None = None
    controller_read: bool = False
    controller_epoch: int | None = None
    deletions: list[str] | None = None
    #: topic -> its assignment now, None when it is gone
    topics: dict[str, zd.TopicAssignment | None] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    states: dict[tuple[str, int], LeaderAndIsr | None] = field(default_factory=dict)
    last_config_change: str | None = None

    def empty(self) -> bool:
        return (
            self.brokers is None
            and not self.controller_read
            and self.deletions is None
            and not self.topics
            and not self.configs
            and not self.states
        )


def read_snapshot(store: ZooKeeperStore, watch_for: WatchFor = _no_watch) -> ZkSnapshot:
    """Blocking: the whole tree kafkacompat uses, each read but the partition states' with its watch
    armed (see module docstring; the live brokers last)."""
    snapshot = ZkSnapshot()
    snapshot.controller = store.current_controller(watch_for(CONTROLLER))
    snapshot.controller_epoch = store.stored_controller_epoch()
    snapshot.deletions = store.pending_topic_deletions(watch_for(DELETIONS))
    changes = store.config_changes(watch_for(CONFIG_CHANGES))
    snapshot.last_config_change = changes[-1] if changes else ""
    for name in store.topic_names(watch_for(TOPICS)):
        assignment = store.topic(name, watch_for(("topic", name)))
        if assignment is None:  # deleted between the listing and the read
            continue
        snapshot.topics[name] = assignment
        snapshot.configs[name] = store.topic_configs(name)
        for partition in assignment.partitions:
            state = store.partition_state(name, partition)
            if state is not None:
                snapshot.states[(name, partition)] = state
    snapshot.brokers = store.live_brokers(watch_for(BROKERS), snapshot.broker_epochs)
    return snapshot


def read_changes(
    store: ZooKeeperStore,
    keys: Iterable[WatchKey],
    known_topics: Mapping[str, uuid.UUID | None],
    last_config_change: str,
    watch_for: WatchFor = _no_watch,
) -> ZkChanges:
    """Blocking: read what `keys` name (see module docstring). `known_topics` are the topics the view
    holds, with their ids (a listing of `/brokers/topics` reads only the others, and drops those gone; a
    topic read again under a new id, deleted and created again meanwhile, is read as a new one);
    `last_config_change` the newest notification already acted on."""
    keys = set(keys)
    changes = ZkChanges()
    if CONTROLLER in keys:
        changes.controller = store.current_controller(watch_for(CONTROLLER))
        changes.controller_read = True
        changes.controller_epoch = store.stored_controller_epoch()
    if DELETIONS in keys:
        changes.deletions = store.pending_topic_deletions(watch_for(DELETIONS))
    to_read = {key[1] for key in keys if key[0] == "topic"}
    if TOPICS in keys:
        names = set(store.topic_names(watch_for(TOPICS)))
        to_read |= names - set(known_topics)
        for gone in set(known_topics) - names:
            changes.topics[gone] = None
            to_read.discard(gone)
    config_reads = {key[1] for key in keys if key[0] == "config"}
    if CONFIG_CHANGES in keys:
        newer = [c for c in store.config_changes(watch_for(CONFIG_CHANGES)) if c > last_config_change]
        for name in newer:
            entity = store.config_change(name)
            if entity is not None and entity.startswith("topics/"):
                config_reads.add(entity[len("topics/") :])
        if newer:
            changes.last_config_change = newer[-1]
    for name in sorted(to_read):
        assignment = store.topic(name, watch_for(("topic", name)))
        changes.topics[name] = assignment
        if assignment is None:
            continue
        if name not in known_topics or known_topics[name] != assignment.topic_id:
            config_reads.add(name)
            for partition in assignment.partitions:
                state = store.partition_state(name, partition)
                if state is not None:
                    changes.states[(name, partition)] = state
    for name in sorted(config_reads):
        if changes.topics.get(name, True) is not None:
            changes.configs[name] = store.topic_configs(name)
    for key in keys:
        if key[0] == "state":
            changes.states[(key[1], key[2])] = store.partition_state(key[1], key[2])
    if BROKERS in keys:
        changes.brokers = store.live_brokers(watch_for(BROKERS), changes.broker_epochs)
    return changes
