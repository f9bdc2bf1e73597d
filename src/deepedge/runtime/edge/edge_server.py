"""The Ekya edge server on Ray: one actor per inference job and per retraining job (Sec. 5).

* :class:`InferenceJob` (one per stream) keeps its edge model in memory and answers
  ``infer(frames)``: it analyses the fraction of frames its inference config samples and
  carries the last label over the skipped frames. ``load_checkpoint(state)`` builds the new
  model off to the side and swaps the reference under a lock, so requests already queued or
  in flight are answered (by the old or the new model), never dropped.
* :class:`RetrainingJob` (one per retraining stream and window) retrains a copy of the
  deployed model with its configuration and returns the new weights and the validation
  accuracy; ``progress()`` reports epochs done while it runs.
* :func:`profile_stream` (a Ray task per stream at a window's start,
  :meth:`EdgeServer.begin_window`) micro-profiles the candidate configurations from the
  deployed weights on the window's data; its estimates are what the scheduler plans with.
* :class:`EdgeServer` (driver side) plans with any window scheduler (the same policy objects
  as the simulator), applies the plan at the window's start, and on every retraining
  completion gates the retrained model against the deployed one on the window's
  validation split (the control plane's gate, :mod:`deepedge.learning.gate`: never a worse
  model), hot-loads it into the stream's inference actor when it passes, and re-plans the
  rest of the window, changing the actors' shares. Past half of its epochs, a job whose
  accuracy projected from its epochs so far (Optimus fit) departs from the estimate gets the
  estimate corrected and the window re-planned; its configuration is kept.

Shares. With CUDA, every actor is created with ``num_gpus`` = its first share (a fractional
GPU) and runs torch on the GPU. Without CUDA the share is of the CPU cores: actors ask Ray for
0 CPUs (the 2-core host could not admit them otherwise) and apply their share themselves, as
``torch.set_num_threads(max(1, round(share * cores)))``. Ray cannot resize a live actor, so a
re-allocation changes the share an actor applies (threads; for inference also the sampled
frame fraction), not Ray's bookkeeping. The threads are set by the thread that computes (at
each inference call, at a retraining run's start and after each of its epochs): an actor
runs its calls on a pool of threads, and under OpenMP each thread has its own.

A live edge server (``node``: an agent of the site's cluster) runs every actor and task on
that node (a sliver of its ``deepedge-node:`` resource), and ``on_gpu`` says whether that
node has a GPU (the driver's own host may not).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.gate import passes_gate
from deepedge.learning.microprofiler import (
    NamedConfig,
    ProfileSettings,
    micro_profile,
    projected_accuracy,
    retrain,
)
from deepedge.learning.models import make_edge_model
from deepedge.learning.training import accuracy, predict
from deepedge.planning.window import WindowScheduler
from deepedge.planning.window.config_pruning import ConfigHistory, Outcome
from deepedge.planning.window.documents import (
    RetrainingConfig,
    StreamWindow,
    WindowPlan,
    WindowProblem,
)
from deepedge.runtime.cluster.session import node_resource

log = logging.getLogger(__name__)


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _apply_share(share: float) -> int:
    """Run this thread's torch with ``share`` of the cores. Intra-op threads are each
    thread's own setting under OpenMP and an actor runs its calls on a pool of threads, so
    the thread that computes applies its share itself, at each call."""
    threads = max(1, round(share * (os.cpu_count() or 1)))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


ModelFactory = Callable[[], nn.Module]


def edge_cnn_factory(n_classes: int = 10, image_size: int = 16) -> ModelFactory:
    """The edge CNN's factory (the bundled default of every stream)."""
    return functools.partial(make_edge_model, n_classes, image_size)


def model_from_state(state: dict[str, Any], factory: ModelFactory) -> nn.Module:
    """``factory()`` (a workload's model with its frozen layers set) loaded with ``state``."""
    model = factory()
    # Arrays from Ray's object store are read-only: copy them into the model.
    model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    return model.to(_device()).eval()


