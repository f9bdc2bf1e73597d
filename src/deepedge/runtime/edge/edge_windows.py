"""The Ekya edge server run live through consecutive retraining windows on drifting streams.

Per window ``w`` and stream: the window's labelled data arrives (a drifting digits stream,
:mod:`deepedge.learning.stream`, each stream on its own drift schedule; or, with a workload
(:mod:`deepedge.workload`), the workload's window ``w`` labelled by its labeller, the same
data for every stream) and is split into a
validation split (20%, at most 250 images) and a training pool; the server micro-profiles the
candidate retraining configurations from the deployed model
(:meth:`~deepedge.runtime.edge.edge_server.EdgeServer.begin_window`), the scheduler plans, the
retraining actors run, and their checkpoints are hot-loaded into the inference actors while
the rest of the window is re-planned
(:meth:`~deepedge.runtime.edge.edge_server.EdgeServer.run_window`).
Each stream's deployed model is scored on the window's held-out evaluation images at the
window's start and end.

Time is compressed: a window ends when its last retraining job does, and the next window's
data is there at once. The scheduler still plans with the window length ``window_s``, so
retraining durations are judged against it. The inference table is the frame-sampling part
of the documented model of :mod:`deepedge.sim.generator` (sampling ``r`` of the frames costs
``D r`` GPUs and gives the accuracy factor ``r^0.3``), because the inference actors sample
frames but do not resize them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.microprofiler import NamedConfig, ProfileSettings, validation_split
from deepedge.learning.models import make_edge_model, select_device
from deepedge.learning.stream import DriftConfig, DriftingStream, ImageSet, load_digits_images
from deepedge.learning.training import TrainConfig, accuracy, train_epochs
from deepedge.planning.window import WindowScheduler
from deepedge.planning.window.config_pruning import ConfigHistory
from deepedge.planning.window.documents import (
    InferenceConfig,
    RetrainingHyperparameters,
    StreamWindow,
)
from deepedge.runtime.cluster.session import ray_session
from deepedge.runtime.edge.edge_server import (
    EdgeServer,
    StreamRuntime,
    WindowData,
    edge_cnn_factory,
    model_from_state,
    state_of,
)
from deepedge.workload.model import local_training
from deepedge.workload.resolve import Workload
from deepedge.workload.sources import NO_LABEL

log = logging.getLogger(__name__)

FRAME_RATES = (1.0, 0.5, 0.25, 0.125)


@dataclass(frozen=True)
class EdgeRunSpec:
    """Knobs of :func:`run_edge_windows`."""

    streams: int = 3
    windows: int = 3
    gpus: float = 1.0
    window_s: float = 30.0
    samples: int = 400  # labelled images per stream and window
    eval_size: int = 300
    a_min: float = 0.0
    delta_gpus: float = 0.1
    initial_epochs: int = 3
    prune: bool = True  # drop configs far from the estimated Pareto front (not for a fixed policy)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.streams < 1:
            raise InvalidInputError("streams must be >= 1", field="streams")
        if self.windows < 1:
            raise InvalidInputError("windows must be >= 1", field="windows")
        if self.gpus <= 0:
            raise InvalidInputError(f"gpus must be > 0, got {self.gpus}", field="gpus")
        if self.window_s <= 0:
            raise InvalidInputError("window_s must be > 0", field="window_s")
        if self.samples < 20:
            raise InvalidInputError("samples must be >= 20", field="samples")


@dataclass(frozen=True)
class StreamWindowReport:
    stream_id: str
    severity: float  # of the window's drift, in [0, 1]
    accuracy_before: float  # deployed model on the window's evaluation images, at its start
    accuracy_after: float  # the same at the window's end
    retrained: str | None  # configuration retrained with, if any
    estimated_accuracy: float | None  # the micro-profiler's estimate for it (validation)
    validation_accuracy: float | None  # what the retrained model measured on validation
    configs_profiled: int
    profiling_s: float
    deployed_validation_accuracy: float | None = None  # the model it would replace, same split
    hot_loaded: bool | None = None  # None: nothing retrained; False: kept by the gate
    estimate_error: float | None = None  # estimated minus validation accuracy


@dataclass(frozen=True)
class WindowReport:
    index: int
    planned_accuracy: float  # window-averaged accuracy the first plan expected
    plans: int  # the first plan and the re-plans (completions, deviations)
    wall_s: float  # profiling, planning and retraining
    streams: tuple[StreamWindowReport, ...]


def default_candidates(n_classes: int = 10) -> list[NamedConfig]:
    """Six configurations: epochs x data fraction x frozen blocks (head kept)."""
    out = []
    for epochs in (1, 4):
        for fraction, frozen in ((0.5, 1), (1.0, 1), (1.0, 0)):
            hp = RetrainingHyperparameters(
                epochs=epochs,
                batch_size=32,
                last_layer_neurons=n_classes,
                frozen_layers=frozen,
                data_fraction=fraction,
            )
            out.append(NamedConfig(f"e{epochs}-f{round(fraction * 100)}-z{frozen}", hp))
    return out


def frame_sampling_configs(full_rate_gpus: float) -> tuple[list[InferenceConfig], dict[str, float]]:
    """(inference table, sampled frame fraction per config name); module docstring."""
    table = [
        InferenceConfig(
            name=f"r{round(r * 1000)}", accuracy_factor=r**0.3, gpu_demand=full_rate_gpus * r
        )
        for r in FRAME_RATES
    ]
    return table, {f"r{round(r * 1000)}": r for r in FRAME_RATES}


def _stream(spec: EdgeRunSpec, k: int, seed: int, source: ImageSet) -> DriftingStream:
    """Stream ``k``: its drift starts after window ``k mod 3``, at its own speed and size."""
    return DriftingStream(
        source,
        DriftConfig(
            seed=seed,
            window_size=spec.samples,
            eval_size=spec.eval_size,
            onset_window=k % 3,
            ramp_windows=1 + k % 2,
            max_rotation_deg=25.0 + 15.0 * (k % 3),
        ),
    )


@dataclass(frozen=True)
class _Window:
    """A stream's window: golden-labelled images to retrain on, true-labelled ones to score."""

    images: np.ndarray
    labels: np.ndarray
    eval_images: np.ndarray
    eval_labels: np.ndarray
    severity: float


