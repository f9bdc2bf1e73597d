"""The micro-profiler measured against exhaustive retraining: the retraining configurations
it is measured on (every combination of epochs, data fraction and frozen blocks, named
``e<epochs>-f<percent>-z<frozen>``) and what one measurement finds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from deepedge.learning.microprofiler import NamedConfig
from deepedge.planning.window.documents import RetrainingHyperparameters


def microprofile_grid(
    epochs: Sequence[int], fractions: Sequence[float], frozen: Sequence[int], n_classes: int
) -> list[NamedConfig]:
    """The grid epochs x fractions x frozen (frozen varying fastest), at batch 32, with a
    last layer of ``n_classes`` neurons."""
    return [
        NamedConfig(
            f"e{e}-f{round(f * 100)}-z{z}",
            RetrainingHyperparameters(
                epochs=e,
                batch_size=32,
                last_layer_neurons=n_classes,
                frozen_layers=z,
                data_fraction=f,
            ),
        )
        for e in epochs
        for f in fractions
        for z in frozen
    ]


@dataclass(frozen=True)
class ProfilePair:
    """One configuration on one window: the micro-profiler's estimates beside what its full
    retraining measured (accuracy on the window's held-out images, training seconds)."""

    window: int
    config: str
    predicted: float
    actual: float
    estimated_s: float
    actual_s: float


@dataclass(frozen=True)
class MicroprofileResult:
    """The pairs of a measurement, the wall seconds of micro-profiling (validation included)
    and of the exhaustive retrainings, and how many (configuration, window) pairs pruning
    left unprofiled."""

    pairs: tuple[ProfilePair, ...]
    profile_s: float
    exhaustive_s: float
    pruned: int = 0

    @property
    def mae(self) -> float:
        """The median of ``|predicted - actual|`` over the pairs."""
        return float(np.median([abs(p.predicted - p.actual) for p in self.pairs]))

    @property
    def cost_frac(self) -> float:
        """Micro-profiling's wall seconds over the exhaustive retrainings'."""
        return self.profile_s / self.exhaustive_s
