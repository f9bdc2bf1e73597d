"""The Optimus convergence model and Deep-Edge's dynamic stopping rule.

Model (Optimus, Peng et al. EuroSys'18, written for accuracy as Deep-Edge's accuracy monitor
uses it): after ``k`` epochs the validation accuracy is

    acc(k) = 1 - (1 / (b0 * k + b1) + b2),      b0 >= 0, b1 > 0, b2 >= 0

``b2`` is the irreducible error (the curve tends to ``1 - b2``), ``b0`` the speed of
convergence and ``1 - 1/b1 - b2`` the accuracy at ``k = 0``.

Fit (:func:`fit_optimus`): bounded least squares on the accuracy residuals. Writing
``y = 1 - acc``, for a fixed ``b2`` the model is linear in the transformed target
``1 / (y - b2) = b0 * k + b1``, so a grid over ``b2 in [0, min y)`` with a non-negative
least-squares solve per grid point (rows weighted by ``(y - b2)^2`` so that the linear
residual approximates the accuracy residual) gives a global starting point; a bounded
trust-region solve (``scipy.optimize.least_squares``) then polishes all three parameters.

Dynamic stopping (:class:`StoppingRule`, :func:`decide_stop`): after ``min_epochs``
epochs, fit the curve to the history and stop when the predicted gain of the next
``horizon_epochs`` epochs, ``acc(k + h) - acc(k)``, is under ``min_gain``; stop anyway at
``max_epochs``, or when ``target_accuracy`` is reached.

The measured curve must agree (:func:`measured_gain`): a fit on a few noisy points can
predict a plateau at once (asynchronous validation accuracies swing by several points
from epoch to epoch), so the rule says "converged" only when, in addition, the best
accuracy measured so far rose by less than ``min_gain`` over the last ``h`` epochs::

    max(acc[1..k]) - max(acc[1..k-h]) < min_gain          (k > h)

Noise that pulls points down cannot end an update (the best so far ignores dips), and a
curve still setting records keeps training; on a clean converging curve the condition
holds about ``h`` epochs after the fit's, so it costs a few epochs at most. It never
stops an update earlier than the fit alone; ``max_epochs`` still bounds it.

Other rules (:class:`StopRuleKind`): ``plateau`` stops on the measured condition alone
(after ``min_epochs``), ``fixed`` runs ``max_epochs``. Whatever the rule, a model whose best
accuracy is still within ``chance_margin`` of chance (``chance_accuracy``, ``1 / classes``)
has learned nothing and has not converged: it trains on to ``max_epochs`` and says so
(:attr:`StopDecision.at_chance`). On labels that are not balanced the update raises chance
to what answering the most frequent class scores (:func:`constant_guess_accuracy`): a model
that collapsed to one class (as a diverging learning rate leaves one) scores exactly that.
On a small validation set the margin widens to two standard errors of a guesser's
accuracy, ``2 sqrt(c (1 - c) / n)`` (:func:`chance_threshold`):
3 right out of 12 at six classes (0.25) is what guessing scores, not learning.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from deepedge.core.errors import InvalidInputError

B1_MIN = 1e-6  # b1 > 0 keeps acc(0) finite


@dataclass(frozen=True)
class OptimusCurve:
    """acc(k) = 1 - (1/(b0 k + b1) + b2) with the fit's root-mean-square error."""

    b0: float  # convergence speed (per epoch), >= 0
    b1: float  # offset, > 0: acc(0) = 1 - 1/b1 - b2
    b2: float  # irreducible error, >= 0: acc(inf) = 1 - b2
    rmse: float = 0.0  # fit residual on the accuracies it was fitted to

    def predict(self, epochs: float | Sequence[float] | np.ndarray) -> np.ndarray:
        """Predicted accuracy at ``epochs`` (vectorised; extrapolates beyond the data)."""
        k = np.asarray(epochs, dtype=float)
        return 1.0 - (1.0 / (self.b0 * k + self.b1) + self.b2)

    @property
    def asymptote(self) -> float:
        """acc(inf) = 1 - b2."""
        return 1.0 - self.b2

    def gain(self, epoch: float, horizon_epochs: float) -> float:
        """acc(epoch + horizon) - acc(epoch): what ``horizon`` more epochs would add."""
        return float(self.predict(epoch + horizon_epochs) - self.predict(epoch))

    def epochs_to_accuracy(self, target: float) -> float:
        """Smallest real ``k >= 0`` with acc(k) >= target; ``inf`` when never reached."""
        if float(self.predict(0.0)) >= target:
            return 0.0
        gap = 1.0 - self.b2 - target  # 1/(b0 k + b1) must fall to this
        if gap <= 0 or self.b0 <= 0:
            return math.inf
        return max(0.0, (1.0 / gap - self.b1) / self.b0)

    def epochs_still_needed(self, current_epoch: int, tolerance: float) -> float:
        """Epochs after ``current_epoch`` until acc is within ``tolerance`` of 1 - b2.

        acc(inf) - acc(k) = 1/(b0 k + b1) <= tol  <=>  k >= (1/tol - b1) / b0.
        Returns ``inf`` when the curve never gets that close (b0 = 0 and 1/b1 > tol).
        """
        if tolerance <= 0:
            raise InvalidInputError("tolerance must be > 0", field="tolerance")
        if 1.0 / (self.b0 * current_epoch + self.b1) <= tolerance:
            return 0.0
        if self.b0 <= 0:
            return math.inf
        k_needed = (1.0 / tolerance - self.b1) / self.b0
        return float(max(0, math.ceil(k_needed - current_epoch - 1e-9)))


