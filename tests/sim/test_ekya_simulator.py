"""Trace-driven Ekya simulator: illustrative example, events, format, generator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepedge.planning.window.documents import SchedulerKind, WindowPlan, WindowProblem
from deepedge.planning.window.oracle import OracleScheduler
from deepedge.planning.window.thief import ThiefScheduler
from deepedge.planning.window.uniform import UniformScheduler
from deepedge.sim.baselines import (
    INFERENCE_SHARES,
    holdout_best,
    pareto_front,
    summarize_configs,
    uniform_configs,
)
from deepedge.sim.ekya_schemas import ekya_schemas, render
from deepedge.sim.examples import illustrative_trace
from deepedge.sim.generator import TraceSpec, generate_trace
from deepedge.sim.simulator import Pruning, simulate, window_problem
from deepedge.sim.trace import EkyaTrace, TraceRetraining, TraceStreamWindow, TraceWindow

ROOT = Path(__file__).resolve().parents[2]


def test_uniform_example_matches_hand_computation() -> None:
    # Uniform: 0.75 GPU inference keeps 75%; cfg1 retrains at 0.75 GPU, then 1.5 GPUs infer.
    # W1 A: 85/0.75 s at 48.75%, then 75%; B: 80/0.75 s at 37.5%, then 90%.
    # W2 A: 90/0.75 = 120 s at 56.25%; B: 80/0.75 s at 67.5%, then 98%.
    a1 = (85 / 0.75 * 0.4875 + (120 - 85 / 0.75) * 0.75) / 120
    b1 = (80 / 0.75 * 0.375 + (120 - 80 / 0.75) * 0.90) / 120
    a2 = 0.5625
    b2 = (80 / 0.75 * 0.675 + (120 - 80 / 0.75) * 0.98) / 120
    res = simulate(illustrative_trace(), UniformScheduler("cfg1", 0.5))
    assert res.mean_accuracy == pytest.approx((a1 + b1 + a2 + b2) / 4, abs=1e-9)
    assert abs(res.mean_accuracy - 0.56) <= 0.02


def test_thief_example_within_two_points_and_keeps_floor() -> None:
    trace = illustrative_trace()
    res = simulate(trace, ThiefScheduler())
    assert abs(res.mean_accuracy - 0.73) <= 0.02
    assert res.min_accuracy >= trace.a_min - 1e-9
    # B (the larger gain) is retrained in window 1 with the cheap config.
    assert res.windows[0].retrained[1] == "cfg2"
    assert res.mean_accuracy <= simulate(trace, OracleScheduler()).mean_accuracy + 0.02


def test_replan_on_completion_and_on_deviation() -> None:
    base = illustrative_trace()
    res = simulate(base, ThiefScheduler(), deviation_tolerance=None)
    assert all(w.plans >= 2 for w in res.windows if any(w.retrained))
    # Overstate B's window-1 cfg2 estimate by 10 points: the half-way check re-plans.
    rows = []
    for row in base.windows[0].streams:
        configs = [
            c.model_copy(update={"estimated_accuracy_after": c.accuracy_after + 0.1})
            if row.stream_id == "B" and c.name == "cfg2"
            else c
            for c in row.retraining
        ]
        rows.append(row.model_copy(update={"retraining": configs}))
    noisy = base.model_copy(update={"windows": [TraceWindow(streams=rows), base.windows[1]]})
    with_check = simulate(noisy, ThiefScheduler(), deviation_tolerance=0.05)
    without = simulate(noisy, ThiefScheduler(), deviation_tolerance=None)
    assert with_check.windows[0].plans > without.windows[0].plans


def test_unfinished_retraining_never_helps() -> None:
    base = illustrative_trace()
    slow = [
        TraceStreamWindow(
            stream_id=s.stream_id,
            retraining=[TraceRetraining(name="cfg1", accuracy_after=0.99, gpu_seconds=1e6)],
        )
        for s in base.streams
    ]
    trace = base.model_copy(update={"windows": [TraceWindow(streams=slow)]})
    res = simulate(trace, UniformScheduler("cfg1", 0.5))
    assert res.windows[0].retrained == (None, None)
    assert simulate(trace, ThiefScheduler()).windows[0].retrained == (None, None)


class _Spy:
    """Delegates to the thief and records the configuration names each problem offered."""

    def __init__(self) -> None:
        self.offered: list[set[str]] = []

    @property
    def kind(self) -> SchedulerKind:
        return SchedulerKind.THIEF

    def plan(self, problem: WindowProblem) -> WindowPlan:
        self.offered.append({c.name for s in problem.streams for c in s.retraining_configs})
        return ThiefScheduler().plan(problem)


@pytest.mark.parametrize(
    ("pruning", "last_window"), [(None, {"good", "bad"}), (Pruning(), {"good"})]
)
def test_pruning_drops_configs_far_from_the_estimated_front(
    pruning: Pruning | None, last_window: set[str]
) -> None:
    base = illustrative_trace()
    # "bad" is truly the best, but its estimate sits 0.3 below a cheaper config: pruning
    # judges on estimates only, so after min_windows = 2 windows it is no longer offered.
    rows = [
        TraceStreamWindow(
            stream_id=s.stream_id,
            retraining=[
                TraceRetraining(name="good", accuracy_after=0.8, gpu_seconds=10.0),
                TraceRetraining(
                    name="bad", accuracy_after=0.99, gpu_seconds=50.0, estimated_accuracy_after=0.5
                ),
            ],
        )
        for s in base.streams
    ]
    trace = base.model_copy(update={"windows": [TraceWindow(streams=rows)] * 3})
    spy = _Spy()
    simulate(trace, spy, pruning=pruning)
    assert spy.offered[0] == {"good", "bad"}
    assert spy.offered[-1] <= last_window
    starts = [i for i, names in enumerate(spy.offered) if names]
    assert spy.offered[starts[-1]] == last_window


def test_generator_is_deterministic_and_shaped() -> None:
    spec = TraceSpec(streams=3, windows=2, seed=5)
    a, b = generate_trace(spec), generate_trace(spec)
    assert a == b
    assert len(a.windows) == 2
    assert all(len(r.retraining) == 18 for w in a.windows for r in w.streams)
    assert generate_trace(TraceSpec(streams=3, windows=2, seed=6)) != a


def test_uniform_configs_come_from_the_pareto_front() -> None:
    holdout = generate_trace(TraceSpec(streams=2, windows=3, seed=1))
    front = {s.name for s in pareto_front(summarize_configs(holdout))}
    high, low = uniform_configs(holdout)
    assert {high, low} <= front
    by_name = {s.name: s for s in summarize_configs(holdout)}
    assert by_name[high].mean_gpu_seconds >= by_name[low].mean_gpu_seconds


@pytest.mark.parametrize("gpus_per_stream", [0.1, 0.4])
def test_holdout_best_is_the_best_fixed_policy_on_the_holdout(gpus_per_stream: float) -> None:
    holdout = generate_trace(TraceSpec(streams=2, windows=2, seed=1))
    name, share = holdout_best(holdout, gpus_per_stream)
    gpus = 2 * gpus_per_stream
    chosen = simulate(holdout, UniformScheduler(name, share), gpus=gpus).mean_accuracy
    names = {c.name for c in holdout.windows[0].streams[0].retraining}
    assert name in names and share in INFERENCE_SHARES
    for other in sorted(names):
        for s in INFERENCE_SHARES:
            assert simulate(holdout, UniformScheduler(other, s), gpus=gpus).mean_accuracy <= chosen


def test_thief_beats_uniform_when_stressed() -> None:
    trace = generate_trace(TraceSpec(streams=6, windows=2, delta_gpus=0.05, seed=2))
    thief = simulate(trace, ThiefScheduler(), gpus=1.0).mean_accuracy
    uniform = max(
        simulate(trace, UniformScheduler(name, share), gpus=1.0).mean_accuracy
        for name in uniform_configs(generate_trace(TraceSpec(streams=2, windows=3, seed=1000)))
        for share in (0.3, 0.5, 0.7, 0.9)
    )
    assert thief > uniform


@pytest.mark.parametrize("name", sorted(ekya_schemas()))
def test_committed_schema_is_current(name: str) -> None:
    committed = (ROOT / "docs" / "schemas" / name).read_text()
    assert committed == render(ekya_schemas()[name]), "run python -m deepedge.sim.ekya_schemas"


def test_examples_validate_and_match_code() -> None:
    trace = EkyaTrace.model_validate(
        json.loads((ROOT / "examples" / "ekya-illustrative-trace.json").read_text())
    )
    assert trace == illustrative_trace()
    drifting = EkyaTrace.model_validate(
        json.loads((ROOT / "examples" / "ekya-drifting-trace.json").read_text())
    )
    assert len(drifting.streams) == 4
    problem_text = (ROOT / "examples" / "ekya-window.json").read_text()
    assert json.loads(problem_text) == json.loads(
        window_problem(illustrative_trace(), 0).model_dump_json(exclude_none=True)
    )


@pytest.mark.parametrize("kind", ["thief", "uniform"])
def test_retraining_worse_than_estimated_below_floor_does_not_abort(kind: str) -> None:
    # The estimate promises 0.9; the truth is 0.1 < a_min, so window 2 starts below the floor.
    config = TraceRetraining(
        name="bad", accuracy_after=0.1, gpu_seconds=1.0, estimated_accuracy_after=0.9
    )
    trace = EkyaTrace.model_validate(
        {
            "window_s": 10.0,
            "gpus": 1.0,
            "a_min": 0.4,
            "streams": [
                {
                    "stream_id": "s",
                    "initial_accuracy": 0.6,
                    "inference_configs": [
                        {"name": "full", "accuracy_factor": 1.0, "gpu_demand": 0.5}
                    ],
                }
            ],
            "windows": [
                {"streams": [{"stream_id": "s", "retraining": [config.model_dump()]}]},
                {"streams": [{"stream_id": "s", "retraining": [config.model_dump()]}]},
            ],
        }
    )
    scheduler = ThiefScheduler() if kind == "thief" else UniformScheduler("bad", 0.5)
    # No half-way check: otherwise the thief sees the truth and abandons the job.
    result = simulate(trace, scheduler, deviation_tolerance=None)
    assert result.windows[0].retrained == ("bad",)
    assert result.min_accuracy == pytest.approx(0.1)
    assert 0.0 < result.mean_inference_factor <= 1.0


def test_without_estimates_tells_the_scheduler_the_truth() -> None:
    trace = generate_trace(TraceSpec(streams=3, windows=2, gpus=1, seed=5))
    rows = [c for w in trace.windows for r in w.streams for c in r.retraining]
    assert any(c.est_accuracy != c.accuracy_after for c in rows)  # the generator adds noise
    truth = trace.without_estimates()
    told = [c for w in truth.windows for r in w.streams for c in r.retraining]
    assert [c.name for c in told] == [c.name for c in rows]
    assert all(c.est_accuracy == c.accuracy_after for c in told)
    assert all(c.est_gpu_seconds == c.gpu_seconds for c in told)
    # Truth is what the simulator plays either way: a fixed policy scores the same.
    fixed = UniformScheduler(rows[0].name, 0.5)
    assert simulate(truth, fixed).mean_accuracy == simulate(trace, fixed).mean_accuracy