WindowFn = Callable[[int], _Window]


def _digits_windows(stream: DriftingStream) -> WindowFn:
    def window(t: int) -> _Window:
        w = stream.window(t)
        return _Window(w.images, w.labels, w.eval_images, w.eval_labels, w.transform.severity)

    return window


def _workload_windows(workload: Workload) -> WindowFn:
    """The workload's windows, labelled by its labeller (scored on true labels, or on the
    labeller's where the data has none)."""

    def window(t: int) -> _Window:
        w = workload.window(t)
        eval_labels = w.eval_labels
        if (eval_labels == NO_LABEL).any():
            eval_labels = workload.label(w.eval_images, eval_labels)
        return _Window(
            w.images, workload.label(w.images, w.labels), w.eval_images, eval_labels, w.severity
        )

    return window


def _start_streams(
    spec: EdgeRunSpec, server: EdgeServer, workload: Workload | None
) -> dict[str, WindowFn]:
    """One stream per camera, its model trained on window 0 and deployed: a drifting digits
    stream each, or, with a workload, the workload's windows."""
    rng = np.random.default_rng(spec.seed)
    full_rate = rng.uniform(0.25, 0.5, spec.streams)  # D_v, as in the recorded trace
    source = load_digits_images(16) if workload is None else None
    streams: dict[str, WindowFn] = {}
    model: nn.Module
    for k in range(spec.streams):
        sid = f"cam{k:02d}"
        seed = spec.seed * 1000 + k
        if workload is None:
            assert source is not None
            stream = _stream(spec, k, seed, source)
            windows = _digits_windows(stream)
            model = make_edge_model(stream.n_classes, stream.image_size, seed=seed)
        else:
            windows = _workload_windows(workload)
            model = workload.model_factory()
        model = model.to(select_device())
        pre = windows(0)
        config = TrainConfig() if workload is None else local_training(workload.spec.training)
        train_epochs(model, pre.images, pre.labels, spec.initial_epochs, config, seed=seed)
        table, fractions = frame_sampling_configs(float(full_rate[k]))
        server.add_stream(
            StreamRuntime(
                stream=StreamWindow(
                    stream_id=sid,
                    current_accuracy=accuracy(model, pre.eval_images, pre.eval_labels),
                    inference_configs=table,
                ),
                state=state_of(model),
                train=(pre.images, pre.labels),
                val=(pre.eval_images, pre.eval_labels),
                sample_fractions=fractions,
            )
        )
        streams[sid] = windows
    return streams


