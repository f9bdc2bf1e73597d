"""Replica groups from a placement solution, camera routing and re-placement on node loss."""

from __future__ import annotations

import pytest

from deepedge.core.errors import InfeasibleError
from deepedge.dataplane.replica_groups import (
    GroupPlan,
    ReplicaGroup,
    fallback_order,
    least_loaded,
    plan_of,
    replace,
    restricted,
    route_camera,
    served_model,
)
from deepedge.planning.placement import plan_placement
from deepedge.planning.placement.model import PlacementProblem

NODES = ("n1", "n2", "n3")


def problem(
    cameras: int = 3, memory_mb: float = 4096.0, rate_rps: float = 20.0
) -> PlacementProblem:
    return PlacementProblem.model_validate({
        "name": "cams",
        "sources": [{"id": f"c{i}", "demands": [{"model": "cam", "rate_rps": rate_rps,
                                                  "max_latency_ms": 200.0}]}
                    for i in range(1, cameras + 1)],
        "edge_nodes": [{"id": n, "memory_mb": memory_mb} for n in NODES],
        "links": [{"a": f"c{i}", "b": n, "delay_ms": 1.0 + abs(i - k)}
                  for i in range(1, cameras + 1) for k, n in enumerate(NODES, start=1)],
        "models": [{"id": "cam", "variants": [
            {"id": "b1", "batch_size": 1, "latency_ms": 5.0, "memory_mb": 900.0,
             "max_load_rps": 30.0},
            {"id": "b8", "batch_size": 8, "latency_ms": 20.0, "memory_mb": 1400.0,
             "max_load_rps": 120.0}]}],
    })  # fmt: skip


def decided(p: PlacementProblem) -> GroupPlan:
    return plan_of(p, plan_placement(p, "heuristic", time_limit_s=5.0), "cam")


def test_every_placement_is_a_group_and_every_camera_is_routed_as_the_solution_says() -> None:
    p = problem()
    solution = plan_placement(p, "heuristic", time_limit_s=5.0)
    plan = plan_of(p, solution, "cam")
    assert sorted((g.variant, g.node, g.replicas) for g in plan.groups) == sorted(
        (x.variant, x.node, x.instances) for x in solution.placements
    )
    for g in plan.groups:
        assert g.max_batch_size == {"b1": 1, "b8": 8}[g.variant]
    assert plan.camera_table() == {r.source: f"{r.variant}@{r.node}" for r in solution.routes}
    for camera, group in plan.cameras:
        assert route_camera(plan, camera) == (group, False)


def test_an_unknown_camera_falls_back_to_the_largest_group_and_says_so() -> None:
    plan = GroupPlan("cam", "heuristic", (ReplicaGroup("b1", "n1", 1), ReplicaGroup("b8", "n2", 3)),
                     (("c1", "b1@n1"),), "{}")  # fmt: skip
    assert route_camera(plan, "c9") == ("b8@n2", True)
    assert route_camera(plan, None) == ("b8@n2", True)
    assert fallback_order(plan, "b1@n1") == ["b1@n1", "b8@n2"]


@pytest.mark.parametrize(("models", "name", "expected"), [
    (["cam"], "anything", "cam"),
    (["a", "b"], "b", "b"),
    (["a", "b"], "c", None),
])  # fmt: skip
def test_the_served_model_is_the_deployments_name_or_the_only_one(
    models: list[str], name: str, expected: str | None
) -> None:
    doc = problem().model_dump()
    variants = doc["models"][0]["variants"]
    doc["models"] = [{"id": m, "variants": variants} for m in models]
    doc["sources"][0]["demands"][0]["model"] = models[0]
    for s in doc["sources"][1:]:
        s["demands"][0]["model"] = models[-1]
    assert served_model(PlacementProblem.model_validate(doc), name) == expected


def test_nothing_moves_while_every_node_of_the_plan_is_alive() -> None:
    plan = decided(problem())
    result = replace(plan, NODES)
    assert not result.moved and result.plan == plan and result.lost == frozenset()


@pytest.mark.parametrize("lost", NODES)
def test_a_lost_node_is_re_solved_over_the_survivors(lost: str) -> None:
    plan = decided(problem())
    alive = [n for n in NODES if n != lost]
    result = replace(plan, alive)
    if lost not in plan.nodes:
        assert not result.moved
        return
    assert result.moved and result.lost == {lost}
    assert result.plan.nodes <= set(alive) and result.plan.groups
    assert lost in result.plan.cause and "re-solved" in result.plan.cause
    names = {g.name for g in result.plan.groups}
    assert {c for c, _ in result.plan.cameras} == {"c1", "c2", "c3"}
    assert all(group in names for _, group in result.plan.cameras)


def test_an_infeasible_re_solve_moves_groups_whole_to_the_least_loaded_survivor() -> None:
    # a node holds one instance (1400 of 1500 MB) carrying one camera (100 of 120 requests/s):
    # two survivors cannot serve three cameras, so the re-solve fails and the group moves whole.
    p = problem(memory_mb=1500.0, rate_rps=100.0)
    assert not plan_placement(restricted(p, {"n2", "n3"}), "heuristic", 5.0).placements
    plan = GroupPlan("cam", "heuristic", (ReplicaGroup("b8", "n1", 1, 8),
                                          ReplicaGroup("b8", "n2", 2, 8),
                                          ReplicaGroup("b8", "n3", 1, 8)),
                     (("c1", "b8@n1"), ("c2", "b8@n2"), ("c3", "b8@n3")),
                     p.model_dump_json())  # fmt: skip
    result = replace(plan, ["n2", "n3"])
    assert result.moved and result.plan.nodes <= {"n2", "n3"}
    assert sum(g.replicas for g in result.plan.groups) == 4  # no replica dropped
    table = result.plan.camera_table()
    assert table["c2"] == "b8@n2" and table["c3"] == "b8@n3"
    assert table["c1"] in {"b8@n2", "b8@n3"}


def test_least_loaded_picks_the_emptiest_survivor_and_merges_a_same_variant_group() -> None:
    plan = GroupPlan("cam", "milp", (ReplicaGroup("b1", "n1", 2), ReplicaGroup("b1", "n2", 3),
                                     ReplicaGroup("b8", "n3", 1)),
                     (("c1", "b1@n1"), ("c2", "b1@n2"), ("c3", "b8@n3")), "{}")  # fmt: skip
    moved = least_loaded(plan, ["n2", "n3"], "node(s) n1 not alive")
    assert moved.groups == (ReplicaGroup("b1", "n2", 3), ReplicaGroup("b1", "n3", 2),
                            ReplicaGroup("b8", "n3", 1))  # fmt: skip
    assert moved.camera_table() == {"c1": "b1@n3", "c2": "b1@n2", "c3": "b8@n3"}
    merged = least_loaded(plan, ["n2"], "n1, n3 lost")
    assert merged.groups == (ReplicaGroup("b1", "n2", 5), ReplicaGroup("b8", "n2", 1))
    assert set(merged.camera_table().values()) == {"b1@n2", "b8@n2"}


def test_no_surviving_node_of_the_problem_is_infeasible() -> None:
    plan = decided(problem())
    with pytest.raises(InfeasibleError, match="no node"):
        replace(plan, ["elsewhere"])
