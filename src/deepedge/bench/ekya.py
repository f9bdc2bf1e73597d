"""Ekya benchmark: ``python -m deepedge.bench.ekya [--quick]``.

1. The illustrative example (Table 1 / Figure 4): uniform vs. thief mean accuracy.
2. 10 simulated drifting streams on 1-16 GPUs: thief vs. the best uniform baseline, the
   better of (a) the paper's protocol: Config 1 / Config 2 picked on a hold-out trace,
   inference share 30/50/70/90% (share picked on the test trace) and (b) the (config, share)
   that is best on the hold-out trace at the same GPUs per stream; GPU-equivalence, and the
   gap to the exhaustive oracle on small instances.
   The thief is offered the configurations the micro-profiler's pruning keeps (Sec. 4.2,
   "pruned configuration list", judged on estimates only); the uniform baseline runs its
   fixed configuration and needs no profiler.
3. Scheduler speed: 10 streams, 8 GPUs, 18 configurations, Delta = 0.1.
4. Micro-profiler on real torch training runs: median absolute error and relative cost.

Ends with ``RESULT example_uniform=... example_thief=... gain_rel=... gpu_equiv=...
oracle_gap=... thief_s=... microprofile_mae=... microprofile_cost_frac=...``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from dataclasses import dataclass

from deepedge.bench.ekya_microprofile import run_microprofile
from deepedge.bench.report import machine_description, result_line, table
from deepedge.planning.packing import pack_plan
from deepedge.planning.thief import ThiefScheduler
from deepedge.planning.uniform import UniformScheduler
from deepedge.planning.window import GpuPacking
from deepedge.planning.window_oracle import OracleScheduler
from deepedge.sim.baselines import INFERENCE_SHARES, holdout_best, uniform_configs
from deepedge.sim.examples import illustrative_trace
from deepedge.sim.generator import TraceSpec, generate_trace
from deepedge.sim.simulator import Pruning, simulate, window_problem
from deepedge.sim.trace import EkyaTrace

STRESSED_GPUS = (1, 2)  # <= 0.2 GPU per stream for 10 streams


@dataclass(frozen=True)
class SweepRow:
    gpus: int
    thief: float
    uniform_best: float
    uniform_name: str
    uniform_hindsight: float
    uniform_paper: float
    thief_min: float
    uniform_min: float


def part1_example() -> tuple[float, float, float]:
    """(uniform, thief, thief under linear sampling D = 1) on Table 1 / Figure 4."""
    trace = illustrative_trace()
    uniform = simulate(trace, UniformScheduler("cfg1", 0.5)).mean_accuracy
    thief = simulate(trace, ThiefScheduler()).mean_accuracy
    linear = simulate(illustrative_trace(full_rate_gpus=1.0), ThiefScheduler()).mean_accuracy
    return uniform, thief, linear


def _uniform_best(trace: EkyaTrace, gpus: float, names: list[str]) -> tuple[float, str, float]:
    best, best_name, best_min = -1.0, "", 1.0
    for name in names:
        for share in INFERENCE_SHARES:
            res = simulate(trace, UniformScheduler(name, share), gpus=gpus)
            if res.mean_accuracy > best:
                best, best_name, best_min = (
                    res.mean_accuracy,
                    f"{name}@{share:.0%}",
                    res.min_accuracy,
                )
    return best, best_name, best_min


def gpus_to_match(curve: list[tuple[int, float]], target: float) -> float:
    """GPUs the uniform curve needs to reach ``target`` (linear interpolation; inf if never)."""
    for (g0, a0), (g1, a1) in itertools.pairwise(curve):
        if a0 >= target:
            return float(g0)
        if a1 >= target:
            return g0 + (g1 - g0) * (target - a0) / (a1 - a0)
    return float("inf") if curve[-1][1] < target else float(curve[-1][0])


def part2_sweep(quick: bool) -> tuple[list[SweepRow], float, float]:
    windows = 3 if quick else 10
    gpu_grid = [1, 2, 4] if quick else [1, 2, 4, 8, 16]
    holdout = generate_trace(TraceSpec(streams=2, windows=10, seed=1000))
    config1, config2 = uniform_configs(holdout)
    trace = generate_trace(TraceSpec(windows=windows, delta_gpus=0.05, seed=7))
    all_names = sorted({c.name for c in trace.windows[0].streams[0].retraining})
    rows: list[SweepRow] = []
    for g in gpu_grid:
        thief = simulate(trace, ThiefScheduler(), gpus=g, pruning=Pruning())
        paper, p_name, p_min = _uniform_best(trace, g, [config1, config2])
        h_name, h_share = holdout_best(holdout, g / len(trace.streams))
        held = simulate(trace, UniformScheduler(h_name, h_share), gpus=g)
        u_best, u_name, u_min = (paper, p_name, p_min)
        if held.mean_accuracy > paper:
            u_best, u_name, u_min = (
                held.mean_accuracy,
                f"{h_name}@{h_share:.0%} (hold-out best)",
                held.min_accuracy,
            )
        hindsight = u_best if quick else max(u_best, _uniform_best(trace, g, all_names)[0])
        rows.append(
            SweepRow(
                g, thief.mean_accuracy, u_best, u_name, hindsight, paper, thief.min_accuracy, u_min
            )
        )
    curve = [(r.gpus, r.uniform_best) for r in rows]
    stressed = [r for r in rows if r.gpus in STRESSED_GPUS]
    gain_rel = min(r.thief / r.uniform_best - 1.0 for r in stressed)
    gpu_equiv = min(gpus_to_match(curve, r.thief) / r.gpus for r in stressed)
    return rows, gain_rel, gpu_equiv


def part2_oracle_gap(quick: bool) -> tuple[float, list[tuple[int, int, float, float]]]:
    """Largest mean-accuracy gap oracle - thief over small instances (same inputs)."""
    cases = [(2, 1), (3, 1)] if quick else [(2, 1), (3, 1), (3, 2), (4, 2)]
    out: list[tuple[int, int, float, float]] = []
    for streams, g in cases:
        trace = generate_trace(
            TraceSpec(streams=streams, windows=3 if quick else 6, gpus=g, seed=100 + streams)
        )
        thief = simulate(trace, ThiefScheduler()).mean_accuracy
        oracle = simulate(trace, OracleScheduler()).mean_accuracy
        out.append((streams, g, thief, oracle))
    return max(o - t for _, _, t, o in out), out


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

    rows, gain_rel, gpu_equiv = part2_sweep(args.quick)
    print(
        "\n2. 10 drifting streams, thief vs. uniform (best of Config 1/2 x 30/50/70/90% "
        "and the hold-out best)"
    )
    print(
        table(
            [
                "GPUs",
                "thief",
                "uniform",
                "uniform cfg",
                "gain",
                "paper-pts uniform",
                "hindsight uniform",
                "thief min",
                "uniform min",
            ],
            [
                [
                    r.gpus,
                    round(r.thief, 4),
                    round(r.uniform_best, 4),
                    r.uniform_name,
                    round(r.thief / r.uniform_best - 1.0, 4),
                    round(r.uniform_paper, 4),
                    round(r.uniform_hindsight, 4),
                    round(r.thief_min, 4),
                    round(r.uniform_min, 4),
                ]
                for r in rows
            ],
        )
    )
    oracle_gap, cases = part2_oracle_gap(args.quick)
    print(
        table(
            ["streams", "GPUs", "thief", "oracle", "gap"],
            [[s, g, round(t, 4), round(o, 4), round(o - t, 4)] for s, g, t, o in cases],
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
    }
    print()
    print(result_line(values))


if __name__ == "__main__":
    main()
