"""Training steps, epochs and evaluation for the edge and golden models (plain torch).

One training step (Deep-Edge, Section II): forward pass and loss on a batch, backward pass,
parameter update; :func:`training_step` does all three locally (a parameter-server worker
stops after the backward pass and pushes its gradients, ``runtime/``).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.models import GoldenModel, select_device
from deepedge.learning.objective import MetricKind, metric_hits

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainConfig:
    """Local training: SGD with momentum (the defaults suit the edge CNN on 16x16 digits)
    or Adam (``optimizer="adam"``: AdamW's decoupled weight decay); an epoch is at most
    ``max_batches_per_epoch`` batches of a fresh permutation (None: the whole set).
    ``cosine``: the learning rate decays from ``lr`` to 0 along a half cosine over the
    steps of one :func:`train_epochs` call (more accuracy from the same steps)."""

    lr: float = 0.05
    momentum: float = 0.9
    batch_size: int = 32
    weight_decay: float = 0.0
    optimizer: str = "sgd"
    max_batches_per_epoch: int | None = None
    cosine: bool = False

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.batch_size < 1 or not 0 <= self.momentum < 1:
            raise InvalidInputError("need lr > 0, batch_size >= 1, 0 <= momentum < 1", field="lr")
        if self.optimizer not in {"sgd", "adam"}:
            raise InvalidInputError(f"unknown optimizer {self.optimizer!r}", field="optimizer")
        if self.max_batches_per_epoch is not None and self.max_batches_per_epoch < 1:
            raise InvalidInputError("max_batches_per_epoch must be >= 1", field="max_batches")


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if config.optimizer == "adam":
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.SGD(
        params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
    )


def _as_tensors(
    images: np.ndarray | torch.Tensor, labels: np.ndarray | torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.as_tensor(images, dtype=torch.float32, device=device)
    y = torch.as_tensor(labels, dtype=torch.long, device=device)
    return x, y


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = model(x)
    if isinstance(model, GoldenModel):  # returns log-probabilities already
        return nn.functional.nll_loss(out, y)
    return nn.functional.cross_entropy(out, y)


def training_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    images: np.ndarray | torch.Tensor,
    labels: np.ndarray | torch.Tensor,
) -> float:
    """One full local step (forward, backward, update); returns the batch loss."""
    device = next(model.parameters()).device
    x, y = _as_tensors(images, labels, device)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_of(model, x, y)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


@torch.no_grad()
def predict(model: nn.Module, images: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Predicted class per image (int64); ``model`` may be a frozen TorchScript module
    (its weights are constants then: it runs on the CPU unless a tensor says otherwise)."""
    first = next(itertools.chain(model.parameters(), model.buffers()), None)
    device = first.device if first is not None else torch.device("cpu")
    model.eval()
    out: list[np.ndarray] = []
    with torch.inference_mode():
        for start in range(0, len(images), batch_size):
            x = torch.as_tensor(
                images[start : start + batch_size], dtype=torch.float32, device=device
            )
            out.append(model(x).argmax(dim=1).cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def accuracy(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of ``images`` whose predicted class equals ``labels``."""
    if len(labels) == 0:
        raise InvalidInputError("cannot score an empty set", field="labels")
    return float(np.mean(predict(model, images) == labels))


def metric_score(
    model: nn.Module,
    images: np.ndarray,
    labels: np.ndarray,
    metric: MetricKind = MetricKind.ACCURACY,
    batch_size: int = 256,
) -> float:
    """Fraction of ``images`` that ``metric`` counts right (evaluation mode, in batches)."""
    if len(labels) == 0:
        raise InvalidInputError("cannot score an empty set", field="labels")
    device = next(model.parameters()).device
    model.eval()
    hits = 0
    with torch.no_grad():
        for start in range(0, len(labels), batch_size):
            end = start + batch_size
            out = model(torch.as_tensor(images[start:end], dtype=torch.float32, device=device))
            hits += int(
                metric_hits(metric, out, torch.as_tensor(labels[start:end], device=device)).sum()
            )
    return hits / len(labels)


def train_epochs(
    model: nn.Module,
    images: np.ndarray,
    labels: np.ndarray,
    epochs: int,
    config: TrainConfig | None = None,
    seed: int = 0,
    on_epoch: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Plain local mini-batch SGD for ``epochs`` epochs; returns the mean loss per epoch.

    ``on_epoch(epoch, mean_loss)`` is called after each epoch (1-based).
    """
    config = config or TrainConfig()
    if epochs < 0:
        raise InvalidInputError("epochs must be >= 0", field="epochs")
    device = next(model.parameters()).device
    optimizer = make_optimizer(model, config)
    rng = np.random.default_rng(seed)
    x_all, y_all = _as_tensors(images, labels, device)
    losses: list[float] = []
    stop = len(labels)
    if config.max_batches_per_epoch is not None:
        stop = min(stop, config.max_batches_per_epoch * config.batch_size)
    steps, step = epochs * math.ceil(stop / config.batch_size), 0
    for epoch in range(1, epochs + 1):
        order = torch.as_tensor(rng.permutation(len(labels)), device=device)
        total, batches = 0.0, 0
        for start in range(0, stop, config.batch_size):
            if config.cosine:
                for group in optimizer.param_groups:
                    group["lr"] = config.lr * 0.5 * (1.0 + math.cos(math.pi * step / steps))
                step += 1
            idx = order[start : start + config.batch_size]
            total += training_step(model, optimizer, x_all[idx], y_all[idx])
            batches += 1
        losses.append(total / max(1, batches))
        if on_epoch is not None:
            on_epoch(epoch, losses[-1])
    return losses


GOLDEN_CONFIG = TrainConfig(lr=0.03, momentum=0.9, batch_size=64, weight_decay=1e-4)


def train_golden(
    images: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    image_size: int,
    epochs: int = 12,
    members: int = 3,
    seed: int = 0,
    device: str = "auto",
    config: TrainConfig = GOLDEN_CONFIG,
) -> GoldenModel:
    """Train a :class:`GoldenModel` ensemble; each member sees its own bootstrap order."""
    torch.manual_seed(seed)
    golden = GoldenModel(n_classes, image_size, members).to(select_device(device))
    for i, member in enumerate(golden.members):
        train_epochs(member, images, labels, epochs, config, seed=seed + 101 * i)
    golden.eval()
    log.info("golden model trained: %d members x %d epochs", members, epochs)
    return golden
