"""Drift severity measured from the data (a classifier two-sample test)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from deepedge.learning.drift_severity import drift_severity, summarise

RNG = np.random.default_rng(0)
IMAGES = RNG.uniform(0.2, 0.8, size=(300, 3, 8, 8)).astype(np.float32)
TABLE = RNG.normal(0.0, 1.0, size=(300, 6)).astype(np.float32)


def _darker_greener(x: np.ndarray) -> np.ndarray:
    out = x * 0.5
    out[:, 1] += 0.2
    return out


def _shifted_column(x: np.ndarray) -> np.ndarray:
    out = x.copy()
    out[:, 2] += 4.0  # a unit change: four standard deviations
    return out


@pytest.mark.parametrize(
    ("reference", "change", "low", "high"),
    [
        (IMAGES, lambda x: RNG.permutation(x), 0.0, 0.25),  # the same distribution
        (IMAGES, _darker_greener, 0.9, 1.0),  # a camera at dusk
        (TABLE, lambda x: RNG.normal(0.0, 1.0, x.shape).astype(np.float32), 0.0, 0.25),
        (TABLE, _shifted_column, 0.8, 1.0),  # a recalibrated sensor
    ],
)
def test_severity_tells_drift_from_none(
    reference: np.ndarray, change: Callable[[np.ndarray], np.ndarray], low: float, high: float
) -> None:
    assert low <= drift_severity(reference, change(reference.copy()), seed=1) <= high


def test_too_few_samples_measure_nothing() -> None:
    assert drift_severity(TABLE[:3], TABLE[:3] + 5) == 0.0


def test_an_image_summary_has_the_channel_statistics_and_a_pooled_view() -> None:
    summary = summarise(IMAGES[:2])
    assert summary.shape == (2, 3 * 3 + 3 * 16)
    assert np.allclose(summary[:, :3], IMAGES[:2].mean(axis=(2, 3)))
