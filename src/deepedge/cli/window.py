"""``deepedge plan window FILE`` and ``deepedge simulate ekya FILE`` (Ekya).

``simulate ekya`` shows each replayed window on stderr as it is done (the progress helper);
stdout is the result alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from deepedge.cli.app import check_number, echo_json, group, load_document, run_guarded
from deepedge.cli.progress import progress
from deepedge.core.errors import InvalidInputError
from deepedge.planning.window import SchedulerOptions, WindowScheduler, window_scheduler
from deepedge.planning.window.accuracy import Horizon
from deepedge.planning.window.documents import SchedulerKind, WindowProblem
from deepedge.planning.window.estimate_calibration import CalibrationScope, CalibrationSpec
from deepedge.planning.window.packing import pack_plan
from deepedge.planning.window.reprofiling import ReprofileSpec
from deepedge.sim.baselines import pareto_front, summarize_configs
from deepedge.sim.simulator import Pruning, simulate
from deepedge.sim.trace import EkyaTrace

plan_app = group("plan")
simulate_app = group("simulate")


def _horizon(windows: int, discount: float) -> Horizon | None:
    """The horizon objective of ``--horizon-windows`` (0: the paper's per-window one)."""
    check_number(windows, "--horizon-windows", ge=0)
    check_number(discount, "--horizon-discount", gt=0.0, le=1.0)
    return Horizon(windows, discount) if windows > 0 else None


def _scheduler(
    name: SchedulerKind,
    trace: EkyaTrace | None,
    config: str | None,
    share: float,
    horizon: Horizon | None = None,
) -> WindowScheduler:
    """The scheduler ``name`` of the registry; uniform's configuration defaults to the most
    accurate one on the trace's Pareto front."""
    if name is SchedulerKind.UNIFORM and config is None:
        if trace is None:
            raise InvalidInputError("--uniform-config is required", field="uniform_config")
        front = pareto_front(summarize_configs(trace))
        if not front:
            raise InvalidInputError("the trace has no retraining configurations")
        config = max(front, key=lambda s: s.mean_accuracy).name
    return window_scheduler(name, SchedulerOptions(horizon, config, share))


@plan_app.command("window")
def plan_window(
    file: Path = typer.Argument(
        ..., help="WindowProblem JSON (docs/schemas/ekya-window.schema.json)"
    ),
    scheduler: SchedulerKind = typer.Option(SchedulerKind.THIEF, "--scheduler"),
    uniform_config: str | None = typer.Option(None, help="uniform: the fixed retraining config"),
    inference_share: float = typer.Option(0.5, help="uniform: inference share of each stream"),
    horizon_windows: int = typer.Option(
        0,
        help="thief/oracle: also credit a retrained model in the next N windows (with the "
        "drift the stream has shown); 0: the paper's per-window objective",
    ),
    horizon_discount: float = typer.Option(
        1.0, help="thief/oracle: weight of each further window of the horizon, in (0, 1]"
    ),
) -> None:
    """Allocations, configurations, expected window accuracy per stream and GPU packing."""

    def go() -> None:
        problem = load_document(file, WindowProblem)
        horizon = _horizon(horizon_windows, horizon_discount)
        policy = _scheduler(scheduler, None, uniform_config, inference_share, horizon)
        plan = policy.plan(problem)
        echo_json(plan.model_copy(update={"packing": pack_plan(plan)}))

    run_guarded(go)


@simulate_app.command("ekya")
def simulate_ekya(
    file: Path = typer.Argument(..., help="EkyaTrace JSON (docs/schemas/ekya-trace.schema.json)"),
    scheduler: SchedulerKind = typer.Option(SchedulerKind.THIEF, "--scheduler"),
    gpus: float | None = typer.Option(None, help="override the trace's GPU count"),
    uniform_config: str | None = typer.Option(
        None, help="uniform: fixed config (default: the most accurate Pareto config)"
    ),
    inference_share: float = typer.Option(0.5, help="uniform: inference share of each stream"),
    prune_max_gap: float | None = typer.Option(
        None,
        help="offer only configs whose mean gap to the estimated Pareto front stays <= this "
        "(the micro-profiler's pruning, after 2 windows); default: offer all",
    ),
    horizon_windows: int = typer.Option(
        0,
        help="thief/oracle: also credit a retrained model in the next N windows (with the "
        "drift the stream has shown); 0: the paper's per-window objective",
    ),
    horizon_discount: float = typer.Option(
        1.0, help="thief/oracle: weight of each further window of the horizon, in (0, 1]"
    ),
    calibration: CalibrationScope | None = typer.Option(
        None,
        help="correct the accuracy estimates with the residuals (measured - estimated) of "
        "earlier windows' finished retrainings, pooled per this scope; default: as profiled",
    ),
    calibration_shrinkage: float = typer.Option(
        2.0, help="--calibration: pseudo-observations of residual 0 (>= 0)"
    ),
    reprofile: int | None = typer.Option(
        None,
        help="average the first N (>= 2) of each candidate configuration's profiles (the "
        "trace's reprofiled_accuracy_after); default: the first profile only",
    ),
    reprofile_top_k: int | None = typer.Option(
        None, help="--reprofile: candidates per stream and window (default: all configurations)"
    ),
) -> None:
    """Replay every window of a trace under one scheduler; print per-window accuracy."""

    def go() -> None:
        trace = load_document(file, EkyaTrace)
        check_number(gpus, "--gpus", gt=0.0)
        check_number(prune_max_gap, "--prune-max-gap", ge=0.0)
        check_number(calibration_shrinkage, "--calibration-shrinkage", ge=0.0)
        horizon = _horizon(horizon_windows, horizon_discount)
        policy = _scheduler(scheduler, trace, uniform_config, inference_share, horizon)
        pruning = None if prune_max_gap is None else Pruning(max_gap=prune_max_gap)
        spec = None if calibration is None else CalibrationSpec(calibration, calibration_shrinkage)
        again = None if reprofile is None else ReprofileSpec(reprofile, reprofile_top_k)
        with progress("simulate", total=len(trace.windows), unit="windows") as bar:
            result = simulate(
                trace,
                policy,
                gpus=gpus,
                pruning=pruning,
                calibration=spec,
                reprofile=again,
                on_window=lambda w: bar.update(
                    w.index + 1, note=f"window {w.index}: mean accuracy {w.mean_accuracy:.3f}"
                ),
            )
        payload: dict[str, Any] = {
            "scheduler": str(result.scheduler),
            "gpus": result.gpus,
            "mean_accuracy": result.mean_accuracy,
            "min_accuracy": result.min_accuracy,
            "a_min": trace.a_min,
            "windows": [
                {
                    "index": w.index,
                    "mean_accuracy": w.mean_accuracy,
                    "min_accuracy": w.min_accuracy,
                    "plans": w.plans,
                    "streams": {
                        s.stream_id: {"accuracy": a, "retrained": r}
                        for s, a, r in zip(
                            trace.streams, w.stream_accuracy, w.retrained, strict=True
                        )
                    },
                }
                for w in result.windows
            ],
        }
        echo_json(payload)

    run_guarded(go)
