"""The loss a model trains with and the metric it is scored by (named, plain torch).

* :class:`LossKind` - ``cross-entropy`` on logits, or ``nll`` on log-probabilities (a model
  whose ``forward`` ends in ``log_softmax``, like :class:`~deepedge.learning.models.GoldenModel`).
* :class:`MetricKind` - ``accuracy`` (top-1: the arg-max class is the label) or
  ``top5-accuracy`` (the label is among the five highest outputs).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the enums are part of documents that must not pull torch in
    import numpy as np
    import torch


class LossKind(enum.Enum):
    CROSS_ENTROPY = "cross-entropy"
    NLL = "nll"


class MetricKind(enum.Enum):
    ACCURACY = "accuracy"
    TOP5_ACCURACY = "top5-accuracy"


def loss_value(kind: LossKind, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The mean loss of a batch."""
    from torch import nn

    if kind is LossKind.NLL:
        return nn.functional.nll_loss(outputs, labels)
    return nn.functional.cross_entropy(outputs, labels)


def metric_hits(kind: MetricKind, outputs: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """Per sample, whether it counts as right (bool array)."""
    if kind is MetricKind.TOP5_ACCURACY and outputs.shape[1] > 5:
        top = outputs.topk(5, dim=1).indices
        return (top == labels.reshape(-1, 1)).any(dim=1).cpu().numpy()
    return (outputs.argmax(dim=1) == labels).cpu().numpy()
