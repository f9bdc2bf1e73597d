"""The documents and runners of ``ekya-window`` jobs beyond the planner-only one.

* :class:`EkyaRunSpec`: the Ekya edge server run live on a workload's windows
  (:func:`deepedge.runtime.edge.edge_windows.run_local`: micro-profile, plan with Thief, retrain,
  hot-load); the result stores what each window did.
* :class:`EkyaRetrainSpec`: one retraining window of a deployment (the control plane's),
  from the data and parent weights staged in the job's work folder
  (:func:`deepedge.runtime.edge.edge_retraining.retrain_window`); the retrained model goes to
  ``results/model.pt``, whole (none when the scheduler chose not to retrain, or when the
  retrained model scored below the deployed one).
* :class:`EdgeWindowSpec`: one retraining window of an edge server shared by the
  deployments placed on it (what the control plane submits): every stream scheduled
  together (:func:`deepedge.runtime.edge.edge_retraining.retrain_joint_window`); a retrained
  stream's model goes to ``results/weights/<stream_id>.pt``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepedge.service.workload_ref import WorkloadRef, workload_reference

EDGE_WEIGHTS_DIR = "weights"  # results/weights/<stream_id>.pt of an EdgeWindowSpec
MODEL_FILE_PATTERN = r"^[A-Za-z0-9_.-]+\.(npy|pt)$"
WINDOW_SCHEDULER = "thief"  # the policy of planning/window.WINDOW_SCHEDULERS ekya-window jobs run


class EkyaRunSpec(BaseModel):
    """The document of a live ``ekya-window`` job: the edge server on a workload's windows."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    workload: WorkloadRef = Field(
        description="a workload document (absolute paths), a bundled name or a file on the host"
    )
    streams: int = Field(1, ge=1, le=16, description="streams, each reading the workload")
    windows: int = Field(2, ge=1, le=100, description="retraining windows after window 0")
    gpus: float = Field(1.0, gt=0.0, le=64.0)
    window_s: float = Field(20.0, gt=0.0, le=86_400.0)
    samples: int = Field(400, ge=20, le=1_000_000)
    seed: int = 0


