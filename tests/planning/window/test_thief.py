"""Thief scheduler, PickConfigs, EstimateAccuracy, uniform baseline and window oracle."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepedge.core.errors import InfeasibleError
from deepedge.planning.window.accuracy import best_stream_choice, estimate_accuracy
from deepedge.planning.window.documents import (
    InferenceConfig,
    RetrainingConfig,
    StreamWindow,
    WindowProblem,
)
from deepedge.planning.window.oracle import OracleScheduler, oracle_choices
from deepedge.planning.window.thief import (
    ThiefScheduler,
    fair_allocation,
    pick_configs,
    total_quanta,
)
from deepedge.planning.window.uniform import UniformScheduler

FULL = InferenceConfig(name="full", accuracy_factor=1.0, gpu_demand=1.0)
HALF = InferenceConfig(name="half", accuracy_factor=0.6, gpu_demand=0.5)


def one_stream(gpu_seconds: float, gpus: float = 2.0, a_min: float = 0.0) -> WindowProblem:
    return WindowProblem(
        window_s=100.0,
        gpus=gpus,
        delta_gpus=0.1,
        a_min=a_min,
        streams=[
            StreamWindow(
                stream_id="s",
                current_accuracy=0.5,
                inference_configs=[FULL],
                retraining_configs=[
                    RetrainingConfig(name="c", accuracy_after=0.9, gpu_seconds=gpu_seconds)
                ],
            )
        ],
    )


@pytest.mark.parametrize(
    ("gpu_seconds", "config", "accuracy"),
    [
        # I = 1 GPU keeps up; R = 1 GPU retrains in 50 s: (50*0.5 + 50*0.9) / 100.
        (50.0, "c", 0.7),
        # 20 GPU-s finish in 20 s: (20*0.5 + 80*0.9) / 100.
        (20.0, "c", 0.82),
        # 150 GPU-s cannot finish in 100 s with the 1 GPU left: never picked.
        (150.0, None, 0.5),
    ],
)
def test_one_stream_one_config_known_answer(
    gpu_seconds: float, config: str | None, accuracy: float
) -> None:
    for scheduler in (ThiefScheduler(), OracleScheduler()):
        plan = scheduler.plan(one_stream(gpu_seconds))
        d = plan.streams[0]
        assert d.retraining_config == config
        assert d.window_accuracy == pytest.approx(accuracy)
        assert d.inference_config == "full"


def test_estimate_accuracy_formula() -> None:
    stream = one_stream(60.0).streams[0]
    config = stream.retraining_configs[0]
    fast = estimate_accuracy(stream, config, 1.0, 1.0, 100.0, 0.0)
    assert fast is not None
    assert fast.retraining_duration_s == pytest.approx(60.0)
    assert fast.window_accuracy == pytest.approx((60 * 0.5 + 40 * 0.9) / 100)


def test_config_too_slow_is_never_picked_by_estimate() -> None:
    stream = one_stream(60.0).streams[0]
    config = stream.retraining_configs[0]
    # 60 GPU-s on 0.5 GPU take 120 s > T = 100 s.
    assert estimate_accuracy(stream, config, 1.0, 0.5, 100.0, 0.0) is None
    # Without the floor (uniform baseline) it runs all window and never helps.
    slow = estimate_accuracy(stream, config, 1.0, 0.5, 100.0, None)
    assert slow is not None
    assert slow.window_accuracy == pytest.approx(0.5)
    assert best_stream_choice(stream, 1.0, 0.5, 100.0, 0.0).retraining is None


def test_a_min_forces_inference_share() -> None:
    # a_min 0.45 needs the full config (0.5 * 0.6 = 0.3 < 0.45) -> inference keeps 1 GPU.
    problem = WindowProblem(
        window_s=100.0,
        gpus=1.5,
        delta_gpus=0.1,
        a_min=0.45,
        streams=[
            StreamWindow(
                stream_id="s",
                current_accuracy=0.5,
                inference_configs=[FULL, HALF],
                retraining_configs=[
                    RetrainingConfig(name="c", accuracy_after=0.9, gpu_seconds=10.0)
                ],
            )
        ],
    )
    plan = ThiefScheduler().plan(problem)
    d = plan.streams[0]
    assert d.inference_config == "full"
    assert d.accuracy_during_retraining >= 0.45
    assert d.retraining_config == "c"


def test_infeasible_floor_raises() -> None:
    problem = one_stream(10.0, gpus=0.5, a_min=0.4)
    with pytest.raises(InfeasibleError):
        ThiefScheduler().plan(problem)
    with pytest.raises(InfeasibleError):
        OracleScheduler().plan(problem)


def test_uniform_splits_evenly_and_ignores_floor() -> None:
    problem = one_stream(50.0, gpus=2.0, a_min=0.0)
    plan = UniformScheduler("c", 0.25).plan(problem)
    d = plan.streams[0]
    assert d.inference_gpus == pytest.approx(0.5)
    assert d.retraining_gpus == pytest.approx(1.5)
    assert d.inference_config is None  # 0.5 GPU cannot keep up with the 1-GPU config
    # Retraining 50/1.5 = 33.3 s at accuracy 0, then 0.9 with all 2 GPUs.
    assert d.window_accuracy == pytest.approx((100 - 100 / 3) * 0.9 / 100)


# ---------------------------------------------------------------- random instances
inference_tables = st.lists(
    st.tuples(st.floats(0.2, 1.0), st.floats(0.05, 1.0)), min_size=1, max_size=4
)


@st.composite
def problems(draw: st.DrawFn, max_streams: int = 3, max_gpus: int = 3) -> WindowProblem:
    n = draw(st.integers(1, max_streams))
    streams = []
    for v in range(n):
        table = draw(inference_tables)
        configs = [
            InferenceConfig(name=f"i{k}", accuracy_factor=f, gpu_demand=d)
            for k, (f, d) in enumerate(table)
        ]
        retrain = [
            RetrainingConfig(name=f"r{k}", accuracy_after=a, gpu_seconds=c)
            for k, (a, c) in enumerate(
                draw(st.lists(st.tuples(st.floats(0.3, 1.0), st.floats(0.0, 150.0)), max_size=3))
            )
        ]
        streams.append(
            StreamWindow(
                stream_id=f"s{v}",
                current_accuracy=draw(st.floats(0.3, 0.9)),
                inference_configs=configs,
                retraining_configs=retrain,
            )
        )
    reach = min(
        s.current_accuracy * max(c.accuracy_factor for c in s.inference_configs) for s in streams
    )
    return WindowProblem(
        window_s=100.0,
        gpus=float(draw(st.integers(1, max_gpus))),
        delta_gpus=draw(st.sampled_from([0.25, 0.5])),
        a_min=draw(st.floats(0.0, 1.0)) * reach,
        streams=streams,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_thief_invariants(problem: WindowProblem) -> None:
    try:
        plan = ThiefScheduler().plan(problem)
    except InfeasibleError:
        with pytest.raises(InfeasibleError):
            oracle_choices(problem)
        return
    # Allocation never exceeds G.
    assert plan.allocated_gpus <= problem.gpus + 1e-9
    for d in plan.streams:
        # Instantaneous accuracy never below a_min, during and after retraining.
        assert d.accuracy_during_retraining >= problem.a_min - 1e-9
        assert d.accuracy_after_retraining >= problem.a_min - 1e-9
        if d.retraining_duration_s is not None:
            assert d.retraining_duration_s <= problem.window_s + 1e-9
    # Never worse than its fair starting point.
    _choices, (neg_short, fair_mean) = pick_configs(problem, fair_allocation(problem))
    if neg_short == 0.0:
        assert plan.mean_accuracy >= fair_mean - 1e-12
    # Never better than the exhaustive optimum.
    optimum = OracleScheduler().plan(problem)
    assert plan.mean_accuracy <= optimum.mean_accuracy + 1e-9


def _brute_force(problem: WindowProblem) -> float:
    k = total_quanta(problem)
    n = len(problem.streams)
    best = -1.0
    for alloc in itertools.product(range(k + 1), repeat=2 * n):
        if sum(alloc) > k:
            continue
        _choices, (short, mean) = pick_configs(problem, list(alloc))
        if short == 0.0:
            best = max(best, mean)
    return best


@settings(max_examples=25, deadline=None)
@given(problems(max_streams=2, max_gpus=1))
def test_oracle_matches_brute_force(problem: WindowProblem) -> None:
    brute = _brute_force(problem)
    if brute < 0:
        with pytest.raises(InfeasibleError):
            oracle_choices(problem)
        return
    assert OracleScheduler().plan(problem).mean_accuracy == pytest.approx(brute, abs=1e-9)


def plateau_problem() -> WindowProblem:
    """A needs 8 quanta for its accurate config; one stolen quantum alone gains nothing."""

    def stream(sid: str, cheap: float, dear: float, cheap_factor: float) -> StreamWindow:
        return StreamWindow(
            stream_id=sid,
            current_accuracy=1.0,
            inference_configs=[
                InferenceConfig(name="cheap", accuracy_factor=cheap_factor, gpu_demand=cheap),
                InferenceConfig(name="dear", accuracy_factor=1.0, gpu_demand=dear),
            ],
        )

    return WindowProblem(
        window_s=100.0,
        gpus=1.0,
        delta_gpus=0.1,
        streams=[stream("a", 0.2, 0.8, 0.5), stream("b", 0.1, 0.5, 0.9)],
    )


def test_thief_steps_across_an_inference_plateau() -> None:
    # Fair start: 5 quanta each -> a cheap (0.5), b dear (1.0): 0.75. Stealing up to a's next
    # demand level (8 quanta) gives a dear (1.0) and b cheap (0.9): 0.95.
    plan = ThiefScheduler().plan(plateau_problem())
    assert plan.mean_accuracy == pytest.approx(0.95)
    assert plan.decision("a").inference_config == "dear"
    assert plan.decision("a").inference_gpus == pytest.approx(0.8)


_any_size = st.floats(min_value=0.0, max_value=1e308, allow_nan=False, allow_infinity=False)


@st.composite
def extreme_documents(draw: st.DrawFn) -> dict[str, object]:
    """Documents whose numbers span the whole finite range the schema's signs allow."""
    streams = []
    for v in range(draw(st.integers(1, 3))):
        streams.append(
            {
                "stream_id": f"s{v}",
                "current_accuracy": draw(st.floats(0.0, 1.0)),
                "data_scale": draw(st.floats(1e-300, 1e308)),
                "inference_configs": [
                    {
                        "name": f"i{k}",
                        "accuracy_factor": draw(st.floats(1e-9, 1.0)),
                        "gpu_demand": draw(_any_size),
                    }
                    for k in range(draw(st.integers(1, 3)))
                ],
                "retraining_configs": [
                    {
                        "name": f"r{k}",
                        "accuracy_after": draw(st.floats(0.0, 1.0)),
                        "gpu_seconds": draw(_any_size),
                    }
                    for k in range(draw(st.integers(0, 3)))
                ],
            }
        )
    return {
        "window_s": draw(st.floats(1e-300, 1e308)),
        "gpus": draw(st.floats(1e-3, 1e6)),
        "delta_gpus": draw(st.floats(1e-3, 1e3)),
        "streams": streams,
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extreme_documents())
def test_any_valid_document_is_planned_or_refused_never_crashes(doc: dict[str, object]) -> None:
    from pydantic import ValidationError

    try:
        problem = WindowProblem.model_validate(doc)
    except ValidationError:
        return  # refused with a message naming the field: exit 2 in the CLI
    for scheduler in (ThiefScheduler(), UniformScheduler("r0", 0.5)):
        try:
            plan = scheduler.plan(problem)
        except InfeasibleError:
            continue
        assert plan.allocated_gpus <= problem.gpus * (1 + 1e-9)
        assert 0.0 <= plan.mean_accuracy <= 1.0