def _validate(epochs: Sequence[float], accuracies: Sequence[float]) -> tuple[np.ndarray, ...]:
    k = np.asarray(epochs, dtype=float)
    a = np.asarray(accuracies, dtype=float)
    if k.shape != a.shape or k.ndim != 1:
        raise InvalidInputError("epochs and accuracies must be 1-D of equal length", field="epochs")
    if len(k) < 2:
        raise InvalidInputError("need at least 2 (epoch, accuracy) points to fit", field="epochs")
    if np.any(k < 0) or not np.all(np.isfinite(k)):
        raise InvalidInputError("epochs must be finite and >= 0", field="epochs")
    if np.any((a < 0) | (a > 1)) or not np.all(np.isfinite(a)):
        raise InvalidInputError("accuracies must be in [0, 1]", field="accuracies")
    return k, a


def _residuals(params: np.ndarray, k: np.ndarray, a: np.ndarray) -> np.ndarray:
    b0, b1, b2 = params
    return (1.0 - (1.0 / (b0 * k + b1) + b2)) - a


def fit_optimus(
    epochs: Sequence[float], accuracies: Sequence[float], grid_points: int = 48
) -> OptimusCurve:
    """Fit acc(k) = 1 - (1/(b0 k + b1) + b2) with b0, b2 >= 0 and b1 > 0 (see module doc).

    Raises :class:`InvalidInputError` on fewer than two points, mismatched lengths,
    negative epochs or accuracies outside [0, 1].
    """
    from scipy.optimize import least_squares, nnls  # only where a curve is fitted

    k, a = _validate(epochs, accuracies)
    y = 1.0 - a
    y_min = float(y.min())
    best: tuple[float, np.ndarray] | None = None
    # y - b2 must stay positive: the grid stops just short of min(y).
    for b2 in np.linspace(0.0, max(0.0, y_min) * (1 - 1e-3), grid_points):
        gap = np.maximum(y - b2, 1e-9)
        z = 1.0 / gap
        w = gap**2
        design = np.column_stack([k, np.ones_like(k)]) * w[:, None]
        coef, _ = nnls(design, z * w)
        b0, b1 = float(coef[0]), max(float(coef[1]), B1_MIN)
        params = np.array([b0, b1, float(b2)])
        sse = float(np.sum(_residuals(params, k, a) ** 2))
        if best is None or sse < best[0]:
            best = (sse, params)
    assert best is not None  # the grid has at least one point
    start = best[1]
    lower = np.array([0.0, B1_MIN, 0.0])
    upper = np.array([np.inf, np.inf, 1.0])
    start = np.clip(start, lower + 1e-12, upper - 1e-12)
    try:
        sol = least_squares(
            _residuals, start, bounds=(lower, upper), args=(k, a), x_scale="jac", max_nfev=500
        )
        params = sol.x if np.sum(sol.fun**2) <= best[0] else best[1]
    except ValueError:  # a degenerate start on the boundary: keep the grid solution
        params = best[1]
    rmse = float(np.sqrt(np.mean(_residuals(params, k, a) ** 2)))
    return OptimusCurve(float(params[0]), float(params[1]), float(params[2]), rmse)


class StopRuleKind(enum.StrEnum):
    OPTIMUS = "optimus"  # Deep-Edge: the fitted curve and the measured best both plateau
    PLATEAU = "plateau"  # the measured best rose less than min_gain over horizon_epochs
    FIXED = "fixed"  # always max_epochs


class StopReason(enum.Enum):
    """Why the accuracy monitor says stop (or not)."""

    CONTINUE = "continue"  # too few epochs to fit, or the predicted gain is worth it
    CONVERGED = "converged"  # predicted and measured gain over the horizon < min_gain
    TARGET_REACHED = "target_reached"  # measured accuracy >= target_accuracy
    MAX_EPOCHS = "max_epochs"  # the user's numEpoch is spent


