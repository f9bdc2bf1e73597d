"""Benchmark: Deep-Edge sharding vs Deep-Edge+ vs fair vs the exact oracle (Section V-C).

``python -m deepedge.bench.sharding [--quick] [--experiments N] [--clusters K] [--noise S]
[--margin X] [--seed K]``

Part A, the paper's setting: 120 random experiments on its testbed (1 TX2 + 3 Nano
workers, a Raspberry Pi 4 parameter server, |M| = 3855). Every worker runs SIFT every
200 ms plus random stressors; every initial state is feasible. Per experiment:

* the **ground truth** is the analytic catalog (emulated devices, see perfmodel/catalog.py);
* the planners decide from **estimates**: the catalog seen through ``NoisyModel`` with
  relative error ``--noise`` (seeded per experiment);
* Deep-Edge (Algorithm 1), Deep-Edge+ (``planning/sharding/deep_edge_plus.py``), fair (equal
  shards, max batch, interference-blind) and the exact oracle (every subset and every
  feasible batch, by Total_cost) are **scored on the ground truth**.

The oracle runs twice: on the same estimates as the policies (the gap then measures their
decision rule and search; ``oracle_gap_mean`` is Algorithm 1's, by Total_cost) and
clairvoyantly on the ground truth (the gap then also contains the loss from estimation
error). Violations count experiments in which at least one background app misses its
deadline.

Part B (``sharding_gaps``): Algorithm 1's and Deep-Edge+'s gaps to the oracle on
``--clusters`` random small clusters the testbed never uses (small |M|, memory-bound
workers, uneven initialisation and transfer), with exact information and with estimates.

Planner time is the median wall time of Algorithm 1 and of Deep-Edge+ on 6, 50 and 500
workers (the testbed's mix, estimates with the paper's errors).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.bench.sharding_gaps import GapResult, GapStats, run_gaps
from deepedge.bench.sharding_scenarios import random_cluster, scaled_devices
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.perfmodel.noisy import PAPER_TABLE_I, EstimatorNoise, NoisyModel
from deepedge.planning.sharding import SHARD_POLICIES, ShardPolicy
from deepedge.planning.sharding.cost_model import PlanEvaluation, evaluate_plan
from deepedge.planning.sharding.oracle import plan_oracle
from deepedge.planning.sharding.plan import Policy
from deepedge.planning.sharding.spec import ClusterSpec

DEFAULT_MARGIN = 0.03  # ~1.4 sigma of the pressure estimate's error at Table I accuracy


@dataclass(frozen=True, slots=True)
class Outcome:
    deep_edge: PlanEvaluation
    plus: PlanEvaluation
    fair: PlanEvaluation
    oracle_same: PlanEvaluation
    oracle_truth: PlanEvaluation
    selected: int

    @property
    def speedup(self) -> float:
        return self.fair.epoch_time_s / self.deep_edge.epoch_time_s


def run_experiment(
    cluster: ClusterSpec, noise: EstimatorNoise, seed: int, margin: float
) -> Outcome:
    truth = DeviceCatalog()
    cluster = cluster.model_copy(update={"deadline_margin": margin})
    estimates = NoisyModel(truth, noise, seed=seed)
    plans = {name: policy(cluster, estimates) for name, policy in SHARD_POLICIES.items()}
    de_plan = plans[Policy.DEEP_EDGE]
    return Outcome(
        deep_edge=evaluate_plan(cluster, de_plan, truth),
        plus=evaluate_plan(cluster, plans[Policy.DEEP_EDGE_PLUS], truth),
        fair=evaluate_plan(cluster, plans[Policy.FAIR], truth),
        oracle_same=evaluate_plan(cluster, plans[Policy.ORACLE], truth),
        # the limit, not a policy: the oracle on the ground truth, with no deadline margin
        oracle_truth=evaluate_plan(cluster, plan_oracle(cluster, truth, margin=0.0), truth),
        selected=len(de_plan.selected_ids),
    )


def time_planner_ms(
    planner: ShardPolicy,
    n_workers: int,
    repeats: int,
    noise: EstimatorNoise,
    seed: int,
) -> tuple[float, float]:
    """Median wall and CPU time (ms) of one ``planner`` call on ``n_workers`` workers.

    The wall time is the figure reported; the process CPU time shows how much of it was
    the planner itself on a machine shared with other jobs.
    """
    rng = np.random.default_rng(seed)
    cluster = random_cluster(
        rng, scaled_devices(n_workers), dataset_size=max(3855, 964 * n_workers)
    )
    cluster = cluster.model_copy(update={"deadline_margin": DEFAULT_MARGIN})
    planner(cluster, NoisyModel(DeviceCatalog(), noise, seed=seed - 1))  # warm-up
    wall, cpu = [], []
    for r in range(repeats):
        estimates = NoisyModel(DeviceCatalog(), noise, seed=seed + r)
        start, start_cpu = time.perf_counter(), time.process_time()
        planner(cluster, estimates)
        wall.append((time.perf_counter() - start) * 1000.0)
        cpu.append((time.process_time() - start_cpu) * 1000.0)
    return statistics.median(wall), statistics.median(cpu)


def _summary(values: list[float]) -> list[float]:
    return [statistics.fmean(values), statistics.median(values), max(values)]


def _policy_rows(outcomes: list[Outcome]) -> list[list[object]]:
    rows: list[list[object]] = []
    for name, pick in (
        ("deep-edge (Alg. 1)", lambda o: o.deep_edge),
        ("deep-edge+", lambda o: o.plus),
        ("fair", lambda o: o.fair),
        ("oracle (same estimates)", lambda o: o.oracle_same),
        ("oracle (ground truth)", lambda o: o.oracle_truth),
    ):
        evals = [pick(o) for o in outcomes]
        rows.append(
            [
                name,
                *_summary([e.epoch_time_s for e in evals]),
                statistics.fmean(e.total_cost_s for e in evals),
                sum(1 for e in evals if e.violations),
                sum(e.violations for e in evals),
            ]
        )
    return rows


def _gap_rows(result: GapResult) -> list[list[object]]:
    rows: list[list[object]] = []
    for setting, stats in (("exact", result.exact), ("estimates", result.estimated)):
        for policy, s in stats.items():
            rows.append(_gap_row(setting, str(policy), s))
    return rows


def _gap_row(setting: str, policy: str, s: GapStats) -> list[object]:
    return [
        setting, policy, len(s.gaps), s.mean, statistics.median(s.gaps) if s.gaps else 0.0,
        s.worst, s.share_above(0.01), s.share_above(0.05), s.no_plan, s.batch_above_shard,
        s.violations,
    ]  # fmt: skip


@dataclass(frozen=True)
class Settings:
    """The run's sizes and estimate noise, from the command line."""

    experiments: int
    clusters: int
    margin: float
    noise: EstimatorNoise
    noise_label: str
    seed: int
    quick: bool


