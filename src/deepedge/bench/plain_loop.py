"""The plain single-process training loop the parameter server is measured against.

:class:`PlainLoop` runs ordinary local mini-batch SGD with momentum (one torch thread, no
parameter server), hosted in a Ray actor started with the same options as a
:class:`~deepedge.runtime.training.worker.TrainingWorker`
(:func:`deepedge.runtime.training.hosted.hosted`),
so that it gets the same kind of process, priority and thread count and, like the worker,
keeps its model and data across calls; only the PS round trips differ between the two
measurements (``python -m deepedge.bench.update``, ``deepedge.bench.workloads``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from deepedge.learning.training import TrainConfig, make_optimizer, training_step
from deepedge.runtime.training.hosted import hosted


class PlainLoop:
    """Local SGD with momentum on ``(x, y)``; :meth:`epoch_walls` times whole epochs."""

    def __init__(
        self,
        factory: Callable[[], nn.Module],
        x: np.ndarray,
        y: np.ndarray,
        lr: float,
        momentum: float,
        seed: int = 0,
    ) -> None:
        torch.set_num_threads(1)
        self.model = factory()
        self.opt = make_optimizer(self.model, TrainConfig(lr=lr, momentum=momentum))
        self.x = torch.as_tensor(np.array(x, dtype=np.float32))
        self.y = torch.as_tensor(np.array(y, dtype=np.int64))
        self.rng = np.random.default_rng(seed)

    def epoch_walls(self, batch_size: int, epochs: int) -> list[float]:
        """Wall time of each of ``epochs`` epochs (one ``training_step`` per batch)."""
        walls: list[float] = []
        for _ in range(epochs):
            started = time.perf_counter()
            order = torch.as_tensor(self.rng.permutation(len(self.y)))
            for s in range(0, len(self.y), batch_size):
                idx = order[s : s + batch_size]
                training_step(self.model, self.opt, self.x[idx], self.y[idx])
            walls.append(time.perf_counter() - started)
        return walls


@contextmanager
def plain_loop(
    factory: Callable[[], nn.Module],
    x: np.ndarray,
    y: np.ndarray,
    lr: float,
    momentum: float,
    seed: int = 0,
) -> Iterator[Callable[[int, int], list[float]]]:
    """A hosted :class:`PlainLoop` (the worker actors' options: 0 CPUs, no restarts), as
    ``epoch_walls(batch_size, epochs)``; the actor is killed when the block ends."""
    with hosted(PlainLoop, factory, x, y, lr, momentum, seed) as loop:

        def epoch_walls(batch_size: int, epochs: int) -> list[float]:
            return loop.call(PlainLoop.epoch_walls, batch_size, epochs)

        yield epoch_walls
