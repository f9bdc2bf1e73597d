"""Scoring through cached frozen-prefix outputs gives the full model's accuracy, or falls back."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from deepedge.learning.frozen_prefix import cacheable_prefix, make_scorer
from deepedge.learning.microprofiler import build_retraining_model
from deepedge.learning.models import make_edge_model
from deepedge.learning.resnet import make_resnet
from deepedge.learning.training import TrainConfig, accuracy, make_optimizer, training_step
from deepedge.planning.window.documents import RetrainingHyperparameters


def _hp(frozen: int, classes: int) -> RetrainingHyperparameters:
    return RetrainingHyperparameters(
        epochs=1, batch_size=8, last_layer_neurons=classes, frozen_layers=frozen, data_fraction=1.0
    )


class _ScaledInput(nn.Module):
    """A model whose forward does something before ``features``: the cache must not apply."""

    def __init__(self) -> None:
        super().__init__()
        base = make_edge_model(4, 16, seed=0)
        self.features = base.features
        self.head = base.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(2.0 * x - 1.0), 1))


class _BatchNormPrefix(nn.Module):
    """The first block keeps running statistics: a training step changes its output."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()),
            nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1)),
        )
        self.head = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


def _data(channels: int, size: int, n: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (
        rng.random((n, channels, size, size)).astype(np.float32),
        rng.integers(0, classes, n),
    )


@pytest.mark.parametrize(
    ("name", "frozen", "cached"),
    [
        ("resnet", 4, True),  # stem..layer3 frozen: layer4 and the head evaluate
        ("resnet", 5, True),  # the whole backbone frozen: only the head evaluates
        ("resnet", 0, False),  # nothing frozen: nothing to cache
        ("edge", 1, True),
        ("scaled-input", 1, False),  # forward is not features-first: logits differ, fallback
        ("batchnorm", 1, False),  # running statistics in the prefix
    ],
)
def test_scorer_matches_the_full_model_after_training(name: str, frozen: int, cached: bool) -> None:
    torch.manual_seed(0)
    deployed: nn.Module
    if name == "resnet":
        deployed, (x, y) = make_resnet(4, 32, width=8, seed=0), _data(3, 32, 40, 4)
    elif name == "edge":
        deployed, (x, y) = make_edge_model(4, 16, seed=0), _data(1, 16, 40, 4)
    elif name == "scaled-input":
        deployed, (x, y) = _ScaledInput(), _data(1, 16, 40, 4)
    else:
        deployed, (x, y) = _BatchNormPrefix(), _data(1, 16, 40, 4)
    model = build_retraining_model(deployed, _hp(frozen, 4))
    assert cacheable_prefix(model, frozen) == (name != "batchnorm" and frozen > 0)
    score, prefix = make_scorer(model, frozen, x[:24], y[:24])
    assert (prefix is not None) == cached
    optimizer = make_optimizer(model, TrainConfig(lr=0.2, batch_size=8))
    before = [p.detach().clone() for p in model.parameters()]
    for start in range(24, 40, 8):
        training_step(model, optimizer, x[start : start + 8], y[start : start + 8])
        assert score(model) == accuracy(model, x[:24], y[:24])
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    # the model's own features are back in place after scoring
    assert len(list(model.features.children())) == len(list(deployed.features.children()))


def test_cached_prefix_is_shared_between_models_with_the_same_frozen_blocks() -> None:
    deployed = make_resnet(4, 32, width=8, seed=1)
    x, y = _data(3, 32, 16, 4)
    first = build_retraining_model(deployed, _hp(5, 4))
    _, prefix = make_scorer(first, 5, x, y)
    assert prefix is not None
    second = build_retraining_model(deployed, _hp(5, 4))
    with torch.no_grad():
        second.head.weight.mul_(-1.0)  # another head: other predictions, same prefix
    score, shared = make_scorer(second, 5, x, y, cached=prefix)
    assert shared is prefix
    assert score(second) == accuracy(second, x, y)
