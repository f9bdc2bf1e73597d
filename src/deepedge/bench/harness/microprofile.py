"""The retraining configurations the micro-profiler is measured on: every combination of
epochs, data fraction and frozen blocks, named ``e<epochs>-f<percent>-z<frozen>``."""

from __future__ import annotations

from collections.abc import Sequence

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
