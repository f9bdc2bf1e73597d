"""One Ekya retraining window of one deployment on the edge server (the control plane's
``ekya-window`` job).

The edge server (:class:`~deepedge.runtime.edge_server.EdgeServer`) serves the deployment's
stream with the deployed model (an inference actor) and, at the window's start,
micro-profiles the candidate retraining configurations from the deployed weights on the
window's golden-labelled data. A validation split (20%, at most 250 images) is drawn from
that data, so the control plane's own held-out gate data never reaches the job. The
scheduler (Thief) then chooses the inference configuration (frame sampling), the
retraining configuration, or none, and the shares of the server's ``gpus`` (CPU threads on
a host without a GPU) of both; the retraining actor runs, its checkpoint is hot-loaded and
the rest of the window is re-planned on completions and deviations, as in a live window
(:meth:`~deepedge.runtime.edge_server.EdgeServer.run_window`).

Weights travel as flat parameter vectors (:func:`deepedge.learning.models.get_flat_weights`),
the control plane's artifact format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from deepedge.core.errors import InvalidInputError
from deepedge.learning.microprofiler import NamedConfig, ProfileSettings, validation_split
from deepedge.learning.models import get_flat_weights, set_flat_weights
from deepedge.learning.training import accuracy
from deepedge.planning.window import WindowScheduler
from deepedge.planning.window.documents import StreamWindow, WindowPlan
from deepedge.runtime.edge_server import (
    EdgeServer,
    ModelFactory,
    StreamRuntime,
    WindowData,
    model_from_state,
    state_of,
)
from deepedge.runtime.edge_windows import default_candidates, frame_sampling_configs


@dataclass(frozen=True)
class RetrainingWindowSpec:
    """The edge server and the window one deployment is retrained in."""

    stream_id: str
    gpus: float = 1.0  # G: GPUs of the edge server (cores without a GPU)
    window_s: float = 30.0  # the retraining window the scheduler plans in
    inference_gpus: float = 0.4  # D_v: GPUs the stream's inference takes at the full frame rate
    delta_gpus: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.gpus <= 0 or self.window_s <= 0 or self.inference_gpus <= 0:
            raise InvalidInputError("gpus, window_s and inference_gpus must be > 0", field="gpus")


@dataclass(frozen=True)
class RetrainingWindowResult:
    """What the window decided and produced; ``weights`` is None when the scheduler chose
    not to retrain (the deployed model then serves on)."""

    weights: np.ndarray | None
    accuracy_before: float  # the deployed model on the validation split
    retrained: str | None  # the configuration retrained with
    estimated_accuracy: float | None  # the micro-profiler's estimate for it
    validation_accuracy: float | None  # what the retrained model measured
    train_s: float | None
    configs: tuple[dict[str, Any], ...]  # every profiled configuration's estimate
    plans: tuple[WindowPlan, ...]  # the first plan, then the re-plans
    profiling_s: float
    validation_samples: int

    def summary(self) -> dict[str, Any]:
        """The JSON of the job's result (everything but the weights)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in {"weights", "plans"}}
        out["plans"] = [p.model_dump(mode="json") for p in self.plans]
        out["decision"] = out["plans"][0]["streams"][0] if self.plans else None
        return out


def retrain_window(
    initial: np.ndarray,
    factory: ModelFactory,
    data: tuple[np.ndarray, np.ndarray],
    spec: RetrainingWindowSpec,
    scheduler: WindowScheduler,
    n_classes: int = 10,
    candidates: Sequence[NamedConfig] | None = None,
    settings: ProfileSettings | None = None,
) -> RetrainingWindowResult:
    """Run one window for the stream whose deployed flat weights are ``initial`` on its
    golden-labelled ``data`` (images, labels); needs a running Ray session. The candidates
    default to :func:`~deepedge.runtime.edge_windows.default_candidates`."""
    images, labels = data
    if len(labels) < 10:
        raise InvalidInputError(f"{len(labels)} labelled images; need >= 10", field="train_data")
    model = factory()
    set_flat_weights(model, np.asarray(initial, dtype=np.float32))
    state = state_of(model)
    val_idx, pool_idx = validation_split(len(labels), np.random.default_rng([spec.seed, 1]))
    val = (images[val_idx], labels[val_idx])
    pool = (images[pool_idx], labels[pool_idx])
    before = accuracy(model_from_state(state, factory), *val)
    table, fractions = frame_sampling_configs(spec.inference_gpus)
    server = EdgeServer(
        scheduler,
        gpus=spec.gpus,
        window_s=spec.window_s,
        delta_gpus=spec.delta_gpus,
        model_factory=factory,
    )
    server.add_stream(
        StreamRuntime(
            stream=StreamWindow(
                stream_id=spec.stream_id, current_accuracy=before, inference_configs=table
            ),
            state=state,
            train=pool,
            val=val,
            sample_fractions=fractions,
        )
    )
    offered = default_candidates(n_classes) if candidates is None else list(candidates)
    profile = server.begin_window({spec.stream_id: WindowData(pool, val)}, offered, settings)[
        spec.stream_id
    ]
    outcome = server.run_window(seed=spec.seed).get(spec.stream_id)
    estimates = {c.name: c.accuracy_after for c in profile.configs}
    weights = (
        None
        if outcome is None
        else get_flat_weights(model_from_state(outcome.state, factory).cpu())
    )
    return RetrainingWindowResult(
        weights=weights,
        accuracy_before=before,
        retrained=None if outcome is None else outcome.config,
        estimated_accuracy=None if outcome is None else estimates[outcome.config],
        validation_accuracy=None if outcome is None else outcome.val_accuracy,
        train_s=None if outcome is None else outcome.train_s,
        configs=tuple(
            {"name": c.name, "accuracy_after": c.accuracy_after, "gpu_seconds": c.gpu_seconds}
            for c in profile.configs
        ),
        plans=tuple(server.plans),
        profiling_s=profile.seconds,
        validation_samples=len(val_idx),
    )
