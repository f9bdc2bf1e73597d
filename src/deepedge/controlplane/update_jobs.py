"""The jobs the control plane runs to update a deployment, and their results read back
as decisions.

* ``model-update`` (``update.policy: model-update``, target nodes): Deep-Edge across the
  deployment's testbed nodes; its plan becomes the window's ``allocation`` event (workers,
  shards, batches).
* ``ekya-window`` (``update.policy: ekya-window``, target edge-server): one Ekya window of
  the edge server shared by its deployments (submitted by
  :mod:`deepedge.controlplane.edge_server_window`); Thief's joint decision (inference and
  retraining configurations, their GPU shares, the re-plans) becomes each deployment's
  ``allocation`` event (:func:`ekya_allocation`).

A ``model-update`` job trains from the golden-labelled windows and the parent's model
that the control plane stages in the job's work folder (``TRAIN_FILE``, ``PARENT_FILE``: the
parent version's artifact, the whole model state) and leaves the whole trained model in
its results (``MODEL_FILE``; :func:`result_model` also finds the flat ``weights.npy``
of a job run by an older deepedge).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.records import Event, EventKind
from deepedge.service.records import HistoryEntry, JobRecord
from deepedge.service.update_executor import ExecutorChoice
from deepedge.service.workspace import JobDir

TRAIN_FILE, PARENT_FILE = "train.npz", "parent.pt"
MODEL_FILE, LEGACY_WEIGHTS_FILE = "model.pt", "weights.npy"
EDGE_MODELS_DIR = "weights"  # an edge server window's results/weights/<stream>.pt


MAX_MODEL_BYTES = 4 << 30


def job_ended(job: JobRecord, history: Sequence[HistoryEntry]) -> str:
    """How a job that ended without a result reads in a deployment's decisions: its id and
    status, then its error's message, else the cause recorded with that status (a halted
    job has no error: "halted by the user"), else nothing more."""
    why = job.error_message or next(
        (h.cause for h in reversed(history) if h.status is job.status and h.cause), None
    )
    return f"job {job.id} {job.status.value}" + (f": {why}" if why else "")


def result_model(job_dir: JobDir, stream: str | None = None) -> bytes | None:
    """The trained model a job left in its results (``stream``: one stream's of an edge
    server's window), whole (``.pt``) or a legacy flat vector (``.npy``); None if none.
    Read without following a symbolic link: tenant code wrote that folder."""
    candidates = [f"results/{MODEL_FILE}", f"results/{LEGACY_WEIGHTS_FILE}"]
    if stream is not None:
        own = [f"results/{EDGE_MODELS_DIR}/{stream}.pt", f"results/{EDGE_MODELS_DIR}/{stream}.npy"]
        candidates = own + candidates  # (a one-stream job leaves its model at the top)
    for relative in candidates:
        try:
            return job_dir.read_tenant_file(relative, MAX_MODEL_BYTES)
        except FileNotFoundError:
            continue
    return None


def read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def deep_edge_allocation(result: dict[str, Any]) -> list[dict[str, Any]]:
    plan = result.get("plan")
    if not isinstance(plan, dict):
        return []
    return [
        {"node": w.get("id"), "selected": bool(w.get("selected")), "shard": w.get("shard"),
         "batch": w.get("batch_size")}
        for w in plan.get("workers", [])
        if isinstance(w, dict)
    ]  # fmt: skip


def model_update_job(
    spec: DeploymentSpec, samples: int, nodes: list[str] | None = None
) -> dict[str, Any]:
    """The document of the ``model-update`` job that trains a version of a deployment on
    ``nodes`` (default: the target's) from the staged ``TRAIN_FILE`` and ``PARENT_FILE``
    (``samples`` to train on): the emulated testbed's, or, for a live target, the agents'
    of the service's cluster (the job plans from their reports, on the learned models of
    ``update.models_dir`` where they cover every device type, and pins its workers and PS
    to them). The job runs on the executor ``update.executor`` names (auto: threads of its
    learner, no Ray to start; Ray for a live target; :mod:`deepedge.service.update_executor`).
    An edge server's deployments are updated by its joint window instead
    (:mod:`deepedge.controlplane.edge_server_window`)."""
    # A user's workload gives the job its model (the staged data and weights are its own).
    workload = {} if spec.user_workload is None else {"workload": spec.user_workload}
    live: dict[str, Any] = {}
    if spec.target.live:
        live = {"live_cluster": True, "ps_node": spec.update.ps_node,
                "models_root": spec.update.models_dir}  # fmt: skip
    # auto (the job's own default) stays out: the documents of earlier jobs stay the same
    executor = spec.update.executor
    chosen = {} if executor is ExecutorChoice.AUTO else {"executor": executor.value}
    epochs, min_epochs = spec.update.epoch_bounds(spec.user_workload is not None)
    return {
        "dataset_size": samples,
        "epochs": epochs,
        "min_epochs": min_epochs,
        **({} if spec.user_workload is not None else {  # (a workload trains as it says)
            "lr": spec.update.learning_rate, "momentum": spec.update.momentum,
            "lr_schedule": spec.update.lr_schedule}),
        "time_scale": spec.update.time_scale,
        "seed": spec.stream.seed,
        "nodes": list(spec.target.nodes if nodes is None else nodes),
        "train_data": TRAIN_FILE,
        "initial_weights": PARENT_FILE,
        **workload,
        **live,
        **chosen,
    }


def update_phases(result: dict[str, Any]) -> dict[str, float]:
    """The seconds a ``model-update`` job's learner spent in each phase (``start``: its
    process to the training ready, Ray's start included where Ray runs it; ``plan``;
    ``train``; ``write``), as its result records them; empty for a result without them (a
    job of an older deepedge). Only finite numbers are kept: tenant code wrote the file."""
    phases = result.get("phases_s")
    if not isinstance(phases, dict):
        return {}
    return {
        str(name): float(seconds)
        for name, seconds in phases.items()
        if isinstance(seconds, int | float) and not isinstance(seconds, bool)
        and math.isfinite(seconds)
    }  # fmt: skip


def live_allocation_text(result: dict[str, Any]) -> str:
    """How a live update's decision reads: where it ran (by Ray's actor table) and which
    models planned it; empty for an update on the emulated testbed."""
    if not result.get("live"):
        return ""
    ran = result.get("workers_ran_on") or {}
    return (f" (live: workers ran on {', '.join(str(n) for n in ran.values())}, the parameter "
            f"server on {result.get('ps_node')}, by Ray's actor table; planned on the "
            f"{result.get('planned_on')} models)")  # fmt: skip


def stream_outcome(name: str, result: dict[str, Any]) -> dict[str, Any]:
    """Stream ``name``'s retraining outcome in an ``ekya-window`` job's result: an edge
    server's window has one per retraining stream (none: inference only); a one-stream
    window's is the result itself; any other job's result is its own outcome."""
    outcomes = result.get("streams")
    own = outcomes.get(name) if isinstance(outcomes, dict) else result
    return own if isinstance(own, dict) else {}


def ekya_allocation(
    name: str,
    server: str,
    number: int | None,
    window: int,
    job_id: str | None,
    result: dict[str, Any],
) -> Event | None:
    """The Ekya window's decision (an ``ekya-window`` job's result) for deployment ``name``'s
    stream on edge server ``server``, as the ``allocation`` event of its ``window``: the
    first plan's shares and configurations of every stream of the server (``streams``; the
    deployment's own is ``stream``), its own retraining outcome (None for an inference-only
    stream) and how many times the window was re-planned; ``number`` is the version it
    trained (or serves, inference only). None for another job's result or stream."""
    plans = result.get("plans")
    if not isinstance(plans, list) or not plans or not isinstance(plans[0], dict):
        return None
    scheduler = str(result.get("scheduler", "the scheduler"))
    first = plans[0]
    decision = next((d for d in first.get("streams", []) if d.get("stream_id") == name), None)
    if decision is None:
        return None
    own = stream_outcome(name, result)
    gpus = float(first.get("gpus", 0.0))
    retrained = own.get("retrained")
    streams = [
        {k: d.get(k) for k in ("stream_id", "inference_config", "inference_gpus",
                               "retraining_config", "retraining_gpus", "window_accuracy")}
        for d in first.get("streams", [])
    ]  # fmt: skip
    if not own:
        outcome = f"inference only beside {len(streams) - 1} retraining stream(s)"
    elif retrained and own.get("gate_passed") is False:
        outcome = (f"v{number} retrained but scored {own.get('validation_accuracy', 0.0):.3f} < "
                   f"{own.get('accuracy_before', 0.0):.3f} of the deployed model: not "
                   "hot-loaded (gate)")  # fmt: skip
    else:
        outcome = f"v{number} {'retrained' if retrained else 'not trained'}"
    return Event(
        EventKind.ALLOCATION,
        f"window {window}: {scheduler} gave {name} {decision['inference_gpus']:.2f} of {gpus:g} "
        f"GPU(s) of {server} for inference ({decision.get('inference_config')}) and "
        f"{decision['retraining_gpus']:.2f} for retraining "
        f"({retrained or 'no retraining'}); {outcome}",
        window=window,
        version=number,
        job_id=job_id,
        detail={
            "policy": "ekya-window",
            "scheduler": scheduler,
            "server": server,
            "gpus": gpus,
            "device": result.get("device"),
            "window_s": first.get("window_s"),
            "stream": name,
            "streams": streams,
            "allocated_gpus": sum(
                float(d.get("inference_gpus") or 0) + float(d.get("retraining_gpus") or 0)
                for d in streams
            ),
            "inference_only": not own,
            "replans": len(plans) - 1,
            "retrained": retrained,
            "estimated_accuracy": own.get("estimated_accuracy"),
            "validation_accuracy": own.get("validation_accuracy"),
            "estimate_error": own.get("estimate_error"),
            "gate_passed": own.get("gate_passed"),
            "accuracy_before": own.get("accuracy_before"),
            "configs": own.get("configs", []),
        },
    )
