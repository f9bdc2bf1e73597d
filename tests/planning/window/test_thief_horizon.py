"""The thief's horizon objective: a retrained model is credited in the next H windows."""

from __future__ import annotations

import pytest

from deepedge.planning.window.accuracy import Horizon, HorizonContext, best_stream_choice
from deepedge.planning.window.documents import (
    InferenceConfig,
    RetrainingConfig,
    StreamWindow,
    WindowProblem,
)
from deepedge.planning.window.oracle import oracle_choices
from deepedge.planning.window.thief import ThiefScheduler, thief_allocation
from deepedge.sim.generator import TraceSpec, generate_trace
from deepedge.sim.simulator import window_problem

FULL = InferenceConfig(name="full", accuracy_factor=1.0, gpu_demand=1.0)
HALF = InferenceConfig(name="half", accuracy_factor=0.6, gpu_demand=0.5)


def late_payoff(drift: float) -> WindowProblem:
    """1 GPU, T = 100 s. Not retraining: I = 1, accuracy 0.5 all window. Retraining
    (I = R = 0.5): 80 s at 0.5 x 0.6, then 20 s at 0.9, A_T = 0.42 < 0.5."""
    return WindowProblem(
        window_s=100.0,
        gpus=1.0,
        delta_gpus=0.5,
        streams=[
            StreamWindow(
                stream_id="s",
                current_accuracy=0.5,
                inference_configs=[FULL, HALF],
                retraining_configs=[
                    RetrainingConfig(name="c", accuracy_after=0.9, gpu_seconds=40.0)
                ],
                drift_per_window=drift,
            )
        ],
    )


@pytest.mark.parametrize(
    ("drift", "v_keep", "v_retrain"),
    [
        # V = (T A_T + P f_ref clip(a_end - delta)) / (T + P), f_ref = 1, P = T = 100
        (0.0, (50 + 50) / 200, (42 + 90) / 200),
        (0.3, (50 + 20) / 200, (42 + 60) / 200),
        (0.6, (50 + 0) / 200, (42 + 30) / 200),  # the stale model is clipped at 0
    ],
)
def test_horizon_value_by_hand(drift: float, v_keep: float, v_retrain: float) -> None:
    problem = late_payoff(drift)
    stream = problem.streams[0]
    ctx = HorizonContext(Horizon(1), period_s=100.0, reference_factor=1.0)
    keep = best_stream_choice(stream, 1.0, 0.0, 100.0, 0.0, ctx)
    retrain = best_stream_choice(stream, 0.5, 0.5, 100.0, 0.0, ctx)
    assert keep.retraining is None and keep.value == pytest.approx(v_keep)
    assert retrain.retraining is not None and retrain.value == pytest.approx(v_retrain)
    assert retrain.window_accuracy == pytest.approx(0.42)
    # within the window alone, keeping the whole GPU for inference is better
    assert keep.window_accuracy == pytest.approx(0.5)
    assert keep.window_accuracy > retrain.window_accuracy


@pytest.mark.parametrize(
    ("horizon", "retrains"),
    [(None, None), (Horizon(1), "c"), (Horizon(3, 0.5), "c")],
)
def test_thief_retrains_only_when_later_windows_count(horizon, retrains) -> None:
    plan = ThiefScheduler(horizon=horizon).plan(late_payoff(0.1))
    assert plan.streams[0].retraining_config == retrains
    # the plan reports the window accuracy A_T either way
    assert plan.mean_accuracy == pytest.approx(0.5 if retrains is None else 0.42)


def test_discount_and_length_of_the_horizon() -> None:
    stream = late_payoff(0.1).streams[0]
    retrain = best_stream_choice(stream, 0.5, 0.5, 100.0, 0.0)
    ctx = HorizonContext(Horizon(2, 0.5), period_s=200.0, reference_factor=0.5)
    # (100 * 0.42 + 200 * 0.5 * (1 * 0.8 + 0.5 * 0.7)) / (100 + 200 * 1.5)
    assert ctx.value(stream, retrain, 100.0) == pytest.approx((42 + 115) / 400)


@pytest.mark.parametrize(("windows", "discount"), [(0, 1.0), (2, 0.0), (2, 1.5)])
def test_horizon_rejects_bad_parameters(windows: int, discount: float) -> None:
    with pytest.raises(ValueError):
        Horizon(windows, discount)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_oracle_bounds_the_horizon_thief(seed: int) -> None:
    trace = generate_trace(TraceSpec(streams=3, windows=3, gpus=1.0, delta_gpus=0.1, seed=seed))
    problem = window_problem(trace, 2)
    horizon = Horizon(2)
    _, thief = thief_allocation(problem, horizon=horizon)
    oracle = oracle_choices(problem, horizon)
    assert sum(c.value for c in oracle) >= sum(c.value for c in thief) - 1e-9
    assert all(c.horizon_value is not None for c in thief + oracle)


def test_problems_carry_the_drift_shown_and_the_period() -> None:
    trace = generate_trace(TraceSpec(streams=2, windows=4, seed=5))
    problem = window_problem(trace, 2)
    assert problem.period_s == trace.window_s
    for s in problem.streams:
        drifts = [
            r.drift for w in trace.windows[:3] for r in w.streams if r.stream_id == s.stream_id
        ]
        assert s.drift_per_window == pytest.approx(sum(drifts) / 3)
    assert any(s.drift_per_window != 0.0 for s in problem.streams)
