"""Generated MVSP instances: measured profiles, paper shapes, link delays, feasibility."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest

from deepedge.planning.placement.instance import index_problem
from deepedge.planning.placement.policies import explain_blocked
from deepedge.sim.placement_scenarios import (
    MEAN_LINK_DELAY_MS,
    P1,
    P2,
    PROFILE_FOLDER,
    ScenarioSpec,
    generate,
    load_profiles,
)


def test_profiles_are_the_measured_tables_with_their_licence() -> None:
    profiles = {p.name: p for p in load_profiles()}
    assert set(profiles) == {"vgg16", "vgg_face", "vgg_s", "yolo9000"}
    assert profiles["vgg16"].row(1).latency_ms == pytest.approx(6.2774)
    assert profiles["yolo9000"].row(24).memory_mb == pytest.approx(12194873344 / 2**20)
    folder = resources.files("deepedge.sim").joinpath(*PROFILE_FOLDER)
    assert "University of Washington" in (folder / "LICENSE").read_text()


@pytest.mark.parametrize(("spec", "sources", "nodes", "models"), [(P1, 10, 5, 3), (P2, 11, 4, 4)])
def test_paper_problem_shapes(spec: ScenarioSpec, sources: int, nodes: int, models: int) -> None:
    problem = generate(spec)
    assert (len(problem.sources), len(problem.edge_nodes), len(problem.models)) == (
        sources, nodes, models,
    )  # fmt: skip
    assert all(len(m.variants) == 8 for m in problem.models)
    assert problem.latency_weight == 0.1
    assert all(v.interference_coeff == 0.1 for m in problem.models for v in m.variants)
    # batch-b throughput is b / latency(b)
    v = problem.models[0].variants[3]
    assert v.max_load_rps == pytest.approx(v.batch_size / (v.latency_ms / 1000.0))


def test_link_delays_have_the_paper_mean_and_graph_is_connected() -> None:
    problem = generate(ScenarioSpec("big", 300, 30, 2, seed=3))
    delays = np.array([ln.delay_ms for ln in problem.links])
    assert delays.mean() == pytest.approx(MEAN_LINK_DELAY_MS, rel=0.05)
    inst = index_problem(problem)
    assert np.isfinite(inst.comm_ms.min(axis=1)).all()


@pytest.mark.parametrize("seed", range(4))
def test_every_generated_demand_is_servable_alone(seed: int) -> None:
    problem = generate(ScenarioSpec("s", 40, 6, 4, seed=seed, speed_factors=(1.0, 2.0),
                                    latency_limit_ms=(30.0, 40.0)))  # fmt: skip
    assert explain_blocked(index_problem(problem)) == []


def test_generation_is_deterministic() -> None:
    assert generate(P1) == generate(P1)
    assert generate(P1) != generate(ScenarioSpec("P1", 10, 5, 3, seed=1))