def frozen_names(model: nn.Module) -> frozenset[str]:
    """Parameters the model's factory froze (a workload's frozen layers): never retrained."""
    return frozenset(n for n, p in model.named_parameters() if not p.requires_grad)


def state_of(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """A picklable copy of a model's weights."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


@dataclass(frozen=True)
class InferenceReply:
    labels: np.ndarray
    analysed: int
    model_version: int
    threads: int = 1  # the torch threads the call ran with (its share on a CPU server)


class InferenceJob:
    """Serves one stream: sampled inference with a hot-swappable in-memory model."""

    def __init__(self, state: dict[str, Any], factory: ModelFactory) -> None:
        self._factory = factory
        self._model = model_from_state(state, factory)
        self._version = 0
        self._lock = threading.Lock()
        self._sample_fraction = 1.0
        self._share = 1.0
        self.served = 0

    def configure(self, share: float, sample_fraction: float) -> int:
        """Apply a new allocation: core share (threads) and sampled frame fraction."""
        self._share = share
        self._sample_fraction = max(1e-3, min(1.0, sample_fraction))
        return _apply_share(share)

    def infer(self, frames: np.ndarray) -> InferenceReply:
        threads = _apply_share(self._share)
        with self._lock:
            model, version = self._model, self._version
        step = max(1, round(1.0 / self._sample_fraction))
        picked = np.arange(0, len(frames), step)
        labels = np.empty(len(frames), dtype=np.int64)
        if len(picked):
            analysed = predict(model, frames[picked])
            # Skipped frames keep the label of the last analysed frame.
            labels[:] = np.repeat(analysed, step)[: len(frames)]
        self.served += len(frames)
        return InferenceReply(labels, len(picked), version, threads)

    def load_checkpoint(self, state: dict[str, Any]) -> int:
        """Build the new model first, then swap it in atomically; returns the new version."""
        fresh = model_from_state(state, self._factory)
        with self._lock:
            self._model = fresh
            self._version += 1
            return self._version

    def stats(self) -> dict[str, float]:
        return {"served": self.served, "version": self._version, "share": self._share}


@dataclass(frozen=True)
class RetrainingOutcome:
    stream_id: str
    config: str
    state: dict[str, np.ndarray]
    val_accuracy: float
    train_s: float
    gate_passed: bool = True  # False: scored below the deployed model, not hot-loaded
    # The deployed model on the same split, scored by the job (None: the stream's
    # current_accuracy stands for it).
    deployed_accuracy: float | None = None


class RetrainingJob:
    """Retrains one stream's model with one configuration."""

    def __init__(self, stream_id: str, share: float) -> None:
        self.stream_id = stream_id
        self.history: list[float] = []
        self.share = share
        _apply_share(share)

    def set_share(self, share: float) -> int:
        self.share = share
        return _apply_share(share)

    def progress(self) -> list[float]:
        """Validation accuracy after each epoch done so far."""
        return list(self.history)

    def run(
        self,
        state: dict[str, Any],
        factory: ModelFactory,
        train: tuple[np.ndarray, np.ndarray],
        val: tuple[np.ndarray, np.ndarray],
        config: RetrainingConfig,
        seed: int = 0,
    ) -> RetrainingOutcome:
        if config.hyperparameters is None:
            raise ValueError(f"retraining config {config.name} has no hyperparameters")
        deployed = model_from_state(state, factory)
        # The gate's rival, scored here on the split the candidate is scored on: the
        # stream's current_accuracy may be a figure the caller declared or estimated.
        deployed_accuracy = accuracy(deployed, *val)
        hp = config.hyperparameters
        n = len(train[1])
        pool = np.random.default_rng(seed).choice(
            n, max(1, round(hp.data_fraction * n)), replace=False
        )
        self.history = []
        _apply_share(self.share)
        model, _, train_s = retrain(
            deployed,
            train[0][pool],
            train[1][pool],
            hp,
            hp.epochs,
            seed,
            val=val,
            history=self.history,
            keep_frozen=frozen_names(deployed),
            after_epoch=lambda: _apply_share(self.share),  # a re-allocation, mid-run
        )
        return RetrainingOutcome(
            self.stream_id,
            config.name,
            state_of(model),
            accuracy(model, *val),
            train_s,
            deployed_accuracy=deployed_accuracy,
        )


@dataclass(frozen=True)
class StreamProfile:
    """What micro-profiling one stream at a window's start found."""

    configs: list[RetrainingConfig]  # estimates: accuracy after, seconds at 100% allocation
    current_accuracy: float  # the deployed model on the window's validation split
    seconds: float  # wall seconds the profiling took


def profile_stream(
    state: dict[str, Any],
    factory: ModelFactory,
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    candidates: Sequence[NamedConfig],
    settings: ProfileSettings,
    share: float,
) -> StreamProfile:
    """Micro-profile ``candidates`` from the deployed weights on this window's data.

    Runs with ``share`` of the device (threads on CPU); the measured seconds are scaled to
    100% allocation the way the scheduler scales them back (``d = c / R``).
    """
    threads = _apply_share(share)
    model = model_from_state(state, factory)
    current = accuracy(model, *val)
    t0 = time.perf_counter()
    estimates = micro_profile(model, train, val, candidates, settings, frozen_names(model))
    seconds = time.perf_counter() - t0
    scale = 1.0 if torch.cuda.is_available() else threads / (os.cpu_count() or 1)
    configs = [
        e.to_retraining_config().model_copy(update={"gpu_seconds": e.estimated_gpu_seconds * scale})
        for e in estimates
    ]
    return StreamProfile(configs, current, seconds)


@dataclass(frozen=True)
class WindowData:
    """A stream's labelled data for one window: the training pool and a validation split."""

    train: tuple[np.ndarray, np.ndarray]
    val: tuple[np.ndarray, np.ndarray]


@dataclass
class StreamRuntime:
    """What the server knows of one stream during a window."""

    stream: StreamWindow
    state: dict[str, np.ndarray]
    train: tuple[np.ndarray, np.ndarray]
    val: tuple[np.ndarray, np.ndarray]
    sample_fractions: dict[str, float]  # inference config name -> sampled frame fraction
    actor: Any = None
    done: bool = False
    # This stream's own model and retraining candidates (streams of different models share
    # one server); None: the server's ``model_factory`` and the candidates of begin_window.
    factory: ModelFactory | None = None
    candidates: Sequence[NamedConfig] | None = None
    min_gain: float = 0.0  # the gate its retrained model passes to be hot-loaded


@dataclass
class EdgeServer:
    """Drives the actors of one edge server through a retraining window."""

    scheduler: WindowScheduler
    gpus: float
    window_s: float
    a_min: float = 0.0
    delta_gpus: float = 0.1
    model_factory: ModelFactory = field(default_factory=edge_cnn_factory)
    poll_s: float = 0.5
    deviation_tolerance: float = 0.05
    streams: dict[str, StreamRuntime] = field(default_factory=dict)
    plans: list[WindowPlan] = field(default_factory=list)
    pruning: ConfigHistory | None = None  # template: each stream gets its own copy
    histories: dict[str, ConfigHistory] = field(default_factory=dict)
    node: str | None = None  # a live node every actor and task runs on (None: anywhere)
    on_gpu: bool | None = None  # whether the actors' node has a GPU (None: this host's)

    def _gpu(self) -> bool:
        return torch.cuda.is_available() if self.on_gpu is None else self.on_gpu

    def _pinned(self, options: dict[str, Any]) -> dict[str, Any]:
        if self.node is None:
            return options
        return {**options, "resources": {node_resource(self.node): 0.001}}

    def _options(self, share: float) -> dict[str, Any]:
        if self._gpu():
            return self._pinned({"num_gpus": max(0.01, min(1.0, share)), "num_cpus": 0,
                                 "max_concurrency": 4})  # fmt: skip
        return self._pinned({"num_cpus": 0, "max_concurrency": 4})

    def _factory(self, runtime: StreamRuntime) -> ModelFactory:
        return runtime.factory or self.model_factory

    def add_stream(self, runtime: StreamRuntime) -> None:
        runtime.actor = (
            ray.remote(InferenceJob)
            .options(**self._options(0.1))
            .remote(runtime.state, self._factory(runtime))
        )
        self.streams[runtime.stream.stream_id] = runtime

    def begin_window(
        self,
        data: Mapping[str, WindowData],
        candidates: Sequence[NamedConfig],
        settings: ProfileSettings | None = None,
    ) -> dict[str, StreamProfile]:
        """A new window: hand every stream its data and micro-profile the candidates.

        Profiling runs as one Ray task per stream, from the stream's deployed weights, the
        server split evenly between the tasks. With ``pruning`` set, a stream profiles only
        the candidates its history still keeps (configurations far from the estimated
        accuracy/cost Pareto front in past windows are dropped). The estimates become the
        stream's retraining configurations and the measured accuracy of its deployed model
        its current accuracy; :meth:`run_window` then plans from them.
        """
        missing = sorted(set(self.streams) - set(data))
        if missing:
            raise InvalidInputError(f"no window data for stream(s) {', '.join(missing)}")
        if not candidates:
            raise InvalidInputError("no retraining configurations to profile", field="candidates")
        settings = settings or ProfileSettings()
        share = 1.0 / len(self.streams)
        task_options: dict[str, Any] = {"num_cpus": 0}
        if self._gpu():
            task_options["num_gpus"] = share
        task = ray.remote(profile_stream).options(**self._pinned(task_options))
        refs = {}
        for sid, rt in self.streams.items():
            rt.train, rt.val, rt.done = data[sid].train, data[sid].val, False
            offered = list(rt.candidates or candidates)
            if self.pruning is not None:
                history = self.histories.setdefault(
                    sid, ConfigHistory(self.pruning.max_gap, self.pruning.min_windows)
                )
                offered = history.keep(offered) or offered
            refs[sid] = task.remote(
                rt.state,
                self._factory(rt),
                rt.train,
                rt.val,
                offered,
                settings,
                share,
            )
        profiles: dict[str, StreamProfile] = {}
        for sid, ref in refs.items():
            profile: StreamProfile = ray.get(ref)
            if sid in self.histories:
                self.histories[sid].record(
                    [Outcome(c.name, c.accuracy_after, c.gpu_seconds) for c in profile.configs]
                )
            rt = self.streams[sid]
            rt.stream = rt.stream.model_copy(
                update={
                    "current_accuracy": profile.current_accuracy,
                    "retraining_configs": profile.configs,
                }
            )
            profiles[sid] = profile
        return profiles

    def _problem(self, left_s: float, running: dict[str, str] | None = None) -> WindowProblem:
        """The rest of the window; mid-window a running job keeps its config, none is started."""
        rows = []
        for sid, rt in self.streams.items():
            configs = rt.stream.retraining_configs
            if running is not None:
                configs = [c for c in configs if running.get(sid) == c.name]
            rows.append(rt.stream.model_copy(update={"retraining_configs": configs}))
        return WindowProblem(
            window_s=left_s,
            gpus=self.gpus,
            delta_gpus=self.delta_gpus,
            a_min=self.a_min,
            streams=rows,
        )

    def _apply(self, plan: WindowPlan) -> None:
        calls = []
        for d in plan.streams:
            rt = self.streams[d.stream_id]
            fraction = rt.sample_fractions.get(d.inference_config or "", 0.0)
            calls.append(rt.actor.configure.remote(d.inference_gpus / self.gpus, fraction))
        ray.get(calls)
        self.plans.append(plan)

    def run_window(self, seed: int = 0) -> dict[str, RetrainingOutcome]:
        """Plan, start the chosen retraining jobs, and handle completions until all are done."""
        start = time.monotonic()
        plan = self.scheduler.plan(self._problem(self.window_s))
        self._apply(plan)
        running: dict[Any, tuple[str, str, Any]] = {}
        for d in plan.streams:
            if d.retraining_config is None:
                continue
            rt = self.streams[d.stream_id]
            config = next(c for c in rt.stream.retraining_configs if c.name == d.retraining_config)
            job: Any = (
                ray.remote(RetrainingJob)
                .options(**self._options(d.retraining_gpus))
                .remote(d.stream_id, d.retraining_gpus / self.gpus)
            )
            ref = job.run.remote(rt.state, self._factory(rt), rt.train, rt.val, config, seed)
            running[ref] = (d.stream_id, config.name, job)
        outcomes: dict[str, RetrainingOutcome] = {}
        checked: set[str] = set()
        while running:
            ready, _ = ray.wait(list(running), num_returns=1, timeout=self.poll_s)
            if not ready:
                if self._check_deviations(running, checked):
                    self._replan(start, running)
                continue
            stream_id, _config, _job = running.pop(ready[0])
            outcome = self._complete(self.streams[stream_id], ray.get(ready[0]))
            outcomes[stream_id] = outcome
            self._replan(start, running)
        return outcomes

    def _complete(self, rt: StreamRuntime, outcome: RetrainingOutcome) -> RetrainingOutcome:
        """A finished retraining: hot-loaded when it passes the gate against the deployed
        model on the stream's validation split, else the deployed model serves on."""
        deployed = outcome.deployed_accuracy
        if deployed is None:
            deployed = rt.stream.current_accuracy
        passed = passes_gate(outcome.val_accuracy, deployed, rt.min_gain)
        rt.done = True
        if passed:
            ray.get(rt.actor.load_checkpoint.remote(outcome.state))
            rt.state = outcome.state
            rt.stream = rt.stream.model_copy(update={"current_accuracy": outcome.val_accuracy})
        log.info(
            "retraining of %s done: validation %.3f vs %.3f deployed: %s",
            outcome.stream_id, outcome.val_accuracy, deployed,
            "hot-loaded" if passed else "kept the deployed model (gate)",
        )  # fmt: skip
        return dataclasses.replace(outcome, gate_passed=passed, deployed_accuracy=deployed)

    def _replan(self, start: float, running: dict[Any, tuple[str, str, Any]]) -> None:
        """Re-run the scheduler on the rest of the window; running jobs keep their configs."""
        left = self.window_s - (time.monotonic() - start)
        if left <= 0:
            return
        still = {sid: name for sid, name, _ in running.values()}
        replan = self.scheduler.plan(self._problem(left, still))
        self._apply(replan)
        ray.get(
            [
                job.set_share.remote(replan.decision(sid).retraining_gpus / self.gpus)
                for sid, _, job in running.values()
            ]
        )

    def _check_deviations(
        self, running: dict[Any, tuple[str, str, Any]], checked: set[str]
    ) -> bool:
        """Past half of its epochs, a job whose projected accuracy departs from the estimate by
        more than ``deviation_tolerance`` gets its estimate corrected (once); True if any did."""
        changed = False
        for sid, name, job in running.values():
            if sid in checked:
                continue
            rt = self.streams[sid]
            config = next(c for c in rt.stream.retraining_configs if c.name == name)
            epochs = config.hyperparameters.epochs if config.hyperparameters else 0
            history: list[float] = ray.get(job.progress.remote())
            if len(history) * 2 < epochs:
                continue
            checked.add(sid)
            projected = projected_accuracy(history, epochs)
            if (
                projected is None
                or abs(projected - config.accuracy_after) <= self.deviation_tolerance
            ):
                continue
            fixed = config.model_copy(update={"accuracy_after": projected})
            rt.stream = rt.stream.model_copy(
                update={
                    "retraining_configs": [
                        fixed if c.name == name else c for c in rt.stream.retraining_configs
                    ]
                }
            )
            changed = True
            log.info(
                "%s: projected %.3f vs estimate %.3f, re-planning",
                sid,
                projected,
                config.accuracy_after,
            )
        return changed
