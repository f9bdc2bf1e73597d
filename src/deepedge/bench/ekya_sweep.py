"""Part 2 of ``python -m deepedge.bench.ekya``: the thief against the uniform baseline on the
recorded trace over 1-16 GPUs, the hold-out choices (horizon, calibration) and the gap to
the exhaustive oracle (the benchmark's module docstring says what each column means)."""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deepedge.planning.window.accuracy import Horizon
from deepedge.planning.window.estimate_calibration import CalibrationScope, CalibrationSpec
from deepedge.planning.window.oracle import OracleScheduler
from deepedge.planning.window.reprofiling import ReprofileSpec
from deepedge.planning.window.thief import ThiefScheduler
from deepedge.planning.window.uniform import UniformScheduler
from deepedge.sim.baselines import INFERENCE_SHARES, holdout_best, uniform_configs
from deepedge.sim.generator import TraceSpec, generate_trace
from deepedge.sim.recorded import load_recorded_trace, subset
from deepedge.sim.simulator import Pruning, SimulationResult, simulate
from deepedge.sim.trace import EkyaTrace

STRESSED_GPUS = (1, 2)  # <= 0.2 GPU per stream for 10 streams
ORACLE_STREAMS = ("cam01", "cam02", "cam04")  # gradual, abrupt, episodic
NO_RETRAINING = "(no retraining)"  # a config name no trace has: the whole share to inference
HORIZON_CANDIDATES = tuple(Horizon(h, rho) for h in (1, 2, 3, 5) for rho in (1.0, 0.5))
CALIBRATION_CANDIDATES = tuple(
    CalibrationSpec(scope, k) for scope in CalibrationScope for k in (0.0, 2.0, 8.0)
)
REPROFILE_CANDIDATES = tuple(ReprofileSpec(n, k) for n in (2, 3) for k in (1, 3, None))


@dataclass(frozen=True)
class SweepRow:
    gpus: int
    thief: float
    thief_pruned: float
    thief_exact: float
    thief_horizon: float
    thief_horizon_exact: float
    thief_horizon_calibrated: float
    thief_horizon_reprofiled: float
    thief_horizon_chosen: float
    uniform_best: float
    uniform_name: str
    uniform_hindsight: float
    hindsight_name: str
    uniform_paper: float
    no_retraining: float
    thief_min: float
    uniform_min: float
    thief_inference_factor: float
    uniform_inference_factor: float
    thief_retraining_frac: float
    uniform_retraining_frac: float
    horizon_retraining_frac: float


def _uniform_best(trace: EkyaTrace, gpus: float, names: list[str]) -> tuple[SimulationResult, str]:
    best: tuple[SimulationResult, str] | None = None
    for name in names:
        for share in INFERENCE_SHARES:
            res = simulate(trace, UniformScheduler(name, share), gpus=gpus)
            if best is None or res.mean_accuracy > best[0].mean_accuracy:
                best = (res, f"{name}@{share:.0%}")
    assert best is not None
    return best


def gpus_to_match(curve: list[tuple[int, float]], target: float) -> float:
    """GPUs the uniform curve needs to reach ``target`` (linear interpolation; inf if never)."""
    for (g0, a0), (g1, a1) in itertools.pairwise(curve):
        if a0 >= target:
            return float(g0)
        if a1 >= target:
            return g0 + (g1 - g0) * (target - a0) / (a1 - a0)
    return float("inf") if curve[-1][1] < target else float(curve[-1][0])


def uniform_baseline(
    trace: EkyaTrace, holdout: EkyaTrace, gpus: int
) -> tuple[SimulationResult, str, SimulationResult]:
    """(baseline, its name, the paper protocol's best) at ``gpus``: the better of the paper's
    protocol (Config 1 / Config 2 chosen on ``holdout``, share best on ``trace``) and the
    (config, share) that is best on ``holdout`` at the same GPUs per stream."""
    config1, config2 = uniform_configs(holdout)
    paper, p_name = _uniform_best(trace, gpus, [config1, config2])
    h_name, h_share = holdout_best(holdout, gpus / len(trace.streams))
    held = simulate(trace, UniformScheduler(h_name, h_share), gpus=gpus)
    if held.mean_accuracy > paper.mean_accuracy:
        return held, f"{h_name}@{h_share:.0%} (hold-out best)", paper
    return paper, p_name, paper


def add_trace_argument(parser: argparse.ArgumentParser, what: str = "") -> None:
    """The ``--trace PATH`` option of the benchmarks that replay the recorded trace."""
    parser.add_argument(
        "--trace",
        type=Path,
        default=None,
        help=f"{what}a trace recorded by deepedge.bench.ekya_record (default: the committed one)",
    )


