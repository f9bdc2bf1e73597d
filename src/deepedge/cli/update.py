"""``deepedge update --workload FILE --cluster FILE``: one model update of a user's workload.

On a real Ray cluster with agents (``--address HEAD`` and no ``--cluster``) the cluster is
built from the agents' latest reports, the plan uses the learned models of ``--models``
per device type (else the catalog), and the workers run on their nodes, unpaced
(docs/CLUSTER.md).

Checks the workload (a bad one exits 2 naming the field, before Ray starts), reads and
labels one window of its data, plans the cluster with Deep-Edge and retrains on the
emulated cluster with the asynchronous parameter server, with the workload's ``training``
section; writes ``model.pt`` (the whole model: a ``state_dict`` for an entry point, a
TorchScript archive for a TorchScript model) and ``update.json`` to ``--output`` and prints
the summary as JSON.

``--weights`` warm-starts from a model trained elsewhere: a ``torch.save`` of its
``state_dict`` (parameters and buffers), a TorchScript archive, or a flat ``.npy``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from deepedge.cli.app import RayAddress, app, check_number, echo_json, load_document, run_guarded
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
    output: Path = typer.Option(Path("runs/update"), help="folder for weights and report"),
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
) -> None:
    """Retrain the workload's model once on a cluster and print what happened (JSON)."""

    def go() -> None:
        from deepedge.learning.model_state import buffer_arrays, load_model_file
        from deepedge.learning.models import get_flat_weights
        from deepedge.planning.sharding.spec import ClusterSpec
        from deepedge.runtime.session import cluster_address, ray_session
        from deepedge.runtime.workload_update import save_update, training_config, update_workload
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
        loaded = load_workload(workload)
        start = buffers = None
        if weights is not None:
            try:
                model = load_model_file(loaded.model_factory(), weights)
            except InvalidInputError as exc:
                message = exc.message.removeprefix("weights: ")
                raise InvalidInputError(f"--weights: {message}", field="weights") from exc
            start, buffers = get_flat_weights(model), buffer_arrays(model)
        config = training_config(loaded, max_epochs=max_epochs, time_scale=time_scale)
        with ray_session(cpus, address):
            live = None
            if on_live:
                from deepedge.runtime.live_cluster import LiveCluster

                live = LiveCluster(ps_node=ps_node)
            result = update_workload(
                loaded,
                spec,
                output / "checkpoints",
                window=window,
                initial_weights=start,
                initial_buffers=buffers,
                config=config,
                estimate_noise=estimate_noise,
                live=live,
                models_root=models,
            )
        echo_json(save_update(result, loaded, output))

    run_guarded(go)
