"""``deepedge profile``, ``deepedge perfmodels fit`` and ``deepedge perfmodels report``.

* ``profile --out DIR [--quick]``: measure this host under stress (stress-ng, the SIFT app,
  the edge model's update task against a loopback parameter server) and write the dataset
  to DIR; progress and ETA go to stderr.
* ``perfmodels fit DIR``: sensitivity analysis + AutoML for every Deep-Edge function on DIR's
  dataset; models and their metadata go to DIR/models; prints the Table I-like report.
* ``perfmodels report DIR``: print the report of fitted models.

(The learned *performance* models of the planner; the deployments' model versions are the
``models`` group, :mod:`deepedge.cli.deployments`.)

Bad input (unreadable dataset, missing columns, too few rows, stress-ng asked for but not
installed) is one ``error:`` line and exit status 2.

torch, scikit-learn, FLAML and pandas are imported inside the commands that use them, so the
other ``deepedge`` commands start without loading them.
"""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import typer

from deepedge.cli.app import app, check_number, group, run_guarded
from deepedge.cli.progress import progress
from deepedge.cli.render import Output, OutputFormat, emit, table
from deepedge.cluster.metrics import CpuScope
from deepedge.core.errors import InvalidInputError, RunFailedError
from deepedge.perfmodel import MODELS_SUBDIR
from deepedge.perfmodel.fit_budget import DEFAULT_FIT, QUICK_FIT, FitBudget
from deepedge.profiling.stressors import StressBackend

if TYPE_CHECKING:
    from deepedge.perfmodel.fitted_model import ModelsMetadata
    from deepedge.profiling.profiler import Progress

perfmodels_app = group("perfmodels")


def _row_schema() -> dict[str, Any]:
    from deepedge.profiling.dataset import column_schema

    return column_schema()


def _provenance_schema() -> dict[str, Any]:
    from deepedge.profiling.dataset import Provenance

    return Provenance.model_json_schema()


def _metadata_schema() -> dict[str, Any]:
    from deepedge.perfmodel.fitted_model import ModelsMetadata

    return ModelsMetadata.model_json_schema()


SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "profile-row.schema.json": _row_schema,
    "profile-provenance.schema.json": _provenance_schema,
    "perfmodels-metadata.schema.json": _metadata_schema,
}


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


def progress_note(p: Progress) -> str:
    """The point just measured: its stress level and configuration."""
    s = p.point.stress
    return (
        f"cpu={s.cpu_load:g} mem={s.mem_mb}MB io={s.io_workers} gpu={s.gpu_duty:g} "
        f"b={p.point.batch_size} |W|={p.point.n_workers}"
    )


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def report_rows(metadata: ModelsMetadata) -> list[list[object]]:
    """Table I: device, function, points train/test, algorithm, MAPE mean +- std, floor."""
    rows: list[list[object]] = []
    for r in metadata.functions:
        floor = "-" if math.isnan(r.noise_floor) else f"{100 * r.noise_floor:.2f}"
        rows.append(
            [
                metadata.device,
                r.function.value,
                f"{r.n_train}/{r.n_test}",
                r.algorithm,
                f"{100 * r.mape_mean:.2f} +- {100 * r.mape_std:.2f}",
                floor,
                f"{100 * r.baseline_mape:.2f}",
                ", ".join(r.features),
            ]
        )
    return rows


REPORT_HEADERS = [
    "device",
    "function",
    "train/test",
    "algorithm",
    "MAPE % (held-out)",
    "noise floor %",
    "mean-predictor %",
    "features",
]


def importance_rows(metadata: ModelsMetadata) -> list[list[object]]:
    rows: list[list[object]] = []
    for r in metadata.functions:
        for fi in r.importances:
            rows.append(
                [
                    r.function.value,
                    fi.feature,
                    f"{fi.share:.3f}",
                    f"{fi.spearman_rho:+.2f}",
                    "yes" if fi.selected else "no",
                    fi.note,
                ]
            )
    return rows


IMPORTANCE_HEADERS = ["function", "feature", "importance", "spearman", "selected", "note"]


def render_report(metadata: ModelsMetadata) -> str:
    return "\n\n".join(
        [
            table(REPORT_HEADERS, report_rows(metadata)),
            "sensitivity analysis (permutation importance shares):",
            table(IMPORTANCE_HEADERS, importance_rows(metadata)),
        ]
    )


