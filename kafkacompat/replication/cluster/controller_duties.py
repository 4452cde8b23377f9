"""The controller's duties: what it decides, writes to ZooKeeper and then announces.

Theory of operation
-------------------
Only the controller (the broker holding `/controller`) writes partition states. Every write goes to
ZooKeeper first, versioned and fenced by the controller epoch (`ZooKeeperStore.controller_write_states`:
check `/controller_epoch`, then compare-and-set each state; a stale controller gets `StaleController`),
and only then are the brokers told, through `ControllerRequests.announce` (LeaderAndIsr to the replicas,
UpdateMetadata to every live broker). `controller.py` holds the pure decisions; this object reads,
decides with them and writes:

- `reconcile`, on every change of the view while controller (watches fired, or duties marked due):
  partitions of new topics get their first
  state (first live replica leads, the live replicas form the ISR); partitions led by a dead broker get a
  new leader from the ISR (`unclean.leader.election.enable` honoured per topic) with leader epoch + 1;
  dead followers leave the ISR; topics in `/admin/delete_topics` get StopReplica with deletion (a bounded
  wait for the answers) and are removed; reassignments whose new replicas joined the ISR complete
  (Kafka's KIP-455: the assignment becomes the target, leadership moves into it if it must);
- the admin requests served as controller: AlterPartitionReassignments (`alter_reassignments`),
  ElectLeaders (`elect_leaders`, and `auto_rebalance` for `auto.leader.rebalance.enable`),
  ControlledShutdown (`controlled_shutdown_as_controller`) and AlterPartition
  (`alter_partition_as_controller`: ISR changes proposed by leaders, validated against ZooKeeper's
  current state by `broker_requests.alter_partition_decision`, answered with the state written).
"""

from __future__ import annotations

import logging

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.broker_requests import (
    EPOCH_DURING_DELETE,
    IsrProposal,
    alter_partition_decision,
)
from kafkacompat.replication.cluster.controller_requests import ControllerRequests
from kafkacompat.replication.cluster.shared import ClusterState, ZkSnapshot, at_version
from kafkacompat.replication.cluster.zk_view import BROKERS, DUTIES
from kafkacompat.replication.controller import (
    elect_for_controlled_shutdown,
    elect_offline_leader,
    elect_preferred_leader,
    on_brokers_lost,
    preferred_leader_moves,
)
from kafkacompat.replication.partition_state import NO_LEADER, LeaderAndIsr
from kafkacompat.replication.zookeeper import StaleController
from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = ["DELETION_WAIT_SECONDS", "PREFERRED_ELECTION", "UNCLEAN_ELECTION", "ControllerDuties"]

log = logging.getLogger("kafkacompat.cluster")

#: how long the controller waits for the replicas' StopReplica answers before removing a deleted topic
DELETION_WAIT_SECONDS = 10.0
PREFERRED_ELECTION = 0
UNCLEAN_ELECTION = 1


