"""Invariants of every sharding policy on random clusters (hypothesis)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from _shard_cases import cluster, worker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from deepedge.core.errors import DeepEdgeError
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.perfmodel.noisy import NoisyModel
from deepedge.planning.sharding.deep_edge import plan_shards
from deepedge.planning.sharding.deep_edge_plus import plan_deep_edge_plus
from deepedge.planning.sharding.estimates import EstimateCache
from deepedge.planning.sharding.fair import plan_fair
from deepedge.planning.sharding.oracle import plan_oracle
from deepedge.planning.sharding.plan import ShardPlan
from deepedge.planning.sharding.spec import ClusterSpec

TRUTH = DeviceCatalog()
DEVICES = ["jetson-tx2", "jetson-nano", "raspberry-pi-4"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workers(draw: st.DrawFn, index: int) -> dict[str, Any]:
    device = draw(st.sampled_from(DEVICES))
    lo = draw(st.integers(1, 16))
    hi = draw(st.integers(lo, 64))
    apps = [
        {
            "name": f"app{k}",
            "kind": draw(st.sampled_from(["sift", "dnn-inference"])),
            "deadline_s": draw(st.floats(0.05, 0.6)),
        }
        for k in range(draw(st.integers(0, 2)))
    ]
    return worker(
        f"w{index}",
        device,
        cpu=draw(st.floats(0.0, 0.9)),
        gpu=draw(st.floats(0.0, 0.95)),
        mem=draw(st.floats(0.1, 0.6)),
        apps=apps,
        min_batch=lo,
        max_batch=hi,
    )


@st.composite
def clusters(draw: st.DrawFn, max_workers: int = 6) -> ClusterSpec:
    n = draw(st.integers(1, max_workers))
    return cluster(
        [draw(workers(i)) for i in range(n)],
        draw(st.integers(1, 20_000)),
        deadline_margin=draw(st.sampled_from([0.0, 0.05])),
        max_iterations=draw(st.integers(1, 30)),
    )


def check_plan_invariants(c: ClusterSpec, result: ShardPlan, model: Any, deadlines: bool) -> None:
    cache = EstimateCache(c, model)
    shards = [w.shard for w in result.workers]
    assert [w.id for w in result.workers] == [w.id for w in c.workers]
    if result.feasible:
        assert sum(shards) == c.dataset_size
    else:
        assert sum(shards) == 0 and result.epoch_time_s is None
    for i, (row, spec) in enumerate(zip(result.workers, c.workers, strict=True)):
        assert row.selected == (row.shard > 0)
        if row.selected:
            assert spec.min_batch <= row.batch_size <= spec.max_batch
            assert row.batch_size <= cache.max_batch(i)  # memory constraint (1)
            if deadlines:
                assert cache.blocker(i, row.batch_size, c.deadline_margin) is None
        else:
            assert row.batch_size == 0 and row.exclusion is not None


@SETTINGS
@given(clusters(), st.integers(0, 3))
def test_deep_edge_invariants_under_noisy_estimates(c: ClusterSpec, seed: int) -> None:
    model = NoisyModel(TRUTH, 0.1, seed=seed)
    check_plan_invariants(c, plan_shards(c, model), model, deadlines=True)


@SETTINGS
@given(clusters())
def test_fair_invariants(c: ClusterSpec) -> None:
    result = plan_fair(c, TRUTH)
    check_plan_invariants(c, result, TRUTH, deadlines=False)
    selected = [w.shard for w in result.workers if w.selected]
    assert not selected or max(selected) - min(selected) <= 1


@SETTINGS
@given(clusters(), st.integers(0, 3))
def test_deep_edge_plus_invariants_under_noisy_estimates(c: ClusterSpec, seed: int) -> None:
    model = NoisyModel(TRUTH, 0.1, seed=seed)
    result = plan_deep_edge_plus(c, model)
    check_plan_invariants(c, result, model, deadlines=True)
    for row in result.workers:
        assert not row.selected or row.batch_size <= row.shard  # a batch fits in its shard


@SETTINGS
@given(clusters(max_workers=4))
def test_oracle_is_never_worse_than_any_policy_that_keeps_batches_in_shards(
    c: ClusterSpec,
) -> None:
    plus = plan_deep_edge_plus(c, TRUTH)
    oracle = plan_oracle(c, TRUTH)
    check_plan_invariants(c, oracle, TRUTH, deadlines=True)
    assert oracle.feasible == plus.feasible
    if not plus.feasible:
        return
    assert oracle.total_cost_s is not None and plus.total_cost_s is not None
    assert oracle.total_cost_s <= plus.total_cost_s * (1 + 1e-9)
    # Algorithm 1 applies a margin to the pressure only: compare on the published rule.
    alg1 = plan_shards(c, TRUTH)
    if (
        c.deadline_margin == 0
        and alg1.feasible
        and all(w.batch_size <= w.shard for w in alg1.workers)
    ):
        assert alg1.total_cost_s is not None
        assert oracle.total_cost_s <= alg1.total_cost_s * (1 + 1e-9)


_EXAMPLE = json.loads(
    (Path(__file__).resolve().parents[3] / "examples" / "cluster.json").read_text()
)


def _number_paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _number_paths(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _number_paths(v, (*path, i))]
    numeric = isinstance(node, int | float) and not isinstance(node, bool)
    return [path] if numeric else []


_PATHS = _number_paths(_EXAMPLE)


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_PATHS),
            st.one_of(
                st.floats(0.0, 1e308, allow_nan=False, allow_infinity=False),
                st.floats(-1e308, 0.0, allow_nan=False, allow_infinity=False),
                st.integers(0, 10**30),
            ),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_valid_cluster_is_planned_or_refused_never_crashes(
    edits: list[tuple[tuple[Any, ...], float]],
) -> None:
    """Extreme but finite numbers anywhere: a plan whose shards sum to |M|, or a typed refusal."""
    doc = copy.deepcopy(_EXAMPLE)
    for path, value in edits:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    try:
        spec = ClusterSpec.model_validate(doc)
    except ValidationError:
        return
    for plan_with in (plan_shards, plan_deep_edge_plus, plan_fair, plan_oracle):
        try:
            plan = plan_with(spec, TRUTH)
        except DeepEdgeError:
            continue
        assert sum(w.shard for w in plan.workers) in (0, spec.dataset_size)
        if plan.feasible:  # a usable plan always has a finite predicted cost
            assert plan.total_cost_s is not None and math.isfinite(plan.total_cost_s)