def sweep_traces(quick: bool, path: Path | None = None) -> tuple[EkyaTrace, EkyaTrace]:
    """(test, hold-out) parts of the recorded trace (the committed one, or the trace JSON at
    ``path``: ``cam*`` streams test, ``hold*`` streams hold out); ``quick`` keeps its first 3
    windows."""
    recorded = load_recorded_trace(path)
    test, holdout = subset(recorded, "cam"), subset(recorded, "hold")
    if quick:
        test = test.model_copy(update={"windows": test.windows[:3]})
    return test, holdout


def stressed_comparison(
    rows: list[SweepRow],
    thief: Callable[[SweepRow], float],
    uniform: Callable[[SweepRow], float],
) -> tuple[float, float]:
    """(gain, GPU equivalence) of a thief column over a uniform column in the stressed regime.

    Both are the worst over ``STRESSED_GPUS``: the relative accuracy gain at ``G``, and the GPUs
    the uniform curve needs to match the thief at ``G``, divided by ``G``.
    """
    stressed = [r for r in rows if r.gpus in STRESSED_GPUS]
    curve = [(r.gpus, uniform(r)) for r in rows]
    gain = min(thief(r) / uniform(r) - 1.0 for r in stressed)
    equiv = min(gpus_to_match(curve, thief(r)) / r.gpus for r in stressed)
    return gain, equiv


def holdout_horizon(holdout: EkyaTrace, streams: int) -> Horizon:
    """The horizon whose thief is most accurate on ``holdout`` (mean over the stressed
    GPU counts, each scaled to the hold-out's streams: ``G / streams`` per stream). Ties go
    to the first candidate."""
    best: tuple[float, Horizon] | None = None
    for horizon in HORIZON_CANDIDATES:
        acc = statistics.mean(
            simulate(
                holdout,
                ThiefScheduler(horizon=horizon),
                gpus=g / streams * len(holdout.streams),
            ).mean_accuracy
            for g in STRESSED_GPUS
        )
        if best is None or acc > best[0] + 1e-12:
            best = (acc, horizon)
    assert best is not None
    return best[1]


def _holdout_accuracy(
    holdout: EkyaTrace,
    streams: int,
    horizon: Horizon,
    calibration: CalibrationSpec | None = None,
    reprofile: ReprofileSpec | None = None,
) -> float:
    return statistics.mean(
        simulate(
            holdout,
            ThiefScheduler(horizon=horizon),
            gpus=g / streams * len(holdout.streams),
            calibration=calibration,
            reprofile=reprofile,
        ).mean_accuracy
        for g in STRESSED_GPUS
    )


@dataclass(frozen=True)
class EstimateChoice:
    """How the horizon thief's accuracy estimates are formed, chosen on the hold-out streams:
    the best calibration and the best re-profiling candidate, each with its hold-out mean
    accuracy, beside the thief on the first profile alone (``holdout_plain``). The RESULT's
    thief is whichever of the three is best there (ties: the plain one)."""

    calibration: CalibrationSpec
    holdout_calibrated: float
    reprofile: ReprofileSpec
    holdout_reprofiled: float
    holdout_plain: float

    @property
    def used(self) -> str:
        """Which estimates the RESULT uses: calibrated, re-profiled or plain."""
        best = max(self.holdout_calibrated, self.holdout_reprofiled)
        if best <= self.holdout_plain + 1e-12:
            return "plain"
        return "calibrated" if self.holdout_calibrated >= self.holdout_reprofiled else "re-profiled"


def profiling_cost_frac(trace: EkyaTrace, reprofile: ReprofileSpec | None = None) -> float:
    """Seconds of micro-profiling per second of exhaustive retraining (every configuration,
    every stream and window) on ``trace``: the first profiles (``profiling_s``) plus, with
    ``reprofile``, each further profile's share of ``reprofiling_s`` for the candidates
    only. Nan when the trace did not record them."""
    first = further = exhaustive = 0.0
    for window in trace.windows:
        for row in window.streams:
            exhaustive += sum(c.gpu_seconds for c in row.retraining)
            if row.profiling_s is None:
                return float("nan")
            first += row.profiling_s
            if reprofile is None or not row.retraining:
                continue
            made = len(row.retraining[0].reprofiled_accuracy_after or [])
            if row.reprofiling_s is None or made == 0:
                continue
            k = len(row.retraining) if reprofile.top_k is None else reprofile.top_k
            share = min(reprofile.profiles - 1, made) / made * min(k, len(row.retraining))
            further += row.reprofiling_s * share / len(row.retraining)
    return (first + further) / exhaustive if exhaustive > 0 else float("nan")


def holdout_estimates(holdout: EkyaTrace, streams: int, horizon: Horizon) -> EstimateChoice:
    """The calibration and the re-profiling candidates whose horizon thief is most accurate
    on ``holdout`` (same measure as :func:`holdout_horizon`; ties to the first candidate),
    beside the thief on the first profile alone."""
    calibrated = [
        (_holdout_accuracy(holdout, streams, horizon, calibration=c), c)
        for c in CALIBRATION_CANDIDATES
    ]
    reprofiled = [
        (_holdout_accuracy(holdout, streams, horizon, reprofile=r), r) for r in REPROFILE_CANDIDATES
    ]
    cal_acc, cal = max(calibrated, key=lambda x: x[0])
    rep_acc, rep = max(reprofiled, key=lambda x: x[0])
    plain = _holdout_accuracy(holdout, streams, horizon)
    return EstimateChoice(cal, cal_acc, rep, rep_acc, plain)


