"""Benchmark: Deep-Edge sharding vs the fair scheduler vs the exact oracle (Section V-C).

``python -m deepedge.bench.sharding [--quick] [--experiments N] [--noise S] [--seed K]``

120 random experiments on the paper's testbed (1 TX2 + 3 Nano workers, a Raspberry Pi 4
parameter server, |M| = 3855). Every worker runs SIFT every 200 ms plus random stressors;
every initial state is feasible. Per experiment:

* the **ground truth** is the analytic catalog (emulated devices, see perfmodel/catalog.py);
* the planners decide from **estimates**: the catalog seen through ``NoisyModel`` with
  relative error ``--noise`` (seeded per experiment);
* Deep-Edge (Algorithm 1), fair (equal shards, max batch, interference-blind) and the
  exact oracle (all subsets x a batch grid) are **scored on the ground truth**.

The oracle runs twice: on the same estimates as Deep-Edge (the gap then measures the
heuristic's search alone; this is ``oracle_gap_mean``) and clairvoyantly on the ground
truth (the gap then also contains the loss from estimation error; shown in the table).
Violations count experiments in which at least one background app misses its deadline.
Planner time is the median wall time of ``plan_shards`` on 6, 50 and 500 workers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

from deepedge.bench.report import machine_description, result_line, table
from deepedge.bench.sharding_scenarios import random_cluster, scaled_devices
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.perfmodel.noisy import PAPER_TABLE_I, EstimatorNoise, NoisyModel
from deepedge.planning.cost_model import PlanEvaluation, evaluate_plan
from deepedge.planning.shard_fair import plan_fair
from deepedge.planning.shard_oracle import plan_oracle
from deepedge.planning.shard_spec import ClusterSpec
from deepedge.planning.sharding import plan_shards

DEFAULT_MARGIN = 0.03  # ~1.4 sigma of the pressure estimate's error at Table I accuracy


@dataclass(frozen=True, slots=True)
class Outcome:
    deep_edge: PlanEvaluation
    fair: PlanEvaluation
    oracle_same: PlanEvaluation
    oracle_truth: PlanEvaluation
    selected: int

    @property
    def speedup(self) -> float:
        return self.fair.epoch_time_s / self.deep_edge.epoch_time_s


def run_experiment(
    cluster: ClusterSpec, noise: EstimatorNoise, seed: int, grid_points: int, margin: float
) -> Outcome:
    truth = DeviceCatalog()
    cluster = cluster.model_copy(update={"deadline_margin": margin})
    estimates = NoisyModel(truth, noise, seed=seed)
    de_plan = plan_shards(cluster, estimates)
    return Outcome(
        deep_edge=evaluate_plan(cluster, de_plan, truth),
        fair=evaluate_plan(cluster, plan_fair(cluster, estimates), truth),
        oracle_same=evaluate_plan(cluster, plan_oracle(cluster, estimates, grid_points), truth),
        oracle_truth=evaluate_plan(
            cluster, plan_oracle(cluster, truth, grid_points, margin=0.0), truth
        ),
        selected=len(de_plan.selected_ids),
    )


def time_planner_ms(
    n_workers: int, repeats: int, noise: EstimatorNoise, seed: int
) -> tuple[float, float]:
    """Median wall and CPU time (ms) of one ``plan_shards`` call on ``n_workers`` workers.

    The wall time is the figure reported; the process CPU time shows how much of it was
    the planner itself on a machine shared with other jobs.
    """
    rng = np.random.default_rng(seed)
    cluster = random_cluster(
        rng, scaled_devices(n_workers), dataset_size=max(3855, 964 * n_workers)
    )
    plan_shards(cluster, NoisyModel(DeviceCatalog(), noise, seed=seed - 1))  # warm-up
    wall, cpu = [], []
    for r in range(repeats):
        estimates = NoisyModel(DeviceCatalog(), noise, seed=seed + r)
        start, start_cpu = time.perf_counter(), time.process_time()
        plan_shards(cluster, estimates)
        wall.append((time.perf_counter() - start) * 1000.0)
        cpu.append((time.process_time() - start_cpu) * 1000.0)
    return statistics.median(wall), statistics.median(cpu)


def _summary(values: list[float]) -> list[float]:
    return [statistics.fmean(values), statistics.median(values), max(values)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.sharding")
    parser.add_argument("--quick", action="store_true", help="12 experiments, small grid")
    parser.add_argument("--experiments", type=int, default=None)
    parser.add_argument(
        "--noise",
        type=float,
        default=None,
        help="one relative error for every estimator (default: the paper's Table I errors)",
    )
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="deadline margin")
    parser.add_argument("--seed", type=int, default=2020)
    args = parser.parse_args(argv)
    n_exp = args.experiments or (12 if args.quick else 120)
    grid_points = 3 if args.quick else 5
    margin = args.margin
    noise = PAPER_TABLE_I if args.noise is None else EstimatorNoise.uniform(args.noise)
    noise_label = "paper Table I" if args.noise is None else f"uniform {args.noise}"
    rng = np.random.default_rng(args.seed)
    outcomes = [
        run_experiment(random_cluster(rng), noise, args.seed + k, grid_points, margin)
        for k in range(n_exp)
    ]
    infeasible = sum(1 for o in outcomes if not o.deep_edge.workers)
    # A cluster where every worker would break a deadline has no plan to compare.
    outcomes = [o for o in outcomes if o.deep_edge.workers]
    de = [o.deep_edge.epoch_time_s for o in outcomes]
    fair = [o.fair.epoch_time_s for o in outcomes]
    speedups = [o.speedup for o in outcomes]
    gap_same = [o.deep_edge.epoch_time_s / o.oracle_same.epoch_time_s - 1 for o in outcomes]
    gap_truth = [o.deep_edge.epoch_time_s / o.oracle_truth.epoch_time_s - 1 for o in outcomes]
    viol_de = sum(1 for o in outcomes if o.deep_edge.violations)
    viol_fair = sum(1 for o in outcomes if o.fair.violations)
    repeats = (1, 1, 1) if args.quick else (30, 5, 3)
    plan_ms = {
        n: time_planner_ms(n, r, noise, args.seed)
        for n, r in zip((6, 50, 500), repeats, strict=True)
    }

    print(f"machine: {machine_description()}")
    print(
        f"experiments: {n_exp}, estimate noise {noise_label}, deadline margin {margin:g}, "
        f"oracle grid {grid_points} batch sizes per worker; "
        f"{infeasible} experiment(s) with no feasible worker left out\n"
    )
    rows = [
        ["deep-edge", *_summary(de), viol_de, sum(o.deep_edge.violations for o in outcomes)],
        ["fair", *_summary(fair), viol_fair, sum(o.fair.violations for o in outcomes)],
        [
            "oracle (same estimates)",
            *_summary([o.oracle_same.epoch_time_s for o in outcomes]),
            sum(1 for o in outcomes if o.oracle_same.violations),
            sum(o.oracle_same.violations for o in outcomes),
        ],
        [
            "oracle (ground truth)",
            *_summary([o.oracle_truth.epoch_time_s for o in outcomes]),
            sum(1 for o in outcomes if o.oracle_truth.violations),
            sum(o.oracle_truth.violations for o in outcomes),
        ],
    ]
    headers = ["policy", "epoch mean s", "median s", "max s", "exps w/ violation", "apps"]
    print(table(headers, rows))
    print()
    above = sum(1 for s in speedups if s > 1.5) / len(speedups)
    hist = np.histogram(speedups, bins=[0, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 100])[0]
    print(
        table(
            ["speedup", "mean", "median", "min", "max", "share > 1.5"],
            [["deep-edge / fair", *_summary(speedups)[:2], min(speedups), max(speedups), above]],
        )
    )
    labels = ["<1", "1-1.25", "1.25-1.5", "1.5-2", "2-2.5", "2.5-3", ">=3"]
    bins = ", ".join(f"{a}: {int(h)}" for a, h in zip(labels, hist, strict=True))
    print(f"\nspeedup histogram: {bins}")
    print(
        f"\ngap to oracle: same estimates mean {statistics.fmean(gap_same):.4f} "
        f"max {max(gap_same):.4f}; ground truth mean {statistics.fmean(gap_truth):.4f} "
        f"max {max(gap_truth):.4f}"
    )
    print(
        f"workers selected by deep-edge: mean {statistics.fmean(o.selected for o in outcomes):.2f}"
    )
    print(
        table(
            ["workers", "plan wall ms (median)", "plan cpu ms (median)"],
            [[n, wall, cpu] for n, (wall, cpu) in plan_ms.items()],
        )
    )
    print(
        result_line(
            {
                "speedup_mean": statistics.fmean(speedups),
                "speedup_median": statistics.median(speedups),
                "violations_deepedge": viol_de,
                "violations_fair": viol_fair,
                "oracle_gap_mean": statistics.fmean(gap_same),
                "plan_ms_6": plan_ms[6][0],
                "plan_ms_500": plan_ms[500][0],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