@dataclass(frozen=True)
class PartA:
    """Part A's testbed experiments that have a plan to compare, and what they show (gaps:
    Total_cost / the oracle's - 1, per experiment; violations: experiments in which a
    background app misses its deadline)."""

    outcomes: list[Outcome]
    infeasible: int  # experiments with no feasible worker, left out
    speedups: list[float]  # fair / Deep-Edge epoch time
    plus_speedups: list[float]  # fair / Deep-Edge+ epoch time
    gap_same: list[float]  # Deep-Edge against the oracle on the same estimates
    plus_same: list[float]
    gap_truth: list[float]  # against the clairvoyant oracle
    plus_truth: list[float]
    violations_deep_edge: int
    violations_plus: int
    violations_fair: int

    @classmethod
    def of(cls, outcomes: list[Outcome], infeasible: int) -> PartA:
        return cls(
            outcomes, infeasible,
            speedups=[o.speedup for o in outcomes],
            plus_speedups=[o.fair.epoch_time_s / o.plus.epoch_time_s for o in outcomes],
            gap_same=[_gap(o.deep_edge, o.oracle_same) for o in outcomes],
            plus_same=[_gap(o.plus, o.oracle_same) for o in outcomes],
            gap_truth=[_gap(o.deep_edge, o.oracle_truth) for o in outcomes],
            plus_truth=[_gap(o.plus, o.oracle_truth) for o in outcomes],
            violations_deep_edge=sum(1 for o in outcomes if o.deep_edge.violations),
            violations_plus=sum(1 for o in outcomes if o.plus.violations),
            violations_fair=sum(1 for o in outcomes if o.fair.violations),
        )  # fmt: skip


