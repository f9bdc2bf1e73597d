"""The exact oracle against an independent enumeration of every plan on tiny clusters."""

from __future__ import annotations

import itertools
import math

from _shard_cases import cluster, sift, worker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.planning.sharding.cost_model import evaluate_assignment, evaluate_plan
from deepedge.planning.sharding.estimates import EstimateCache
from deepedge.planning.sharding.oracle import plan_oracle
from deepedge.planning.sharding.spec import ClusterSpec

TRUTH = DeviceCatalog()
DEVICES = ["jetson-tx2", "jetson-nano", "raspberry-pi-4"]


def enumerate_best(c: ClusterSpec) -> float:
    """Least Total_cost over every subset, batch and integer shard with batch <= shard."""
    cache = EstimateCache(c, TRUTH)
    n, size = len(c.workers), c.dataset_size
    options = {}
    for i, w in enumerate(c.workers):
        top = min(cache.max_batch(i), w.max_batch, size)
        feasible = [b for b in range(w.min_batch, top + 1) if cache.blocker(i, b) is None]
        if cache.max_batch(i) and feasible:
            options[i] = feasible
    best = math.inf
    for k in range(1, len(options) + 1):
        for subset in itertools.combinations(sorted(options), k):
            for batches in itertools.product(*(options[i] for i in subset)):
                rest = size - sum(batches)
                for extra in itertools.product(range(rest + 1), repeat=k):
                    if sum(extra) != rest:
                        continue
                    shards, bs = [0] * n, [0] * n
                    for i, b, e in zip(subset, batches, extra, strict=True):
                        shards[i], bs[i] = b + e, b
                    best = min(best, evaluate_assignment(cache, shards, bs).total_cost_s)
    return best


@st.composite
def tiny_clusters(draw: st.DrawFn) -> ClusterSpec:
    workers = []
    for k in range(draw(st.integers(1, 3))):
        lo = draw(st.integers(1, 3))
        apps = [sift(deadline_s=draw(st.floats(0.1, 0.3)))] if draw(st.booleans()) else []
        workers.append(
            worker(
                f"w{k}",
                draw(st.sampled_from(DEVICES)),
                cpu=draw(st.floats(0.0, 0.8)),
                gpu=draw(st.floats(0.0, 0.9)),
                mem=draw(st.floats(0.1, 0.9)),
                apps=apps,
                min_batch=lo,
                max_batch=draw(st.integers(lo, lo + 4)),
                init_s=draw(st.floats(0.0, 3.0)),
                transfer_s_per_sample=draw(st.floats(0.0, 0.5)),
            )
        )
    size = draw(st.integers(1, 12 if len(workers) < 3 else 9))
    return cluster(workers, size, num_epochs=draw(st.integers(1, 3)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_clusters())
def test_oracle_equals_the_enumeration_of_every_plan(c: ClusterSpec) -> None:
    expected = enumerate_best(c)
    plan = plan_oracle(c, TRUTH)
    if math.isinf(expected):
        assert not plan.feasible
        return
    assert plan.feasible
    cost = evaluate_plan(c, plan, TRUTH).total_cost_s
    assert abs(cost - expected) <= 1e-9 * expected
    for w in plan.workers:
        assert not w.selected or w.batch_size <= w.shard