@app.command("profile")
def profile(
    out: Path = typer.Option(..., "--out", help="directory to write the dataset to"),
    quick: bool = typer.Option(False, "--quick", help="a sweep of well under a minute"),
    budget_s: float | None = typer.Option(None, "--budget-s", help="sweep time budget"),
    device: str | None = typer.Option(None, "--device", help="device type name (default: host)"),
    backend: StressBackend = typer.Option(StressBackend.AUTO, "--backend"),
    cpu_scope: CpuScope = typer.Option(
        CpuScope.SYSTEM, "--cpu-scope", help="tree: count only the profiled processes' CPU"
    ),
    fmt: str = typer.Option("parquet", "--format", help="parquet or csv"),
    seed: int = typer.Option(0, "--seed"),
    workload: str | None = typer.Option(
        None, "--workload", help="profile this workload's model on its first window"
    ),
) -> None:
    """Profile this host under stress and write the dataset (Deep-Edge Section IV-B1)."""

    def go() -> None:
        from deepedge.profiling.dataset import write_dataset
        from deepedge.profiling.profiler import (
            Profiler,
            SweepConfig,
            edge_workload,
            workload_profile,
        )

        if fmt not in {"parquet", "csv"}:
            raise InvalidInputError(f"--format must be parquet or csv, got {fmt!r}", "format")
        check_number(budget_s, "--budget-s", gt=0.0)
        try:  # fail before minutes of profiling, not after
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidInputError(f"cannot create {out}: {exc.strerror}", "out") from exc
        overrides: dict[str, Any] = {"backend": backend, "seed": seed, "cpu_scope": cpu_scope}
        if budget_s is not None:
            overrides["budget_s"] = budget_s
        if device:
            overrides["device"] = device
        cfg = replace(SweepConfig.quick() if quick else SweepConfig(), **overrides)
        task = edge_workload(seed=seed) if workload is None else workload_profile(workload)
        profiler = Profiler(cfg, task)
        typer.echo(
            f"profiling {cfg.device}: {len(profiler.points)} configurations x {cfg.repeats} "
            f"repeats, planned {_duration(profiler.planned_s)} (budget {_duration(cfg.budget_s)})",
            err=True,
        )
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            with progress("profile", total=len(profiler.points), unit="points") as bar:
                dataset = profiler.run(
                    lambda p: bar.update(p.done, p.total, progress_note(p), left_s=p.eta_s)
                )
        finally:
            signal.signal(signal.SIGTERM, previous)
        if dataset.frame.empty:
            if profiler.interrupted:
                raise KeyboardInterrupt
            raise RunFailedError("no configuration was measured within the time budget")
        path = write_dataset(dataset, out, fmt)
        typer.echo(f"wrote {len(dataset.frame)} rows to {path}")
        if profiler.interrupted:
            typer.echo(f"error: interrupted; {len(dataset.frame)} rows kept in {path}", err=True)
            raise typer.Exit(code=130)

    try:
        run_guarded(go)
    except KeyboardInterrupt:
        typer.echo("error: interrupted; every stressor was stopped", err=True)
        raise typer.Exit(code=130) from None


@perfmodels_app.command("fit")
def models_fit(
    directory: Path = typer.Argument(..., help="directory holding a profile dataset"),
    time_budget_s: float | None = typer.Option(None, "--time-budget-s", help="AutoML s/function"),
    quick: bool = typer.Option(False, "--quick", help=f"{QUICK_FIT.describe()} per target form"),
    seed: int = typer.Option(0, "--seed"),
    per_window: bool = typer.Option(
        False, "--per-window", help="data points are single windows, not configuration medians"
    ),
) -> None:
    """Fit the learned estimators on DIR's dataset and save them to DIR/models."""

    def go() -> None:
        from deepedge.perfmodel.fitted_model import DeviceModels
        from deepedge.perfmodel.fitting import fit_all
        from deepedge.profiling.dataset import read_dataset

        check_number(time_budget_s, "--time-budget-s", gt=0.0)
        budget = QUICK_FIT if quick else DEFAULT_FIT
        if time_budget_s is not None:
            budget = FitBudget(time_budget_s)
        spent = budget.describe()
        dataset = read_dataset(directory)
        with progress("fit", unit="functions") as bar:
            fitted = fit_all(
                dataset.frame,
                budget,
                seed,
                aggregate=not per_window,
                on_function=lambda k, n, name: bar.update(
                    done=k, total=n, note=f"{name} (AutoML, {spent})" if k < n else "done"
                ),
            )
        models = DeviceModels.build(fitted, dataset.provenance.model_dump(), budget, seed)
        models.save(directory / MODELS_SUBDIR)
        typer.echo(render_report(models.metadata))

    run_guarded(go)


@perfmodels_app.command("report")
def models_report(
    directory: Path = typer.Argument(..., help="directory of fitted models (or its parent)"),
    output: Output = OutputFormat.TABLE,
) -> None:
    """Print the Table I-like report of fitted models (one per device type)."""

    def go() -> list[Any]:
        from deepedge.perfmodel.fitted_model import load_performance_model

        model = load_performance_model(directory)
        return [models.metadata for models in model.devices.values()]

    reports = run_guarded(go)
    document: Any = (
        reports[0].model_dump(mode="json")
        if len(reports) == 1
        else [r.model_dump(mode="json") for r in reports]
    )
    emit(document, output, lambda wide: "\n\n".join(render_report(r) for r in reports))


def write_schemas(out_dir: Path) -> list[str]:
    """Write the JSON Schemas of the dataset row, its provenance and the models metadata."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, schema in SCHEMAS.items():
            (out_dir / name).write_text(json.dumps(schema(), indent=2) + "\n")
    except OSError as exc:
        raise InvalidInputError(f"cannot write to {out_dir}: {exc.strerror}") from exc
    return list(SCHEMAS)


@perfmodels_app.command("schemas")
def models_schemas(
    out_dir: Path = typer.Argument(Path("docs/schemas"), help="folder to write the schemas to"),
) -> None:
    """Write the JSON Schemas of the profile dataset and the models metadata."""

    def go() -> None:
        names = write_schemas(out_dir)
        typer.echo(f"wrote {', '.join(names)} to {out_dir}")

    run_guarded(go)
