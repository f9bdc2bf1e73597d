"""The DL model-update task: real PyTorch training steps against a parameter server.

One step on a batch of ``b`` samples is

1. *compute*: forward pass, cross-entropy loss, backward pass (timed; CUDA synchronised);
2. *update*: push the flat gradient to the parameter server, which applies SGD, and pull
   the new weights back into the model (timed as one round trip).

A measurement window runs steps for ``duration_s`` and reports the Deep-Edge quantities
of equations (5) and (6):

    t_compute = sum_k compute_k / (K b)      seconds per sample
    t_update  = sum_k round_trip_k / K       seconds per iteration

over the window's steps ``k = 1..K`` after the first (a warm-up step: the first one after a
change of batch size pays for new buffers). Means, not medians: an epoch lasts the *sum* of
its steps, and under CPU stress the step times are a mixture of contended and uncontended
steps whose median jumps between the two modes from one window to the next, while the
mean moves with the mixing share (measured side by side: the mean's repeat spread was
lower at every stress level tried).

The task is model-agnostic: it trains whatever ``torch.nn.Module`` it is given on the
given images (``(N, C, H, W)`` float32) and integer labels.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError, RunFailedError
from deepedge.profiling.loopback_ps import PsClient

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UpdateWindow:
    batch_size: int
    n_steps: int
    t_compute_s: float  # seconds per sample (mean step compute / b, warm-up step excluded)
    t_update_s: float  # seconds per iteration (mean push+update+pull)
    t_update_server_s: float  # mean seconds the server spent applying the update
    loss_first: float
    loss_last: float


def flat_weights(model: nn.Module) -> np.ndarray:
    return (
        torch.nn.utils.parameters_to_vector(model.parameters())
        .detach()
        .cpu()
        .numpy()
        .astype(np.float32)
    )


class UpdateTask:
    """Trains ``model`` step by step; every gradient goes through ``ps`` (a worker's client)."""

    def __init__(
        self,
        model: nn.Module,
        images: np.ndarray,
        labels: np.ndarray,
        ps: PsClient,
        seed: int = 0,
        device: torch.device | None = None,
    ) -> None:
        if images.ndim != 4 or len(images) != len(labels) or len(images) == 0:
            raise InvalidInputError("images must be (N, C, H, W) with one label each", "images")
        self.device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(self.device)
        self._x = torch.as_tensor(images, dtype=torch.float32, device=self.device)
        self._y = torch.as_tensor(labels, dtype=torch.long, device=self.device)
        self._ps = ps
        self._rng = np.random.default_rng(seed)
        self._loss = nn.CrossEntropyLoss()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def step(self, batch_size: int) -> tuple[float, float, float, float]:
        """One step; returns ``(compute_s, round_trip_s, server_update_s, loss)``."""
        index = torch.as_tensor(
            self._rng.integers(0, len(self._y), size=batch_size), device=self.device
        )
        x, y = self._x[index], self._y[index]
        self.model.zero_grad(set_to_none=True)
        self._sync()
        start = time.perf_counter()
        loss = self._loss(self.model(x), y)
        loss.backward()
        self._sync()
        compute_s = time.perf_counter() - start

        start = time.perf_counter()
        grads = [
            p.grad if p.grad is not None else torch.zeros_like(p) for p in self.model.parameters()
        ]
        flat_grad = torch.nn.utils.parameters_to_vector(grads).detach().cpu().numpy()
        reply = self._ps.push_pull(flat_grad)
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(
                torch.as_tensor(reply.weights, device=self.device), self.model.parameters()
            )
        self._sync()
        update_s = time.perf_counter() - start
        return compute_s, update_s, reply.server_update_s, float(loss.detach())

    def run_window(
        self,
        batch_size: int,
        duration_s: float,
        min_steps: int = 3,
        more: Callable[[], bool] | None = None,
        max_duration_s: float | None = None,
    ) -> UpdateWindow:
        """Steps for ``duration_s`` and at least ``min_steps``; then on while ``more()`` holds,
        up to ``max_duration_s`` (4 x ``duration_s`` by default)."""
        if batch_size < 1:
            raise InvalidInputError(f"batch_size must be >= 1, got {batch_size}", "batch_size")
        computes: list[float] = []
        updates: list[float] = []
        servers: list[float] = []
        losses: list[float] = []
        start = time.monotonic()
        end = start + duration_s
        hard_end = start + (4 * duration_s if max_duration_s is None else max_duration_s)
        while len(computes) < min_steps or (
            time.monotonic() < end or (more is not None and more() and time.monotonic() < hard_end)
        ):
            compute_s, update_s, server_s, loss = self.step(batch_size)
            computes.append(compute_s)
            updates.append(update_s)
            servers.append(server_s)
            losses.append(loss)
        if not np.isfinite(losses[-1]):
            raise RunFailedError("the update task diverged (non-finite loss)")
        skip = 1 if len(computes) > 1 else 0  # the warm-up step (module docstring)
        return UpdateWindow(
            batch_size=batch_size,
            n_steps=len(computes) - skip,
            t_compute_s=float(np.mean(computes[skip:])) / batch_size,
            t_update_s=float(np.mean(updates[skip:])),
            t_update_server_s=float(np.mean(servers[skip:])),
            loss_first=losses[0],
            loss_last=losses[-1],
        )
