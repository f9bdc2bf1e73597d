"""The update's validation score counts what the workload's metric counts."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from deepedge.learning.models import get_trainable_flat
from deepedge.learning.objective import MetricKind
from deepedge.runtime.training.update_epochs import validation_accuracy


class _Fixed(nn.Module):
    """Logits are the input itself (one trainable scale, kept at 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def test_top5_counts_a_label_among_the_five_highest_and_top1_only_the_highest() -> None:
    rng = np.random.default_rng(0)
    n, classes = 600, 10  # more than one scoring batch
    logits = rng.normal(size=(n, classes)).astype(np.float32)
    rank = np.argsort(-logits, axis=1)
    # A third of the labels are the best class, a third the 3rd best, a third the 8th best.
    pick = np.array([0, 2, 7])[np.arange(n) % 3]
    labels = rank[np.arange(n), pick]
    model = _Fixed()
    weights = get_trainable_flat(model)
    top1 = validation_accuracy(model, weights, logits, labels)
    top5 = validation_accuracy(model, weights, logits, labels, MetricKind.TOP5_ACCURACY)
    assert top1 == np.mean(pick == 0) == 200 / 600
    assert top5 == np.mean(pick < 5) == 400 / 600
