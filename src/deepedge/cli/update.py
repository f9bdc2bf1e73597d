"""``deepedge update --workload FILE --cluster FILE``: one model update of a user's workload.

On a real Ray cluster with agents (``--address HEAD`` and no ``--cluster``) the cluster is
built from the agents' latest reports, the plan uses the learned models of ``--models``
per device type (else the catalog), and the workers run on their nodes, unpaced
(docs/CLUSTER.md).

Checks the workload (a bad one exits 2 naming the field, before Ray starts), reads and
labels one window of its data, plans the cluster with Deep-Edge and retrains on the
emulated cluster with the asynchronous parameter server, with the workload's ``training``
section; writes ``model.pt`` (the whole model: a ``state_dict`` for an entry point, a
TorchScript archive for a TorchScript model) and ``update.json`` to ``--out``. Progress
(starting Ray, the plan, each epoch's accuracy) goes to stderr as it happens; the result to
stdout: a summary for people, or the ``update.json`` document with ``-o json|yaml``.

``--weights`` warm-starts from a model trained elsewhere: a ``torch.save`` of its
``state_dict`` (parameters and buffers), a TorchScript archive, or a flat ``.npy``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from deepedge.cli import render
from deepedge.cli.app import RayAddress, app, check_number, load_document, run_guarded
from deepedge.cli.progress import Progress, progress
from deepedge.cli.render import Output, OutputFormat
from deepedge.core.errors import InvalidInputError

WORKLOAD_HELP = "workload document (docs/schemas/workload.schema.json) or a bundled name"


@app.command("update")
def update(
    workload: str = typer.Option(..., help=WORKLOAD_HELP),
    cluster: Path | None = typer.Option(
        None,
        help="cluster JSON (docs/schemas/shard-cluster.schema.json); "
        "default with --address: the agents' reports",
    ),
    out: Path = typer.Option(Path("runs/update"), "--out", help="folder for the model and report"),
    window: int | None = typer.Option(None, min=0, help="window to train on (default: last)"),
    weights: Path | None = typer.Option(
        None,
        help="start from this model: a torch.save state_dict, a TorchScript archive or a flat .npy",
    ),
    max_epochs: int | None = typer.Option(
        None, min=1, help="stop after this many epochs at most (default: training.max_epochs)"
    ),
    time_scale: float = typer.Option(0.0, help="emulated device pacing (0: host speed)"),
    estimate_noise: float = typer.Option(0.05, help="relative error of the planner's estimates"),
    cpus: int = typer.Option(2, min=1, help="CPUs of the embedded Ray (not sent when connecting)"),
    address: RayAddress = None,
    ps_node: str | None = typer.Option(
        None, "--ps-node", help="live cluster: the node that hosts the PS (default: least loaded)"
    ),
    models: Path | None = typer.Option(
        None, "--models", help="live cluster: learned models, one sub-directory per device type"
    ),
    output: Output = OutputFormat.TABLE,
) -> None:
    """Retrain the workload's model once on a cluster and print what happened."""

    def go() -> dict[str, Any]:
        from deepedge.planning.sharding.spec import ClusterSpec
        from deepedge.runtime.cluster.session import cluster_address
        from deepedge.workload.resolve import load_workload

        check_number(time_scale, "--time-scale", ge=0.0, le=1.0)
        check_number(estimate_noise, "--estimate-noise", ge=0.0, le=1.0)
        on_live = cluster is None
        if on_live and cluster_address(address) is None:
            raise InvalidInputError(
                "give --cluster, or --address of a Ray cluster whose devices run agents",
                field="cluster",
            )
        if on_live and time_scale != 0:
            raise InvalidInputError(
                "a live cluster is never paced: drop --time-scale", "time_scale"
            )
        spec = None if cluster is None else load_document(cluster, ClusterSpec)
        with progress("update", total=max_epochs, unit="epochs") as bar:
            bar.update(note="loading the workload")
            loaded = load_workload(workload)
            summary = _run(bar, loaded, spec, on_live)
        summary["devices"] = (
            "live cluster (measured, unpaced)" if on_live
            else f"emulated, paced x{time_scale:g}" if time_scale > 0
            else "emulated testbed at this host's speed (unpaced)"
        )  # fmt: skip
        return summary

    def _run(bar: Progress, loaded: Any, spec: Any, on_live: bool) -> dict[str, Any]:
        from deepedge.learning.model_state import buffer_arrays, load_model_file
        from deepedge.learning.models import get_flat_weights
        from deepedge.runtime.cluster.session import ray_session
        from deepedge.runtime.training.workload_update import (
            save_update,
            training_config,
            update_workload,
        )

        start = buffers = None
        if weights is not None:
            try:
                model = load_model_file(loaded.model_factory(), weights)
            except InvalidInputError as exc:
                message = exc.message.removeprefix("weights: ")
                raise InvalidInputError(f"--weights: {message}", field="weights") from exc
            start, buffers = get_flat_weights(model), buffer_arrays(model)
        config = training_config(loaded, max_epochs=max_epochs, time_scale=time_scale)
        bar.update(total=config.stopping.max_epochs, note="starting Ray")
        with ray_session(cpus, address):
            live = None
            if on_live:
                from deepedge.runtime.cluster.live_cluster import LiveCluster

                live = LiveCluster(ps_node=ps_node)
            result = update_workload(
                loaded,
                spec,
                out / "checkpoints",
                window=window,
                initial_weights=start,
                initial_buffers=buffers,
                config=config,
                estimate_noise=estimate_noise,
                on_event=lambda event: show_event(bar, event),
                live=live,
                models_root=models,
            )
        bar.update(note="saving the model")
        return save_update(result, loaded, out)

    summary = run_guarded(go)
    render.emit(summary, output, lambda wide: render_summary(summary, out, wide))


