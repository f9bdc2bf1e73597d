"""Learned estimators: Deep-Edge's functions fitted by AutoML on a measured profile.

Functions (Section IV-C1 and V-B; features are the *candidates*, the sensitivity analysis
of :mod:`deepedge.perfmodel.features` selects among them)::

    EstComputeTime   t_compute  ~ X_i^initial (cpu, gpu, mem), b_i                   eq. (5)
    EstUpdateTime    t_update   ~ X_i^initial, mean(B), |W|, X_ps                   eq. (6)
    EstState^m       X_i^new,m  ~ X_i^initial, b_i       for m in {cpu, mem, gpu}   eq. (7)
    EstExecTime      t_exec     ~ X_i^new (cpu, gpu, mem)                            eq. (8)

(t_exec: the mean SIFT frame time of a window, the column with the lower repeat spread.)

Times are fitted on ``log y`` with mean absolute error, which is the relative error for
small errors (``|log y' - log y| ~ |y' - y| / y``), the quantity MAPE scores. A state
``X^new,m`` is fitted both as the change ``X^new,m - X^initial,m`` that the update task
causes and as the level ``X^new,m`` itself (half the budget each); the form with the lower
cross-validated MAE (the same unit for both) is kept. The change suits a task that adds a
fixed load; the level suits a saturated resource (``X^new,cpu = 1`` whatever the start).

Data points. By default (``aggregate``) a data point is one *configuration* (stress level,
``b``, ``|W|``): its targets and measured states are the medians over the configuration's
repeats (:func:`aggregate_configurations`), which estimates the configuration's typical
value better than any single window and is robust to one disturbed window. With
``aggregate=False`` every measured window is a data point.

Each function's regressor is chosen by FLAML over LightGBM, XGBoost, random forest and
extra trees within a budget of trials or seconds (:mod:`deepedge.perfmodel.fit_budget`),
with group cross-validation (repeats of one configuration never straddle a fold).
Evaluation is on held-out configurations (a group split: no held-out row shares a
configuration with a training row):

    MAPE = mean_i |y'_i - y_i| / |y_i|          (reported as a fraction, with its std)

The *noise floor* of a function is the MAPE of an oracle that knows every configuration's
true mean, scored against the data points as they are built. For a single window it is
estimated from the repeats as

    floor_1 = mean_i |y_i - ybar_g(i)| / |y_i| * sqrt(n_g / (n_g - 1))

(the factor corrects for ``ybar`` containing ``y_i``). For a data point that is the median
of ``n_g`` windows the error shrinks by the median's efficiency factor ``e(n_g)``, the ratio
of the standard deviations of the median of ``n`` and of one normally distributed draw
(``e(1) = 1``, ``e(2) = 0.707``, ``e(3) = 0.670``, about ``1.2533 / sqrt(n)`` for large n):

    floor = mean_g e(n_g) * mean_{i in g} |y_i - ybar_g| / |y_i| * sqrt(n_g / (n_g - 1))

A model cannot be expected to beat its floor.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict
from sklearn.model_selection import GroupShuffleSplit

from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.features import FeatureImportance, sensitivity_analysis
from deepedge.perfmodel.fit_budget import FitBudget

log = logging.getLogger(__name__)

ESTIMATORS: tuple[str, ...] = ("lgbm", "xgboost", "rf", "extra_tree")
MIN_ROWS = 10
MIN_GROUPS = 4
TEST_SHARE = 0.2


class TargetForm(StrEnum):
    """What the regressor of a function predicts."""

    LOG = "log"  # log y
    DELTA = "delta"  # y - the spec's delta_of column
    LEVEL = "level"  # y itself


class LearnedFunction(StrEnum):
    """The learned functions, named as in the paper's Table I."""

    COMPUTE_TIME = "EstComputeTime"
    UPDATE_TIME = "EstUpdateTime"
    STATE_CPU = "EstState^cpu"
    STATE_GPU = "EstState^gpu"
    STATE_MEM = "EstState^mem"
    EXEC_TIME = "EstExecTime"


_INITIAL = ("init_cpu", "init_gpu", "init_mem")


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    function: LearnedFunction
    target: str  # dataset column
    candidates: tuple[str, ...]
    log_target: bool  # fit log(y): times are positive and scored relatively
    delta_of: str | None = None  # fit y - frame[delta_of] (the change the task causes)


