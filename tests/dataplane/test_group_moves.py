"""A placed deployment's move between plans: the router switches only to a plan whose
groups run, and the groups it left go only once it has switched."""

from __future__ import annotations

import pytest

from deepedge.dataplane.group_moves import (
    RETIRE_AFTER_S,
    UNREPORTED_RETIRE_S,
    advance,
    plan_revision,
    settled,
    switch,
    wanted,
)
from deepedge.dataplane.replica_groups import GroupPlan, ReplicaGroup


def plan(*groups: tuple[str, int], cameras: dict[str, str] | None = None,
         cause: str = "placement decision") -> GroupPlan:  # fmt: skip
    made = tuple(ReplicaGroup("b8", node, replicas, 8) for node, replicas in groups)
    table = cameras or {f"c-{g.node}": g.name for g in made}
    return GroupPlan("cam", "heuristic", made, tuple(sorted(table.items())), "{}", cause)


BEFORE = plan(("n1", 1), ("n2", 1))
AFTER = plan(("n2", 1), ("n3", 1), cameras={"c-n1": "b8@n3", "c-n2": "b8@n2"})
MERGED = plan(("n2", 2), cameras={"c-n1": "b8@n2", "c-n2": "b8@n2"})


def test_a_first_plan_is_routed_at_once() -> None:
    move = advance(None, BEFORE, ready=(), now_s=7.0)
    assert (move.routed, move.revision, move.switched_at_s) == (BEFORE, plan_revision(BEFORE), 7.0)


@pytest.mark.parametrize(("target", "ready", "switched"), [
    (AFTER, (), False),  # nothing of the new plan runs yet
    (AFTER, ("b8@n3",), False),  # b8@n2 (kept) not running: e.g. its replica restarting
    (AFTER, ("b8@n2", "b8@n3"), True),
    (AFTER, ("b8@n1", "b8@n2", "b8@n3"), True),  # the old group's state does not matter
    (MERGED, ("b8@n1",), False),  # the merged group not yet scaled up
    (MERGED, ("b8@n2",), True),
])  # fmt: skip
def test_the_router_switches_only_when_every_group_of_the_target_is_ready(
    target: GroupPlan, ready: tuple[str, ...], switched: bool
) -> None:
    move = advance(switch(BEFORE, 0.0), target, ready, now_s=10.0)
    assert move.routed == (target if switched else BEFORE)
    assert move.switched_at_s == (10.0 if switched else 0.0)


def test_a_plan_that_routes_alike_is_no_move() -> None:
    same = plan(("n1", 1), ("n2", 1), cause="node(s) n9 not alive: re-solved (heuristic)")
    move = switch(BEFORE, 0.0)
    assert plan_revision(same) == move.revision
    assert advance(move, same, ready=(), now_s=10.0) is move


@pytest.mark.parametrize(("routed", "target", "runs"), [
    (BEFORE, BEFORE, [("n1", 1), ("n2", 1)]),
    (BEFORE, AFTER, [("n2", 1), ("n3", 1), ("n1", 1)]),  # the old group until settled
    (BEFORE, MERGED, [("n2", 2), ("n1", 1)]),  # the target's replica count wins
    (AFTER, AFTER, [("n2", 1), ("n3", 1)]),
])  # fmt: skip
def test_the_groups_run_are_the_target_and_the_routed_plan(
    routed: GroupPlan, target: GroupPlan, runs: list[tuple[str, int]]
) -> None:
    assert [(g.node, g.replicas) for g in wanted(switch(routed, 0.0), target)] == runs


@pytest.mark.parametrize(("reported", "waited_s", "done"), [
    ("now", 0.0, False),  # the router has it, but a request it sent before may be in flight
    ("now", RETIRE_AFTER_S - 0.1, False),
    ("now", RETIRE_AFTER_S, True),
    ("before", RETIRE_AFTER_S, False),  # the router still routes by the plan before
    (None, RETIRE_AFTER_S * 2, False),  # no router report yet
    ("before", UNREPORTED_RETIRE_S, True),  # a router that never reports holds none forever
    (None, UNREPORTED_RETIRE_S, True),
])  # fmt: skip
def test_left_groups_go_once_the_router_reported_the_switch_and_a_grace_passed(
    reported: str | None, waited_s: float, done: bool
) -> None:
    move = switch(AFTER, 100.0)
    revision = {"now": move.revision, "before": plan_revision(BEFORE), None: None}[reported]
    assert settled(move, revision, 100.0 + waited_s) is done
