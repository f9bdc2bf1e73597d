"""One Ekya retraining window of an edge server's deployments (the control plane's
``ekya-window`` job): every stream on the server scheduled together (Ekya Sec. 4).

The edge server (:class:`~deepedge.runtime.edge.edge_server.EdgeServer`) serves every
deployment's stream with its deployed model (an inference actor each) and, at the window's
start, micro-profiles the candidate retraining configurations of each stream that has new
golden-labelled data (a *retraining* stream) from its deployed weights. A stream without
data this window (its deployment did not trigger) is an *inference-only* stream: it enters
the scheduler at its last measured accuracy with no retraining configuration, so its
inference still takes its share of the server. A validation split (20%, at most 250
images) is drawn from a retraining stream's data, so the control plane's own held-out gate
data never reaches the job. The scheduler (Thief) then chooses, jointly over all streams,
each stream's inference configuration (frame sampling), its retraining configuration, or
none, and the shares of the server's ``gpus`` (CPU threads on a host without a GPU) of
both, with ``sum_v (I_v + R_v) <= gpus``; the retraining actors run, their checkpoints are
hot-loaded and the rest of the window is re-planned on completions and deviations, as in a
live window
(:meth:`~deepedge.runtime.edge.edge_server.EdgeServer.run_window`).

Models travel whole, as :data:`~deepedge.learning.model_state.State` (``state_dict``
arrays: parameters and buffers); the job writes each retrained one as a model file, the
control plane's artifact format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from deepedge.core.errors import InvalidInputError
from deepedge.learning.microprofiler import NamedConfig, ProfileSettings, validation_split
from deepedge.learning.model_state import State, load_state
from deepedge.learning.training import accuracy
from deepedge.planning.window import WindowScheduler
from deepedge.planning.window.documents import StreamWindow, WindowPlan
from deepedge.runtime.edge.edge_server import (
    EdgeServer,
    ModelFactory,
    StreamRuntime,
    WindowData,
    model_from_state,
    state_of,
)
from deepedge.runtime.edge.edge_windows import default_candidates, frame_sampling_configs


@dataclass(frozen=True)
class RetrainingWindowSpec:
    """The edge server and the window one deployment is retrained in."""

    stream_id: str
    gpus: float = 1.0  # G: GPUs of the edge server (cores without a GPU)
    window_s: float = 30.0  # the retraining window the scheduler plans in
    inference_gpus: float = 0.4  # D_v: GPUs the stream's inference takes at the full frame rate
    delta_gpus: float = 0.1
    seed: int = 0
    min_gain: float = 0.0  # the gate a retrained model passes to be hot-loaded

    def __post_init__(self) -> None:
        if self.gpus <= 0 or self.window_s <= 0 or self.inference_gpus <= 0:
            raise InvalidInputError("gpus, window_s and inference_gpus must be > 0", field="gpus")


@dataclass(frozen=True)
class RetrainingWindowResult:
    """What the window decided and produced; ``state`` is None when the scheduler chose not
    to retrain, or when the retrained model failed the gate against the deployed one (the
    deployed model then serves on: ``gate_passed`` False)."""

    state: State | None
    accuracy_before: float  # the deployed model on the validation split
    retrained: str | None  # the configuration retrained with
    estimated_accuracy: float | None  # the micro-profiler's estimate for it
    validation_accuracy: float | None  # what the retrained model measured
    train_s: float | None
    configs: tuple[dict[str, Any], ...]  # every profiled configuration's estimate
    plans: tuple[WindowPlan, ...]  # the first plan, then the re-plans
    profiling_s: float
    validation_samples: int
    gate_passed: bool | None = None  # None: nothing retrained
    estimate_error: float | None = None  # estimated minus validation accuracy

    def summary(self) -> dict[str, Any]:
        """The JSON of the job's result (everything but the model)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in {"state", "plans"}}
        out["plans"] = [p.model_dump(mode="json") for p in self.plans]
        out["decision"] = out["plans"][0]["streams"][0] if self.plans else None
        return out


@dataclass(frozen=True)
class EdgeStream:
    """One deployment's stream in a joint window: its deployed model (its whole state) and
    factory, and either its golden-labelled ``data`` (images, labels: a retraining stream)
    or None (an inference-only stream, entering the scheduler at ``current_accuracy``)."""

    stream_id: str
    initial: State
    factory: ModelFactory
    inference_gpus: float  # D_v: GPUs its inference takes at the full frame rate
    data: tuple[np.ndarray, np.ndarray] | None = None
    current_accuracy: float = 0.0  # inference-only: its last measured accuracy
    n_classes: int = 10
    min_gain: float = 0.0  # its deployment's gate: a retrained model hot-loads past it

    def __post_init__(self) -> None:
        if self.inference_gpus <= 0:
            raise InvalidInputError("inference_gpus must be > 0", field="inference_gpus")
        if self.data is not None and len(self.data[1]) < 10:
            raise InvalidInputError(
                f"stream {self.stream_id}: {len(self.data[1])} labelled images; need >= 10",
                field="train_data",
            )


@dataclass(frozen=True)
class JointWindowSpec:
    """The edge server the window shares between all its streams."""

    gpus: float = 1.0  # G: GPUs of the edge server (cores without a GPU)
    window_s: float = 30.0
    delta_gpus: float = 0.1
    seed: int = 0
    node: str | None = None  # a live node: every actor and task of the window runs there
    on_gpu: bool | None = None  # that node's device (None: this host's)

    def __post_init__(self) -> None:
        if self.gpus <= 0 or self.window_s <= 0:
            raise InvalidInputError("gpus and window_s must be > 0", field="gpus")