def run_edge_windows(
    spec: EdgeRunSpec,
    scheduler: WindowScheduler,
    candidates: Sequence[NamedConfig] | None = None,
    settings: ProfileSettings | None = None,
    workload: Workload | None = None,
    on_window: Callable[[WindowReport], None] | None = None,
) -> list[WindowReport]:
    """Run ``spec.windows`` windows live on Ray (needs a running Ray session), on drifting
    digits or on ``workload`` (its window 0 trains the first model, windows 1.. follow);
    ``on_window`` hears each window's report as it ends."""
    n_classes = 10 if workload is None else workload.n_classes
    candidates = default_candidates(n_classes) if candidates is None else list(candidates)
    if workload is not None:
        workload.require_windows(spec.windows + 1, " (window 0 trains the first model)")
    server = EdgeServer(
        scheduler,
        gpus=spec.gpus,
        window_s=spec.window_s,
        a_min=spec.a_min,
        delta_gpus=spec.delta_gpus,
        pruning=ConfigHistory() if spec.prune else None,
        model_factory=edge_cnn_factory() if workload is None else workload.model_factory,
    )
    streams = _start_streams(spec, server, workload)
    reports: list[WindowReport] = []
    for w in range(1, spec.windows + 1):
        windows = {sid: window_of(w) for sid, window_of in streams.items()}
        data: dict[str, WindowData] = {}
        before: dict[str, float] = {}
        for sid, win in windows.items():
            val_idx, pool_idx = validation_split(
                len(win.labels), np.random.default_rng([spec.seed, w])
            )
            data[sid] = WindowData(
                train=(win.images[pool_idx], win.labels[pool_idx]),
                val=(win.images[val_idx], win.labels[val_idx]),
            )
            before[sid] = _score(server, sid, win.eval_images, win.eval_labels)
        t0 = time.perf_counter()
        plans_before = len(server.plans)
        profiles = server.begin_window(data, candidates, settings)
        outcomes = server.run_window(seed=w)
        wall = time.perf_counter() - t0
        first_plan = server.plans[plans_before]
        rows = []
        for sid, win in windows.items():
            outcome = outcomes.get(sid)
            estimates = {c.name: c.accuracy_after for c in profiles[sid].configs}
            estimate = None if outcome is None else estimates[outcome.config]
            rows.append(
                StreamWindowReport(
                    stream_id=sid,
                    severity=win.severity,
                    accuracy_before=before[sid],
                    accuracy_after=_score(server, sid, win.eval_images, win.eval_labels),
                    retrained=None if outcome is None else outcome.config,
                    estimated_accuracy=estimate,
                    validation_accuracy=None if outcome is None else outcome.val_accuracy,
                    configs_profiled=len(profiles[sid].configs),
                    profiling_s=profiles[sid].seconds,
                    deployed_validation_accuracy=None
                    if outcome is None
                    else outcome.deployed_accuracy,
                    hot_loaded=None if outcome is None else outcome.gate_passed,
                    estimate_error=None
                    if outcome is None or estimate is None
                    else estimate - outcome.val_accuracy,
                )
            )
        reports.append(
            WindowReport(
                index=w,
                planned_accuracy=first_plan.mean_accuracy,
                plans=len(server.plans) - plans_before,
                wall_s=wall,
                streams=tuple(rows),
            )
        )
        log.info("window %d done in %.1f s", w, wall)
        if on_window is not None:
            on_window(reports[-1])
    return reports


def run_local(
    spec: EdgeRunSpec,
    scheduler: WindowScheduler,
    candidates: Sequence[NamedConfig] | None = None,
    settings: ProfileSettings | None = None,
    address: str | None = None,
    workload: Workload | None = None,
    on_window: Callable[[WindowReport], None] | None = None,
) -> list[WindowReport]:
    """:func:`run_edge_windows` in a Ray session of its own (or the one already running);
    ``address`` connects to a running cluster instead of an embedded Ray."""
    with ray_session(address=address):
        return run_edge_windows(spec, scheduler, candidates, settings, workload, on_window)


def _score(server: EdgeServer, sid: str, images: np.ndarray, labels: np.ndarray) -> float:
    rt = server.streams[sid]
    return accuracy(model_from_state(rt.state, server.model_factory), images, labels)
