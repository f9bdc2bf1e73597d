"""GPU packing of thief allocations: quantisation to inverse powers of two, first-fit decreasing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepedge.planning.window.documents import WindowProblem
from deepedge.planning.window.packing import JobShare, pack, pack_plan, quantize
from deepedge.planning.window.thief import ThiefScheduler


def _is_inverse_pow2(x: float) -> bool:
    return x == 0.0 or (0 < x < 1 and math.log2(x) == round(math.log2(x)))


@pytest.mark.parametrize(
    ("gpus", "shares", "expected"),
    [
        (1, [0.5, 0.5], [(0, 0.5), (0, 0.5)]),
        (1, [0.3, 0.3, 0.3], [(0, 0.25), (0, 0.25), (0, 0.25)]),
        (2, [1.5, 0.4], [(1, 0.5), (0, 0.25)]),
        (3, [0.9, 0.9, 0.9], [(0, 0.5), (0, 0.5), (0, 0.5)]),
    ],
)
def test_quantize_known_answers(
    gpus: int, shares: list[float], expected: list[tuple[int, float]]
) -> None:
    jobs = [JobShare(f"s{i}", "inference", g) for i, g in enumerate(shares)]
    got = quantize(jobs, gpus)
    assert sum(w + f for w, f in got) <= gpus
    # Greedy promotion may use leftover capacity; the floors are the known part.
    for (w, f), (ew, ef) in zip(got, expected, strict=True):
        assert w + f >= ew + ef - 1e-12


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 8).flatmap(
        lambda g: st.tuples(
            st.just(g),
            st.lists(st.floats(0.0, float(g)), min_size=1, max_size=12).filter(
                lambda xs: sum(xs) <= g
            ),
        )
    )
)
def test_packing_never_overfills(case: tuple[int, list[float]]) -> None:
    gpus, shares = case
    jobs = [JobShare(f"s{i}", "retraining", x) for i, x in enumerate(shares)]
    packing = pack(jobs, gpus)
    assert len(packing.gpu_load) == gpus
    assert all(load <= 1.0 + 1e-9 for load in packing.gpu_load)
    assert all(_is_inverse_pow2(s.share) or s.share == 1.0 for s in packing.slots)
    per_job: dict[str, float] = {}
    for s in packing.slots:
        per_job[s.stream_id] = per_job.get(s.stream_id, 0.0) + s.share
    assert sum(per_job.values()) == pytest.approx(sum(packing.gpu_load))
    assert 0.0 <= packing.fragmentation <= 1.0


def test_pack_plan_of_a_thief_plan() -> None:
    from deepedge.sim.examples import illustrative_trace
    from deepedge.sim.simulator import window_problem

    problem: WindowProblem = window_problem(illustrative_trace(), 0)
    plan = ThiefScheduler().plan(problem)
    packing = pack_plan(plan)
    assert packing is not None
    assert max(packing.gpu_load) <= 1.0 + 1e-9
    assert {s.stream_id for s in packing.slots} == {"A", "B"}
    assert pack_plan(plan.model_copy(update={"gpus": 2.5})) is None
