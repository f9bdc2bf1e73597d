"""Moving a placed deployment between two plans without dropping requests.

A placed deployment's camera router stays up across a re-placement; what moves is the set
of replica groups (:mod:`deepedge.dataplane.replica_groups`). At any moment there are two
plans:

* ``routed``: the plan the router follows, named by its revision (:func:`plan_revision`);
  the router reports the revision it follows with every long poll of the controller;
* ``target``: the plan the controller wants now (the decision, moved off lost nodes).

Every poll the controller runs the groups :func:`wanted` (``target`` and ``routed``
together: a group in both runs with ``target``'s replica count), :func:`advance`\\ s the
move with the target groups that are ready, and deletes the groups outside ``wanted`` only
once the move is :func:`settled`. For a plan ``{a@n1, a@n2}`` whose node n1 is lost and
which is re-placed as ``{a@n2, a@n3}``::

    routed {a@n1, a@n2}, target {a@n2, a@n3}   run a@n1, a@n2, a@n3 (a@n3 loading; the
                                               router's failover answers n1's cameras)
    a@n3 ready         -> routed {a@n2, a@n3}  a@n1 still runs: requests sent before the
                                               router switched get their answers
    router reports it, RETIRE_AFTER_S later    settled: a@n1 deleted

The router never follows a plan whose groups are not all ready, except the first plan of a
deployment (there is nothing to fall back to) and a controller's first after its restart.
All of it is pure: time is passed in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass

from deepedge.dataplane.replica_groups import GroupPlan, ReplicaGroup

# After the router switched plans, the groups it left run this much longer: more than its
# group timeout (3 s), so a request it sent them before the switch is answered or has moved on.
RETIRE_AFTER_S = 5.0
# A router that never reports the switch (down, restarting) holds the left groups no longer.
UNREPORTED_RETIRE_S = 60.0


@dataclass(frozen=True)
class GroupMove:
    """The plan a deployment's router follows, its revision, and when the router was given
    it (monotonic seconds)."""

    routed: GroupPlan
    revision: str
    switched_at_s: float


def plan_revision(plan: GroupPlan) -> str:
    """What the router needs of a plan, as a digest: its groups and its camera table (two
    plans that route alike have one revision, whatever their causes)."""
    return hashlib.sha256(repr((plan.groups, plan.cameras)).encode()).hexdigest()[:16]


def switch(plan: GroupPlan, now_s: float) -> GroupMove:
    return GroupMove(plan, plan_revision(plan), now_s)


def advance(
    move: GroupMove | None, target: GroupPlan, ready: Collection[str], now_s: float
) -> GroupMove:
    """The move after one poll: the router switches to ``target`` once every one of its
    groups is in ``ready`` (group names); a deployment's first plan is routed at once."""
    if move is None:
        return switch(target, now_s)
    if plan_revision(target) == move.revision:
        return move
    if all(g.name in ready for g in target.groups):
        return switch(target, now_s)
    return move


def wanted(move: GroupMove, target: GroupPlan) -> tuple[ReplicaGroup, ...]:
    """The groups to run: ``target``'s, then those of the routed plan that it lacks."""
    names = {g.name for g in target.groups}
    return (*target.groups, *(g for g in move.routed.groups if g.name not in names))


def settled(move: GroupMove, reported: str | None, now_s: float) -> bool:
    """Whether the groups outside :func:`wanted` may go: the router reported the routed
    revision and ``RETIRE_AFTER_S`` passed since the switch (``UNREPORTED_RETIRE_S``
    without its report)."""
    waited_s = now_s - move.switched_at_s
    if reported == move.revision:
        return waited_s >= RETIRE_AFTER_S
    return waited_s >= UNREPORTED_RETIRE_S