@dataclass(frozen=True)
class StoppingRule:
    """Parameters of Deep-Edge's dynamic stopping (module docstring)."""

    min_epochs: int = 3  # epochs before the first fit (the curve has three parameters)
    max_epochs: int = 20  # numEpoch: the user's upper bound
    horizon_epochs: int = 3  # look-ahead of the predicted gain
    min_gain: float = 0.005  # stop when acc(k + h) - acc(k) < min_gain
    target_accuracy: float | None = None  # optional: stop once reached
    rule: StopRuleKind = StopRuleKind.OPTIMUS
    chance_accuracy: float | None = None  # 1 / classes: no convergence this close to it
    chance_margin: float = 0.05

    def __post_init__(self) -> None:
        if self.min_epochs < 2:
            raise InvalidInputError("min_epochs must be >= 2", field="min_epochs")
        if self.max_epochs < 1:
            raise InvalidInputError("max_epochs must be >= 1", field="max_epochs")
        if self.horizon_epochs < 1:
            raise InvalidInputError("horizon_epochs must be >= 1", field="horizon_epochs")
        if self.min_gain < 0:
            raise InvalidInputError("min_gain must be >= 0", field="min_gain")


def constant_guess_accuracy(labels: Sequence[int] | np.ndarray, classes: int) -> float:
    """The accuracy of a model that learned nothing from its inputs at best: the share of
    the most frequent label (``1 / classes`` when there are no labels)."""
    known = np.asarray(labels, dtype=np.int64)
    counts = np.bincount(known[known >= 0], minlength=max(1, classes))
    total = int(counts.sum())
    return float(counts.max() / total) if total else 1.0 / max(1, classes)


def chance_threshold(chance: float, margin: float, validation_size: int | None = None) -> float:
    """The accuracy at or under which a model has learned nothing: ``chance + margin``,
    widened on ``validation_size`` samples to two standard errors of a guesser's accuracy."""
    if validation_size is None or validation_size <= 0:
        return chance + margin
    noise = 2.0 * math.sqrt(chance * (1.0 - chance) / validation_size)
    return chance + max(margin, noise)


def measured_gain(accuracies: Sequence[float], horizon_epochs: int) -> float | None:
    """How much the best measured accuracy rose over the last ``horizon_epochs`` epochs:
    ``max(acc[1..k]) - max(acc[1..k-h])``; ``None`` while ``k <= h`` (no earlier best)."""
    k = len(accuracies)
    if horizon_epochs < 1:
        raise InvalidInputError("horizon_epochs must be >= 1", field="horizon_epochs")
    if k <= horizon_epochs:
        return None
    return float(max(accuracies) - max(accuracies[: k - horizon_epochs]))


@dataclass(frozen=True)
class StopDecision:
    stop: bool
    reason: StopReason
    curve: OptimusCurve | None  # None before min_epochs
    predicted_gain: float | None  # acc(k + h) - acc(k) from the curve
    epochs_still_needed: float | None  # until within min_gain of the asymptote
    at_chance: bool = False  # the best accuracy is within chance_margin of chance


def decide_stop(
    accuracies: Sequence[float], rule: StoppingRule, validation_size: int | None = None
) -> StopDecision:
    """Decide after epoch ``k = len(accuracies)``; ``accuracies[j]`` is acc after epoch j+1,
    measured on ``validation_size`` samples (None: the plain chance margin)."""
    k = len(accuracies)
    if k == 0:
        return StopDecision(False, StopReason.CONTINUE, None, None, None)
    if rule.target_accuracy is not None and accuracies[-1] >= rule.target_accuracy:
        return StopDecision(True, StopReason.TARGET_REACHED, None, None, 0.0)
    curve = None
    gain = None
    needed = None
    if k >= rule.min_epochs:
        curve = fit_optimus([float(e) for e in range(1, k + 1)], accuracies)
        gain = curve.gain(k, rule.horizon_epochs)
        needed = curve.epochs_still_needed(k, max(rule.min_gain, 1e-6))
    chance = rule.chance_accuracy
    at_chance = chance is not None and max(accuracies) <= chance_threshold(
        chance, rule.chance_margin, validation_size
    )
    if k >= rule.max_epochs:
        return StopDecision(True, StopReason.MAX_EPOCHS, curve, gain, needed, at_chance)
    if rule.rule is StopRuleKind.FIXED or at_chance:
        return StopDecision(False, StopReason.CONTINUE, curve, gain, needed, at_chance)
    plateau = rule.rule is StopRuleKind.PLATEAU and k >= rule.min_epochs
    if plateau or (gain is not None and gain < rule.min_gain):
        measured = measured_gain(accuracies, rule.horizon_epochs)
        if measured is not None and measured < rule.min_gain:
            return StopDecision(True, StopReason.CONVERGED, curve, gain, needed)
    return StopDecision(False, StopReason.CONTINUE, curve, gain, needed)