SPECS: tuple[FunctionSpec, ...] = (
    FunctionSpec(LearnedFunction.COMPUTE_TIME, "t_compute_s", (*_INITIAL, "batch_size"), True),
    FunctionSpec(
        LearnedFunction.UPDATE_TIME,
        "t_update_s",
        (*_INITIAL, "batch_mean", "n_workers", "ps_cpu", "ps_gpu", "ps_mem"),
        True,
    ),
    FunctionSpec(
        LearnedFunction.STATE_CPU, "new_cpu", (*_INITIAL, "batch_size"), False, "init_cpu"
    ),
    FunctionSpec(
        LearnedFunction.STATE_GPU, "new_gpu", (*_INITIAL, "batch_size"), False, "init_gpu"
    ),
    FunctionSpec(
        LearnedFunction.STATE_MEM, "new_mem", (*_INITIAL, "batch_size"), False, "init_mem"
    ),
    FunctionSpec(LearnedFunction.EXEC_TIME, "exec_mean_s", ("new_cpu", "new_gpu", "new_mem"), True),
)
SPEC_BY_FUNCTION = {spec.function: spec for spec in SPECS}


class ImportanceRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    feature: str
    share: float
    spearman_rho: float
    selected: bool
    note: str = ""


class FunctionReport(BaseModel):
    """Training metadata and held-out accuracy of one learned function (a Table I row)."""

    model_config = ConfigDict(frozen=True)

    function: LearnedFunction
    target: str
    features: list[str]
    importances: list[ImportanceRecord]
    algorithm: str
    config: dict[str, Any]
    n_train: int
    n_test: int
    mape_mean: float  # held-out, fraction
    mape_std: float
    baseline_mape: float  # held-out MAPE of predicting the training mean
    noise_floor: float  # repeat-measurement spread, fraction (see module docstring)
    fit_time_s: float
    repeats_per_point: float = 1.0  # windows aggregated into one data point, on average
    target_form: TargetForm | None = None  # None (older files): the spec's default form


@dataclass(frozen=True)
class FittedFunction:
    spec: FunctionSpec
    model: Any  # a FLAML estimator wrapper with ``predict(DataFrame)``
    report: FunctionReport

    @property
    def form(self) -> TargetForm:
        return self.report.target_form or default_form(self.spec)

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """Predictions in the target's unit for rows holding the selected features."""
        raw = np.asarray(self.model.predict(frame[self.report.features]), dtype=float)
        if self.form is TargetForm.LOG:
            return np.exp(raw)
        if self.form is TargetForm.DELTA and self.spec.delta_of is not None:
            return raw + frame[self.spec.delta_of].to_numpy(dtype=float)
        return raw


def default_form(spec: FunctionSpec) -> TargetForm:
    if spec.log_target:
        return TargetForm.LOG
    return TargetForm.DELTA if spec.delta_of is not None else TargetForm.LEVEL


