"""Small reference models with the layers real workloads use: BatchNorm and a tabular MLP.

* :class:`BatchNormCNN` - a MobileNet-style image classifier: a 3x3 stem, then blocks of a
  depthwise 3x3 and a pointwise 1x1 convolution, each followed by BatchNorm and ReLU
  (stride 2 every other block), global average pooling and a linear ``head``. Its
  BatchNorm layers keep running statistics, so it serves correctly only with its buffers
  (:mod:`deepedge.learning.model_state`).
* :class:`TabularMLP` - feature vector -> hidden layers (Linear, LayerNorm, ReLU, dropout)
  -> class scores: the model of a tabular workload.

Both are deterministic in ``seed`` (the factory seeds torch around construction).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from deepedge.core.errors import InvalidInputError


def _seeded(seed: int) -> torch.Tensor:
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    return state


def _separable(c_in: int, c_out: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_in, 3, stride=stride, padding=1, groups=c_in, bias=False),
        nn.BatchNorm2d(c_in),
        nn.ReLU(inplace=True),
        nn.Conv2d(c_in, c_out, 1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class BatchNormCNN(nn.Module):
    """stem(3x3, stride 2) -> ``blocks`` separable blocks -> pool -> linear ``head``."""

    def __init__(
        self, n_classes: int = 10, channels: int = 3, width: int = 16, blocks: int = 4
    ) -> None:
        super().__init__()
        if n_classes < 2 or width < 1 or blocks < 1 or channels < 1:
            raise InvalidInputError(
                "need n_classes >= 2, channels >= 1, width >= 1, blocks >= 1", field="n_classes"
            )
        layers: list[nn.Module] = [
            nn.Sequential(
                nn.Conv2d(channels, width, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            )
        ]
        c = width
        for k in range(blocks):
            out = c * 2 if k % 2 == 1 else c
            layers.append(_separable(c, out, 2 if k % 2 == 1 else 1))
            c = out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(c, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


def make_bn_cnn(
    n_classes: int = 10, channels: int = 3, width: int = 16, blocks: int = 4, seed: int = 0
) -> BatchNormCNN:
    """A freshly initialised :class:`BatchNormCNN`, deterministic in ``seed``."""
    state = _seeded(seed)
    try:
        return BatchNormCNN(n_classes, channels, width, blocks)
    finally:
        torch.random.set_rng_state(state)


class TabularMLP(nn.Module):
    """``n_features`` -> hidden layers (Linear, LayerNorm, ReLU, dropout) -> ``n_classes``."""

    def __init__(
        self,
        n_features: int,
        n_classes: int,
        hidden: Sequence[int] = (64, 32),
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if n_features < 1 or n_classes < 2 or not 0 <= dropout < 1:
            raise InvalidInputError(
                "need n_features >= 1, n_classes >= 2 and 0 <= dropout < 1", field="n_features"
            )
        layers: list[nn.Module] = []
        width = n_features
        for size in hidden:
            layers += [nn.Linear(width, size), nn.LayerNorm(size), nn.ReLU(), nn.Dropout(dropout)]
            width = size
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x.flatten(1)))


def make_mlp(
    n_features: int,
    n_classes: int,
    hidden: Sequence[int] = (64, 32),
    dropout: float = 0.1,
    seed: int = 0,
) -> TabularMLP:
    """A freshly initialised :class:`TabularMLP`, deterministic in ``seed``."""
    state = _seeded(seed)
    try:
        return TabularMLP(n_features, n_classes, tuple(hidden), dropout)
    finally:
        torch.random.set_rng_state(state)
