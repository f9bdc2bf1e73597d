"""NoisyModel: seeded, fixed, bounded multiplicative errors; never the ground truth."""

from __future__ import annotations

import pytest

from deepedge.cluster.state import NodeState
from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.perfmodel.noisy import PAPER_TABLE_I, EstimatorNoise, NoisyModel
from deepedge.perfmodel.protocol import PerformanceModel

TRUTH = DeviceCatalog()
STATES = [NodeState(c / 10, 0.4, g / 10) for c in range(0, 10, 3) for g in range(0, 10, 3)]
PS = NodeState(0.2, 0.3)


def test_noisy_model_is_a_performance_model() -> None:
    assert isinstance(NoisyModel(TRUTH, 0.05), PerformanceModel)


def test_zero_noise_is_the_inner_model() -> None:
    noisy = NoisyModel(TRUTH, 0.0)
    for s in STATES:
        assert noisy.est_compute_time_s("jetson-nano", s, 16) == TRUTH.est_compute_time_s(
            "jetson-nano", s, 16
        )
        assert noisy.est_state("jetson-nano", s, 16) == TRUTH.est_state("jetson-nano", s, 16)


def test_same_seed_same_answer_other_seed_other_answer() -> None:
    a, b, c = (
        NoisyModel(TRUTH, 0.1, seed=1),
        NoisyModel(TRUTH, 0.1, seed=1),
        NoisyModel(TRUTH, 0.1, seed=2),
    )
    answers = [m.est_compute_time_s("jetson-tx2", STATES[5], 32) for m in (a, b, c)]
    assert answers[0] == answers[1] != answers[2]
    assert a.est_compute_time_s("jetson-tx2", STATES[5], 32) == answers[0]  # fixed, not fresh


@pytest.mark.parametrize("sigma", [0.02, 0.1, 0.3])
def test_errors_are_bounded_by_three_sigma_and_not_all_zero(sigma: float) -> None:
    noisy = NoisyModel(TRUTH, sigma, seed=7)
    ratios = [
        noisy.est_exec_time_s("jetson-nano", "sift", s)
        / TRUTH.est_exec_time_s("jetson-nano", "sift", s)
        for s in STATES
    ]
    assert all(abs(r - 1) <= 3 * sigma + 1e-12 for r in ratios)
    assert any(abs(r - 1) > 1e-9 for r in ratios)


def test_vector_and_scalar_update_times_agree() -> None:
    noisy = NoisyModel(TRUTH, 0.1, seed=3)
    devices, states, batches = ["jetson-tx2", "jetson-nano"], STATES[:2], [32, 16]
    vector = noisy.est_update_times_s(devices, states, batches, PS, 2)
    scalar = [
        noisy.est_update_time_s(d, s, batches, PS, 2) for d, s in zip(devices, states, strict=True)
    ]
    assert vector == pytest.approx(scalar)


def test_state_noise_scales_the_change_and_stays_in_range() -> None:
    noisy = NoisyModel(TRUTH, 0.3, seed=11)
    for s in STATES:
        est = noisy.est_state("jetson-nano", s, 16)
        for v in (est.cpu_util, est.mem_util, est.gpu_util):
            assert v is not None and 0.0 <= v <= 1.0
        assert est.cpu_util >= s.cpu_util  # the change keeps its sign


def test_max_batch_is_delegated_exactly() -> None:
    noisy = NoisyModel(TRUTH, 0.3, seed=5)
    for s in STATES:
        assert noisy.max_batch_size("jetson-nano", s, 3600, 4, 64) == TRUTH.max_batch_size(
            "jetson-nano", s, 3600, 4, 64
        )


def test_paper_table_i_sigmas_follow_the_reported_mape() -> None:
    assert PAPER_TABLE_I.update > PAPER_TABLE_I.compute > PAPER_TABLE_I.exec > 0
    assert PAPER_TABLE_I.exec == pytest.approx(0.016 / 0.7979, abs=1e-3)


@pytest.mark.parametrize("sigma", [-0.1, 0.34, 1.0])
def test_out_of_range_noise_is_rejected(sigma: float) -> None:
    with pytest.raises(InvalidInputError):
        NoisyModel(TRUTH, sigma)
    with pytest.raises(InvalidInputError):
        EstimatorNoise(exec=sigma)
