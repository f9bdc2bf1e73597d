"""One registry per family: every policy name resolves, unknown names are bad input, and the
objects the registries hand out are the policies the families ship."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.planning.placement import PLACEMENT_POLICIES, placement_policy, plan_placement
from deepedge.planning.placement.model import Method, PlacementProblem
from deepedge.planning.sharding import SHARD_POLICIES, Planner, shard_policy
from deepedge.planning.sharding.plan import Policy
from deepedge.planning.sharding.spec import ClusterSpec
from deepedge.planning.window import (
    WINDOW_SCHEDULERS,
    SchedulerOptions,
    WindowScheduler,
    window_scheduler,
)
from deepedge.planning.window.accuracy import Horizon
from deepedge.planning.window.documents import SchedulerKind, WindowProblem
from deepedge.planning.window.oracle import OracleScheduler
from deepedge.planning.window.thief import ThiefScheduler
from deepedge.planning.window.uniform import UniformScheduler

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _document(name: str, model: type) -> object:
    return model.model_validate_json((EXAMPLES / name).read_text())


@pytest.mark.parametrize(
    ("registry", "keys"),
    [(SHARD_POLICIES, Policy), (WINDOW_SCHEDULERS, SchedulerKind), (PLACEMENT_POLICIES, Method)],
)
def test_every_name_of_a_family_has_a_policy(registry: object, keys: type) -> None:
    assert set(registry) == set(keys)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("lookup", "field"),
    [(shard_policy, "policy"), (window_scheduler, "scheduler"), (placement_policy, "method")],
)
def test_an_unknown_name_is_bad_input_naming_the_field(lookup: object, field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        lookup("greedy")  # type: ignore[operator]
    assert info.value.field == field and "greedy" in info.value.message


@pytest.mark.parametrize("name", list(Policy))
def test_each_sharding_policy_plans_under_its_own_name(name: Policy) -> None:
    cluster = _document("cluster.json", ClusterSpec)
    plan = shard_policy(name.value)(cluster, DeviceCatalog())  # type: ignore[arg-type]
    assert plan.policy is name


def test_a_planner_asks_its_estimates_for_each_cluster() -> None:
    cluster = _document("cluster.json", ClusterSpec)
    asked: list[int] = []

    def estimates(c: ClusterSpec) -> DeviceCatalog:
        asked.append(len(c.workers))
        return DeviceCatalog(c.parameter_server.device)

    planner = Planner(shard_policy(Policy.FAIR), estimates)
    smaller = cluster.model_copy(update={"workers": cluster.workers[:1]})  # type: ignore[attr-defined]
    assert planner(smaller) == SHARD_POLICIES[Policy.FAIR](smaller, estimates(smaller))
    assert planner(cluster).policy is Policy.FAIR  # type: ignore[arg-type]
    assert asked[0] == 1 and asked[-1] == len(cluster.workers)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        (SchedulerKind.THIEF, SchedulerOptions(), ThiefScheduler()),
        (
            SchedulerKind.THIEF,
            SchedulerOptions(Horizon(3, 0.9)),
            ThiefScheduler(horizon=Horizon(3, 0.9)),
        ),
        (SchedulerKind.ORACLE, SchedulerOptions(Horizon(2, 1.0)), OracleScheduler(Horizon(2, 1.0))),
        (SchedulerKind.UNIFORM, SchedulerOptions(None, "cfg1", 0.3), UniformScheduler("cfg1", 0.3)),
    ],
)
def test_window_schedulers_are_built_from_their_options(
    name: SchedulerKind, options: SchedulerOptions, expected: WindowScheduler
) -> None:
    scheduler = window_scheduler(name.value, options)
    assert scheduler == expected and scheduler.kind is name
    problem = _document("ekya-window.json", WindowProblem)
    assert scheduler.plan(problem).scheduler is name  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        (SchedulerOptions(uniform_config=None), "uniform_config"),
        (SchedulerOptions(uniform_config="cfg1", inference_share=1.5), "inference_share"),
        (SchedulerOptions(uniform_config="cfg1", inference_share=-0.1), "inference_share"),
    ],
)
def test_uniform_needs_a_configuration_and_a_share_in_range(
    options: SchedulerOptions, field: str
) -> None:
    with pytest.raises(InvalidInputError) as info:
        window_scheduler(SchedulerKind.UNIFORM, options)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("name", "solved_by"),
    [(Method.HEURISTIC, Method.HEURISTIC), (Method.MILP, Method.MILP), (Method.AUTO, Method.MILP)],
)
def test_each_placement_policy_solves_under_its_name(name: Method, solved_by: Method) -> None:
    problem = _document("placement-tiny.json", PlacementProblem)
    solution = placement_policy(name)(problem, 30.0)  # type: ignore[arg-type]
    assert solution.method is solved_by and solution.objective is not None
    again = plan_placement(problem, name, 30.0)  # type: ignore[arg-type]
    assert (again.method, again.objective) == (solution.method, solution.objective)
