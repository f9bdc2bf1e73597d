"""Benchmark: learned performance and interference models on this host's real measurements.

``python -m deepedge.bench.perfmodels [--quick] [--data DIR] [--out DIR] [--per-window]``

Profiles this host (the default sweep, or ``--quick``; or loads the dataset in ``--data``),
fits every Deep-Edge function with sensitivity analysis + AutoML, and prints the Table I-like
report: train/test points, chosen algorithm, held-out MAPE mean +- std, the noise floor
(repeat-measurement spread) and a mean predictor's MAPE. A data point is a configuration
(the median of its repeated windows), or with ``--per-window`` every window; the noise
floor is computed for the same kind of point. The last line is

    RESULT mape_mean=... mape_compute=... mape_exec=... noise_floor=...

with fractions (0.03 = 3 %): ``mape_mean`` averages the held-out MAPE of all learned
functions, ``noise_floor`` averages their noise floors.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from deepedge.bench.harness.report import machine_description, result_line
from deepedge.cli.profile import progress_note, render_report
from deepedge.cli.progress import progress
from deepedge.cluster.metrics import CpuScope
from deepedge.core.errors import DeepEdgeError
from deepedge.perfmodel import MODELS_SUBDIR
from deepedge.perfmodel.fit_budget import DEFAULT_FIT, QUICK_FIT, FitBudget
from deepedge.perfmodel.fitted_model import DeviceModels, ModelsMetadata
from deepedge.perfmodel.fitting import LearnedFunction, fit_all
from deepedge.profiling.dataset import ProfileDataset, read_dataset, write_dataset
from deepedge.profiling.profiler import Profiler, SweepConfig, edge_workload


def summary(metadata: ModelsMetadata) -> dict[str, float]:
    """The RESULT figures: mean held-out MAPE, compute, exec, mean noise floor."""

    def mape_of(function: LearnedFunction) -> float:
        report = metadata.report(function)
        return float("nan") if report is None else report.mape_mean

    floors = [r.noise_floor for r in metadata.functions if not math.isnan(r.noise_floor)]
    return {
        "mape_mean": float(np.mean([r.mape_mean for r in metadata.functions])),
        "mape_compute": mape_of(LearnedFunction.COMPUTE_TIME),
        "mape_exec": mape_of(LearnedFunction.EXEC_TIME),
        "noise_floor": float(np.mean(floors)) if floors else float("nan"),
    }


def _profile(
    out_dir: Path, quick: bool, seed: int, cpu_scope: CpuScope, cpu_load_slice_ms: int
) -> ProfileDataset:
    base = SweepConfig.quick() if quick else SweepConfig()
    cfg = replace(base, seed=seed, cpu_scope=cpu_scope, cpu_load_slice_ms=cpu_load_slice_ms)
    profiler = Profiler(cfg, edge_workload(seed=seed))
    print(
        f"profiling: {len(profiler.points)} configurations x {cfg.repeats} repeats, "
        f"budget {cfg.budget_s:.0f} s",
        file=sys.stderr,
    )
    with progress("profile", total=len(profiler.points), unit="points") as bar:
        dataset = profiler.run(
            lambda p: bar.update(p.done, p.total, progress_note(p), left_s=p.eta_s)
        )
    write_dataset(dataset, out_dir)
    return dataset


def run(
    data: Path | None,
    out: Path | None,
    quick: bool,
    budget_s: float | None,
    seed: int,
    cpu_scope: CpuScope = CpuScope.SYSTEM,
    aggregate: bool = True,
    cpu_load_slice_ms: int = 0,
) -> int:
    out_dir = out or Path(tempfile.mkdtemp(prefix="deepedge-perfmodels-"))
    started = time.perf_counter()
    dataset = (
        read_dataset(data)
        if data is not None
        else _profile(out_dir, quick, seed, cpu_scope, cpu_load_slice_ms)
    )
    profile_s = time.perf_counter() - started
    fit_budget = FitBudget(budget_s) if budget_s else (QUICK_FIT if quick else DEFAULT_FIT)
    fitted = fit_all(dataset.frame, fit_budget, seed, aggregate=aggregate)
    models = DeviceModels.build(fitted, dataset.provenance.model_dump(), fit_budget, seed)
    models.save(out_dir / MODELS_SUBDIR)
    fit_s = time.perf_counter() - started - profile_s
    p = dataset.provenance
    print(f"machine: {machine_description()}")
    print(
        f"dataset: {len(dataset.frame)} rows, {dataset.frame['config_id'].nunique()} "
        f"configurations, device {p.device}, measured {p.started_utc} for {p.duration_s:.0f} s, "
        f"stress backend {p.backend}, CPU state scope {p.cpu_scope}"
        f"{' (sweep truncated)' if p.truncated else ''}"
    )
    repeats = dataset.frame.groupby("config_id").size()
    print(
        "data points: "
        + (
            f"configurations, each the median of its {repeats.min()}-{repeats.max()} windows"
            if aggregate
            else "single windows"
        )
        + "; noise floor: an oracle's MAPE on such points (the repeats' spread)"
    )
    print(f"{'loaded' if data else 'profiled'} in {profile_s:.1f} s, fitted in {fit_s:.1f} s; "
          f"models in {out_dir / MODELS_SUBDIR}")  # fmt: skip
    print()
    print(render_report(models.metadata))
    print()
    print(result_line(summary(models.metadata)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.perfmodels")
    parser.add_argument("--quick", action="store_true", help="quick sweep and fit (< 60 s)")
    parser.add_argument("--data", type=Path, help="fit on this dataset instead of profiling")
    parser.add_argument("--out", type=Path, help="where the dataset and models are written")
    parser.add_argument("--time-budget-s", type=float, help="AutoML budget per function")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cpu-scope",
        choices=[s.value for s in CpuScope],
        default=CpuScope.SYSTEM.value,
        help="tree: node CPU counts only the profiled processes (host shared with other jobs)",
    )
    parser.add_argument(
        "--per-window",
        action="store_true",
        help="fit and score single windows instead of per-configuration medians",
    )
    parser.add_argument(
        "--cpu-load-slice-ms",
        type=int,
        default=0,
        help="stress-ng busy slice of the CPU stressor (0: its default, random 0-500 ms)",
    )
    args = parser.parse_args(argv)
    if args.cpu_load_slice_ms < 0:
        print("error: --cpu-load-slice-ms must be >= 0", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(
            args.data,
            args.out,
            args.quick,
            args.time_budget_s,
            args.seed,
            CpuScope(args.cpu_scope),
            aggregate=not args.per_window,
            cpu_load_slice_ms=args.cpu_load_slice_ms,
        )
    except DeepEdgeError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
