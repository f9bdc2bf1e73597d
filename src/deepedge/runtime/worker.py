"""A training worker: one asynchronous training loop against the parameter server.

Each selected worker ``w_i`` receives its shard ``d_i`` from the data store (through the
Ray object store) and trains with its batch size ``b_i``, both taken from the plan. One
step (Deep-Edge, Sec. II/III): pull-free forward + backward on a batch with the latest
weights, push the gradient, receive the new weights (push + update + pull in one round
trip), then pace the step to the emulated device (:mod:`deepedge.runtime.emulation`).

With ``overlap_push`` the worker does not wait for the reply of its push: it computes the
next batch's gradient on the weights it has (one update staler) while the PS applies the
previous one, and collects the reply just before pushing again. This hides the PS round
trip behind compute when the PS runs elsewhere (a separate process or board).

:class:`TrainingWorker` is a plain class run as a Ray actor; ``fail_after_steps`` injects a
process crash (``os._exit``) for fault-tolerance tests and benchmarks.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.models import get_flat_gradients, set_flat_weights
from deepedge.runtime.emulation import EmulatedDevice, Pacer

log = logging.getLogger(__name__)


class LossKind(enum.Enum):
    CLASSIFICATION = "cross-entropy"
    REGRESSION = "mse"


@dataclass(frozen=True)
class WorkerEpochStats:
    worker_id: str
    epoch: int
    samples: int  # samples processed this epoch (= d_i)
    steps: int
    batch_size: int  # b_i actually used
    wall_s: float  # the epoch's wall-clock time on this worker
    compute_s: float  # forward + backward (real torch)
    ps_round_trip_s: float  # push + update + pull through the PS actor
    slept_s: float  # pacing to the emulated device
    overruns: int  # steps where the host was slower than the emulated device
    mean_loss: float


class TrainingWorker:
    """One worker actor (module docstring)."""

    def __init__(
        self,
        worker_id: str,
        model_factory: Callable[[], nn.Module],
        batch_size: int,
        device: EmulatedDevice | None = None,
        loss: LossKind = LossKind.CLASSIFICATION,
        seed: int = 0,
        fail_after_steps: int | None = None,
        torch_threads: int = 1,
        clip_grad_norm: float = 2.0,
        overlap_push: bool = False,
    ) -> None:
        if batch_size < 1:
            raise InvalidInputError("batch_size must be >= 1", field="batch_size")
        torch.set_num_threads(torch_threads)
        self.worker_id = worker_id
        self.model = model_factory()
        self.batch_size = batch_size
        self.device = device
        self.loss = loss
        self.rng = np.random.default_rng(seed)
        self.fail_after_steps = fail_after_steps
        self.steps_done = 0
        self.clip_grad_norm = clip_grad_norm
        self.overlap_push = overlap_push
        self.x: torch.Tensor | None = None
        self.y: torch.Tensor | None = None

    def load_shard(self, shard: tuple[np.ndarray, np.ndarray]) -> int:
        """Receive ``(inputs, targets)`` of this worker's shard; returns ``d_i``."""
        inputs, targets = shard
        if len(inputs) != len(targets):
            raise InvalidInputError("shard inputs and targets differ in length", field="shard")
        self.x = torch.as_tensor(inputs, dtype=torch.float32)
        dtype = torch.long if self.loss is LossKind.CLASSIFICATION else torch.float32
        self.y = torch.as_tensor(targets, dtype=dtype)
        return len(inputs)

    def ping(self) -> str:
        return self.worker_id

    def _loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.loss is LossKind.CLASSIFICATION:
            return nn.functional.cross_entropy(out, y)
        return nn.functional.mse_loss(out.reshape(y.shape), y)

    def run_epoch(self, ps: object, epoch: int) -> WorkerEpochStats:
        """Process the whole shard once, pushing every batch's gradient to ``ps``."""
        import ray  # the runtime is the only layer that imports ray

        if self.x is None or self.y is None:
            raise InvalidInputError("run_epoch before load_shard", field="shard")
        started = time.perf_counter()
        version, weights = ray.get(ps.pull.remote())  # type: ignore[attr-defined]
        set_flat_weights(self.model, weights)
        pacer = Pacer(self.device) if self.device is not None else None
        order = torch.as_tensor(self.rng.permutation(len(self.y)))
        compute_s = ps_s = loss_sum = 0.0
        steps = 0
        in_flight = None
        self.model.train()
        for start in range(0, len(order), self.batch_size):
            step_started = time.perf_counter()
            idx = order[start : start + self.batch_size]
            self.model.zero_grad(set_to_none=True)
            loss = self._loss(self.model(self.x[idx]), self.y[idx])
            loss.backward()
            # Clipping bounds what one stale gradient can do to the shared weights.
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
            grad = get_flat_gradients(self.model)
            grad_version = version
            t_mid = time.perf_counter()
            compute_s += t_mid - step_started
            if in_flight is not None:  # overlap mode: collect the previous push's reply now
                version, weights = ray.get(in_flight)
                set_flat_weights(self.model, weights)
            in_flight = ps.push.remote(  # type: ignore[attr-defined]
                self.worker_id, grad, grad_version
            )
            if not self.overlap_push:
                version, weights = ray.get(in_flight)
                set_flat_weights(self.model, weights)
                in_flight = None
            ps_s += time.perf_counter() - t_mid
            loss_sum += float(loss.detach())
            steps += 1
            self.steps_done += 1
            if self.fail_after_steps is not None and self.steps_done >= self.fail_after_steps:
                log.warning("%s: injected crash after %d steps", self.worker_id, self.steps_done)
                os._exit(1)
            if pacer is not None:
                pacer.pace(step_started)
        if in_flight is not None:
            ray.get(in_flight)
        return WorkerEpochStats(
            worker_id=self.worker_id,
            epoch=epoch,
            samples=len(order),
            steps=steps,
            batch_size=self.batch_size,
            wall_s=time.perf_counter() - started,
            compute_s=compute_s,
            ps_round_trip_s=ps_s,
            slept_s=pacer.slept_s if pacer else 0.0,
            overruns=pacer.overruns if pacer else 0,
            mean_loss=loss_sum / max(1, steps),
        )
