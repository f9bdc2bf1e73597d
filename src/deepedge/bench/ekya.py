"""Ekya benchmark: ``python -m deepedge.bench.ekya [--quick]``.

1. The illustrative example (Table 1 / Figure 4): uniform vs. thief mean accuracy.
2. The 10 test streams of the recorded trace (real training runs on heterogeneous drifting
   streams, :mod:`deepedge.sim.recorded`; its 2 hold-out streams choose the baseline) on
   1-16 GPUs: thief vs. the best uniform baseline, the better of (a) the paper's protocol:
   Config 1 / Config 2 picked on the hold-out streams, inference share 30/50/70/90% (share
   picked on the test trace) and (b) the (config, share) that is best on the hold-out
   streams at the same GPUs per stream. Also printed, not used in the RESULT: the
   hindsight-best uniform (all configs x shares, chosen on the test trace itself), no
   retraining, and the inference side (time-averaged inference accuracy factor). Then the
   gap to the exhaustive oracle on small instances (generated traces).
   The thief decides on the micro-profiler's estimates recorded in the trace, over all 18
   configurations (column "thief pruned": only those the history-based pruning keeps, which
   loses under drift on this trace; column "thief exact": told the true outcomes instead,
   the bound any micro-profiler could reach); the uniform baseline runs its fixed
   configuration. Column "thief horizon": the thief with the horizon objective
   (:class:`~deepedge.planning.window.accuracy.Horizon`), whose ``H`` and discount are
   chosen on the hold-out streams (``HORIZON_CANDIDATES``, at the stressed GPUs per
   stream); ``gain_rel_horizon`` / ``gpu_equiv_horizon`` compare it with the same uniform
   baseline as ``gain_rel`` / ``gpu_equiv``. Column "horizon calib.": the horizon thief
   whose accuracy estimates are corrected online from the residuals of earlier windows'
   finished retrainings (:mod:`deepedge.planning.window.estimate_calibration`), with the scope and
   shrinkage best on the hold-out streams (``CALIBRATION_CANDIDATES``). The ``_horizon``
   keys report whichever of the two (without / with calibration) is better on the hold-out
   streams.
3. Scheduler speed: 10 streams, 8 GPUs, 18 configurations, Delta = 0.1.
4. Micro-profiler on real torch training runs: median absolute error and relative cost.

Ends with ``RESULT example_uniform=... example_thief=... gain_rel=... gpu_equiv=...
oracle_gap=... thief_s=... microprofile_mae=... microprofile_cost_frac=...
gain_rel_horizon=... gpu_equiv_horizon=...``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

from deepedge.bench.ekya_microprofile import run_microprofile
from deepedge.bench.report import machine_description, result_line, table
from deepedge.planning.window.accuracy import Horizon
from deepedge.planning.window.documents import GpuPacking
from deepedge.planning.window.estimate_calibration import CalibrationScope, CalibrationSpec
from deepedge.planning.window.oracle import OracleScheduler
from deepedge.planning.window.packing import pack_plan
from deepedge.planning.window.thief import ThiefScheduler
from deepedge.planning.window.uniform import UniformScheduler
from deepedge.sim.baselines import INFERENCE_SHARES, holdout_best, uniform_configs
from deepedge.sim.examples import illustrative_trace
from deepedge.sim.generator import TraceSpec, generate_trace
from deepedge.sim.recorded import load_recorded_trace, subset
from deepedge.sim.simulator import Pruning, SimulationResult, simulate, window_problem
from deepedge.sim.trace import EkyaTrace

STRESSED_GPUS = (1, 2)  # <= 0.2 GPU per stream for 10 streams
ORACLE_STREAMS = ("cam01", "cam02", "cam04")  # gradual, abrupt, episodic
NO_RETRAINING = "(no retraining)"  # a config name no trace has: the whole share to inference
HORIZON_CANDIDATES = tuple(Horizon(h, rho) for h in (1, 2, 3, 5) for rho in (1.0, 0.5))
CALIBRATION_CANDIDATES = tuple(
    CalibrationSpec(scope, k) for scope in CalibrationScope for k in (0.0, 2.0, 8.0)
)


@dataclass(frozen=True)
class SweepRow:
    gpus: int
    thief: float
    thief_pruned: float
    thief_exact: float
    thief_horizon: float
    thief_horizon_exact: float
    thief_horizon_calibrated: float
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


def part1_example() -> tuple[float, float, float]:
    """(uniform, thief, thief under linear sampling D = 1) on Table 1 / Figure 4."""
    trace = illustrative_trace()
    uniform = simulate(trace, UniformScheduler("cfg1", 0.5)).mean_accuracy
    thief = simulate(trace, ThiefScheduler()).mean_accuracy
    linear = simulate(illustrative_trace(full_rate_gpus=1.0), ThiefScheduler()).mean_accuracy
    return uniform, thief, linear


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


def sweep_traces(quick: bool) -> tuple[EkyaTrace, EkyaTrace]:
    """(test, hold-out) parts of the recorded trace; ``quick`` keeps its first 3 windows."""
    recorded = load_recorded_trace()
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
    holdout: EkyaTrace, streams: int, horizon: Horizon, calibration: CalibrationSpec | None
) -> float:
    return statistics.mean(
        simulate(
            holdout,
            ThiefScheduler(horizon=horizon),
            gpus=g / streams * len(holdout.streams),
            calibration=calibration,
        ).mean_accuracy
        for g in STRESSED_GPUS
    )


@dataclass(frozen=True)
class CalibrationChoice:
    """The calibration best on the hold-out streams, and whether it beat none there."""

    spec: CalibrationSpec
    holdout_with: float
    holdout_without: float

    @property
    def used(self) -> bool:
        return self.holdout_with > self.holdout_without + 1e-12


def holdout_calibration(holdout: EkyaTrace, streams: int, horizon: Horizon) -> CalibrationChoice:
    """The calibration candidate whose horizon thief is most accurate on ``holdout`` (same
    measure as :func:`holdout_horizon`), beside the thief without calibration."""
    scored = [(_holdout_accuracy(holdout, streams, horizon, c), c) for c in CALIBRATION_CANDIDATES]
    best_acc, best = max(scored, key=lambda x: x[0])
    return CalibrationChoice(best, best_acc, _holdout_accuracy(holdout, streams, horizon, None))


def part2_sweep(quick: bool) -> tuple[list[SweepRow], Horizon, CalibrationChoice]:
    """Thief vs. uniform on the recorded trace, one row per GPU count; the horizon the
    horizon-aware thief uses and its estimate calibration (both chosen on the hold-out
    streams)."""
    gpu_grid = [1, 2, 4] if quick else [1, 2, 4, 8, 16]
    trace, holdout = sweep_traces(quick)
    horizon = holdout_horizon(holdout, len(trace.streams))
    choice = holdout_calibration(holdout, len(trace.streams), horizon)
    ahead = ThiefScheduler(horizon=horizon)
    truth = trace.without_estimates()
    config1, config2 = uniform_configs(holdout)
    all_names = sorted({c.name for c in trace.windows[0].streams[0].retraining})
    rows: list[SweepRow] = []
    for g in gpu_grid:
        thief = simulate(trace, ThiefScheduler(), gpus=g)
        pruned = simulate(trace, ThiefScheduler(), gpus=g, pruning=Pruning())
        exact = simulate(truth, ThiefScheduler(), gpus=g)
        with_horizon = simulate(trace, ahead, gpus=g)
        horizon_exact = simulate(truth, ahead, gpus=g)
        calibrated = simulate(trace, ahead, gpus=g, calibration=choice.spec)
        chosen = calibrated if choice.used else with_horizon
        paper, p_name = _uniform_best(trace, g, [config1, config2])
        h_name, h_share = holdout_best(holdout, g / len(trace.streams))
        held = simulate(trace, UniformScheduler(h_name, h_share), gpus=g)
        best, name = (paper, p_name)
        if held.mean_accuracy > paper.mean_accuracy:
            best, name = (held, f"{h_name}@{h_share:.0%} (hold-out best)")
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
    quick: bool, horizon: Horizon | None = None
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
        recorded = subset(load_recorded_trace(), ORACLE_STREAMS)
        recorded = recorded.model_copy(update={"windows": recorded.windows[:4]})
        cases += [("recorded", recorded, 0.5), ("recorded", recorded, 1.0)]
    out: list[tuple[str, int, float, float, float]] = []
    for label, trace, g in cases:
        thief = simulate(trace, ThiefScheduler(horizon=horizon), gpus=g).mean_accuracy
        oracle = simulate(trace, OracleScheduler(horizon=horizon), gpus=g).mean_accuracy
        out.append((label, len(trace.streams), g, thief, oracle))
    return max(o - t for *_, t, o in out), out


def part3_speed(quick: bool) -> tuple[float, float, GpuPacking | None]:
    """Median wall time of one thief plan (and of a single Algorithm-1 pass), and its packing."""
    trace = generate_trace(TraceSpec(streams=10, windows=1, gpus=8, delta_gpus=0.1, seed=3))
    problem = window_problem(trace, 0, 8.0)
    assert all(len(s.retraining_configs) == 18 for s in problem.streams)
    timings: dict[int, list[float]] = {20: [], 1: []}
    plan = None
    for passes in timings:
        for _ in range(3 if quick else 7):
            t0 = time.perf_counter()
            plan = ThiefScheduler(max_passes=passes).plan(problem)
            timings[passes].append(time.perf_counter() - t0)
    packing = None if plan is None else pack_plan(plan)
    return statistics.median(timings[20]), statistics.median(timings[1]), packing


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for tests")
    args = parser.parse_args(argv)
    print(f"machine: {machine_description()}")

    uniform, thief, linear = part1_example()
    print("\n1. illustrative example (2 streams, 3 GPUs, 2 x 120 s)")
    print(
        table(
            ["scheduler", "mean accuracy", "paper"],
            [
                ["uniform (cfg1, 50%)", round(uniform, 4), 0.56],
                ["thief", round(thief, 4), 0.73],
                ["thief, linear sampling (D=1)", round(linear, 4), "-"],
            ],
        )
    )

    rows, horizon, choice = part2_sweep(args.quick)
    print(
        "\n2. 10 recorded streams (real training runs), thief vs. uniform: best of "
        "Config 1/2 x 30/50/70/90% and the hold-out best; hindsight = best of all configs x "
        "shares on the test trace itself"
    )
    print(
        table(
            [
                "GPUs",
                "thief",
                "thief pruned",
                "thief exact",
                "thief horizon",
                "horizon calib.",
                "uniform",
                "uniform cfg",
                "gain",
                "paper-pts",
                "hindsight",
                "hindsight cfg",
                "gain vs hind.",
                "no retrain",
                "thief min",
                "uniform min",
            ],
            [
                [
                    r.gpus,
                    round(r.thief, 4),
                    round(r.thief_pruned, 4),
                    round(r.thief_exact, 4),
                    round(r.thief_horizon, 4),
                    round(r.thief_horizon_calibrated, 4),
                    round(r.uniform_best, 4),
                    r.uniform_name,
                    round(r.thief / r.uniform_best - 1.0, 4),
                    round(r.uniform_paper, 4),
                    round(r.uniform_hindsight, 4),
                    r.hindsight_name,
                    round(r.thief / r.uniform_hindsight - 1.0, 4),
                    round(r.no_retraining, 4),
                    round(r.thief_min, 4),
                    round(r.uniform_min, 4),
                ]
                for r in rows
            ],
        )
    )
    print("inference side: time-averaged inference accuracy factor and retraining time share")
    print(
        table(
            [
                "GPUs",
                "thief factor",
                "uniform factor",
                "thief retrain frac",
                "uniform retrain frac",
                "horizon retrain frac",
            ],
            [
                [
                    r.gpus,
                    round(r.thief_inference_factor, 4),
                    round(r.uniform_inference_factor, 4),
                    round(r.thief_retraining_frac, 4),
                    round(r.uniform_retraining_frac, 4),
                    round(r.horizon_retraining_frac, 4),
                ]
                for r in rows
            ],
        )
    )
    pairs = [
        ("thief", "best uniform (RESULT)", "thief", "uniform_best"),
        ("thief", "paper's Config 1/2 only", "thief", "uniform_paper"),
        ("thief", "hindsight-best uniform", "thief", "uniform_hindsight"),
        ("thief, exact profiles", "best uniform", "thief_exact", "uniform_best"),
        ("thief, horizon", "best uniform", "thief_horizon", "uniform_best"),
        ("thief, horizon", "paper's Config 1/2 only", "thief_horizon", "uniform_paper"),
        ("thief, horizon", "hindsight-best uniform", "thief_horizon", "uniform_hindsight"),
        ("thief, horizon, exact profiles", "best uniform", "thief_horizon_exact", "uniform_best"),
        ("thief, horizon, calibrated", "best uniform", "thief_horizon_calibrated", "uniform_best"),
        (
            "thief, horizon, calibrated",
            "paper's Config 1/2 only",
            "thief_horizon_calibrated",
            "uniform_paper",
        ),
        (
            f"thief, horizon, hold-out choice ({'calibrated' if choice.used else 'uncalibrated'}; "
            "RESULT)",
            "best uniform",
            "thief_horizon_chosen",
            "uniform_best",
        ),
        (
            "thief, horizon, hold-out choice",
            "paper's Config 1/2 only",
            "thief_horizon_chosen",
            "uniform_paper",
        ),
    ]
    comparisons = [
        (a, b, *stressed_comparison(rows, attrgetter(t), attrgetter(u))) for a, b, t, u in pairs
    ]
    gain_rel, gpu_equiv = comparisons[0][2], comparisons[0][3]
    gain_horizon, equiv_horizon = comparisons[10][2], comparisons[10][3]
    print(
        f"horizon objective chosen on the hold-out streams: H = {horizon.windows} windows, "
        f"discount {horizon.discount}"
    )
    print(
        f"estimate calibration best on the hold-out streams: {choice.spec.label} "
        f"(hold-out mean accuracy {choice.holdout_with:.4f} vs. {choice.holdout_without:.4f} "
        f"without); the RESULT's _horizon keys use the thief "
        f"{'with' if choice.used else 'without'} it"
    )
    print(f"stressed regime ({', '.join(map(str, STRESSED_GPUS))} GPUs), worst of the two:")
    print(
        table(
            ["scheduler", "against", "gain_rel", "gpu_equiv"],
            [[a, b, round(g, 4), round(e, 3)] for a, b, g, e in comparisons],
        )
    )
    oracle_gap, cases = part2_oracle_gap(args.quick)
    print(
        table(
            ["trace", "streams", "GPUs", "thief", "oracle", "gap"],
            [[k, s, g, round(t, 4), round(o, 4), round(o - t, 4)] for k, s, g, t, o in cases],
        )
    )
    horizon_gap, cases = part2_oracle_gap(args.quick, horizon)
    print(f"the same with the horizon objective (thief and oracle); worst gap {horizon_gap:.4f}")
    print(
        table(
            ["trace", "streams", "GPUs", "thief", "oracle", "gap"],
            [[k, s, g, round(t, 4), round(o, 4), round(o - t, 4)] for k, s, g, t, o in cases],
        )
    )

    thief_s, one_pass_s, packing = part3_speed(args.quick)
    print("\n3. thief speed, 10 streams x 8 GPUs x 18 configs, Delta 0.1")
    print(table(["variant", "median s"], [["until stable", thief_s], ["one pass", one_pass_s]]))
    if packing is not None:
        print(
            f"packing of that plan onto 8 GPUs: {len(packing.slots)} pieces, "
            f"max GPU load {max(packing.gpu_load):.3g}, "
            f"quantisation error {packing.quantization_error_gpus:.3g} GPUs, "
            f"fragmentation {packing.fragmentation:.3g}"
        )

    print("\n4. micro-profiler vs. exhaustive retraining (drifting digits, edge CNN, torch)")
    micro = run_microprofile(args.quick)
    print(
        table(
            ["window", "config", "predicted", "actual", "abs err", "est s", "measured s"],
            [
                [
                    p.window,
                    p.config,
                    round(p.predicted, 4),
                    round(p.actual, 4),
                    round(abs(p.predicted - p.actual), 4),
                    round(p.estimated_s, 3),
                    round(p.actual_s, 3),
                ]
                for p in micro.pairs
            ],
        )
    )
    print(
        f"profiling {micro.profile_s:.1f} s vs exhaustive {micro.exhaustive_s:.1f} s; "
        f"{micro.pruned} config-windows pruned"
    )

    values: dict[str, float | int | str | bool] = {
        "example_uniform": round(uniform, 4),
        "example_thief": round(thief, 4),
        "gain_rel": round(gain_rel, 4),
        "gpu_equiv": round(gpu_equiv, 3),
        "oracle_gap": round(oracle_gap, 4),
        "thief_s": round(thief_s, 4),
        "microprofile_mae": round(micro.mae, 4),
        "microprofile_cost_frac": round(micro.cost_frac, 4),
        "gain_rel_horizon": round(gain_horizon, 4),
        "gpu_equiv_horizon": round(equiv_horizon, 3),
    }
    print()
    print(result_line(values))


if __name__ == "__main__":
    main()
