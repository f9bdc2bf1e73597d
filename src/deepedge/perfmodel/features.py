"""Sensitivity analysis: which candidate features drive a learned function (Section V-B).

Deep-Edge varies one dimension at a time and keeps the features that move the target
(Figure 9). On a measured dataset the same question is answered by *permutation
importance*: a probe model (extremely randomised trees) is fitted on part of the training
rows, and feature ``j``'s importance is the increase of the probe's mean absolute error on
the remaining rows when column ``j`` is shuffled,

    I_j = E_shuffle[ MAE(f(X_perm(j)), y) ] - MAE(f(X), y)

normalised to shares of the positive total. Its *direction* is the sign of Spearman's rank
correlation between the feature and the target ("increasing the batch size decreases the
compute time"). The selected features are those with a share of at least ``min_share``
(the most important one is always kept). Before probing, candidates that are constant or
absent (a GPU column on a host without GPU) and exact duplicates of an earlier candidate
(the loopback parameter server's state equals the worker's) are dropped, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import spearmanr
from sklearn.ensemble import ExtraTreesRegressor
from sklearn.inspection import permutation_importance
from sklearn.model_selection import GroupShuffleSplit

from deepedge.core.errors import InvalidInputError

MIN_SHARE = 0.02


@dataclass(frozen=True, slots=True)
class FeatureImportance:
    feature: str
    share: float  # normalised permutation importance, sums to 1 over probed features
    spearman_rho: float  # rank correlation with the target (direction of the effect)
    selected: bool
    note: str = ""  # why a candidate was dropped before probing


@dataclass(frozen=True, slots=True)
class SensitivityReport:
    importances: tuple[FeatureImportance, ...]

    @property
    def selected(self) -> tuple[str, ...]:
        return tuple(fi.feature for fi in self.importances if fi.selected)


def usable_candidates(
    frame: pd.DataFrame, candidates: Sequence[str]
) -> tuple[list[str], list[FeatureImportance]]:
    """Drop absent, constant and duplicate candidates; return (kept, dropped-with-notes)."""
    kept: list[str] = []
    dropped: list[FeatureImportance] = []
    for name in candidates:
        column = frame[name]
        if column.isna().all():
            dropped.append(FeatureImportance(name, 0.0, 0.0, False, "absent"))
        elif column.nunique(dropna=True) <= 1:
            dropped.append(FeatureImportance(name, 0.0, 0.0, False, "constant"))
        else:
            twin = next((k for k in kept if frame[k].equals(column)), None)
            if twin is not None:
                dropped.append(FeatureImportance(name, 0.0, 0.0, False, f"duplicate of {twin}"))
            else:
                kept.append(name)
    return kept, dropped


def sensitivity_analysis(
    frame: pd.DataFrame,
    target: np.ndarray,
    candidates: Sequence[str],
    groups: np.ndarray,
    seed: int = 0,
    min_share: float = MIN_SHARE,
) -> SensitivityReport:
    """Permutation importances of ``candidates`` for ``target`` (see module docstring)."""
    kept, dropped = usable_candidates(frame, candidates)
    if not kept:
        raise InvalidInputError("no usable feature: every candidate is absent or constant")
    x = frame[kept].to_numpy(dtype=float)
    y = np.asarray(target, dtype=float)
    n_groups = len(np.unique(groups))
    if n_groups >= 4:
        split = GroupShuffleSplit(n_splits=1, test_size=0.3, random_state=seed)
        fit_idx, probe_idx = next(split.split(x, y, groups))
    else:
        fit_idx = probe_idx = np.arange(len(y))
    probe = ExtraTreesRegressor(n_estimators=100, min_samples_leaf=2, random_state=seed, n_jobs=1)
    probe.fit(x[fit_idx], y[fit_idx])
    result = permutation_importance(
        probe,
        x[probe_idx],
        y[probe_idx],
        scoring="neg_mean_absolute_error",
        n_repeats=5,
        random_state=seed,
        n_jobs=1,
    )
    raw = np.clip(np.asarray(result.importances_mean, dtype=float), 0.0, None)
    # no feature beats the shuffled baseline: every share is 0 and all are kept, so the
    # AutoML search (not the probe) decides
    informative = raw.sum() > 0
    shares = raw / raw.sum() if informative else np.zeros(len(kept))
    top = int(np.argmax(shares))
    probed = []
    for j, name in enumerate(kept):
        constant = np.ptp(x[:, j]) == 0 or np.ptp(y) == 0
        rho = 0.0 if constant else spearmanr(x[:, j], y).statistic
        probed.append(
            FeatureImportance(
                feature=name,
                share=float(shares[j]),
                spearman_rho=0.0 if not np.isfinite(rho) else float(rho),
                note="" if informative else "no feature beats noise",
                selected=bool(shares[j] >= min_share or j == top or not informative),
            )
        )
    probed.sort(key=lambda fi: -fi.share)
    return SensitivityReport(tuple(probed + dropped))
