"""Scoring a partly frozen model on a fixed image set without re-running its frozen blocks.

A retraining configuration with ``frozen_layers = z`` never changes the first ``z`` blocks
``P = features[:z]`` of the model (:func:`deepedge.learning.microprofiler.retraining_blocks`).
If ``P`` has no buffers (no running statistics that a training-mode forward would update:
GroupNorm, not BatchNorm) and none of its parameters trains, its output on a fixed set ``V``
is the same after every training step, so for a model whose forward starts with
``features(x)``

    acc(model, V) = acc(model with features[z:] only, P(V))

and ``P(V)`` is computed once per set (:func:`prefix_outputs`) instead of once per
evaluation. The micro-profiler scores every profiling epoch on the same validation set, so
on a ResNet with a frozen backbone the evaluations cost a fraction of a full forward pass.

Whether the model's forward really starts with ``features`` is checked, not assumed: the
scorer compares the logits of both paths on the first images of ``V`` once
(:func:`make_scorer`) and falls back to the full forward pass when they differ.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from deepedge.learning.training import accuracy

log = logging.getLogger(__name__)

Scorer = Callable[[nn.Module], float]  # validation accuracy of a model
_CHECK_IMAGES = 8  # images the two forward paths are compared on


def cacheable_prefix(model: nn.Module, frozen_blocks: int) -> bool:
    """True when ``features[:frozen_blocks]`` exists, holds no buffers and does not train."""
    features = getattr(model, "features", None)
    if frozen_blocks < 1 or not isinstance(features, nn.Sequential):
        return False
    prefix = list(features.children())[:frozen_blocks]
    if len(prefix) < frozen_blocks or len(prefix) == len(features):
        return False
    return not any(True for b in prefix for _ in b.buffers()) and not any(
        p.requires_grad for b in prefix for p in b.parameters()
    )


def _feature_blocks(model: nn.Module) -> list[nn.Module]:
    features = model.features
    if not isinstance(features, nn.Sequential):
        raise TypeError("the model's features must be an nn.Sequential")
    return list(features.children())


@torch.no_grad()
def prefix_outputs(model: nn.Module, frozen_blocks: int, images: np.ndarray) -> torch.Tensor:
    """``features[:frozen_blocks](images)`` in evaluation mode, in batches."""
    blocks = nn.Sequential(*_feature_blocks(model)[:frozen_blocks])
    blocks.eval()
    device = next(model.parameters()).device
    out = [
        blocks(torch.as_tensor(images[i : i + 256], dtype=torch.float32, device=device))
        for i in range(0, len(images), 256)
    ]
    return torch.cat(out)


@contextmanager
def _suffix_only(model: nn.Module, frozen_blocks: int) -> Iterator[nn.Module]:
    """The model with ``features`` replaced by ``features[frozen_blocks:]`` while inside."""
    features = model.features
    model.features = nn.Sequential(*_feature_blocks(model)[frozen_blocks:])
    try:
        yield model
    finally:
        model.features = features


def make_scorer(
    model: nn.Module,
    frozen_blocks: int,
    images: np.ndarray,
    labels: np.ndarray,
    cached: torch.Tensor | None = None,
) -> tuple[Scorer, torch.Tensor | None]:
    """A scorer of models built like ``model`` (same frozen prefix) on ``(images, labels)``.

    Returns (scorer, the prefix outputs it uses or None). ``cached`` passes prefix outputs
    of the same images computed before (for another model with the same prefix). Without a
    cacheable prefix (:func:`cacheable_prefix`), or when the two paths disagree on the
    first images, the scorer runs the full model.
    """

    def full(m: nn.Module) -> float:
        return accuracy(m, images, labels)

    if not cacheable_prefix(model, frozen_blocks):
        return full, None
    prefix = cached if cached is not None else prefix_outputs(model, frozen_blocks, images)
    check = slice(0, min(_CHECK_IMAGES, len(labels)))
    model.eval()
    with torch.no_grad():
        whole = model(torch.as_tensor(images[check], dtype=torch.float32, device=prefix.device))
        with _suffix_only(model, frozen_blocks) as suffix:
            part = suffix(prefix[check])
    if whole.shape != part.shape or not torch.allclose(whole, part, rtol=1e-4, atol=1e-5):
        log.debug("frozen prefix: the model's forward is not features-first; not cached")
        return full, None

    def cached_score(m: nn.Module) -> float:
        with _suffix_only(m, frozen_blocks) as suffix, torch.no_grad():
            suffix.eval()
            predicted = torch.cat(
                [suffix(prefix[i : i + 512]).argmax(dim=1) for i in range(0, len(prefix), 512)]
            )
        return float(np.mean(predicted.cpu().numpy() == labels))

    return cached_score, prefix
