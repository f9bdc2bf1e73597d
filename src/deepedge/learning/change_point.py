"""Where a window's inputs changed: the newest requests against the ones before them.

A camera's condition changes at an instant (a light goes on, the view moves, the first scene
comes back), not at a window's edge. :func:`moved_at` tells, from the inputs alone, whether
the newest ``m`` sampled inputs of an open window come from another condition than the
``n`` before them, and if so at which input the change happened, so the window can end
there and the next one hold the new condition only; :func:`moved_whole`, whether the whole
open window is new (the change came at its start).

Inputs are summarised as in :mod:`deepedge.learning.drift_severity` (per channel mean,
standard deviation, sharpness, a 4x4 pooling; a feature vector as it is). With ``mu``,
``s^2`` the reference's per-feature mean and variance and ``mu'``, ``s'^2`` the newest
inputs'::

    z_j = (mu'_j - mu_j) / sqrt(s^2_j / n + s'^2_j / m)

The inputs moved when ``max_j |z_j| > Z`` (:data:`Z_MOVED`: far beyond what the digits' class
mix moves between windows of one condition, about 3, and a Bonferroni bound over the
features at 1e-6). The change is then placed by one split of the open window's inputs
projected on the direction of the shift (``d_j = (mu'_j - mu_j) / s^2_j``): the split that
leaves the least squared error in its two parts (a single change point, least squares).
"""

from __future__ import annotations

import numpy as np

from deepedge.learning.drift_severity import summarise

Z_MOVED = 6.0  # |z| of a feature's mean shift that says the inputs moved
MIN_NEW = 16  # newest inputs the test is made on (and the fewest a new part may hold)
VARIANCE_FLOOR = 1e-6


def shift(reference: np.ndarray, newest: np.ndarray) -> tuple[float, np.ndarray]:
    """``max_j |z_j|`` of the newest summaries against the reference's, and the direction
    ``d`` of the shift (module docstring)."""
    n, m = len(reference), len(newest)
    mu, mu_new = reference.mean(axis=0), newest.mean(axis=0)
    var = np.maximum(reference.var(axis=0, ddof=1), VARIANCE_FLOOR)
    var_new = np.maximum(newest.var(axis=0, ddof=1), VARIANCE_FLOOR)
    z = (mu_new - mu) / np.sqrt(var / n + var_new / m)
    return float(np.max(np.abs(z))), (mu_new - mu) / var


def split(scores: np.ndarray, fewest: int) -> int:
    """The index ``k`` (``fewest <= k <= len - fewest``) that splits ``scores`` into the two
    parts with the least total squared error around their means."""
    total = len(scores)
    prefix = np.concatenate([[0.0], np.cumsum(scores)])
    prefix_sq = np.concatenate([[0.0], np.cumsum(scores**2)])
    k = np.arange(fewest, total - fewest + 1)
    left = prefix_sq[k] - prefix[k] ** 2 / k
    right = (prefix_sq[total] - prefix_sq[k]) - (prefix[total] - prefix[k]) ** 2 / (total - k)
    return int(k[np.argmin(left + right)])


def moved_at(
    before: np.ndarray, window: np.ndarray, newest: int = MIN_NEW, z_moved: float = Z_MOVED
) -> int | None:
    """The index of ``window``'s first input of a new condition, or None.

    ``before``: inputs of the condition so far (the window before this one, say);
    ``window``: the open window's inputs, oldest first. None when the newest ``newest``
    inputs are not told apart from ``before`` (or too few inputs to tell), or when the
    change lies within the window's first ``newest`` inputs (the window holds the new
    condition almost whole: it ends as it would)."""
    if len(before) < newest or len(window) < 2 * newest:
        return None
    reference, current = _summaries(before), _summaries(window)
    z, direction = shift(reference, current[-newest:])
    if z <= z_moved:
        return None
    k = split(current @ direction, newest)
    # the older part must look like what came before: else the whole window is new
    z_old, _ = shift(reference, current[:k])
    return k if z_old <= z_moved else None


def moved_whole(
    before: np.ndarray, window: np.ndarray, newest: int = MIN_NEW, z_moved: float = Z_MOVED
) -> bool:
    """Whether the whole of ``window`` comes from another condition than ``before``: its
    newest ``newest`` inputs and its oldest are both told apart from ``before`` (the change
    came at the window's start, where :func:`moved_at` places none)."""
    if len(before) < newest or len(window) < 2 * newest:
        return False
    reference, current = _summaries(before), _summaries(window)
    z_new, _ = shift(reference, current[-newest:])
    z_old, _ = shift(reference, current[:newest])
    return z_new > z_moved and z_old > z_moved


def _summaries(inputs: np.ndarray) -> np.ndarray:
    """The inputs' summaries (module docstring), non-finite values as 0."""
    return np.nan_to_num(summarise(inputs), nan=0.0, posinf=0.0, neginf=0.0)
