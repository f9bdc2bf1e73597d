"""Learned estimators: fitting, held-out evaluation, noise floor, save/load, Protocol."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _learned_cases import MEM_TOTAL_MB, synthetic_dataset, synthetic_frame
from hypothesis import given, settings
from hypothesis import strategies as st

from deepedge.cluster.state import NodeState
from deepedge.core.errors import InvalidInputError, NotFoundError
from deepedge.perfmodel.features import sensitivity_analysis, usable_candidates
from deepedge.perfmodel.fit_budget import QUICK_FIT, FitBudget
from deepedge.perfmodel.fitted_model import (
    METADATA_NAME,
    DeviceModels,
    LearnedPerformanceModel,
    ModelsMetadata,
    load_performance_model,
)
from deepedge.perfmodel.fitting import (
    LearnedFunction,
    TargetForm,
    aggregate_configurations,
    fit_all,
    held_out_split,
    mape,
    median_efficiency,
    noise_floor,
)
from deepedge.perfmodel.protocol import PerformanceModel

BUDGET = QUICK_FIT  # counted in trials: the same fit however loaded the machine


@pytest.fixture(scope="module")
def fitted_dir(tmp_path_factory):
    dataset = synthetic_dataset()
    fitted = fit_all(dataset.frame, BUDGET, seed=0)
    models = DeviceModels.build(fitted, dataset.provenance.model_dump(), BUDGET, 0)
    out = tmp_path_factory.mktemp("models")
    models.save(out)
    return out, models


@pytest.mark.parametrize(
    ("values", "groups", "expected"),
    [
        ([1.0, 1.0, 2.0, 2.0], [0, 0, 1, 1], 0.0),  # identical repeats: no noise
        # |1 - 1.5|/1 and |2 - 1.5|/2, times sqrt(2): (0.5 + 0.25) / 2 * sqrt(2)
        ([1.0, 2.0], [0, 0], 0.375 * np.sqrt(2)),
        ([1.0, 2.0, 3.0], [0, 1, 2], float("nan")),  # no repeats: undefined
    ],
)
def test_noise_floor(values, groups, expected):
    got = noise_floor(np.array(values), np.array(groups))
    if np.isnan(expected):
        assert np.isnan(got)
    else:
        assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("values", "groups", "expected"),
    [
        ([1.0, 1.0, 2.0, 2.0], [0, 0, 1, 1], 0.0),
        # one window's floor 0.375 sqrt(2), times e(2) = 1/sqrt(2)
        ([1.0, 2.0], [0, 0], 0.375),
        # configuration-weighted: (0.375 + 0) / 2
        ([1.0, 2.0, 3.0, 3.0, 3.0], [0, 0, 1, 1, 1], 0.1875),
    ],
)
def test_noise_floor_of_aggregated_points(values, groups, expected):
    got = noise_floor(np.array(values), np.array(groups), aggregated=True)
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("n", "expected", "tol"),
    [(1, 1.0, 1e-12), (2, 2**-0.5, 1e-12), (3, 0.670, 0.01), (25, 1.2533 / 5, 0.01)],
)
def test_median_efficiency(n, expected, tol):
    assert median_efficiency(n) == pytest.approx(expected, abs=tol)


def test_aggregation_takes_per_configuration_medians():
    frame = synthetic_frame(n_configs=5, repeats=3, noise=0.2)
    points = aggregate_configurations(frame)
    assert list(points.columns) == list(frame.columns)
    assert list(points["config_id"]) == sorted(frame["config_id"].unique())
    assert (points["repeat"] == 3).all()
    for _, row in points.iterrows():
        group = frame[frame["config_id"] == row["config_id"]]
        assert row["t_compute_s"] == pytest.approx(group["t_compute_s"].median())
        assert row["init_cpu"] == pytest.approx(group["init_cpu"].median())
        assert np.isnan(row["init_gpu"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("saturated", "expected"),
    [(True, TargetForm.LEVEL), (False, TargetForm.DELTA)],
)
def test_state_form_follows_the_data(saturated, expected):
    frame = synthetic_frame(n_configs=16)
    if saturated:  # the task pins the CPU at 1 whatever the initial state
        frame["new_cpu"] = 1.0
    else:  # the task adds a fixed load
        frame["new_cpu"] = frame["init_cpu"] * 0.5 + 0.2
        frame["init_cpu"] = frame["init_cpu"] * 0.5
    (fitted,) = fit_all(frame, BUDGET, functions=[LearnedFunction.STATE_CPU])
    assert fitted.report.target_form is expected
    assert fitted.report.mape_mean < 0.01


@pytest.mark.slow
def test_a_trial_budget_fits_the_same_model_every_time():
    """Counted in trials, the search reads no clock: two fits agree to the last digit
    (a search counted in seconds differs with the machine's load)."""
    frame = synthetic_frame(n_configs=16)
    budget = FitBudget(time_s=120.0, trials=8)
    first, second = (
        fit_all(frame, budget, functions=[LearnedFunction.COMPUTE_TIME])[0].report for _ in range(2)
    )
    assert (first.algorithm, first.config) == (second.algorithm, second.config)
    assert first.mape_mean == second.mape_mean


@pytest.mark.slow
@pytest.mark.parametrize("aggregate", [True, False])
def test_data_points_are_configurations_or_windows(aggregate):
    frame = synthetic_frame(n_configs=12, repeats=3)
    (fitted,) = fit_all(frame, BUDGET, functions=[LearnedFunction.STATE_MEM], aggregate=aggregate)
    r = fitted.report
    assert r.n_train + r.n_test == (12 if aggregate else 36)
    assert r.repeats_per_point == (3.0 if aggregate else 1.0)
    window_floor = noise_floor(frame["new_mem"].to_numpy(), frame["config_id"].to_numpy())
    assert r.noise_floor == pytest.approx(window_floor * (median_efficiency(3) if aggregate else 1))


def test_mape_is_relative():
    assert mape(np.array([1.1, 1.8]), np.array([1.0, 2.0])) == pytest.approx([0.1, 0.1])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=12, max_size=60), st.integers(0, 5))
