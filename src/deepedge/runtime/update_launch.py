"""Stage 2 of a model update: launch the actors of one plan (PS, data store, workers).

A :class:`Launch` holds the Ray actors of one attempt: the :class:`ParameterServer` (from
the last checkpoint when there is one, else from the initial weights' trainable part) with
its gradient channel, the :class:`DataStore` cut into the plan's shards, and one
:class:`TrainingWorker` per selected worker, paced to its emulated device and holding its
shard and the full initial weights (one object in the store, read once by each worker:
its frozen parameters). The attempt's actors are killed together (:meth:`Launch.kill`).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ray
from torch import nn

from deepedge.learning.model_state import State
from deepedge.planning.sharding.plan import ShardPlan
from deepedge.runtime.datastore import DataStore
from deepedge.runtime.emulation import EmulatedDevice
from deepedge.runtime.gradient_channel import ChannelAddress
from deepedge.runtime.monitor import PARAMETER_SERVER_ID
from deepedge.runtime.parameter_server import (
    ParameterServer,
    asynchronous_sgd,
    load_checkpoint,
)
from deepedge.runtime.session import actor_node_id, actor_options, driver_node_options
from deepedge.runtime.update_config import (
    FaultInjection,
    NormStatistics,
    PushTransport,
    UpdateConfig,
)
from deepedge.runtime.worker import LossKind, TrainingWorker

log = logging.getLogger(__name__)


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


class Launch:
    """The Ray actors of one launch (PS, data store, workers); killed as one."""

    def __init__(self) -> None:
        self.ps: Any = None
        self.store: Any = None
        self.workers: dict[str, Any] = {}
        self.channel: ChannelAddress | None = None  # the PS's gradient channel, if open

    def kill(self) -> None:
        for handle in [*self.workers.values(), self.ps, self.store]:
            if handle is not None:
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:  # an actor of a lost node may be gone already
                    log.debug("could not kill an actor of the launch", exc_info=True)
        self.workers = {}
        self.ps = self.store = self.channel = None


def placement(launch: Launch) -> dict[str, str | None]:
    """The Ray node each worker (by id) and the PS (``PARAMETER_SERVER_ID``) runs on."""
    where = {wid: actor_node_id(h) for wid, h in launch.workers.items()}
    if launch.ps is not None:
        where[PARAMETER_SERVER_ID] = actor_node_id(launch.ps)
    return where


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


def start_launch(
    launch: Launch,
    inputs: UpdateInputs,
    plan: ShardPlan,
    devices: dict[str, EmulatedDevice],
    faults: FaultBudget,
    launch_no: int,
    ps_node: str | None = None,
) -> None:
    """Start ``launch``'s actors for ``plan`` and hand every worker its shard.

    The PS holds the trainable part of ``inputs.initial_weights`` (the model's full flat
    vector). Each worker runs on its node (its id's ``deepedge-node:`` resource, when the
    cluster has it), the PS on ``ps_node`` (likewise) and the data store on the driver's
    node.
    """
    launch.ps = _start_ps(inputs, plan, faults, ps_node)
    if inputs.config.transport is PushTransport.CHANNEL:
        launch.channel = ray.get(launch.ps.open_channel.remote())
    x_train, y_train = inputs.train
    launch.store = (
        ray.remote(DataStore)
        .options(**driver_node_options())
        .remote(x_train, y_train, inputs.config.seed)
    )
    ray.get(launch.store.assign.remote(plan.shards))
    _start_workers(launch, inputs, plan, devices, faults, launch_no)
    ray.get([h.load_shard.remote(launch.store.shard.remote(w)) for w, h in launch.workers.items()])


def _start_ps(
    inputs: UpdateInputs, plan: ShardPlan, faults: FaultBudget, ps_node: str | None
) -> Any:
    """The parameter server's actor: from the last checkpoint when there is one, else from
    the initial weights' trainable part (with an injected crash, if one is due)."""
    config, trainable = inputs.config, inputs.ps_mask
    ckpt = load_checkpoint(inputs.checkpoint_dir)
    ps_cls = ray.remote(ParameterServer).options(**actor_options(ps_node))
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
    if ckpt is not None:
        return ps_cls.remote(
            weights=ckpt.weights,
            velocity=ckpt.velocity,
            version=ckpt.version,
            meta=ckpt.meta,
            average=ckpt.average,
            second=ckpt.second,
            steps=ckpt.steps,
            buffers=ckpt.buffers or (inputs.initial_buffers if inputs.share_buffers else {}),
            **common,
        )
    start = inputs.initial_weights
    return ps_cls.remote(
        weights=start if trainable is None else start[trainable],
        buffers=inputs.initial_buffers if inputs.share_buffers else {},
        **common,
    )


def _start_workers(
    launch: Launch,
    inputs: UpdateInputs,
    plan: ShardPlan,
    devices: dict[str, EmulatedDevice],
    faults: FaultBudget,
    launch_no: int,
) -> None:
    """One training worker per selected worker of ``plan``, each on its node, each with the
    full initial weights (one object in the store: its frozen parameters)."""
    config = inputs.config
    full_weights = ray.put(inputs.initial_weights)
    buffers = ray.put(inputs.initial_buffers)
    for assignment in plan.workers:
        if not assignment.selected:
            continue
        wid = assignment.id
        launch.workers[wid] = (
            ray.remote(TrainingWorker)
            .options(**actor_options(wid))
            .remote(
                wid,
                inputs.model_factory,
                assignment.batch_size,
                devices[wid],
                LossKind.CLASSIFICATION,
                config.seed + launch_no * 101 + zlib.crc32(wid.encode()) % 997,
                faults.take(wid),
                push_window=config.push_window,
                fresh_wait_frac=config.fresh_wait_frac,
                initial_weights=full_weights,
                gradient_encoding=config.gradient_encoding,
                initial_buffers=buffers,
                share_buffers=inputs.share_buffers,
            )
        )