def _gap(plan: PlanEvaluation, oracle: PlanEvaluation) -> float:
    return plan.total_cost_s / oracle.total_cost_s - 1


PlanTimes = dict[tuple[str, int], tuple[float, float]]  # (policy, workers) -> (wall, cpu) ms


def parse_args(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.sharding")
    parser.add_argument("--quick", action="store_true", help="12 experiments, 12 clusters")
    parser.add_argument("--experiments", type=int, default=None)
    parser.add_argument("--clusters", type=int, default=None, help="part B (default 240)")
    parser.add_argument(
        "--noise",
        type=float,
        default=None,
        help="one relative error for every estimator (default: the paper's Table I errors)",
    )
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="deadline margin")
    parser.add_argument("--seed", type=int, default=2020)
    args = parser.parse_args(argv)
    return Settings(
        experiments=args.experiments or (12 if args.quick else 120),
        clusters=args.clusters or (12 if args.quick else 240),
        margin=args.margin,
        noise=PAPER_TABLE_I if args.noise is None else EstimatorNoise.uniform(args.noise),
        noise_label="paper Table I" if args.noise is None else f"uniform {args.noise}",
        seed=args.seed,
        quick=args.quick,
    )


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    part_a = run_part_a(settings)
    gaps = run_gaps(settings.clusters, settings.noise, settings.margin, settings.seed + 7919)
    plan_ms = time_planners(settings)
    print(f"machine: {machine_description()}")
    print_part_a(settings, part_a)
    print_part_b(gaps)
    print_plan_times(plan_ms)
    print(result_line(result_values(part_a, gaps, plan_ms)))
    return 0


def run_part_a(settings: Settings) -> PartA:
    """The testbed experiments; a cluster where every worker would break a deadline has no
    plan to compare and is only counted."""
    rng = np.random.default_rng(settings.seed)
    outcomes = [
        run_experiment(random_cluster(rng), settings.noise, settings.seed + k, settings.margin)
        for k in range(settings.experiments)
    ]
    infeasible = sum(1 for o in outcomes if not o.deep_edge.workers)
    return PartA.of([o for o in outcomes if o.deep_edge.workers], infeasible)


def time_planners(settings: Settings) -> PlanTimes:
    """Algorithm 1's and Deep-Edge+'s planning time on 6, 50 and 500 workers."""
    repeats = (1, 1, 1) if settings.quick else (30, 5, 3)
    return {
        (name, n): time_planner_ms(planner, n, r, settings.noise, settings.seed)
        for name, planner in (
            ("deep-edge", SHARD_POLICIES[Policy.DEEP_EDGE]),
            ("deep-edge+", SHARD_POLICIES[Policy.DEEP_EDGE_PLUS]),
        )
        for n, r in zip((6, 50, 500), repeats, strict=True)
    }


