"""Stage 2 of a model update: what one launch of a plan starts, whichever executor runs it.

A launch is one attempt: the :class:`~deepedge.runtime.training.parameter_server.ParameterServer`
(from the last checkpoint when there is one, else from the initial weights' trainable
part, :func:`ps_arguments`), the :class:`~deepedge.runtime.training.datastore.DataStore` cut into
the
plan's shards, and one :class:`~deepedge.runtime.training.worker.TrainingWorker` per selected worker
(:func:`worker_arguments`), paced to its emulated device and holding its shard and the
full initial weights (its frozen parameters). An :class:`Executor` makes the launches of an
update and runs them (:class:`~deepedge.runtime.training.update_config.UpdateExecutor`): as Ray
actors
(:mod:`deepedge.runtime.training.ray_launch`) or as threads of the update's process
(:mod:`deepedge.runtime.training.thread_launch`). Either way the stages drive a launch through the
one :class:`Launch` interface below: start it, run an epoch on every worker and wait for
each (:meth:`Launch.start_epoch`, :meth:`Launch.wait`, :meth:`Launch.result`, which raise
:class:`WorkerDied` or :class:`ParameterServerLost` for the failure rules of
:mod:`deepedge.runtime.training.update_epochs`), read and checkpoint the PS, and kill it as one.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from torch import nn

from deepedge.learning.model_state import State
from deepedge.planning.sharding.plan import ShardPlan, WorkerAssignment
from deepedge.runtime.training.emulation import EmulatedDevice
from deepedge.runtime.training.monitor import PARAMETER_SERVER_ID
from deepedge.runtime.training.parameter_server import PSStats, asynchronous_sgd, load_checkpoint
from deepedge.runtime.training.update_config import (
    FaultInjection,
    NormStatistics,
    UpdateConfig,
    UpdateExecutor,
)
from deepedge.runtime.training.worker import LossKind, WorkerEpochStats

Data = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class UpdateInputs:
    """What one update trains on and from, the same for all its launches."""

    train: Data
    validation: Data
    model_factory: Callable[[], nn.Module]
    initial_weights: np.ndarray  # the model's full flat vector (float32)
    trainable: np.ndarray  # bool, same length: the part the PS holds and trains
    checkpoint_dir: Path
    config: UpdateConfig
    initial_buffers: State = field(default_factory=dict)  # the initial model's buffers

    @property
    def share_buffers(self) -> bool:
        """Whether the PS owns the buffers (averaged from the workers' pushes)."""
        return bool(self.initial_buffers) and (
            self.config.norm_statistics is NormStatistics.PS_AVERAGE
        )

    @property
    def ps_mask(self) -> np.ndarray | None:
        """``trainable``, or None when every parameter trains (the PS holds all of them)."""
        return None if self.trainable.all() else self.trainable


@dataclass
class FaultBudget:
    """Injected crashes still to come: ``worker -> launches left``, and after how many steps."""

    left: dict[str, int] = field(default_factory=dict)
    after_steps: dict[str, int] = field(default_factory=dict)

    def take(self, worker_id: str) -> int | None:
        """The crash point for this launch of ``worker_id`` (None: no crash)."""
        if self.left.get(worker_id, 0) <= 0:
            return None
        self.left[worker_id] -= 1
        return self.after_steps[worker_id]

    @classmethod
    def of(cls, faults: tuple[FaultInjection, ...]) -> FaultBudget:
        return cls(
            {f.worker_id: f.times for f in faults}, {f.worker_id: f.after_steps for f in faults}
        )


def average_decay(plan: ShardPlan, average_epochs: float) -> float:
    """beta of the PS's weight average: a span of ``average_epochs`` of ``plan``'s updates."""
    if average_epochs <= 0:
        return 0.0
    updates = sum(-(-w.shard // w.batch_size) for w in plan.workers if w.selected and w.shard)
    return max(0.0, 1.0 - 1.0 / max(1.0, average_epochs * updates))


def epoch_timeout_s(
    plan: ShardPlan, devices: dict[str, EmulatedDevice], config: UpdateConfig
) -> float:
    """The heartbeat: ``epoch_timeout_factor`` x the slowest modelled epoch, at least
    ``min_epoch_timeout_s``."""
    slowest = max(
        d.paced_step_s * -(-plan.shards[w] // max(1, d.batch_size)) for w, d in devices.items()
    )
    return max(config.min_epoch_timeout_s, config.epoch_timeout_factor * slowest)


def ps_arguments(inputs: UpdateInputs, plan: ShardPlan, faults: FaultBudget) -> dict[str, Any]:
    """The parameter server's constructor arguments for a launch of ``plan``: from the last
    checkpoint when there is one, else from the initial weights' trainable part, with the
    configured SGD compensated for the plan's asynchrony and an injected crash if one is due
    (its version counted from the checkpoint's)."""
    config, trainable = inputs.config, inputs.ps_mask
    ckpt = load_checkpoint(inputs.checkpoint_dir)
    lr, momentum = (
        asynchronous_sgd(config.lr, config.momentum, len(plan.selected_ids))
        if config.optimizer == "sgd"
        else (config.lr, 0.0)
    )
    common: dict[str, Any] = {
        "lr": lr,
        "momentum": momentum,
        "optimizer": config.optimizer,
        "weight_decay": config.weight_decay,
        "checkpoint_dir": str(inputs.checkpoint_dir),
        "checkpoint_every_updates": config.checkpoint_every_updates,
        "average_decay": average_decay(plan, config.average_epochs),
    }
    ps_crash = faults.take(PARAMETER_SERVER_ID)
    if ps_crash is not None:
        start_version = ckpt.version if ckpt is not None else 0
        common["fail_after_updates"] = start_version + ps_crash
    shared = inputs.initial_buffers if inputs.share_buffers else {}
    if ckpt is not None:
        return {
            "weights": ckpt.weights,
            "velocity": ckpt.velocity,
            "version": ckpt.version,
            "meta": ckpt.meta,
            "average": ckpt.average,
            "second": ckpt.second,
            "steps": ckpt.steps,
            "buffers": ckpt.buffers or shared,
            **common,
        }
    start = inputs.initial_weights
    return {"weights": start if trainable is None else start[trainable], "buffers": shared,
            **common}  # fmt: skip


def worker_arguments(
    inputs: UpdateInputs,
    assignment: WorkerAssignment,
    device: EmulatedDevice,
    faults: FaultBudget,
    launch_no: int,
    **overrides: Any,
) -> dict[str, Any]:
    """A training worker's constructor arguments for ``assignment`` in launch ``launch_no``
    (its seed differs per launch, an injected crash is taken if one is due); ``overrides``
    give the executor's own (the initial weights as it ships them, its push window)."""
    config, wid = inputs.config, assignment.id
    arguments: dict[str, Any] = {
        "worker_id": wid,
        "model_factory": inputs.model_factory,
        "batch_size": assignment.batch_size,
        "device": device,
        "loss": LossKind.CLASSIFICATION,
        "seed": config.seed + launch_no * 101 + zlib.crc32(wid.encode()) % 997,
        "fail_after_steps": faults.take(wid),
        "push_window": config.push_window,
        "fresh_wait_frac": config.fresh_wait_frac,
        "initial_weights": inputs.initial_weights,
        "gradient_encoding": config.gradient_encoding,
        "initial_buffers": inputs.initial_buffers,
        "share_buffers": inputs.share_buffers,
    }
    arguments.update(overrides)
    return arguments


class WorkerDied(Exception):
    """A worker of the launch is gone (its process died, or its thread crashed)."""


class ParameterServerLost(Exception):
    """The launch's parameter server is gone (its process died, or it crashed)."""


class Launch(Protocol):
    """One attempt's PS, data store and workers, as the update's stages drive them.

    An epoch's handles are opaque (Ray's object references, a thread pool's futures):
    :meth:`start_epoch` maps each to its worker; :meth:`wait` hands back at most one done;
    :meth:`result` gives its statistics or raises :class:`WorkerDied` (a strike for that
    worker) or :class:`ParameterServerLost` (none); the PS's methods raise
    :class:`ParameterServerLost` when it is gone.
    """

    @property
    def worker_ids(self) -> list[str]: ...

    def start(
        self,
        inputs: UpdateInputs,
        plan: ShardPlan,
        devices: dict[str, EmulatedDevice],
        faults: FaultBudget,
        launch_no: int,
        ps_node: str | None = None,
    ) -> None:
        """Start the PS (on ``ps_node`` where the cluster has it), cut the data into
        ``plan``'s shards and start a worker per selected worker, holding its shard."""
        ...

    def start_epoch(self, epoch: int) -> dict[Any, str]: ...

    def wait(self, pending: list[Any], timeout_s: float) -> tuple[list[Any], list[Any]]: ...

    def result(self, done: Any) -> WorkerEpochStats: ...

    def pull_average(self) -> np.ndarray:
        """The PS's averaged trainable weights, to score."""
        ...

    def pull_buffers(self) -> State: ...

    def checkpoint(self, meta: dict[str, Any]) -> None: ...

    def set_lr_scale(self, scale: float) -> None: ...

    def stats(self) -> PSStats: ...

    def placement(self) -> dict[str, str | None]:
        """Where each worker (by id) and the PS (``PARAMETER_SERVER_ID``) ran."""
        ...

    def kill(self) -> None:
        """Stop every part of the launch (idempotent; a part already gone is skipped)."""
        ...


class Executor(Protocol):
    """Makes the launches of one update (module docstring)."""

    kind: UpdateExecutor

    def start(self) -> None:
        """Bring up what the launches run on, once per update (Ray: start or join it)."""
        ...

    def launch(self) -> Launch:
        """A new launch, not started yet (so that a failed start is still killed)."""
        ...
