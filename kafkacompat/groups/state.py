"""Classic group states and the transitions Kafka's GroupCoordinator allows between them.

Empty --first join--> PreparingRebalance --all joined / timeout--> CompletingRebalance --leader
sync--> Stable; any live state falls back to PreparingRebalance when membership or metadata changes;
PreparingRebalance goes to Empty when the rebalance ends with no members; Empty goes to Dead when
the group is deleted or its last offsets expire. ``Group.transition`` asserts these.
"""

from __future__ import annotations

import enum

__all__ = ["VALID_PREVIOUS_STATES", "GroupState"]


class GroupState(enum.Enum):
    # The values are the state names Kafka reports in DescribeGroups and ListGroups.
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(
        {
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        }
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}