class EkyaRetrainSpec(BaseModel):
    """The document of a deployment's ``ekya-window`` job: one retraining window on the edge
    server (:func:`deepedge.runtime.edge.edge_retraining.retrain_window`) from the data and
    parent weights the control plane staged in the job's work folder."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    train_data: str = Field(
        max_length=256,
        pattern=r"^[A-Za-z0-9_.-]+\.npz$",
        description="an .npz in the job's work folder: x_train, y_train (golden-labelled); "
        "its x_val, y_val (the control plane's gate data) are not read",
    )
    initial_weights: str = Field(
        max_length=256,
        pattern=MODEL_FILE_PATTERN,
        description="the deployed model in the job's work folder: a model file (.pt, whole) "
        "or flat weights (.npy)",
    )
    stream_id: str = Field("stream", min_length=1, max_length=128)
    gpus: float = Field(1.0, gt=0.0, le=64.0, description="the edge server's GPUs (or cores)")
    window_s: float = Field(30.0, gt=0.0, le=86_400.0, description="the retraining window")
    inference_gpus: float = Field(
        0.4, gt=0.0, le=64.0, description="GPUs the inference takes at the full frame rate"
    )
    seed: int = 0
    workload: WorkloadRef | None = Field(
        None, description="the workload whose model the weights are (default: the edge CNN)"
    )


class EdgeStreamSpec(BaseModel):
    """One stream of an :class:`EdgeWindowSpec`: a deployment's files in the job's work
    folder; with ``train_data`` it may retrain, without it only its inference is scheduled
    (at ``current_accuracy``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    stream_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    initial_weights: str = Field(max_length=256, pattern=MODEL_FILE_PATTERN)
    train_data: str | None = Field(None, max_length=256, pattern=r"^[A-Za-z0-9_.-]+\.npz$")
    inference_gpus: float = Field(0.4, gt=0.0, le=64.0)
    current_accuracy: float = Field(0.0, ge=0.0, le=1.0)
    min_gain: float = Field(0.0, ge=-1.0, le=1.0, description="its deployment's gate.min_gain")
    workload: WorkloadRef | None = None
    # The control plane's own bookkeeping: the version the stream retrains (None: inference
    # only) and the version whose weights are staged (restaged from it after a crash)
    version: int | None = Field(None, ge=1)
    weights_version: int | None = Field(None, ge=1)


class EdgeWindowSpec(BaseModel):
    """The document of an edge server's ``ekya-window`` job: one retraining window shared
    by all ``streams`` on the server (``sum_v (I_v + R_v) <= gpus``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    edge_server: str = Field(min_length=1, max_length=64)
    gpus: float = Field(1.0, gt=0.0, le=64.0, description="the edge server's GPUs (or cores)")
    window_s: float = Field(30.0, gt=0.0, le=86_400.0, description="the retraining window")
    seed: int = 0
    streams: list[EdgeStreamSpec] = Field(min_length=1, max_length=64)
    live_node: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="the agent of the service's Ray cluster the window's actors run on "
        "(None: wherever the job's Ray puts them)",
    )
    device: Literal["cpu", "cuda"] | None = Field(
        None,
        description="a live node's device, from the registry: the shares are GPU fractions "
        "on cuda, CPU threads on cpu (None: the job's host decides)",
    )

    @model_validator(mode="after")
    def _one_retraining_stream(self) -> EdgeWindowSpec:
        ids = [s.stream_id for s in self.streams]
        if len(set(ids)) != len(ids):
            raise ValueError("streams: duplicate stream_id")
        if all(s.train_data is None for s in self.streams):
            raise ValueError("streams: none has train_data to retrain on")
        if (self.live_node is None) != (self.device is None):
            raise ValueError("live_node and device go together")
        return self

    def retraining(self) -> list[EdgeStreamSpec]:
        return [s for s in self.streams if s.train_data is not None]


def run_window(entry: Any, problem: Any) -> Any:
    """Run an ``ekya-window`` document; ``entry`` is the window family's registry lookup
    (``deepedge.planning.window.window_scheduler``)."""
    scheduler = entry(WINDOW_SCHEDULER)
    if isinstance(problem, EkyaRunSpec):
        return _run_ekya_live(scheduler, problem)
    if isinstance(problem, EkyaRetrainSpec):
        return _run_ekya_retrain(scheduler, problem)
    if isinstance(problem, EdgeWindowSpec):
        return _run_edge_window(scheduler, problem)
    return scheduler.plan(problem)


def _run_ekya_retrain(scheduler: Any, spec: EkyaRetrainSpec) -> Any:
    import numpy as np

    from deepedge.learning.model_state import (
        load_model_file,
        load_state,
        save_model_file,
        state_arrays,
    )
    from deepedge.runtime.cluster.session import ray_session
    from deepedge.runtime.edge.edge_retraining import RetrainingWindowSpec, retrain_window
    from deepedge.runtime.edge.edge_server import edge_cnn_factory

    with np.load(spec.train_data) as staged:
        data = (staged["x_train"], staged["y_train"])
    factory, n_classes = edge_cnn_factory(), 10
    if spec.workload is not None:
        from deepedge.workload.resolve import load_workload

        workload = load_workload(workload_reference(spec))
        factory, n_classes = workload.model_factory, workload.n_classes
    initial = state_arrays(load_model_file(factory(), Path(spec.initial_weights)))
    window = RetrainingWindowSpec(
        stream_id=spec.stream_id,
        gpus=spec.gpus,
        window_s=spec.window_s,
        inference_gpus=spec.inference_gpus,
        seed=spec.seed,
    )
    with ray_session():
        result = retrain_window(initial, factory, data, window, scheduler, n_classes)
    if result.state is not None:
        results = Path(os.environ.get("DEEPEDGE_RESULTS_DIR", "results"))
        save_model_file(load_state(factory(), result.state), results / "model.pt")
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"  # shares: GPU or CPU threads
    return {"scheduler": WINDOW_SCHEDULER, "device": device, **result.summary()}


def _run_edge_window(scheduler: Any, spec: EdgeWindowSpec) -> Any:
    import numpy as np
    import torch

    from deepedge.learning.model_state import (
        load_model_file,
        load_state,
        save_model_file,
        state_arrays,
    )
    from deepedge.runtime.cluster.session import ray_session
    from deepedge.runtime.edge.edge_retraining import (
        EdgeStream,
        JointWindowSpec,
        retrain_joint_window,
    )
    from deepedge.runtime.edge.edge_server import edge_cnn_factory

    streams = []
    for s in spec.streams:
        factory, n_classes = edge_cnn_factory(), 10
        if s.workload is not None:
            from deepedge.workload.resolve import load_workload

            workload = load_workload(workload_reference(s))
            factory, n_classes = workload.model_factory, workload.n_classes
        data = None
        if s.train_data is not None:
            with np.load(s.train_data) as staged:
                data = (staged["x_train"], staged["y_train"])
        initial = state_arrays(load_model_file(factory(), Path(s.initial_weights)))
        streams.append(
            EdgeStream(s.stream_id, initial, factory, s.inference_gpus, data,
                       s.current_accuracy, n_classes, s.min_gain)
        )  # fmt: skip
    on_gpu = None if spec.device is None else spec.device == "cuda"
    window = JointWindowSpec(gpus=spec.gpus, window_s=spec.window_s, seed=spec.seed,
                             node=spec.live_node, on_gpu=on_gpu)  # fmt: skip
    with ray_session():
        result = retrain_joint_window(streams, window, scheduler)
    weights = Path(os.environ.get("DEEPEDGE_RESULTS_DIR", "results")) / EDGE_WEIGHTS_DIR
    weights.mkdir(parents=True, exist_ok=True)
    factories = {s.stream_id: s.factory for s in streams}
    for sid, outcome in result.streams.items():
        if outcome.state is not None:
            save_model_file(load_state(factories[sid](), outcome.state), weights / f"{sid}.pt")
    device = spec.device or ("cuda" if torch.cuda.is_available() else "cpu")  # GPU or threads
    return {"scheduler": WINDOW_SCHEDULER, "device": device, "edge_server": spec.edge_server,
            "gpus": spec.gpus, "live_node": spec.live_node, **result.summary()}  # fmt: skip


def _run_ekya_live(scheduler: Any, spec: EkyaRunSpec) -> Any:
    import dataclasses

    from deepedge.runtime.edge.edge_windows import EdgeRunSpec, run_local
    from deepedge.workload.resolve import load_workload

    workload = load_workload(workload_reference(spec))
    workload.require_windows(spec.windows + 1, " (window 0 trains the first model)")
    run = EdgeRunSpec(
        streams=spec.streams,
        windows=spec.windows,
        gpus=spec.gpus,
        window_s=spec.window_s,
        samples=spec.samples,
        seed=spec.seed,
    )
    reports = run_local(run, scheduler, workload=workload)
    return {"scheduler": WINDOW_SCHEDULER, "windows": [dataclasses.asdict(r) for r in reports]}