@dataclass(frozen=True)
class JointWindowResult:
    """One joint decision: every retraining stream's outcome (``streams``, by stream id;
    inference-only streams have none) and the plans over all streams."""

    streams: dict[str, RetrainingWindowResult]
    plans: tuple[WindowPlan, ...]  # the first plan, then the re-plans

    def summary(self) -> dict[str, Any]:
        """The JSON of the job's result (everything but the weights)."""
        per_stream = {}
        for sid, result in self.streams.items():
            out = result.summary()
            del out["plans"], out["decision"]
            per_stream[sid] = out
        return {"plans": [p.model_dump(mode="json") for p in self.plans], "streams": per_stream}


def retrain_window(
    initial: State,
    factory: ModelFactory,
    data: tuple[np.ndarray, np.ndarray],
    spec: RetrainingWindowSpec,
    scheduler: WindowScheduler,
    n_classes: int = 10,
    candidates: Sequence[NamedConfig] | None = None,
    settings: ProfileSettings | None = None,
) -> RetrainingWindowResult:
    """One stream alone on the server (:func:`retrain_joint_window` with one stream)."""
    stream = EdgeStream(spec.stream_id, initial, factory, spec.inference_gpus, data,
                        n_classes=n_classes, min_gain=spec.min_gain)  # fmt: skip
    window = JointWindowSpec(spec.gpus, spec.window_s, spec.delta_gpus, spec.seed)
    joint = retrain_joint_window([stream], window, scheduler, candidates, settings)
    return dataclasses.replace(joint.streams[spec.stream_id], plans=joint.plans)


def retrain_joint_window(
    streams: Sequence[EdgeStream],
    spec: JointWindowSpec,
    scheduler: WindowScheduler,
    candidates: Sequence[NamedConfig] | None = None,
    settings: ProfileSettings | None = None,
) -> JointWindowResult:
    """Run one window for all ``streams`` of the server (module docstring); needs a running
    Ray session. A retraining stream's candidates default to
    :func:`~deepedge.runtime.edge.edge_windows.default_candidates` for its classes."""
    if not any(s.data is not None for s in streams):
        raise InvalidInputError("no stream has data to retrain on", field="streams")
    server = EdgeServer(scheduler, gpus=spec.gpus, window_s=spec.window_s,
                        delta_gpus=spec.delta_gpus, node=spec.node,
                        on_gpu=spec.on_gpu)  # fmt: skip
    data: dict[str, WindowData] = {}
    before: dict[str, tuple[float, int]] = {}
    for k, s in enumerate(streams):
        if s.data is None:
            continue
        state = state_of(load_state(s.factory(), s.initial))
        images, labels = s.data
        rng = np.random.default_rng([spec.seed, 1, k] if k else [spec.seed, 1])
        val_idx, pool_idx = validation_split(len(labels), rng)
        val = (images[val_idx], labels[val_idx])
        pool = (images[pool_idx], labels[pool_idx])
        accuracy_before = accuracy(model_from_state(state, s.factory), *val)
        before[s.stream_id] = (accuracy_before, len(val_idx))
        server.add_stream(_runtime(s, state, accuracy_before, pool, val, candidates))
        data[s.stream_id] = WindowData(pool, val)
    offered = default_candidates() if candidates is None else list(candidates)
    profiles = server.begin_window(data, offered, settings)
    for s in streams:  # inference only: scheduled with the others, never profiled
        if s.data is None:
            state = state_of(load_state(s.factory(), s.initial))
            empty = (np.zeros((0,)), np.zeros((0,), dtype=np.int64))
            server.add_stream(_runtime(s, state, s.current_accuracy, empty, empty, []))
    outcomes = server.run_window(seed=spec.seed)
    results = {}
    for s in streams:
        if s.data is None:
            continue
        sid, profile, outcome = s.stream_id, profiles[s.stream_id], outcomes.get(s.stream_id)
        estimates = {c.name: c.accuracy_after for c in profile.configs}
        estimate = None if outcome is None else estimates[outcome.config]
        passed = None if outcome is None else outcome.gate_passed
        results[sid] = RetrainingWindowResult(
            state=outcome.state if outcome is not None and outcome.gate_passed else None,
            accuracy_before=before[sid][0],
            retrained=None if outcome is None else outcome.config,
            estimated_accuracy=estimate,
            validation_accuracy=None if outcome is None else outcome.val_accuracy,
            train_s=None if outcome is None else outcome.train_s,
            configs=tuple(
                {"name": c.name, "accuracy_after": c.accuracy_after, "gpu_seconds": c.gpu_seconds}
                for c in profile.configs
            ),
            plans=(),
            profiling_s=profile.seconds,
            validation_samples=before[sid][1],
            gate_passed=passed,
            estimate_error=None
            if outcome is None or estimate is None
            else estimate - outcome.val_accuracy,
        )
    return JointWindowResult(results, tuple(server.plans))


def _runtime(
    stream: EdgeStream,
    state: dict[str, np.ndarray],
    current_accuracy: float,
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    candidates: Sequence[NamedConfig] | None,
) -> StreamRuntime:
    table, fractions = frame_sampling_configs(stream.inference_gpus)
    return StreamRuntime(
        stream=StreamWindow(stream_id=stream.stream_id, current_accuracy=current_accuracy,
                            inference_configs=table),
        state=state, train=train, val=val, sample_fractions=fractions, factory=stream.factory,
        candidates=default_candidates(stream.n_classes) if candidates is None else candidates,
        min_gain=stream.min_gain,
    )  # fmt: skip
