"""``deepedge ekya``: the Ekya edge server run live on Ray over drifting streams.

Each window's outcome is shown on stderr as it ends (the progress helper); the result is a
table per window and stream (``-o wide``: the micro-profiler's estimates too), or the whole
document with ``-o json|yaml``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import typer

from deepedge.cli import render
from deepedge.cli.app import RayAddress, app, run_guarded
from deepedge.cli.progress import progress
from deepedge.cli.render import Column, Output, OutputFormat
from deepedge.cli.update import WORKLOAD_HELP
from deepedge.core.errors import InvalidInputError
from deepedge.planning.window import SchedulerOptions, window_scheduler
from deepedge.planning.window.documents import SchedulerKind


@app.command("ekya")
def ekya(
    streams: int = typer.Option(3, help="video streams (drifting digit streams)"),
    windows: int = typer.Option(3, help="retraining windows to run"),
    gpus: float = typer.Option(1.0, help="G: GPUs (CPU share of the host without CUDA)"),
    window_s: float = typer.Option(20.0, help="T: retraining window the scheduler plans for"),
    samples: int = typer.Option(400, help="labelled images per stream and window"),
    scheduler: SchedulerKind = typer.Option(SchedulerKind.THIEF, help="thief or uniform"),
    uniform_config: str = typer.Option("e4-f100-z0", help="uniform: retraining config"),
    inference_share: float = typer.Option(0.5, help="uniform: inference share of a stream"),
    seed: int = typer.Option(0),
    workload: str | None = typer.Option(
        None, help=f"{WORKLOAD_HELP}; every stream reads its windows (default: drifting digits)"
    ),
    address: RayAddress = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Run the edge server live: per window, micro-profile, plan, retrain, hot-load; print
    what each window did."""

    def go() -> dict[str, Any]:
        from deepedge.runtime.edge.edge_windows import EdgeRunSpec, default_candidates, run_local
        from deepedge.workload.resolve import load_workload

        loaded = load_workload(workload) if workload is not None else None
        if loaded is not None:
            loaded.require_windows(windows + 1, " (window 0 trains the first model)")

        if scheduler is SchedulerKind.ORACLE:
            raise InvalidInputError("the live server runs thief or uniform", field="scheduler")
        if scheduler is SchedulerKind.UNIFORM:
            names = [c.name for c in default_candidates()]
            if uniform_config not in names:
                raise InvalidInputError(
                    f"--uniform-config {uniform_config} is not one of {', '.join(names)}",
                    field="uniform_config",
                )
        policy = window_scheduler(
            scheduler,
            SchedulerOptions(uniform_config=uniform_config, inference_share=inference_share),
        )
        spec = EdgeRunSpec(
            streams=streams,
            windows=windows,
            gpus=gpus,
            window_s=window_s,
            samples=samples,
            # A fixed-configuration policy must always be offered its configuration.
            prune=scheduler is SchedulerKind.THIEF,
            seed=seed,
        )
        with progress("ekya", total=windows, unit="windows") as bar:
            bar.update(note="starting Ray, training the first models")

            def ended(report: Any) -> None:
                retrained = [s.retrained for s in report.streams if s.retrained]
                mean = sum(s.accuracy_after for s in report.streams) / len(report.streams)
                bar.update(
                    done=report.index,
                    note=f"window {report.index}: {len(retrained)} of {len(report.streams)} "
                    f"streams retrained, mean accuracy {mean:.3f}",
                )

            reports = run_local(spec, policy, address=address, workload=loaded, on_window=ended)
        return {"scheduler": scheduler.value, "windows": [dataclasses.asdict(r) for r in reports]}

    document = run_guarded(go)
    rows = [{"window": w["index"], **s} for w in document["windows"] for s in w["streams"]]
    render.emit_list(document, rows, STREAM_COLUMNS, output, "no windows ran")


STREAM_COLUMNS = [
    Column("window", lambda r: r["window"], right=True),
    Column("stream", lambda r: r["stream_id"]),
    Column("drift", lambda r: f"{r['severity']:.2f}", right=True),
    Column("before", lambda r: render.percent(r["accuracy_before"]), right=True),
    Column("after", lambda r: render.percent(r["accuracy_after"]), right=True),
    Column("retrained", lambda r: _retrained(r)),
    Column("estimate", lambda r: render.percent(r["estimated_accuracy"]), right=True),
    Column("measured", lambda r: render.percent(r["validation_accuracy"]), right=True),
    Column(
        "deployed",
        lambda r: render.percent(r.get("deployed_validation_accuracy")),
        wide=True,
        right=True,
    ),
    Column("profiled", lambda r: r["configs_profiled"], wide=True, right=True),
    Column("profiling", lambda r: render.duration(r["profiling_s"]), wide=True, right=True),
]


def _retrained(row: dict[str, Any]) -> str:
    """The configuration retrained with, and whether the gate let it serve."""
    if not row["retrained"]:
        return "no retraining"
    if row.get("hot_loaded") is False:
        return f"{row['retrained']} (kept the deployed model: gate)"
    return str(row["retrained"])
