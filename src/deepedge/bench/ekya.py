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
   chosen on the hold-out streams (``ekya_sweep.HORIZON_CANDIDATES``, at the stressed GPUs per
   stream); ``gain_rel_horizon`` / ``gpu_equiv_horizon`` compare it with the same uniform
   baseline as ``gain_rel`` / ``gpu_equiv``. Column "horizon calib.": the horizon thief
   whose accuracy estimates are corrected online from the residuals of earlier windows'
   finished retrainings (:mod:`deepedge.planning.window.estimate_calibration`), with the scope and
   shrinkage best on the hold-out streams (``ekya_sweep.CALIBRATION_CANDIDATES``). Column
   "horizon re-prof.": the horizon thief whose candidate configurations are re-profiled (the
   mean of the trace's independent profiles, :mod:`deepedge.planning.window.reprofiling`),
   with the number of profiles and candidates best on the hold-out streams
   (``ekya_sweep.REPROFILE_CANDIDATES``). The ``_horizon`` keys report whichever of the three
   (first profile only, calibrated, re-profiled) is best on the hold-out streams.
3. Scheduler speed: 10 streams, 8 GPUs, 18 configurations, Delta = 0.1.
4. Micro-profiler on real torch training runs: median absolute error and relative cost.

Ends with ``RESULT example_uniform=... example_thief=... gain_rel=... gpu_equiv=...
oracle_gap=... thief_s=... microprofile_mae=... microprofile_cost_frac=...
gain_rel_horizon=... gpu_equiv_horizon=...``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

from deepedge.bench.ekya_microprofile import run_microprofile
from deepedge.bench.ekya_sweep import (
    STRESSED_GPUS,
    EstimateChoice,
    SweepRow,
    add_trace_argument,
    part2_oracle_gap,
    part2_sweep,
    profiling_cost_frac,
    stressed_comparison,
    sweep_traces,
)
from deepedge.bench.harness.microprofile import MicroprofileResult
from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.planning.window.accuracy import Horizon
from deepedge.planning.window.documents import GpuPacking
from deepedge.planning.window.packing import pack_plan
from deepedge.planning.window.thief import ThiefScheduler
from deepedge.planning.window.uniform import UniformScheduler
from deepedge.sim.examples import illustrative_trace
from deepedge.sim.generator import TraceSpec, generate_trace
from deepedge.sim.simulator import simulate, window_problem


def part1_example() -> tuple[float, float, float]:
    """(uniform, thief, thief under linear sampling D = 1) on Table 1 / Figure 4."""
    trace = illustrative_trace()
    uniform = simulate(trace, UniformScheduler("cfg1", 0.5)).mean_accuracy
    thief = simulate(trace, ThiefScheduler()).mean_accuracy
    linear = simulate(illustrative_trace(full_rate_gpus=1.0), ThiefScheduler()).mean_accuracy
    return uniform, thief, linear


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


@dataclass(frozen=True)
class Gains:
    """The RESULT's comparisons in the stressed regime (worst of its GPU counts)."""

    gain_rel: float  # thief / best uniform - 1
    gpu_equiv: float  # GPUs the best uniform needs to match the thief, relative
    gain_rel_horizon: float  # the same for the horizon thief chosen on the hold-out streams
    gpu_equiv_horizon: float


COMPARISONS = [
    ("thief", "best uniform (RESULT)", "thief", "uniform_best"),
    ("thief", "paper's Config 1/2 only", "thief", "uniform_paper"),
    ("thief", "hindsight-best uniform", "thief", "uniform_hindsight"),
    ("thief, exact profiles", "best uniform", "thief_exact", "uniform_best"),
    ("thief, horizon", "best uniform", "thief_horizon", "uniform_best"),
    ("thief, horizon", "paper's Config 1/2 only", "thief_horizon", "uniform_paper"),
    ("thief, horizon", "hindsight-best uniform", "thief_horizon", "uniform_hindsight"),
    ("thief, horizon, exact profiles", "best uniform", "thief_horizon_exact", "uniform_best"),
    ("thief, horizon, calibrated", "best uniform", "thief_horizon_calibrated", "uniform_best"),
    ("thief, horizon, calibrated", "paper's Config 1/2 only", "thief_horizon_calibrated",
     "uniform_paper"),
    ("thief, horizon, re-profiled", "best uniform", "thief_horizon_reprofiled", "uniform_best"),
    ("thief, horizon, re-profiled", "paper's Config 1/2 only", "thief_horizon_reprofiled",
     "uniform_paper"),
    ("thief, horizon, hold-out choice ({estimates}; RESULT)", "best uniform",
     "thief_horizon_chosen", "uniform_best"),
    ("thief, horizon, hold-out choice", "paper's Config 1/2 only", "thief_horizon_chosen",
     "uniform_paper"),
]  # fmt: skip
"""(scheduler, against, SweepRow field of the scheduler, field of the baseline); the first
row gives ``gain_rel``/``gpu_equiv``, the hold-out choice's (plain, calibrated or
re-profiled estimates) the ``_horizon`` keys."""
RESULT_COMPARISON, RESULT_HORIZON_COMPARISON = 0, 12


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for tests")
    add_trace_argument(parser)
    args = parser.parse_args(argv)
    print(f"machine: {machine_description()}")
    if args.trace is not None:
        print(f"trace: {args.trace}")
    uniform, thief = report_example()
    rows, horizon, choice = report_sweep(args.quick, args.trace)
    gains = report_comparisons(rows, horizon, choice, args.trace)
    oracle_gap = report_oracle_gaps(args.quick, horizon, args.trace)
    thief_s = report_speed(args.quick)
    micro = report_microprofile(args.quick)
    values: dict[str, float | int | str | bool] = {
        "example_uniform": round(uniform, 4),
        "example_thief": round(thief, 4),
        "gain_rel": round(gains.gain_rel, 4),
        "gpu_equiv": round(gains.gpu_equiv, 3),
        "oracle_gap": round(oracle_gap, 4),
        "thief_s": round(thief_s, 4),
        "microprofile_mae": round(micro.mae, 4),
        "microprofile_cost_frac": round(micro.cost_frac, 4),
        "gain_rel_horizon": round(gains.gain_rel_horizon, 4),
        "gpu_equiv_horizon": round(gains.gpu_equiv_horizon, 3),
    }
    print()
    print(result_line(values))


def report_example() -> tuple[float, float]:
    """Part 1: print the illustrative example; uniform's and the thief's mean accuracy."""
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
    return uniform, thief


SWEEP_HEADERS = [
    "GPUs", "thief", "thief pruned", "thief exact", "thief horizon", "horizon calib.",
    "horizon re-prof.", "uniform", "uniform cfg", "gain", "paper-pts", "hindsight", "hindsight cfg",
    "gain vs hind.", "no retrain", "thief min", "uniform min",
]  # fmt: skip
INFERENCE_HEADERS = [
    "GPUs", "thief factor", "uniform factor", "thief retrain frac", "uniform retrain frac",
    "horizon retrain frac",
]  # fmt: skip


def _sweep_cells(r: SweepRow) -> list[object]:
    return [
        r.gpus, round(r.thief, 4), round(r.thief_pruned, 4), round(r.thief_exact, 4),
        round(r.thief_horizon, 4), round(r.thief_horizon_calibrated, 4),
        round(r.thief_horizon_reprofiled, 4), round(r.uniform_best, 4), r.uniform_name,
        round(r.thief / r.uniform_best - 1.0, 4),
        round(r.uniform_paper, 4), round(r.uniform_hindsight, 4), r.hindsight_name,
        round(r.thief / r.uniform_hindsight - 1.0, 4), round(r.no_retraining, 4),
        round(r.thief_min, 4), round(r.uniform_min, 4),
    ]  # fmt: skip


def _inference_cells(r: SweepRow) -> list[object]:
    return [
        r.gpus, round(r.thief_inference_factor, 4), round(r.uniform_inference_factor, 4),
        round(r.thief_retraining_frac, 4), round(r.uniform_retraining_frac, 4),
        round(r.horizon_retraining_frac, 4),
    ]  # fmt: skip


def report_sweep(
    quick: bool, path: Path | None = None
) -> tuple[list[SweepRow], Horizon, EstimateChoice]:
    """Part 2's sweep over GPUs: print both tables; the rows and the hold-out choices."""
    rows, horizon, choice = part2_sweep(quick, path)
    print(
        "\n2. 10 recorded streams (real training runs), thief vs. uniform: best of "
        "Config 1/2 x 30/50/70/90% and the hold-out best; hindsight = best of all configs x "
        "shares on the test trace itself"
    )
    print(table(SWEEP_HEADERS, [_sweep_cells(r) for r in rows]))
    print("inference side: time-averaged inference accuracy factor and retraining time share")
    print(table(INFERENCE_HEADERS, [_inference_cells(r) for r in rows]))
    return rows, horizon, choice


def report_comparisons(
    rows: list[SweepRow], horizon: Horizon, choice: EstimateChoice, path: Path | None = None
) -> Gains:
    """Part 2's comparisons in the stressed regime: print them; the RESULT's gains."""
    comparisons = [
        (a.format(estimates=choice.used), b,
         *stressed_comparison(rows, attrgetter(t), attrgetter(u)))
        for a, b, t, u in COMPARISONS
    ]  # fmt: skip
    print(
        f"horizon objective chosen on the hold-out streams: H = {horizon.windows} windows, "
        f"discount {horizon.discount}"
    )
    print(
        f"estimates chosen on the hold-out streams (hold-out mean accuracy): first profile "
        f"only {choice.holdout_plain:.4f}; best calibration {choice.calibration.label} "
        f"{choice.holdout_calibrated:.4f}; best re-profiling {choice.reprofile.label} "
        f"{choice.holdout_reprofiled:.4f}; the RESULT's _horizon keys use the {choice.used} "
        f"thief"
    )
    test, _ = sweep_traces(quick=False, path=path)
    print(
        "micro-profiling seconds per second of exhaustive retraining on the test streams "
        "(not charged to the GPUs by the simulator, for any scheduler): first profile "
        f"{profiling_cost_frac(test):.3f}, with the chosen re-profiling "
        f"{profiling_cost_frac(test, choice.reprofile):.3f}"
    )
    print(f"stressed regime ({', '.join(map(str, STRESSED_GPUS))} GPUs), worst of the two:")
    print(
        table(
            ["scheduler", "against", "gain_rel", "gpu_equiv"],
            [[a, b, round(g, 4), round(e, 3)] for a, b, g, e in comparisons],
        )
    )
    first, chosen = comparisons[RESULT_COMPARISON], comparisons[RESULT_HORIZON_COMPARISON]
    return Gains(first[2], first[3], chosen[2], chosen[3])


def report_oracle_gaps(quick: bool, horizon: Horizon, path: Path | None = None) -> float:
    """Part 2's gap to the exhaustive oracle, without and with the horizon objective: print
    both tables; the worst gap without it."""
    headers = ["trace", "streams", "GPUs", "thief", "oracle", "gap"]
    oracle_gap, cases = part2_oracle_gap(quick, path=path)
    print(
        table(
            headers,
            [[k, s, g, round(t, 4), round(o, 4), round(o - t, 4)] for k, s, g, t, o in cases],
        )
    )
    horizon_gap, cases = part2_oracle_gap(quick, horizon, path)
    print(f"the same with the horizon objective (thief and oracle); worst gap {horizon_gap:.4f}")
    print(
        table(
            headers,
            [[k, s, g, round(t, 4), round(o, 4), round(o - t, 4)] for k, s, g, t, o in cases],
        )
    )
    return oracle_gap


def report_speed(quick: bool) -> float:
    """Part 3: print the thief's speed and its plan's packing; the median plan time (s)."""
    thief_s, one_pass_s, packing = part3_speed(quick)
    print("\n3. thief speed, 10 streams x 8 GPUs x 18 configs, Delta 0.1")
    print(table(["variant", "median s"], [["until stable", thief_s], ["one pass", one_pass_s]]))
    if packing is not None:
        print(
            f"packing of that plan onto 8 GPUs: {len(packing.slots)} pieces, "
            f"max GPU load {max(packing.gpu_load):.3g}, "
            f"quantisation error {packing.quantization_error_gpus:.3g} GPUs, "
            f"fragmentation {packing.fragmentation:.3g}"
        )
    return thief_s


def report_microprofile(quick: bool) -> MicroprofileResult:
    """Part 4: the micro-profiler against exhaustive retraining; print the pairs."""
    print("\n4. micro-profiler vs. exhaustive retraining (drifting digits, edge CNN, torch)")
    micro = run_microprofile(quick)
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
    return micro


if __name__ == "__main__":
    main()