def mape(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-row absolute percentage errors as fractions."""
    truth = np.asarray(truth, dtype=float)
    return np.abs(np.asarray(pred, dtype=float) - truth) / np.maximum(np.abs(truth), 1e-12)


@functools.cache
def median_efficiency(n: int) -> float:
    """sd(median of n iid normal draws) / sd(one draw), by a seeded Monte Carlo (exact 1, 1/sqrt 2
    for n = 1, 2)."""
    if n < 1:
        raise InvalidInputError(f"need at least one draw, got {n}", field="n")
    if n <= 2:
        return 1.0 / np.sqrt(n)
    draws = np.random.default_rng(0).standard_normal((200_000, n))
    return float(np.median(draws, axis=1).std())


def noise_floor(values: np.ndarray, groups: np.ndarray, aggregated: bool = False) -> float:
    """Oracle MAPE from repeats (module docstring): of single windows, or with ``aggregated``
    of per-configuration medians. NaN without any repeated configuration."""
    frame = pd.DataFrame({"y": np.asarray(values, dtype=float), "g": groups})
    counts = frame.groupby("g")["y"].transform("size")
    repeated = frame[counts >= 2].copy()
    if repeated.empty:
        return float("nan")
    mean = repeated.groupby("g")["y"].transform("mean")
    n = counts[counts >= 2]
    errors = np.abs(repeated["y"] - mean) / np.maximum(np.abs(repeated["y"]), 1e-12)
    repeated["e"] = errors * np.sqrt(n / (n - 1))
    if not aggregated:
        return float(repeated["e"].mean())
    per_config = repeated.groupby("g")["e"].agg(["mean", "size"])
    factors = np.array([median_efficiency(int(k)) for k in per_config["size"]])
    return float((per_config["mean"].to_numpy() * factors).mean())


def aggregate_configurations(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: the median of every numeric column over its repeats,
    ``repeat`` replaced by the number of repeats aggregated."""
    numeric = [c for c in frame.columns if c not in ("config_id", "device", "repeat")]
    grouped = frame.groupby("config_id", sort=True)
    out = grouped[numeric].median()
    out["repeat"] = grouped.size()
    out["device"] = grouped["device"].first()
    return out.reset_index()[list(frame.columns)]


def held_out_split(groups: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train/test row indices; whole configurations go to one side."""
    if len(np.unique(groups)) < MIN_GROUPS:
        raise InvalidInputError(
            f"need at least {MIN_GROUPS} distinct configurations to hold some out, "
            f"got {len(np.unique(groups))}",
            field="config_id",
        )
    split = GroupShuffleSplit(n_splits=1, test_size=TEST_SHARE, random_state=seed)
    train, test = next(split.split(np.zeros(len(groups)), groups=groups))
    return train, test


def _fit_target(spec: FunctionSpec, frame: pd.DataFrame, form: TargetForm) -> np.ndarray:
    y = frame[spec.target].to_numpy(dtype=float)
    if form is TargetForm.LOG:
        return np.log(y)
    if form is TargetForm.DELTA and spec.delta_of is not None:
        return y - frame[spec.delta_of].to_numpy(dtype=float)
    return y


def _automl(
    x: pd.DataFrame, y: np.ndarray, groups: np.ndarray, budget: FitBudget, n_forms: int, seed: int
) -> tuple[Any, str, dict[str, Any], float]:
    """The best model found, its algorithm, its configuration and its CV loss (MAE), one
    target form's search getting ``1 / n_forms`` of the function's seconds."""
    from flaml import AutoML

    n_groups = len(np.unique(groups))
    settings: dict[str, Any] = {
        "task": "regression",
        "metric": "mae",
        "estimator_list": list(ESTIMATORS),
        "eval_method": "cv",
        "n_splits": min(5, n_groups),
        "split_type": "group",
        "groups": groups,
        "seed": seed,
        "n_jobs": 1,
        "verbose": 0,
        "retrain_full": True,
    }
    time_s = budget.time_s / n_forms
    if budget.trials is not None:
        # learners in turn, not by their measured cost to improve: no clock in the search
        settings |= {"max_iter": budget.trials, "learner_selector": "roundrobin"}
    automl = AutoML()
    automl.fit(X_train=x, y_train=y, time_budget=time_s, **settings)
    if automl.model is None:
        # A slow machine can spend the whole budget before the first trial ends: then
        # train the search's first configuration to completion instead.
        automl = AutoML()
        automl.fit(X_train=x, y_train=y, time_budget=-1, **(settings | {"max_iter": 1}))
    if automl.model is None:
        raise InvalidInputError(
            f"a time budget of {time_s:.3g} s per target form fitted no model; "
            "give the search more time",
            field="time_s",
        )
    return (
        automl.model,
        str(automl.best_estimator),
        dict(automl.best_config or {}),
        float(automl.best_loss),
    )


def fit_function(
    spec: FunctionSpec,
    frame: pd.DataFrame,
    train_idx: np.ndarray,
    test_idx: np.ndarray,
    budget: FitBudget,
    seed: int = 0,
    floor: float = float("nan"),
) -> FittedFunction:
    """Sensitivity analysis, AutoML search and held-out evaluation of one function.

    ``frame`` holds the data points (windows or aggregated configurations); ``floor`` is the
    noise floor of those points (:func:`noise_floor`)."""
    start = time.perf_counter()
    train, test = frame.iloc[train_idx], frame.iloc[test_idx]
    groups = frame["config_id"].to_numpy()
    form = default_form(spec)
    y_train = _fit_target(spec, train, form)
    sensitivity = sensitivity_analysis(
        train, y_train, spec.candidates, groups[train_idx], seed=seed
    )
    features = list(sensitivity.selected)
    forms = [form] if form is not TargetForm.DELTA else [TargetForm.DELTA, TargetForm.LEVEL]
    found = {
        candidate: _automl(
            train[features],
            _fit_target(spec, train, candidate),
            groups[train_idx],
            budget,
            len(forms),
            seed,
        )
        for candidate in forms
    }
    # The lower CV MAE; on a tie (both fit the folds exactly, as a time-limited search can
    # on clean data), the form whose target varies less: less is left to extrapolate.
    spread = {c: float(np.var(_fit_target(spec, train, c))) for c in forms}
    form = min(found, key=lambda c: (round(found[c][3], 9), spread[c]))
    model, algorithm, config, _ = found[form]
    fitted = FittedFunction(
        spec, model, _placeholder_report(spec, features).model_copy(update={"target_form": form})
    )
    truth = test[spec.target].to_numpy(dtype=float)
    errors = mape(fitted.predict(test), truth)
    baseline = mape(np.full(len(truth), train[spec.target].mean()), truth)
    report = FunctionReport(
        function=spec.function,
        target=spec.target,
        features=features,
        importances=[_record(fi) for fi in sensitivity.importances],
        algorithm=algorithm,
        config=config,
        n_train=len(train_idx),
        n_test=len(test_idx),
        mape_mean=float(errors.mean()),
        mape_std=float(errors.std()),
        baseline_mape=float(baseline.mean()),
        noise_floor=floor,
        fit_time_s=time.perf_counter() - start,
        repeats_per_point=float(frame["repeat"].mean()) if "repeat" in frame else 1.0,
        target_form=form,
    )
    log.info(
        "%s: %s on %s, held-out MAPE %.4f (noise floor %.4f)",
        spec.function.value, algorithm, features, report.mape_mean, report.noise_floor,
    )  # fmt: skip
    return FittedFunction(spec, model, report)


def _placeholder_report(spec: FunctionSpec, features: list[str]) -> FunctionReport:
    """A report carrying only the feature list, for predicting before evaluation."""
    return FunctionReport(
        function=spec.function, target=spec.target, features=features, importances=[],
        algorithm="", config={}, n_train=0, n_test=0, mape_mean=float("nan"),
        mape_std=float("nan"), baseline_mape=float("nan"), noise_floor=float("nan"),
        fit_time_s=0.0,
    )  # fmt: skip


def _record(fi: FeatureImportance) -> ImportanceRecord:
    return ImportanceRecord(
        feature=fi.feature,
        share=fi.share,
        spearman_rho=fi.spearman_rho,
        selected=fi.selected,
        note=fi.note,
    )


def functions_for(frame: pd.DataFrame) -> list[FunctionSpec]:
    """The functions a dataset supports (EstState^gpu only when the GPU was measured)."""
    specs = []
    for spec in SPECS:
        if frame[spec.target].isna().any():
            if spec.function is LearnedFunction.STATE_GPU:
                continue
            raise InvalidInputError(f"column {spec.target} has missing values", field=spec.target)
        specs.append(spec)
    return specs


def check_fit_input(frame: pd.DataFrame) -> None:
    if len(frame) < MIN_ROWS:
        raise InvalidInputError(
            f"too few rows to fit: {len(frame)} (need at least {MIN_ROWS})", field="rows"
        )
    for column in ("t_compute_s", "t_update_s", "exec_time_s", "exec_mean_s"):
        if (frame[column] <= 0).any():
            raise InvalidInputError(f"column {column} must be positive", field=column)


def fit_all(
    frame: pd.DataFrame,
    budget: FitBudget,
    seed: int = 0,
    functions: Sequence[LearnedFunction] | None = None,
    aggregate: bool = True,
    on_function: Callable[[int, int, str], None] | None = None,
) -> list[FittedFunction]:
    """Fit every supported function on one held-out split shared by all of them; with
    ``aggregate`` the data points are configurations (module docstring). ``on_function(k,
    n, name)`` hears of each of the ``n`` fits as it starts, and ``(n, n, "")`` at the end."""
    check_fit_input(frame)
    groups = frame["config_id"].to_numpy()
    points = aggregate_configurations(frame) if aggregate else frame.reset_index(drop=True)
    if not aggregate:
        points["repeat"] = 1
    train_idx, test_idx = held_out_split(points["config_id"].to_numpy(), seed)
    specs = [s for s in functions_for(frame) if functions is None or s.function in functions]
    fitted = []
    for k, spec in enumerate(specs):
        if on_function is not None:
            on_function(k, len(specs), spec.function.value)
        floor = noise_floor(frame[spec.target].to_numpy(dtype=float), groups, aggregate)
        fitted.append(fit_function(spec, points, train_idx, test_idx, budget, seed, floor))
    if on_function is not None:
        on_function(len(specs), len(specs), "")
    return fitted
