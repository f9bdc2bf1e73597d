"""MVSP benchmark: ``python -m deepedge.bench.placement [--quick] [--out DIR]``.

1. The paper's numerical study on generated P1/P2 instances (exact MILP): Table III
   (average latency and cost at E(r) = 5.5, 22, 33, K = 2), latency vs. K = 1..4 at low and
   high load, latency/cost/utilisation vs. load (C^e = 5 GB as in the paper), and the alpha
   trade-off at E(r) = 27.5. One PNG per study in ``--out``.
2. Exactness and speed: P1 and P2 solved to proven optimality (wall time of the whole
   ``milp`` method: heuristic warm start + HiGHS).
3. Medium (50 sources, 15 nodes, 5 x 8 variants): heuristic + warm-started MILP within 60 s,
   with HiGHS's proven gap.
4. Scale (2,000 sources, 200 nodes, 10 x 8 variants): heuristic wall and CPU time, its gap
   to the best proven bound (Lagrangian, ``planning/placement/bound.py``), and its objective
   against a cold single-thread MILP's best solution after ``--milp-limit`` s (300 by default).
   ``scale_vs_milp`` is heuristic / MILP objective; it is ``nan`` when the MILP holds no
   feasible solution at its limit (no ratio exists).
5. Small random instances (``placement_scenarios.random_small``, seeds from 15,000, drawn
   until 200 are proven optimal by the MILP; 10 with ``--quick``): the heuristic's gap to
   the optimum, ``heuristic / optimum - 1`` (``inf`` where it routes nothing though the
   MILP found a solution), mean and max.

Every solution is re-checked by the independent checker. ``--quick`` shrinks sweeps (Table
III at E(r) = 5.5 only, the exactness runs' own instances, reused; one load and one alpha),
time limits and the scale instance so that the run ends in well under a minute (the test
suite's smoke run: its figures say nothing about the targets).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.core.errors import InfeasibleError
from deepedge.planning.placement import milp, plan_placement
from deepedge.planning.placement.check import check_solution
from deepedge.planning.placement.heuristic import solve_heuristic
from deepedge.planning.placement.instance import index_problem
from deepedge.planning.placement.model import Method, PlacementSolution, SolveStatus
from deepedge.planning.placement.policies import lower_bound
from deepedge.planning.placement.solution import build_solution, evaluate
from deepedge.sim.placement_scenarios import (
    MEDIUM,
    P1,
    P2,
    SCALE,
    SMALL_SEED_BASE,
    ScenarioSpec,
    generate,
    random_small,
)


@dataclass(frozen=True)
class Run:
    label: str
    solution: PlacementSolution | None
    wall_s: float
    cpu_s: float = math.nan  # CPU time of this process (all its threads)

    @property
    def latency(self) -> float:
        return (
            self.solution.avg_latency_ms
            if self.solution and self.solution.avg_latency_ms
            else math.nan
        )

    @property
    def cost(self) -> float:
        return (
            self.solution.avg_cost
            if self.solution and self.solution.avg_cost is not None
            else math.nan
        )

    @property
    def utilisation(self) -> float:
        if not self.solution or not self.solution.nodes:
            return math.nan
        return sum(n.utilisation for n in self.solution.nodes) / len(self.solution.nodes)

    @property
    def status(self) -> str:
        return self.solution.status.value if self.solution else "infeasible"


def solve(spec: ScenarioSpec, method: Method, time_limit_s: float, label: str = "") -> Run:
    problem = generate(spec)
    start, cpu = time.perf_counter(), time.process_time()
    try:
        sol = plan_placement(problem, method, time_limit_s)
    except InfeasibleError:
        return Run(label or spec.name, None, time.perf_counter() - start)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    if sol.routes:
        report = check_solution(problem, sol)
        if not report.ok:
            raise AssertionError(f"{spec.name}: checker rejected: {report.violations[:3]}")
    return Run(label or spec.name, sol, wall, cpu)


def _plot(path: Path, xs: Sequence[float], series: dict[str, list[float]], xlabel: str,
          title: str, right: dict[str, list[float]] | None = None) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, ys in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("average latency (ms)")
    ax.set_title(title)
    lines, labels = ax.get_legend_handles_labels()
    if right:
        ax2 = ax.twinx()
        for (name, ys), colour in zip(right.items(), ("tab:red", "tab:green"), strict=False):
            ax2.plot(xs, ys, marker="s", linestyle="--", label=name, color=colour)
        ax2.set_ylabel("average cost / utilisation")
        l2, lb2 = ax2.get_legend_handles_labels()
        lines, labels = lines + l2, labels + lb2
    ax.legend(lines, labels, loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def paper_study(
    out: Path, quick: bool, limit_s: float, solved: dict[ScenarioSpec, Run] | None = None
) -> dict[str, float]:
    """The paper's study; ``solved``: runs of instances already solved (reused, not re-run)."""
    known = solved or {}
    rates = [5.5] if quick else [5.5, 22.0, 33.0]
    rows = []
    for base in (P1, P2):
        for rate in rates:
            spec = replace(base, mean_rate_rps=rate)
            r = known.get(spec) or solve(spec, Method.MILP, limit_s)
            rows.append([base.name, rate, r.status, round(r.latency, 3), round(r.cost, 5),
                         round(r.wall_s, 2)])  # fmt: skip
    print("Table III (K=2, alpha=0.1, alpha_mv=0.1, C^e=8 GB)")
    print(table(["problem", "E(r)", "status", "latency ms", "cost", "wall s"], rows))
    ks = [1, 4] if quick else [1, 2, 3, 4]
    k_lat: dict[str, list[float]] = {}
    # E(r) <= 33 never saturates a TITAN X-class instance here, so "high" is E(r) = 99
    for name, rate in (("low load E(r)=5.5", 5.5), (HIGH, 99.0)):
        k_lat[name] = [
            solve(replace(P1, mean_rate_rps=rate, max_colocated=k), Method.MILP, limit_s).latency
            for k in ks
        ]
    print("\nP1 average latency (ms) vs. K")
    print(table(["load", *[f"K={k}" for k in ks]],
                [[n, *[round(v, 3) for v in vs]] for n, vs in k_lat.items()]))  # fmt: skip
    _plot(out / "placement_colocation.png", ks, k_lat, "max co-located instances K",
          "P1: latency vs. co-location")  # fmt: skip
    low, high = k_lat["low load E(r)=5.5"], k_lat[HIGH]
    loads = [5.5] if quick else [5.5, 11.0, 22.0, 33.0, 66.0, 99.0, 132.0]
    runs = [
        solve(replace(P1, mean_rate_rps=x, node_memory_mb=5120.0), Method.MILP, limit_s)
        for x in loads
    ]
    print("\nP1 (C^e = 5 GB) vs. load")
    print(table(["E(r)", "status", "latency ms", "cost", "utilisation"],
                [[x, r.status, round(r.latency, 3), round(r.cost, 5), round(r.utilisation, 4)]
                 for x, r in zip(loads, runs, strict=True)]))  # fmt: skip
    _plot(out / "placement_load.png", loads, {"latency": [r.latency for r in runs]},
          "mean request rate per source E(r) (req/s)", "P1: impact of load",
          right={"cost": [r.cost for r in runs],
                 "utilisation": [r.utilisation for r in runs]})  # fmt: skip
    alphas = [0.2] if quick else [0.0, 0.01, 0.02, 0.04, 0.06, 0.1, 0.2, 0.5]
    runs = [
        solve(replace(P1, mean_rate_rps=27.5, latency_weight=a), Method.MILP, limit_s)
        for a in alphas
    ]
    print("\nP1 trade-off (E(r) = 27.5)")
    print(table(["alpha", "status", "latency ms", "cost", "utilisation"],
                [[a, r.status, round(r.latency, 3), round(r.cost, 5), round(r.utilisation, 4)]
                 for a, r in zip(alphas, runs, strict=True)]))  # fmt: skip
    _plot(out / "placement_tradeoff.png", alphas, {"latency": [r.latency for r in runs]},
          "weight of latency alpha", "P1: latency/cost trade-off",
          right={"cost": [r.cost for r in runs]})  # fmt: skip
    return {
        "k_latency_drop_low": (low[0] - low[-1]) / low[0],
        "k_latency_drop_high": (high[0] - high[-1]) / high[0],
    }


