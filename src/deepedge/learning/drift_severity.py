"""Drift severity measured from the data: a classifier two-sample test.

A window's drift from a reference window (the first, which the first model learned) is how
well a simple classifier tells their inputs apart. With ``acc`` the cross-validated accuracy
of a logistic regression trained to say "reference or current" on balanced samples of both
(up to ``max_samples`` each, seeded)::

    severity = clip(2 (acc - 0.5), 0, 1)

0 when the two windows look alike (the classifier guesses), 1 when every input tells its
window. Inputs are summarised first, so the test is cheap and sees what drifts in images
(light, colour cast, contrast, blur, noise) and tables alike: an image gives its
per-channel mean, standard deviation, mean absolute gradient (sharpness) and a 4x4 average
pooling of each channel; a feature vector is used as it is. The figure is a property of the
data, not of a model (the accuracy a model loses is measured apart, on golden labels).
"""

from __future__ import annotations

import numpy as np

from deepedge.core.errors import InvalidInputError

MAX_SAMPLES = 256
FOLDS = 4


def summarise(inputs: np.ndarray) -> np.ndarray:
    """``(N, D)`` float64 summaries of ``(N, C, H, W)`` images or ``(N, F)`` vectors."""
    x = np.asarray(inputs, dtype=np.float64)
    if x.ndim == 2:
        return x
    if x.ndim != 4:
        raise InvalidInputError(f"inputs must be (N, F) or (N, C, H, W), got {x.shape}", "inputs")
    n, c, h, w = x.shape
    mean = x.mean(axis=(2, 3))
    std = x.std(axis=(2, 3))
    sharp = np.abs(np.diff(x, axis=3)).mean(axis=(2, 3)) if w > 1 else np.zeros((n, c))
    ph, pw = max(1, h // 4), max(1, w // 4)
    cropped = x[:, :, : ph * (h // ph), : pw * (w // pw)]
    pooled = cropped.reshape(n, c, h // ph, ph, w // pw, pw).mean(axis=(3, 5)).reshape(n, -1)
    return np.concatenate([mean, std, sharp, pooled], axis=1)


def drift_severity(
    reference: np.ndarray, current: np.ndarray, seed: int = 0, max_samples: int = MAX_SAMPLES
) -> float:
    """The severity of ``current``'s drift from ``reference`` in [0, 1] (module docstring);
    0 when either has fewer than ``FOLDS`` samples."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(seed)
    n = min(len(reference), len(current), max_samples)
    if n < FOLDS:
        return 0.0
    a = summarise(np.asarray(reference)[rng.choice(len(reference), n, replace=False)])
    b = summarise(np.asarray(current)[rng.choice(len(current), n, replace=False)])
    x = np.nan_to_num(np.concatenate([a, b]), nan=0.0, posinf=0.0, neginf=0.0)
    y = np.concatenate([np.zeros(n, dtype=int), np.ones(n, dtype=int)])
    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=500))
    folds = StratifiedKFold(FOLDS, shuffle=True, random_state=seed)
    accuracy = float(np.mean(cross_val_score(model, x, y, cv=folds)))
    return float(np.clip(2.0 * (accuracy - 0.5), 0.0, 1.0))