def print_part_a(settings: Settings, part_a: PartA) -> None:
    outcomes, speedups, plus_speedups = part_a.outcomes, part_a.speedups, part_a.plus_speedups
    gap_same, plus_same = part_a.gap_same, part_a.plus_same
    gap_truth, plus_truth = part_a.gap_truth, part_a.plus_truth
    print(
        f"part A: {settings.experiments} testbed experiments, estimate noise "
        f"{settings.noise_label}, deadline margin {settings.margin:g}; {part_a.infeasible} "
        "experiment(s) with no feasible worker left out\n"
    )
    headers = [
        "policy", "epoch mean s", "median s", "max s", "Total_cost mean s",
        "exps w/ violation", "apps",
    ]  # fmt: skip
    print(table(headers, _policy_rows(outcomes)))
    print()
    above = sum(1 for s in speedups if s > 1.5) / len(speedups)
    hist = np.histogram(speedups, bins=[0, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 100])[0]
    print(
        table(
            ["speedup (epoch time)", "mean", "median", "min", "max", "share > 1.5"],
            [
                ["deep-edge / fair", *_summary(speedups)[:2], min(speedups), max(speedups),
                 above],
                ["deep-edge+ / fair", *_summary(plus_speedups)[:2], min(plus_speedups),
                 max(plus_speedups), sum(1 for s in plus_speedups if s > 1.5) / len(speedups)],
            ],
        )
    )  # fmt: skip
    labels = ["<1", "1-1.25", "1.25-1.5", "1.5-2", "2-2.5", "2.5-3", ">=3"]
    bins = ", ".join(f"{a}: {int(h)}" for a, h in zip(labels, hist, strict=True))
    print(f"\ndeep-edge speedup histogram: {bins}")
    print(
        table(
            ["gap to oracle (Total_cost)", "same estimates mean", "max", "ground truth mean",
             "max"],
            [["deep-edge (Alg. 1)", statistics.fmean(gap_same), max(gap_same),
              statistics.fmean(gap_truth), max(gap_truth)],
             ["deep-edge+", statistics.fmean(plus_same), max(plus_same),
              statistics.fmean(plus_truth), max(plus_truth)]],
        )
    )  # fmt: skip
    print(
        f"workers selected by deep-edge: mean {statistics.fmean(o.selected for o in outcomes):.2f}"
    )


def print_part_b(gaps: GapResult) -> None:
    print(
        f"\npart B: {gaps.clusters} random clusters ({gaps.workers_mean:.2f} workers on "
        f"average, {gaps.small_data} with |M| <= 200; {gaps.infeasible} with no feasible "
        "worker at all left out); gap = Total_cost / oracle's - 1 on the ground truth"
    )
    print(
        table(
            ["setting", "policy", "clusters", "gap mean", "median", "max", "share > 1%",
             "share > 5%", "no plan", "batch > shard", "exps w/ violation"],
            _gap_rows(gaps),
        )
    )  # fmt: skip


def print_plan_times(plan_ms: PlanTimes) -> None:
    print()
    print(
        table(
            ["policy", "workers", "plan wall ms (median)", "plan cpu ms (median)"],
            [[name, n, wall, cpu] for (name, n), (wall, cpu) in plan_ms.items()],
        )
    )


def result_values(part_a: PartA, gaps: GapResult, plan_ms: PlanTimes) -> dict[str, float]:
    """The RESULT line's figures, in its order."""
    plus_exact, alg1_exact = gaps.exact[Policy.DEEP_EDGE_PLUS], gaps.exact[Policy.DEEP_EDGE]
    speedups = part_a.speedups
    return {
        "speedup_mean": statistics.fmean(speedups),
        "speedup_median": statistics.median(speedups),
        "violations_deepedge": part_a.violations_deep_edge,
        "violations_fair": part_a.violations_fair,
        "oracle_gap_mean": statistics.fmean(part_a.gap_same),
        "plan_ms_6": plan_ms[("deep-edge", 6)][0],
        "plan_ms_500": plan_ms[("deep-edge", 500)][0],
        "plus_gap_mean": plus_exact.mean,
        "plus_gap_max": plus_exact.worst,
        "alg1_gap_mean": alg1_exact.mean,
        "alg1_gap_max": alg1_exact.worst,
        "alg1_no_plan": alg1_exact.no_plan,
        "violations_plus": part_a.violations_plus
        + gaps.estimated[Policy.DEEP_EDGE_PLUS].violations,
        "plus_plan_ms_6": plan_ms[("deep-edge+", 6)][0],
        "plus_plan_ms_500": plan_ms[("deep-edge+", 500)][0],
    }


if __name__ == "__main__":
    sys.exit(main())