HIGH = "high load E(r)=99"


def exactness(limit_s: float, solved: dict[ScenarioSpec, Run] | None = None) -> dict[str, float]:
    """P1 and P2 solved to proven optimality; each run is also put in ``solved`` if given."""
    out = {}
    rows = []
    for spec in (P1, P2):
        r = solve(spec, Method.MILP, limit_s)
        if solved is not None:
            solved[spec] = r
        sol = r.solution
        assert sol is not None
        rows.append([spec.name, sol.status.value, sol.objective, sol.bound, sol.gap,
                     round(r.wall_s, 3), round(r.cpu_s, 3),
                     sol.solver.time_s if sol.solver else None])  # fmt: skip
        out[f"{spec.name.lower()}_s"] = r.wall_s if sol.status == SolveStatus.OPTIMAL else math.inf
    print("\nExactness (E(r)=5.5, K=2): proven optimal?")
    print(table(["problem", "status", "objective", "bound", "gap", "wall s", "cpu s", "HiGHS s"],
                rows))  # fmt: skip
    return out


def medium(spec: ScenarioSpec, budget_s: float) -> dict[str, float]:
    problem = generate(spec)
    start, cpu = time.perf_counter(), time.process_time()
    inst = index_problem(problem)
    heur = solve_heuristic(inst)
    t_heur = time.perf_counter() - start
    res = milp.solve(inst, time_limit_s=max(1.0, budget_s - t_heur),
                               warm_start=heur.assignment)  # fmt: skip
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert res.assignment is not None
    sol = build_solution(inst, res.assignment, method=Method.MILP, status=res.status,
                         bound=res.bound, solver=res.report)  # fmt: skip
    assert check_solution(problem, sol).ok
    h_obj = evaluate(inst, heur.assignment).objective if heur.assignment is not None else math.nan
    print(f"\nMedium {spec.n_sources} sources, {spec.n_nodes} nodes, {spec.n_models} models")
    print(table(["heuristic obj", "heuristic s", "MILP obj", "bound", "gap", "status", "wall s",
                 "cpu s"],
                [[h_obj, round(t_heur, 2), sol.objective, sol.bound, sol.gap, sol.status.value,
                  round(wall, 2), round(cpu, 2)]]))  # fmt: skip
    return {"medium_gap": sol.gap if sol.gap is not None else math.inf}


