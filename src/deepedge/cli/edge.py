"""``deepedge ekya``: the Ekya edge server run live on Ray over drifting streams."""

from __future__ import annotations

import dataclasses

import typer

from deepedge.cli.app import RayAddress, app, echo_json, run_guarded
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
) -> None:
    """Run the edge server live: per window, micro-profile, plan, retrain, hot-load; print
    what each window did (JSON)."""

    def go() -> None:
        from deepedge.runtime.edge_windows import EdgeRunSpec, default_candidates, run_local
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
        reports = run_local(spec, policy, address=address, workload=loaded)
        echo_json(
            {"scheduler": scheduler.value, "windows": [dataclasses.asdict(r) for r in reports]}
        )

    run_guarded(go)
