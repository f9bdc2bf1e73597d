"""Replica groups: where a deployment's replicas run and which group answers each camera.

A deployment with an MVSP placement problem (``DeploymentSpec.placement``) is served as
*replica groups*, one per ``(variant, node)`` pair of the placement solution: ``n_mv^e``
instances become that many replicas pinned to node ``e``, serving the deployment's versions
in variant ``v``'s form (its ``batch_size`` is the group's dynamic-batch bound), and the
solution's routing ``x_mv^ie`` becomes the camera table: the requests of camera (source)
``i`` go to the group ``(v, e)`` the solution routes them to.

Only the deployment's own model of the problem is served: the model whose id is the
deployment's name, or the problem's only model (:func:`served_model`).

When a group's node is lost or draining, :func:`replace` moves the plan onto the surviving
nodes: the same placement policy re-solves the problem restricted to the survivors' edge
nodes (links to the lost nodes dropped); when that is infeasible, the lost groups move
whole to the least-loaded surviving node and their cameras follow them. Either way the
result names its cause. All of it is pure: the data plane's controller supplies the alive
nodes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import replace as with_fields

from deepedge.core.errors import InfeasibleError
from deepedge.planning.placement import plan_placement
from deepedge.planning.placement.model import PlacementProblem, PlacementSolution, SolveStatus

CAMERA_HEADER = "deepedge-camera"  # the HTTP header naming a request's camera
DECIDED = "placement decision"
RESOLVE_TIME_LIMIT_S = 5.0  # a re-placement is solved while the lost node's cameras wait


@dataclass(frozen=True)
class ReplicaGroup:
    """``replicas`` replicas of variant ``variant`` pinned to node ``node``."""

    variant: str
    node: str
    replicas: int
    max_batch_size: int | None = None  # the variant's batch size (None: the deployment's)

    @property
    def name(self) -> str:
        return f"{self.variant}@{self.node}"


@dataclass(frozen=True)
class GroupPlan:
    """A deployment's replica groups and the group each camera's requests go to.

    ``problem`` is the placement problem (JSON) a re-placement re-solves with ``method``;
    ``cause`` says why the plan is what it is (the placement decision, or a re-placement)."""

    model: str  # the problem's model id the deployment serves
    method: str
    groups: tuple[ReplicaGroup, ...]
    cameras: tuple[tuple[str, str], ...]  # (camera, group name), sorted by camera
    problem: str
    cause: str = DECIDED

    def group(self, name: str) -> ReplicaGroup:
        return next(g for g in self.groups if g.name == name)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(g.node for g in self.groups)

    def camera_table(self) -> dict[str, str]:
        return dict(self.cameras)


@dataclass(frozen=True)
class Replacement:
    """What :func:`replace` did: the plan to serve, the nodes it left and why."""

    plan: GroupPlan
    lost: frozenset[str]
    moved: bool  # False: the plan's nodes are all alive, nothing changed


def served_model(problem: PlacementProblem, deployment: str) -> str | None:
    """The problem's model this deployment serves (module docstring), or None."""
    ids = [m.id for m in problem.models]
    if deployment in ids:
        return deployment
    return ids[0] if len(ids) == 1 else None


def plan_of(
    problem: PlacementProblem, solution: PlacementSolution, model: str, cause: str = DECIDED
) -> GroupPlan:
    """The groups and camera table of ``solution`` for ``model`` (module docstring)."""
    variants = {v.id: v for m in problem.models if m.id == model for v in m.variants}
    groups = tuple(
        ReplicaGroup(p.variant, p.node, p.instances, variants[p.variant].batch_size)
        for p in sorted(solution.placements, key=lambda p: (p.node, p.variant))
        if p.model == model
    )
    names = {g.name for g in groups}
    cameras = tuple(
        sorted(
            (r.source, f"{r.variant}@{r.node}")
            for r in solution.routes
            if r.model == model and f"{r.variant}@{r.node}" in names
        )
    )
    return GroupPlan(model, solution.method.value, groups, cameras,
                     problem.model_dump_json(), cause)  # fmt: skip


