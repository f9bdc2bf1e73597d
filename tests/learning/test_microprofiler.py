"""Micro-profiler: curve extrapolation, cost scaling, Pareto pruning, model set-up."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deepedge.core.errors import InvalidInputError
from deepedge.learning.convergence import OptimusCurve, fit_optimus
from deepedge.learning.microprofiler import (
    ExtrapolationAxis,
    NamedConfig,
    ProfileSettings,
    SampleDraw,
    build_retraining_model,
    fresh_blocks,
    micro_profile,
    profile_epoch_size,
    projected_accuracy,
)
from deepedge.learning.models import make_edge_model
from deepedge.planning.window.config_pruning import ConfigHistory, Outcome, pareto_gaps
from deepedge.planning.window.documents import RetrainingHyperparameters


def _hp(
    epochs: int = 5, frozen: int = 0, neurons: int = 10, frac: float = 1.0
) -> RetrainingHyperparameters:
    return RetrainingHyperparameters(
        epochs=epochs,
        batch_size=16,
        last_layer_neurons=neurons,
        frozen_layers=frozen,
        data_fraction=frac,
    )


@pytest.mark.parametrize(("b0", "b1", "b2"), [(0.8, 2.0, 0.05), (0.3, 1.5, 0.1), (2.0, 3.0, 0.02)])
def test_curve_fit_extrapolation_recovers_known_parameters(b0: float, b1: float, b2: float) -> None:
    truth = OptimusCurve(b0, b1, b2)
    k = np.arange(1, 6, dtype=float)  # five profiling epochs
    fitted = fit_optimus(k, truth.predict(k))
    for far in (15.0, 30.0):
        assert float(fitted.predict(far)) == pytest.approx(float(truth.predict(far)), abs=0.01)


def test_pareto_gaps_and_pruning() -> None:
    outcomes = [
        Outcome("cheap", 0.80, 10.0),
        Outcome("good", 0.90, 20.0),
        Outcome("bad", 0.70, 50.0),  # costs more than "good" and is 20 points worse
    ]
    gaps = pareto_gaps(outcomes)
    assert gaps == pytest.approx({"cheap": 0.0, "good": 0.0, "bad": 0.2})
    history = ConfigHistory(max_gap=0.05, min_windows=2)
    configs = [NamedConfig(n, _hp()) for n in ("cheap", "good", "bad", "new")]
    history.record(outcomes)
    assert [c.name for c in history.keep(configs)] == ["cheap", "good", "bad", "new"]
    history.record(outcomes)
    assert [c.name for c in history.keep(configs)] == ["cheap", "good", "new"]


def test_build_retraining_model_freezes_and_replaces_head() -> None:
    deployed = make_edge_model(10, 16)
    frozen = build_retraining_model(deployed, _hp(frozen=1))
    blocks = list(frozen.features.children())
    assert all(not p.requires_grad for p in blocks[0].parameters())
    assert all(p.requires_grad for p in blocks[1].parameters())
    wide = build_retraining_model(deployed, _hp(neurons=32))
    assert wide.head[0].out_features == 32
    assert all(p.requires_grad for p in deployed.parameters())  # the deployed model is untouched


def test_retraining_a_retrained_model_keeps_its_head_and_unfreezes() -> None:
    # A model chain: retraining a model that the same configuration produced fine-tunes its
    # 32-neuron head instead of drawing a fresh one; a block frozen before trains again.
    deployed = make_edge_model(10, 16)
    wide = build_retraining_model(deployed, _hp(frozen=1, neurons=32))
    with torch.no_grad():
        wide.head[0].weight.add_(1.0)
    again = build_retraining_model(wide, _hp(neurons=32))
    assert torch.equal(again.head[0].weight, wide.head[0].weight)
    assert all(p.requires_grad for p in again.parameters())
    narrow = build_retraining_model(wide, _hp(neurons=16))
    assert narrow.head[0].out_features == 16


@pytest.fixture
def one_thread() -> Iterator[None]:
    """A tiny CNN on a shared CPU: one torch thread avoids contention stalls."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("draw", list(SampleDraw))
def test_micro_profile_on_real_training_scales_cost(draw: SampleDraw) -> None:
    rng = np.random.default_rng(0)
    # Two separable classes: bright vs dark images.
    labels = rng.integers(0, 2, 250)
    images = (rng.random((250, 1, 16, 16)) * 0.3 + labels[:, None, None, None] * 0.6).astype(
        np.float32
    )
    deployed = make_edge_model(10, 16)
    configs = [NamedConfig("e5", _hp(epochs=5)), NamedConfig("e20-half", _hp(epochs=20, frac=0.5))]
    settings = ProfileSettings(
        sample_fraction=0.1,
        profile_epochs=3,
        min_steps=1,
        axis=ExtrapolationAxis.EPOCHS,
        draw=draw,
    )
    est = micro_profile(
        deployed, (images[:200], labels[:200]), (images[200:], labels[200:]), configs, settings
    )
    assert [e.name for e in est] == ["e5", "e20-half"]
    for e in est:
        assert len(e.points) == 3
        assert 0.0 <= e.predicted_accuracy <= 1.0
        assert e.estimated_gpu_seconds > 0
    # Cost = measured seconds per sample x epochs x the config's data size.
    assert [e.data_size for e in est] == [200, 100]
    for e, epochs in zip(est, (5, 20), strict=True):
        assert e.estimated_gpu_seconds == pytest.approx(e.seconds_per_sample * epochs * e.data_size)
    assert est[0].to_retraining_config().gpu_seconds == est[0].estimated_gpu_seconds