HEURISTIC_DEADLINE_S = 25.0  # wall-clock guard of the scale heuristic (target: 30 s)


def scale(spec: ScenarioSpec, milp_s: float) -> dict[str, float]:
    problem = generate(spec)
    start, cpu = time.perf_counter(), time.process_time()
    inst = index_problem(problem)
    # the local search stops at a wall-clock deadline (a guard for loaded machines; on a
    # quiet one it ends by its own effort limit well before)
    deadline = start + HEURISTIC_DEADLINE_S
    heur = solve_heuristic(inst, stop=lambda: time.perf_counter() > deadline)
    t_heur, cpu_heur = time.perf_counter() - start, time.process_time() - cpu
    assert heur.assignment is not None, "heuristic left demands unrouted"
    sol = build_solution(inst, heur.assignment, method=Method.HEURISTIC,
                         status=SolveStatus.FEASIBLE, bound=None)  # fmt: skip
    assert check_solution(problem, sol).ok
    h_obj = float(sol.objective or math.nan)
    t0, cpu = time.perf_counter(), time.process_time()
    bound, kind = lower_bound(inst, milp_s, target=h_obj)
    t_bound, cpu_bound = time.perf_counter() - t0, time.process_time() - cpu
    t0, cpu = time.perf_counter(), time.process_time()
    cold = milp.solve(inst, time_limit_s=milp_s, threads=1)
    t_milp, cpu_milp = time.perf_counter() - t0, time.process_time() - cpu
    if cold.assignment is not None:
        msol = build_solution(inst, cold.assignment, method=Method.MILP, status=cold.status,
                              bound=cold.bound)  # fmt: skip
        assert check_solution(problem, msol).ok
    best_bound = max(bound, cold.bound or -math.inf)
    by_milp = cold.bound is not None and cold.bound >= bound
    kind_text = "HiGHS MILP bound" if by_milp else kind.value
    print(f"\nScale {spec.n_sources} sources, {spec.n_nodes} nodes, {spec.n_models} models "
          f"({inst.n_demands} demands, {inst.c_demand.size} candidate routes)")  # fmt: skip
    print(table(
        ["heuristic obj", "wall s", "cpu s", "passes", "deadline hit", "bound", "bound kind",
         "bound wall s", "bound cpu s", "gap"],
        [[h_obj, round(t_heur, 2), round(cpu_heur, 2), heur.passes, heur.stopped, best_bound,
          kind_text, round(t_bound, 1), round(cpu_bound, 1),
          round((h_obj - best_bound) / h_obj, 5)]],
    ))  # fmt: skip
    print(table(
        ["cold MILP limit s", "MILP obj", "HiGHS status", "HiGHS bound", "HiGHS s", "wall s",
         "cpu s", "heuristic/MILP"],
        [[milp_s, cold.objective if cold.objective is not None else "none",
          cold.report.model_status, cold.bound, round(cold.report.time_s or 0.0, 1),
          round(t_milp, 1), round(cpu_milp, 1),
          h_obj / cold.objective if cold.objective is not None else "n/a (no incumbent)"]],
    ))  # fmt: skip
    return {
        "scale_s": t_heur,
        # heuristic / the cold MILP's best objective; nan when the MILP found no feasible
        # solution within its limit (no ratio exists; see docs/BENCHMARKS.md)
        "scale_vs_milp": h_obj / cold.objective if cold.objective is not None else math.nan,
        "scale_gap": (h_obj - best_bound) / h_obj,
    }