def part2_sweep(
    quick: bool, path: Path | None = None
) -> tuple[list[SweepRow], Horizon, EstimateChoice]:
    """Thief vs. uniform on the recorded trace, one row per GPU count; the horizon the
    horizon-aware thief uses and how its estimates are formed (both chosen on the hold-out
    streams)."""
    gpu_grid = [1, 2, 4] if quick else [1, 2, 4, 8, 16]
    trace, holdout = sweep_traces(quick, path)
    horizon = holdout_horizon(holdout, len(trace.streams))
    choice = holdout_estimates(holdout, len(trace.streams), horizon)
    ahead = ThiefScheduler(horizon=horizon)
    truth = trace.without_estimates()
    all_names = sorted({c.name for c in trace.windows[0].streams[0].retraining})
    rows: list[SweepRow] = []
    for g in gpu_grid:
        thief = simulate(trace, ThiefScheduler(), gpus=g)
        pruned = simulate(trace, ThiefScheduler(), gpus=g, pruning=Pruning())
        exact = simulate(truth, ThiefScheduler(), gpus=g)
        with_horizon = simulate(trace, ahead, gpus=g)
        horizon_exact = simulate(truth, ahead, gpus=g)
        calibrated = simulate(trace, ahead, gpus=g, calibration=choice.calibration)
        reprofiled = simulate(trace, ahead, gpus=g, reprofile=choice.reprofile)
        chosen = {"calibrated": calibrated, "re-profiled": reprofiled}.get(
            choice.used, with_horizon
        )
        best, name, paper = uniform_baseline(trace, holdout, g)
        hind, hind_name = _uniform_best(trace, g, all_names)
        if best.mean_accuracy > hind.mean_accuracy:
            hind, hind_name = best, name
        idle = simulate(trace, UniformScheduler(NO_RETRAINING, 1.0), gpus=g)
        rows.append(
            SweepRow(
                gpus=g,
                thief=thief.mean_accuracy,
                thief_pruned=pruned.mean_accuracy,
                thief_exact=exact.mean_accuracy,
                thief_horizon=with_horizon.mean_accuracy,
                thief_horizon_exact=horizon_exact.mean_accuracy,
                thief_horizon_calibrated=calibrated.mean_accuracy,
                thief_horizon_reprofiled=reprofiled.mean_accuracy,
                thief_horizon_chosen=chosen.mean_accuracy,
                uniform_best=best.mean_accuracy,
                uniform_name=name,
                uniform_hindsight=hind.mean_accuracy,
                hindsight_name=hind_name,
                uniform_paper=paper.mean_accuracy,
                no_retraining=idle.mean_accuracy,
                thief_min=thief.min_accuracy,
                uniform_min=best.min_accuracy,
                thief_inference_factor=thief.mean_inference_factor,
                uniform_inference_factor=best.mean_inference_factor,
                thief_retraining_frac=thief.retraining_time_frac,
                uniform_retraining_frac=best.retraining_time_frac,
                horizon_retraining_frac=with_horizon.retraining_time_frac,
            )
        )
    return rows, horizon, choice


def part2_oracle_gap(
    quick: bool, horizon: Horizon | None = None, path: Path | None = None
) -> tuple[float, list[tuple[str, int, float, float, float]]]:
    """Largest mean-accuracy gap oracle - thief over small instances (same inputs): generated
    traces, and (full run) three drifting streams of the recorded trace. With ``horizon``
    both the thief and the oracle use the horizon objective."""
    cases: list[tuple[str, EkyaTrace, float]] = []
    sizes: list[tuple[int, float]] = [(2, 1), (3, 1)] if quick else [(2, 1), (3, 1), (3, 2), (4, 2)]
    for streams, g in sizes:
        trace = generate_trace(
            TraceSpec(streams=streams, windows=3 if quick else 6, gpus=g, seed=100 + streams)
        )
        cases.append(("generated", trace, g))
    if not quick:
        recorded = subset(load_recorded_trace(path), ORACLE_STREAMS)
        recorded = recorded.model_copy(update={"windows": recorded.windows[:4]})
        cases += [("recorded", recorded, 0.5), ("recorded", recorded, 1.0)]
    out: list[tuple[str, int, float, float, float]] = []
    for label, trace, g in cases:
        thief = simulate(trace, ThiefScheduler(horizon=horizon), gpus=g).mean_accuracy
        oracle = simulate(trace, OracleScheduler(horizon=horizon), gpus=g).mean_accuracy
        out.append((label, len(trace.streams), g, thief, oracle))
    return max(o - t for *_, t, o in out), out