def test_held_out_split_keeps_configurations_whole(groups, seed):
    groups = np.array(groups)
    if len(np.unique(groups)) < 4:
        with pytest.raises(InvalidInputError):
            held_out_split(groups, seed)
        return
    train, test = held_out_split(groups, seed)
    assert len(test) > 0
    assert set(groups[train]).isdisjoint(groups[test])
    assert sorted(np.concatenate([train, test])) == list(range(len(groups)))


def test_candidates_drop_absent_constant_and_duplicates():
    frame = synthetic_frame(n_configs=10)
    kept, dropped = usable_candidates(frame, ["init_cpu", "init_gpu", "stress_io", "ps_cpu"])
    assert kept == ["init_cpu"]
    notes = {d.feature: d.note for d in dropped}
    assert notes == {
        "init_gpu": "absent",
        "stress_io": "constant",
        "ps_cpu": "duplicate of init_cpu",
    }


def test_sensitivity_finds_the_driving_feature():
    frame = synthetic_frame(n_configs=40)
    y = np.log(frame["t_compute_s"].to_numpy())
    report = sensitivity_analysis(
        frame, y, ["init_cpu", "init_mem", "batch_size"], frame["config_id"].to_numpy()
    )
    top = report.importances[0]
    assert top.feature == "batch_size" and top.selected
    assert top.spearman_rho < 0  # larger batches: less time per sample (Figure 9(c))
    assert "batch_size" in report.selected


@pytest.mark.slow
def test_estimators_beat_the_mean_predictor(fitted_dir):
    _, models = fitted_dir
    reports = {r.function: r for r in models.metadata.functions}
    assert LearnedFunction.STATE_GPU not in reports  # no GPU measured, no GPU model
    for function in (
        LearnedFunction.COMPUTE_TIME,
        LearnedFunction.UPDATE_TIME,
        LearnedFunction.EXEC_TIME,
        LearnedFunction.STATE_MEM,
    ):
        r = reports[function]
        assert r.mape_mean < r.baseline_mape, function
        assert r.n_test > 0 and r.n_train > r.n_test
        assert r.algorithm in {"lgbm", "xgboost", "rf", "extra_tree"}