def route_camera(plan: GroupPlan, camera: str | None) -> tuple[str, bool]:
    """The group that answers ``camera`` and whether that is a fallback (a camera the plan
    does not route: the group with the most replicas, the first such in the plan)."""
    table = plan.camera_table()
    if camera is not None and camera in table:
        return table[camera], False
    return max(plan.groups, key=lambda g: g.replicas).name, True


def fallback_order(plan: GroupPlan, first: str) -> list[str]:
    """``first``, then every other group, most replicas first (where a request goes when
    its group does not answer)."""
    others = sorted((g for g in plan.groups if g.name != first), key=lambda g: -g.replicas)
    return [first, *(g.name for g in others)]


def replace(plan: GroupPlan, alive: Iterable[str]) -> Replacement:
    """The plan moved off the nodes not in ``alive`` (module docstring); raises
    :class:`InfeasibleError` when no node the plan may use is alive."""
    alive = frozenset(alive)
    lost = plan.nodes - alive
    if not lost:
        return Replacement(plan, frozenset(), moved=False)
    problem = PlacementProblem.model_validate_json(plan.problem)
    survivors = [e for e in problem.edge_nodes if e.id in alive]
    if not survivors:
        raise InfeasibleError(
            f"no node of {plan.model}'s placement is alive (lost: {', '.join(sorted(lost))})",
            reasons=[f"node {n} is not alive" for n in sorted(lost)],
        )
    cause = f"node(s) {', '.join(sorted(lost))} not alive"
    try:
        solution = plan_placement(restricted(problem, {e.id for e in survivors}), plan.method,
                                  time_limit_s=RESOLVE_TIME_LIMIT_S)  # fmt: skip
        moved = plan_of(problem, solution, plan.model, f"{cause}: re-solved ({plan.method})")
        if solution.status in {SolveStatus.OPTIMAL, SolveStatus.FEASIBLE} and moved.groups:
            return Replacement(moved, lost, moved=True)
    except InfeasibleError:
        pass
    return Replacement(least_loaded(plan, [e.id for e in survivors], cause), lost, moved=True)


def restricted(problem: PlacementProblem, nodes: set[str]) -> PlacementProblem:
    """``problem`` over the edge nodes ``nodes`` only (links to the others dropped)."""
    gone = {e.id for e in problem.edge_nodes} - nodes
    return problem.model_copy(
        update={
            "edge_nodes": [e for e in problem.edge_nodes if e.id in nodes],
            "links": [k for k in problem.links if k.a not in gone and k.b not in gone],
        }
    )


def least_loaded(plan: GroupPlan, survivors: list[str], cause: str) -> GroupPlan:
    """Every group on a node outside ``survivors`` moved whole, in plan order, to the
    surviving node with the fewest replicas so far (ties: the first in ``survivors``); a
    moved group joins a group of the same variant already there."""
    load = {n: 0 for n in survivors}
    kept: dict[str, ReplicaGroup] = {}
    for g in plan.groups:
        if g.node in load:
            load[g.node] += g.replicas
            kept[g.name] = g
    renamed: dict[str, str] = {}
    for g in plan.groups:
        if g.node in load:
            continue
        node = min(survivors, key=lambda n: (load[n], survivors.index(n)))
        load[node] += g.replicas
        target = with_fields(g, node=node)
        if target.name in kept:
            have = kept[target.name]
            target = with_fields(have, replicas=have.replicas + g.replicas)
        kept[target.name] = target
        renamed[g.name] = target.name
    groups = tuple(sorted(kept.values(), key=lambda g: (g.node, g.variant)))
    cameras = tuple(sorted((c, renamed.get(name, name)) for c, name in plan.cameras))
    return GroupPlan(plan.model, plan.method, groups, cameras, plan.problem,
                     f"{cause}: moved to the least-loaded node")  # fmt: skip


def plan_document(plan: GroupPlan) -> dict[str, object]:
    """The plan as a plain document (a decision's record, a response's parameters)."""
    return {
        "model": plan.model,
        "method": plan.method,
        "cause": plan.cause,
        "groups": [
            {
                "variant": g.variant,
                "node": g.node,
                "replicas": g.replicas,
                "max_batch_size": g.max_batch_size,
            }
            for g in plan.groups
        ],
        "cameras": dict(plan.cameras),
        "problem": json.loads(plan.problem)["name"],
    }