def show_event(bar: Progress, event: Any) -> None:
    """An update's status note on the progress bar: epochs move it, the rest is its note."""
    data = getattr(event, "data", {})
    if "epoch" in data and "accuracy" in data:
        bar.update(
            done=data["epoch"],
            note=f"epoch {data['epoch']}: accuracy {data['accuracy']:.3f}",
        )
    else:
        bar.update(note=str(getattr(event, "message", "")))


def render_summary(summary: dict[str, Any], out: Path, wide: bool) -> str:
    """What the update did, in a few lines (``-o json`` prints all of update.json)."""
    accuracies = summary["validation_accuracies"]
    selected = [w for w in summary["plan"]["workers"] if w.get("selected")]
    head = render.fields(
        [
            ("workload", f"{summary['workload']}, window {summary['window']} "
             f"({summary['train_size']} training, {summary['validation_size']} held out)"),
            (summary["metric"], f"{summary['metric_before']:.3f} -> {summary['metric_after']:.3f}"),
            ("epochs", f"{len(accuracies)} ({summary['stop_reason'].replace('_', ' ')}; best "
             f"{summary['best_epoch']})"),
            ("restarts", summary["restarts"]),
            ("excluded", summary["excluded"]),
            ("workers", ", ".join(f"{w['id']} ({w['shard']} samples, batch {w['batch_size']})"
                                  for w in selected)),
            ("trainable", f"{summary['trainable_parameters']:,} of {summary['parameters']:,} "
             "parameters"),
            ("devices", summary.get("devices")),
            ("written", f"{out}/model.pt ({summary['model_file']['format']}), update.json"),
            ("warnings", "; ".join(summary.get("warnings", [])) or None),
        ]
    )  # fmt: skip
    if not wide:
        return head
    epochs = "\n".join(f"  {i}: {a:.4f}" for i, a in enumerate(accuracies, 1))
    return head + "\nvalidation accuracy per epoch:\n" + epochs