@pytest.mark.slow
def test_save_load_round_trip_and_protocol(fitted_dir):
    path, models = fitted_dir
    loaded = load_performance_model(path, strict=True)
    assert isinstance(loaded, PerformanceModel)
    original = LearnedPerformanceModel({models.metadata.device: models}, strict=True)
    state = NodeState(cpu_util=0.4, mem_util=0.3)
    device = models.metadata.device
    assert loaded.est_compute_time_s(device, state, 32) == original.est_compute_time_s(
        device, state, 32
    )
    assert loaded.est_exec_time_s(device, "sift", state) > 0
    assert loaded.est_update_time_s(device, state, [16, 32], state, 2) > 0
    new = loaded.est_state(device, state, 64)
    assert new.gpu_util is None and 0 <= new.cpu_util <= 1
    assert loaded.devices[device].metadata.mem_total_mb == MEM_TOTAL_MB
    metadata = loaded.devices[device].metadata
    assert BUDGET.trials is not None
    assert (metadata.trials, metadata.time_budget_s) == (BUDGET.trials, BUDGET.time_s)
    older = json.loads((path / METADATA_NAME).read_text())
    del older["trials"]  # written before fits were counted in trials
    assert ModelsMetadata.model_validate(older).trials is None


@pytest.mark.slow
def test_unknown_device_and_app(fitted_dir):
    path, _ = fitted_dir
    state = NodeState(cpu_util=0.4, mem_util=0.3)
    with pytest.raises(NotFoundError):
        load_performance_model(path, strict=True).est_compute_time_s("jetson-nano", state, 8)
    stand_in = load_performance_model(path)
    assert stand_in.est_compute_time_s("jetson-nano", state, 8) > 0
    with pytest.raises(NotFoundError):
        stand_in.est_exec_time_s("jetson-nano", "dnn-inference", state)


@pytest.mark.slow
@pytest.mark.parametrize("capacity_share", [0.25, 0.3, 0.35, 0.6])
def test_max_batch_size_respects_memory_cap(fitted_dir, capacity_share):
    path, _ = fitted_dir
    model = load_performance_model(path)
    device = "synthetic-host"
    initial = NodeState(cpu_util=0.3, mem_util=0.25)
    cap_mb = capacity_share * MEM_TOTAL_MB
    b = model.max_batch_size(device, initial, cap_mb, 1, 512)
    if b == 0:
        assert model.est_state(device, initial, 1).mem_util * MEM_TOTAL_MB > cap_mb
        return
    for smaller in range(1, b + 1, max(1, b // 16)):
        assert model.est_state(device, initial, smaller).mem_util * MEM_TOTAL_MB <= cap_mb
    if b < 512:
        assert model.est_state(device, initial, b + 1).mem_util * MEM_TOTAL_MB > cap_mb


def test_too_few_rows_is_bad_input():
    with pytest.raises(InvalidInputError, match="too few rows"):
        fit_all(synthetic_frame(n_configs=3), BUDGET)


def test_bad_batch_bounds(fitted_dir):
    path, _ = fitted_dir
    with pytest.raises(InvalidInputError):
        load_performance_model(path).max_batch_size("x", NodeState(0.1, 0.1), 1e6, 8, 4)


def test_missing_models_dir(tmp_path):
    with pytest.raises(InvalidInputError, match="no learned models"):
        load_performance_model(tmp_path)


def test_sensitivity_without_signal_keeps_every_feature():
    frame = synthetic_frame(n_configs=20)
    y = np.zeros(len(frame))  # nothing to explain: no feature can beat the shuffled baseline
    report = sensitivity_analysis(
        frame, y, ["init_cpu", "batch_size"], frame["config_id"].to_numpy()
    )
    assert set(report.selected) == {"init_cpu", "batch_size"}
    assert all(fi.share == 0 and fi.note == "no feature beats noise" for fi in report.importances)