def small_gaps(count: int, seed_base: int = SMALL_SEED_BASE) -> dict[str, float]:
    """Heuristic vs. the proven optimum on ``count`` random small instances.

    Seeds are drawn in order from ``seed_base``; an instance counts only once the MILP
    proves it optimal (those it proves infeasible, or where some demand has no route at
    all, are skipped and counted). The heuristic without its LNS is printed beside it.
    """
    gaps: dict[str, list[float]] = {"heuristic": [], "without LNS": []}
    cpu = {"heuristic": 0.0, "without LNS": 0.0, "MILP": 0.0}
    skipped = 0
    seed = seed_base
    worst = ("", 0.0)
    while len(gaps["heuristic"]) < count:
        spec = random_small(seed)
        seed += 1
        inst = index_problem(generate(spec))
        if inst.n_demands == 0 or np.bincount(inst.c_demand, minlength=inst.n_demands).min() == 0:
            skipped += 1
            continue
        t0 = time.process_time()
        exact = milp.solve(inst, time_limit_s=60.0, mip_rel_gap=1e-6)
        cpu["MILP"] += time.process_time() - t0
        if exact.status != SolveStatus.OPTIMAL or exact.objective is None:
            skipped += 1
            continue
        for label, budget in (("heuristic", 400), ("without LNS", 0)):
            t0 = time.process_time()
            heur = solve_heuristic(inst, lns_subproblems=budget)
            cpu[label] += time.process_time() - t0
            gap = math.inf
            if heur.assignment is not None:
                sol = build_solution(inst, heur.assignment, method=Method.HEURISTIC,
                                     status=SolveStatus.FEASIBLE, bound=None)  # fmt: skip
                assert check_solution(inst.problem, sol).ok
                gap = float(sol.objective or math.nan) / exact.objective - 1.0
            gaps[label].append(gap)
            if label == "heuristic" and gap >= worst[1]:
                worst = (spec.name, gap)
    print(f"\nSmall random instances: {count} proven optimal (seeds {seed_base}-{seed - 1}, "
          f"{skipped} skipped: infeasible or a demand without any route)")  # fmt: skip
    rows = []
    for label, values in gaps.items():
        arr = np.array(values)
        finite = arr[np.isfinite(arr)]
        rows.append([label, float(arr.mean()), float(np.median(arr)), float(arr.max()),
                     float(finite.max()) if finite.size else math.nan,
                     int((~np.isfinite(arr)).sum()), int((arr > 0.01).sum()),
                     int((arr <= 1e-6).sum()), round(cpu[label], 2)])  # fmt: skip
    print(table(["heuristic", "gap mean", "median", "max", "max routed", "unrouted", "> 1 %",
                 "exact", "CPU s"], rows))  # fmt: skip
    print(f"MILP CPU s {cpu['MILP']:.2f}; worst heuristic instance {worst[0]}")
    arr = np.array(gaps["heuristic"])
    return {"heuristic_gap_mean": float(arr.mean()), "heuristic_gap_max": float(arr.max())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sweeps and limits")
    parser.add_argument("--out", type=Path, default=Path("bench-out/placement"))
    parser.add_argument(
        "--milp-limit",
        type=float,
        default=None,
        help="time limit (s) of the cold scale MILP (default 300, quick 3)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine_description()}")
    results: dict[str, float] = {}
    solved: dict[ScenarioSpec, Run] = {}
    results.update(exactness(limit_s=30.0 if args.quick else 60.0, solved=solved))
    limit_s = 10.0 if args.quick else 60.0
    results.update(paper_study(args.out, args.quick, limit_s, solved if args.quick else None))
    if args.quick:
        results.update(medium(replace(MEDIUM, n_sources=15, n_nodes=6), budget_s=5.0))
        small = replace(SCALE, name="scale-quick", n_sources=80, n_nodes=12)
        results.update(scale(small, milp_s=args.milp_limit or 3.0))
    else:
        results.update(medium(MEDIUM, budget_s=60.0))
        results.update(scale(SCALE, milp_s=args.milp_limit or 300.0))
    results.update(small_gaps(10 if args.quick else 200))
    keys = ["p1_s", "p2_s", "k_latency_drop_low", "k_latency_drop_high", "medium_gap",
            "scale_s", "scale_vs_milp", "scale_gap", "heuristic_gap_mean",
            "heuristic_gap_max"]  # fmt: skip
    print(result_line({k: results[k] for k in keys}))


if __name__ == "__main__":
    main()
