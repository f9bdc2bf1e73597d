"""The plain single-process training loop the parameter server is measured against.

:func:`plain_loop_epoch_walls` runs ordinary local mini-batch SGD with momentum (one torch
thread, no parameter server) in a Ray worker process, so that it gets the same kind of
process, priority and thread count as a :class:`TrainingWorker`; only the PS round trips
differ between the two measurements.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import ray
import torch
from torch import nn

from deepedge.learning.training import TrainConfig, make_optimizer, training_step


def _epoch_walls(
    factory: Callable[[], nn.Module],
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    epochs: int,
    lr: float,
    momentum: float,
    seed: int,
) -> list[float]:
    torch.set_num_threads(1)
    model = factory()
    opt = make_optimizer(model, TrainConfig(lr=lr, momentum=momentum))
    xt = torch.as_tensor(np.array(x, dtype=np.float32))
    yt = torch.as_tensor(np.array(y, dtype=np.int64))
    rng = np.random.default_rng(seed)
    walls: list[float] = []
    for _ in range(epochs):
        started = time.perf_counter()
        order = torch.as_tensor(rng.permutation(len(yt)))
        for s in range(0, len(yt), batch_size):
            idx = order[s : s + batch_size]
            training_step(model, opt, xt[idx], yt[idx])
        walls.append(time.perf_counter() - started)
    return walls


def plain_loop_epoch_walls(
    factory: Callable[[], nn.Module],
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    epochs: int,
    lr: float,
    momentum: float,
    seed: int = 0,
) -> list[float]:
    """Wall time of each of ``epochs`` epochs of the plain loop, run as a Ray task."""
    task = ray.remote(_epoch_walls).options(num_cpus=0)
    return list(ray.get(task.remote(factory, x, y, batch_size, epochs, lr, momentum, seed)))