@pytest.mark.usefixtures("one_thread")
def test_epoch_variants_share_one_profiling_run() -> None:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 250)
    images = (rng.random((250, 1, 16, 16)) * 0.3 + labels[:, None, None, None] * 0.6).astype(
        np.float32
    )
    configs = [
        NamedConfig("e2", _hp(epochs=2)),
        NamedConfig("e8-half", _hp(epochs=8, frac=0.5)),
        NamedConfig("e8", _hp(epochs=8)),
    ]
    settings = ProfileSettings(sample_fraction=0.1, profile_epochs=3, min_steps=1)
    est = micro_profile(
        make_edge_model(10, 16),
        (images[:200], labels[:200]),
        (images[200:], labels[200:]),
        configs,
        settings,
    )
    assert [e.name for e in est] == ["e2", "e8-half", "e8"]
    e2, half, e8 = est
    # e2 and e8 differ only in epochs: one run, read at 2 and at 8 epochs.
    assert e2.points == e8.points and e2.curve == e8.curve
    assert e2.profile_seconds == e8.profile_seconds
    assert e8.predicted_accuracy == pytest.approx(min(1.0, max(0.0, float(e8.curve.predict(8)))))
    assert e8.estimated_gpu_seconds == pytest.approx(4 * e2.estimated_gpu_seconds)
    # A different data fraction is a run of its own.
    assert half.points != e2.points and half.data_size == 100


def test_projected_accuracy_reads_the_fitted_curve() -> None:
    truth = OptimusCurve(0.5, 2.0, 0.05)
    seen = [float(a) for a in truth.predict(np.arange(1, 6))]
    assert projected_accuracy(seen[:1], 20) is None
    projected = projected_accuracy(seen, 20)
    assert projected == pytest.approx(float(truth.predict(20)), abs=0.01)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 200), size_frac=st.floats(0.0, 2.5), epochs=st.integers(1, 8))
def test_fresh_blocks_read_whole_passes(n: int, size_frac: float, epochs: int) -> None:
    # Every block has the profiling epoch's size, and the blocks laid end to end are shuffled
    # passes over the pool: each index once per pass, so no image repeats before all were seen.
    # A block may be larger than the pool (a small pool and min_steps): it spans passes.
    size = max(1, round(size_frac * n))
    blocks = fresh_blocks(n, size, epochs, np.random.default_rng(n))
    assert [len(b) for b in blocks] == [size] * epochs
    stream = np.concatenate(blocks)
    for start in range(0, len(stream), n):
        part = stream[start : start + n]
        assert len(set(part.tolist())) == len(part)
        assert set(part.tolist()) <= set(range(n))


def test_fresh_blocks_are_disjoint_when_the_pool_allows_and_reject_bad_sizes() -> None:
    blocks = fresh_blocks(100, 10, 5, np.random.default_rng(0))
    assert len(set(np.concatenate(blocks).tolist())) == 50
    for n, bad in ((100, 0), (0, 10)):
        with pytest.raises(InvalidInputError):
            fresh_blocks(n, bad, 5, np.random.default_rng(0))


@pytest.mark.parametrize(
    ("pool", "batch", "epochs_total", "min_steps", "expected"),
    [
        (205, 32, 35, 4, 128),  # small pool, many epochs: 4 steps (10 % would be 20)
        (1200, 32, 35, 4, 128),  # 10 % (120) < 4 steps
        (4000, 32, 35, 4, 400),  # 10 % wins
        (160, 32, 1, 4, 32),  # one epoch of 160: the 10 % budget (3) caps min_steps; 1 batch
        (640, 32, 8, 4, 102),  # budget 0.1 * 8 * 640 / 5 = 102 < 128 steps' worth
        (205, 32, 35, 1, 32),  # min_steps 1: one batch, as the old 32-sample minimum
    ],
)
def test_profile_epoch_size_steps_fraction_and_budget(
    pool: int, batch: int, epochs_total: int, min_steps: int, expected: int
) -> None:
    settings = ProfileSettings(min_steps=min_steps)
    assert profile_epoch_size(pool, batch, epochs_total, settings) == expected