class ControllerDuties:
    """The controller's decisions and writes (see module docstring); idle unless `is_controller`."""

    def __init__(self, cluster: ClusterState, requests: ControllerRequests) -> None:
        self.cluster = cluster
        self.requests = requests

    async def reconcile(self, snapshot: ZkSnapshot) -> bool:
        """Write the states the controller decides; True if anything was written."""
        live = set(snapshot.brokers)
        epoch = self.cluster.store.controller_epoch
        writes: dict[tuple[str, int], LeaderAndIsr] = {}
        for name, assignment in snapshot.topics.items():
            if name in snapshot.deletions:
                continue
            for partition, replicas in assignment.partitions.items():
                if (name, partition) not in snapshot.states:
                    alive = tuple(r for r in replicas if r in live)
                    if alive:
                        writes[(name, partition)] = LeaderAndIsr(alive[0], 0, alive, epoch, -1)
        existing = {
            key: (snapshot.topics[key[0]].partitions.get(key[1], []), state)
            for key, state in snapshot.states.items()
            if key[0] in snapshot.topics and key[0] not in snapshot.deletions
        }
        unclean = {name: self._unclean(snapshot.configs.get(name, {})) for name in snapshot.topics}
        lost = {r for _, (replicas, _) in existing.items() for r in replicas if r not in live}
        writes.update(on_brokers_lost(existing, lost, live, epoch, unclean=unclean))
        if writes:
            results = await trio.to_thread.run_sync(self.cluster.store.controller_write_states, writes)
            written: dict[tuple[str, int], LeaderAndIsr] = {}
            for key, version in results.items():
                if version < 0:
                    log.info("controller: state of %s-%d changed meanwhile; deciding again", *key)
                    self.cluster.mark(("state", *key))
                else:
                    written[key] = at_version(writes[key], version)
                    log.debug("controller: %s-%d is now %s", key[0], key[1], written[key])
            new = {key for key in written if key not in snapshot.states}
            if written:
                log.info(
                    "controller: wrote %d partition state(s) (%d new), e.g. %s-%d is now %s",
                    len(written),
                    len(new),
                    *next(iter(written)),
                    next(iter(written.values())),
                )
            self._remember(written)
            self.requests.announce(snapshot, written, new=new)
        for name in snapshot.deletions:
            doomed = snapshot.topics.get(name)
            if doomed is not None:
                stops: dict[int, list[tuple[str, int, int, bool]]] = {}
                for partition, replicas in doomed.partitions.items():
                    for replica in replicas:
                        stops.setdefault(replica, []).append((name, partition, EPOCH_DURING_DELETE, True))
                answered = self.requests.send_stop_replica(stops)
                # as Kafka's topic deletion: the replicas stop and delete first (bounded wait: a replica
                # that died meanwhile drops the topic when it comes back and reads ZooKeeper)
                with trio.move_on_after(DELETION_WAIT_SECONDS):
                    for event in answered:
                        await event.wait()
            await trio.to_thread.run_sync(self.cluster.store.remove_topic, name)
            log.info("controller: deleted topic %s", name)
            # the next reconcile reads the listings again (their watches fire too)
            self.cluster.mark(("topics",))
            self.cluster.mark(("deletions",))
        finished = await self._finish_reassignments(snapshot)
        return bool(writes or snapshot.deletions or finished)

    def _remember(self, written: dict[tuple[str, int], LeaderAndIsr]) -> None:
        """The controller's own view takes the states it wrote at once (its UpdateMetadata to itself
        brings them too, later)."""
        for key, state in written.items():
            self.cluster.remember(key, state)

    def _unclean(self, configs: dict[str, str]) -> bool:
        value = configs.get("unclean.leader.election.enable")
        if value is None:
            return bool(self.cluster.broker.config["unclean.leader.election.enable"])
        return value.strip().lower() == "true"

    async def _finish_reassignments(self, snapshot: ZkSnapshot) -> bool:
        """Complete reassignments whose new replicas are all in the ISR: the assignment becomes the
        target, the removed replicas leave the ISR, leadership moves into the target if it must, with
        leader epoch + 1 (Kafka's KIP-455 completion). True if anything was written."""
        epoch = self.cluster.store.controller_epoch
        live = set(snapshot.brokers)
        changed = False
        for name, assignment in snapshot.topics.items():
            if not assignment.adding and not assignment.removing:
                continue
            done: dict[int, list[int]] = {}
            states: dict[tuple[str, int], LeaderAndIsr] = {}
            for partition in set(assignment.adding) | set(assignment.removing):
                state = snapshot.states.get((name, partition))
                adding = assignment.adding.get(partition, [])
                removing = set(assignment.removing.get(partition, []))
                if state is None or not set(adding) <= set(state.isr):
                    continue
                target = [r for r in assignment.partitions.get(partition, []) if r not in removing]
                isr = tuple(r for r in state.isr if r in target)
                leader = state.leader
                if leader not in target or leader not in live:
                    leader = next((r for r in target if r in isr and r in live), NO_LEADER)
                if leader == NO_LEADER:
                    continue
                done[partition] = target
                states[(name, partition)] = LeaderAndIsr(
                    leader, state.leader_epoch + 1, isr, epoch, state.zk_version
                )
            if not done:
                continue
            versions = await trio.to_thread.run_sync(self.cluster.store.controller_write_states, states)
            finished = {p: t for p, t in done.items() if versions.get((name, p), -1) >= 0}
            if finished:
                completed = zd.TopicAssignment(
                    name,
                    assignment.topic_id,
                    {**assignment.partitions, **finished},
                    {p: r for p, r in assignment.adding.items() if p not in finished},
                    {p: r for p, r in assignment.removing.items() if p not in finished},
                )
                await trio.to_thread.run_sync(self.cluster.store.set_assignment, completed)
                self.cluster.snapshot.topics[name] = completed
                written = {(name, p): at_version(states[(name, p)], versions[(name, p)]) for p in finished}
                self._remember(written)
                after = ZkSnapshot(snapshot.brokers, snapshot.broker_epochs, snapshot.controller)
                after.topics = {**snapshot.topics, name: completed}
                self.requests.announce(after, written)
                # the replicas reassigned away stop and delete the partition (Kafka's StopReplica)
                stops: dict[int, list[tuple[str, int, int, bool]]] = {}
                for p in finished:
                    for replica in assignment.removing.get(p, []):
                        stops.setdefault(replica, []).append((name, p, states[(name, p)].leader_epoch, True))
                self.requests.send_stop_replica(stops)
                log.info("controller: reassignment of %s partitions %s complete", name, sorted(finished))
                changed = True
        return changed

    async def alter_reassignments(
        self, wanted: dict[tuple[str, int], list[int] | None]
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments as the controller: target replica lists (None cancels). The
        assignment becomes target + original replicas with adding/removing recorded; the new replicas
        copy the data as followers and the reassignment completes once they are all in the ISR."""
        if not self.cluster.is_controller:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.cluster.node_id} is not the controller")
        snapshot = self.cluster.snapshot  # the controller's view: current, ZooKeeper's compare-and-set checks
        live = set(snapshot.brokers)
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        changed: dict[str, zd.TopicAssignment] = {}
        for (name, partition), target in sorted(wanted.items()):
            assignment = changed.get(name) or snapshot.topics.get(name)
            if assignment is None or partition not in assignment.partitions or name in snapshot.deletions:
                results[(name, partition)] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "The partition does not exist.",
                )
                continue
            current = assignment.partitions[partition]
            adding = assignment.adding.get(partition, [])
            removing = assignment.removing.get(partition, [])
            original = [r for r in current if r not in adding]
            if target is None:
                if not adding and not removing:
                    results[(name, partition)] = (
                        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                        "No reassignment in progress.",
                    )
                    continue
                new_replicas, new_adding, new_removing = original, [], []
            else:
                if not target or len(set(target)) != len(target) or not set(target) <= live:
                    results[(name, partition)] = (
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Replica assignment {target} must name distinct live brokers ({sorted(live)}).",
                    )
                    continue
                new_replicas = list(dict.fromkeys([*target, *original]))
                new_adding = [r for r in target if r not in original]
                new_removing = [r for r in original if r not in target]
            partitions = dict(assignment.partitions)
            partitions[partition] = new_replicas
            adding_map = {p: r for p, r in assignment.adding.items() if p != partition}
            removing_map = {p: r for p, r in assignment.removing.items() if p != partition}
            if new_adding:
                adding_map[partition] = new_adding
            if new_removing:
                removing_map[partition] = new_removing
            changed[name] = zd.TopicAssignment(
                name, assignment.topic_id, partitions, adding_map, removing_map
            )
            results[(name, partition)] = (ErrorCode.NONE, None)
        for assignment in changed.values():
            await trio.to_thread.run_sync(self.cluster.store.set_assignment, assignment)
            snapshot.topics[assignment.topic] = assignment
        if changed:
            # the replica set changed: leader epoch + 1 and LeaderAndIsr to every replica, old and new
            # (KIP-455), so the leader accepts the new followers' fetches and they start fetching
            bumped: dict[tuple[str, int], LeaderAndIsr] = {}
            for (name, partition), (error, _) in results.items():
                state = snapshot.states.get((name, partition))
                if error == ErrorCode.NONE and state is not None and name in changed:
                    bumped[(name, partition)] = LeaderAndIsr(
                        state.leader,
                        state.leader_epoch + 1,
                        state.isr,
                        self.cluster.store.controller_epoch,
                        state.zk_version,
                    )
            if bumped:
                try:
                    versions = await trio.to_thread.run_sync(
                        self.cluster.store.controller_write_states, bumped
                    )
                except StaleController as exc:
                    raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from exc
                after = ZkSnapshot(snapshot.brokers, snapshot.broker_epochs, snapshot.controller)
                after.topics = {**snapshot.topics, **changed}
                written = {
                    k: at_version(v, versions[k]) for k, v in bumped.items() if versions.get(k, -1) >= 0
                }
                self._remember(written)
                self._reread_conflicts(versions)
                self.requests.announce(after, written)
            self.cluster.mark(DUTIES)  # a reassignment whose replicas are all in the ISR completes at once
        return results

    def _reread_conflicts(self, versions: dict[tuple[str, int], int]) -> None:
        """Partition states whose compare-and-set failed changed meanwhile: read them again."""
        for key, version in versions.items():
            if version < 0:
                self.cluster.mark(("state", *key))

    async def auto_rebalance(self) -> None:
        """auto.leader.rebalance.enable: move leaders back to preferred replicas past the threshold."""
        snapshot = self.cluster.snapshot
        partitions = {
            key: (snapshot.topics[key[0]].partitions.get(key[1], []), state)
            for key, state in snapshot.states.items()
            if key[0] in snapshot.topics and key[0] not in snapshot.deletions
        }
        moves = preferred_leader_moves(
            partitions,
            set(snapshot.brokers),
            self.cluster.broker.config["leader.imbalance.per.broker.percentage"],
        )
        if moves:
            log.info("controller: moving %d partition(s) back to their preferred leader", len(moves))
            await self.elect_leaders(moves, PREFERRED_ELECTION)

    async def elect_leaders(
        self, wanted: list[tuple[str, int]] | None, election_type: int
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """ElectLeaders as the controller: preferred (0) or unclean (1) elections, written with the
        controller-epoch check. Raises KafkaError(NOT_CONTROLLER) on any other broker."""
        if not self.cluster.is_controller:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.cluster.node_id} is not the controller")
        snapshot = self.cluster.snapshot  # the controller's view: current, ZooKeeper's compare-and-set checks
        live = set(snapshot.brokers)
        if wanted is None:
            wanted = sorted(k for k in snapshot.states if k[0] in snapshot.topics)
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        writes: dict[tuple[str, int], LeaderAndIsr] = {}
        epoch = self.cluster.store.controller_epoch
        for key in wanted:
            assignment = snapshot.topics.get(key[0])
            replicas = assignment.partitions.get(key[1]) if assignment is not None else None
            state = snapshot.states.get(key)
            if replicas is None or state is None:
                results[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            if election_type == PREFERRED_ELECTION:
                if state.leader == replicas[0]:
                    results[key] = (
                        ErrorCode.ELECTION_NOT_NEEDED,
                        "Leader election not needed for topic partition.",
                    )
                    continue
                leader = elect_preferred_leader(replicas, state.isr, live)
                if leader == NO_LEADER:
                    results[key] = (
                        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                        f"Failed to elect leader for partition {key[0]}-{key[1]}: preferred replica "
                        f"{replicas[0]} is not alive or not in the ISR",
                    )
                    continue
                writes[key] = LeaderAndIsr(leader, state.leader_epoch + 1, state.isr, epoch, state.zk_version)
            else:
                if state.leader in live:
                    results[key] = (
                        ErrorCode.ELECTION_NOT_NEEDED,
                        "Leader election not needed for topic partition.",
                    )
                    continue
                leader, isr = elect_offline_leader(replicas, state.isr, live, True)
                if leader == NO_LEADER:
                    results[key] = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "No live replica to elect.")
                    continue
                writes[key] = LeaderAndIsr(leader, state.leader_epoch + 1, isr, epoch, state.zk_version)
        if writes:
            try:
                versions = await trio.to_thread.run_sync(self.cluster.store.controller_write_states, writes)
            except StaleController as exc:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from exc
            for key, version in versions.items():
                if version < 0:
                    results[key] = (ErrorCode.NOT_CONTROLLER, "The partition state changed meanwhile; retry.")
                else:
                    results[key] = (ErrorCode.NONE, None)
                    log.info("controller: %s-%d elected %s", key[0], key[1], writes[key])
            written = {k: at_version(writes[k], v) for k, v in versions.items() if v >= 0}
            self._remember(written)
            self._reread_conflicts(versions)
            self.requests.announce(snapshot, written)
        return results

    async def controlled_shutdown_as_controller(self, broker_id: int) -> list[tuple[str, int]]:
        """ControlledShutdown as the controller: leadership of `broker_id`'s partitions moves to another
        ISR member (leader epoch + 1) and it leaves the ISRs it follows in; returns the partitions it
        still leads (no other replica could take over). Replication factor 1 partitions stay, as in
        Kafka. KafkaError: NOT_CONTROLLER elsewhere, BROKER_NOT_AVAILABLE for an unknown broker."""
        if not self.cluster.is_controller:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.cluster.node_id} is not the controller")
        snapshot = self.cluster.snapshot  # the controller's view: current, ZooKeeper's compare-and-set checks
        if broker_id not in snapshot.brokers:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        live = set(snapshot.brokers)
        epoch = self.cluster.store.controller_epoch
        self.cluster.shutting_down_brokers.add(broker_id)
        writes: dict[tuple[str, int], LeaderAndIsr] = {}
        remaining: list[tuple[str, int]] = []
        for key, state in snapshot.states.items():
            assignment = snapshot.topics.get(key[0])
            replicas = assignment.partitions.get(key[1], []) if assignment is not None else []
            if broker_id not in replicas or len(replicas) < 2:
                continue
            if state.leader == broker_id:
                leader, isr = elect_for_controlled_shutdown(replicas, state.isr, live, {broker_id})
                if leader == NO_LEADER:
                    remaining.append(key)
                    continue
                writes[key] = LeaderAndIsr(leader, state.leader_epoch + 1, isr, epoch, state.zk_version)
            elif broker_id in state.isr and len(state.isr) > 1:
                isr = tuple(r for r in state.isr if r != broker_id)
                writes[key] = LeaderAndIsr(state.leader, state.leader_epoch + 1, isr, epoch, state.zk_version)
        if writes:
            try:
                versions = await trio.to_thread.run_sync(self.cluster.store.controller_write_states, writes)
            except StaleController as exc:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from exc
            for key, version in versions.items():
                if version < 0 and writes[key].leader != snapshot.states[key].leader:
                    remaining.append(key)  # changed meanwhile: the broker asks again
            written = {k: at_version(writes[k], v) for k, v in versions.items() if v >= 0}
            self._remember(written)
            self._reread_conflicts(versions)
            self.requests.announce(snapshot, written)
        log.info(
            "controller: controlled shutdown of broker %d moved %d partition state(s), %d remain",
            broker_id,
            len(writes),
            len(remaining),
        )
        return sorted(remaining)

    async def alter_partition_as_controller(
        self, broker_id: int, broker_epoch: int, proposals: dict[tuple[str, int], IsrProposal]
    ) -> tuple[ErrorCode, dict[tuple[str, int], tuple[ErrorCode, LeaderAndIsr | None]]]:
        """Validate ISR proposals against ZooKeeper's current states and write the accepted ones with
        compare-and-set; the answer per partition is the state now in ZooKeeper."""
        if not self.cluster.is_controller:
            return ErrorCode.NOT_CONTROLLER, {}
        epochs: dict[int, int] = {}
        await trio.to_thread.run_sync(self.cluster.store.live_brokers, None, epochs)
        if epochs != self.cluster.snapshot.broker_epochs:
            self.cluster.mark(BROKERS)  # the view is behind (its watch is about to fire)
        if broker_id not in epochs or (broker_epoch != -1 and epochs[broker_id] != broker_epoch):
            return ErrorCode.STALE_BROKER_EPOCH, {}

        def read_states() -> dict[tuple[str, int], LeaderAndIsr | None]:
            return {key: self.cluster.store.partition_state(*key) for key in proposals}

        current = await trio.to_thread.run_sync(read_states)
        results: dict[tuple[str, int], tuple[ErrorCode, LeaderAndIsr | None]] = {}
        writes: dict[tuple[str, int], LeaderAndIsr] = {}
        for key, proposal in proposals.items():
            error, state = alter_partition_decision(
                proposal, current.get(key), epochs, self.cluster.shutting_down_brokers
            )
            if error != ErrorCode.NONE or state is None:
                results[key] = (error, None)
            elif state is current.get(key):
                results[key] = (ErrorCode.NONE, state)
            else:
                writes[key] = LeaderAndIsr(
                    state.leader,
                    state.leader_epoch,
                    state.isr,
                    self.cluster.store.controller_epoch,
                    state.zk_version,
                )
        if writes:
            try:
                versions = await trio.to_thread.run_sync(self.cluster.store.controller_write_states, writes)
            except StaleController:
                return ErrorCode.NOT_CONTROLLER, {}
            written: dict[tuple[str, int], LeaderAndIsr] = {}
            for key, version in versions.items():
                if version < 0:
                    results[key] = (ErrorCode.INVALID_UPDATE_VERSION, None)
                else:
                    written[key] = at_version(writes[key], version)
                    results[key] = (ErrorCode.NONE, written[key])
                    log.info(
                        "controller: %s-%d ISR is now %s (AlterPartition)",
                        key[0],
                        key[1],
                        list(written[key].isr),
                    )
            self._remember(written)
            # the leader learns the new state from the answer; every broker's metadata from this
            self.requests.announce(self.cluster.snapshot, written, leader_and_isr=False)
            topics = self.cluster.snapshot.topics
            if any(
                (a := topics.get(key[0])) is not None and (key[1] in a.adding or key[1] in a.removing)
                for key in written
            ):
                # a reassigned partition's ISR changed: it may complete now (Kafka's
                # PartitionReassignmentIsrChangeHandler)
                self.cluster.mark(DUTIES)
        return ErrorCode.NONE, results
