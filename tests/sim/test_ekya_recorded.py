"""The recorded Ekya trace: scene schedules, a tiny real recording, the committed file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deepedge.core.errors import InvalidInputError
from deepedge.learning.stream import DriftConfig, load_digits_images
from deepedge.planning.window.thief import ThiefScheduler
from deepedge.planning.window.uniform import UniformScheduler
from deepedge.sim.baselines import holdout_best
from deepedge.sim.recorded import (
    COST_REFERENCE_CONFIG,
    RecordSpec,
    ScheduledStream,
    StreamSpec,
    default_streams,
    load_recorded_trace,
    profiling_data,
    record_stream,
    recording_stream,
    retraining_configs,
    scene_schedule,
    subset,
    window_length_s,
)
from deepedge.sim.simulator import simulate
from deepedge.sim.trace import TraceRetraining, TraceStreamWindow


@pytest.mark.parametrize(
    ("kind", "windows", "expected"),
    [
        ("static", 3, (0.0, 0.0, 0.0, 0.0)),
        ("gradual", 4, (0.0, 0.25, 0.5, 0.75, 1.0)),
        ("abrupt@2", 4, (0.0, 0.0, 0.0, 1.0, 1.0)),
        ("episodic2", 7, (0.0, 0.0, 1.0, 1.0, 0.0, 0.0, -1.0, -1.0)),
    ],
)
def test_scene_schedules(kind: str, windows: int, expected: tuple[float, ...]) -> None:
    assert scene_schedule(kind, windows) == expected


def test_unknown_schedule_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError):
        scene_schedule("sometimes", 3)


def _row(costs: dict[str, float]) -> TraceStreamWindow:
    return TraceStreamWindow(
        stream_id="s",
        drift=0.0,
        retraining=[
            TraceRetraining(name=n, accuracy_after=0.5, gpu_seconds=c) for n, c in costs.items()
        ],
    )


@pytest.mark.parametrize(
    ("reference_costs", "expected_s"),
    [((3.0,), 6.0), ((0.5, 0.6, 10.0), 1.2), ((0.2, 0.4), 0.6)],
)
def test_window_length_follows_the_reference_cost(
    reference_costs: tuple[float, ...], expected_s: float
) -> None:
    # T = 2 x the median cost of the reference configuration; other rows do not count.
    rows = [_row({COST_REFERENCE_CONFIG: c, "e1-f30-z1": 100.0}) for c in reference_costs]
    assert window_length_s(rows) == pytest.approx(expected_s)


def test_window_length_needs_the_reference_config() -> None:
    with pytest.raises(InvalidInputError):
        window_length_s([_row({"e1-f30-z1": 1.0})])


@pytest.fixture(scope="module")
def digits():
    return load_digits_images(16)


def test_scene_sign_sets_rotation_and_severity(digits) -> None:
    stream = ScheduledStream(digits, DriftConfig(seed=1), (0.0, 1.0, -0.5))
    assert stream.transform_at(0).severity == 0.0
    assert stream.transform_at(1).rotation_deg == pytest.approx(40.0)
    back = stream.transform_at(2)
    assert back.rotation_deg == pytest.approx(-20.0) and back.severity == pytest.approx(0.5)
    calm, drifted = stream.class_mix_at(0), stream.class_mix_at(1)
    assert not np.allclose(calm, drifted)
    assert np.allclose(stream.class_mix_at(2), (calm + drifted) / 2)


def test_configs_cover_epochs_data_layers_and_reference() -> None:
    configs = retraining_configs()
    assert len(configs) == 18 and len({c.name for c in configs}) == 18
    assert "e8-f100-all" in {c.name for c in configs}
    assert {c.hyperparameters.frozen_layers for c in configs} == {0, 1, 2}
    assert {c.hyperparameters.last_layer_neurons for c in configs} == {10, 32}


def test_validation_images_share_no_base_image_with_the_training_pool(digits) -> None:
    # Without drift, jitter or noise a window's images are its base images, so a repeated
    # base image is a repeated pixel row. Windows sample base images with replacement: the
    # old split (20% of the window's own images) repeated pool images in its validation set.
    config = DriftConfig(
        seed=3, window_size=400, validation_frac=0.1, rotation_jitter_deg=0.0, base_noise_std=0.0
    )
    stream = ScheduledStream(digits, config, (0.0, 0.0))
    window = stream.window(1)
    pool_rows = {r.tobytes() for r in window.images}
    assert len(pool_rows) < len(window.images)  # the window itself repeats base images
    for draw in range(3):
        (pool, _), (val, val_labels) = profiling_data(
            stream, window, np.random.default_rng([3, draw]), draw
        )
        assert len(val) == 80 and len(pool) == 320 and len(val_labels) == 80
        pool_rows = {r.tobytes() for r in pool}
        assert not any(r.tobytes() in pool_rows for r in val)
        eval_rows = {r.tobytes() for r in window.eval_images}
        assert not any(r.tobytes() in eval_rows for r in val)


def test_the_recorder_keeps_a_validation_part(digits) -> None:
    spec = default_streams()[0]
    stream, _ = recording_stream(spec, RecordSpec(), digits)
    assert stream.validation_pool is not None and len(stream.validation_pool.labels) == 180
    window = stream.window(1)
    (pool, _), (val, _) = profiling_data(stream, window, np.random.default_rng(0), 0)
    assert len(val) == len(window.labels) // 5 and len(pool) == len(window.labels) - len(val)


def test_samples_scale_multiplies_the_window_size(digits) -> None:
    spec = default_streams()[0]
    base, _ = recording_stream(spec, RecordSpec(), digits)
    larger, _ = recording_stream(spec, RecordSpec(samples_scale=4.0), digits)
    assert len(base.window(1).labels) == spec.samples
    assert len(larger.window(1).labels) == 4 * spec.samples
    with pytest.raises(InvalidInputError):
        RecordSpec(samples_scale=0.0)


@pytest.mark.slow
def test_tiny_real_recording_has_measured_rows(digits) -> None:
    torch.set_num_threads(1)
    spec = StreamSpec("t0", "abrupt@0", 80, 60.0, 2)
    names = ["e1-f30-z1", "e8-f100-head32"]
    configs = [c for c in retraining_configs() if c.name in names]
    initial, rows = record_stream(spec, RecordSpec(windows=2, eval_size=60), digits, configs)
    assert 0.0 < initial <= 1.0
    first, second = rows
    assert first.samples == 64 and first.profiling_s is not None and first.profiling_s > 0
    for row in rows:
        assert [c.name for c in row.retraining] == names
        for c in row.retraining:
            assert c.gpu_seconds > 0 and c.estimated_gpu_seconds is not None
            assert c.start_accuracy is not None
            # two further profiles, each from another validation split and other samples
            again = c.reprofiled_accuracy_after
            assert again is not None and len(again) == 2
        assert row.reprofiling_s is not None and row.reprofiling_s > 0
    # The further profiles are other draws, not copies of the first.
    assert any(
        c.reprofiled_accuracy_after != [c.estimated_accuracy_after] * 2
        for row in rows
        for c in row.retraining
    )
    # each chain starts window 1 from its own window-0 model: the drift is the median of
    # what the chains lost between their window-0 result and their window-1 start
    losses = [
        c0.accuracy_after - c1.start_accuracy
        for c0, c1 in zip(first.retraining, second.retraining, strict=True)
    ]
    assert second.drift == pytest.approx(float(np.median(losses)), abs=1e-5)
    # The scene jumps to full severity: the deployed models lose accuracy; then it stays.
    assert first.drift > 0.05
    assert abs(second.drift) < first.drift


@pytest.fixture(scope="module")
def recorded():
    return load_recorded_trace()


def test_committed_trace_has_provenance_and_shape(recorded) -> None:
    assert recorded.provenance is not None
    assert {"command", "seed", "date", "machine"} <= set(recorded.provenance)
    assert "deepedge.bench.ekya_record" in recorded.provenance["command"]
    assert len(subset(recorded, "cam").streams) == 10
    assert len(subset(recorded, "hold").streams) == 2
    assert recorded.window_s == window_length_s([r for w in recorded.windows for r in w.streams])
    for window in recorded.windows:
        for row in window.streams:
            assert len(row.retraining) == 18
            assert all(c.gpu_seconds > 0 for c in row.retraining)
            assert all(c.start_accuracy is not None for c in row.retraining)
            assert all(len(c.reprofiled_accuracy_after or []) == 2 for c in row.retraining)


def _max_drift(trace, stream_id: str) -> float:
    return max(r.drift for w in trace.windows for r in w.streams if r.stream_id == stream_id)


def test_committed_streams_are_heterogeneous(recorded) -> None:
    # Static cameras barely drift; abrupt and episodic ones lose a lot in some window.
    for static in ("cam00", "cam03", "cam07"):
        assert _max_drift(recorded, static) < 0.12
    for drifting in ("cam02", "cam04", "cam08"):
        assert _max_drift(recorded, drifting) > 0.2
    sizes = {r.samples for w in recorded.windows for r in w.streams}
    assert len(sizes) == 3


def test_subset_rejects_unknown_prefix(recorded) -> None:
    with pytest.raises(InvalidInputError):
        subset(recorded, "nope")


def test_thief_beats_holdout_best_uniform_when_stressed(recorded) -> None:
    test = subset(recorded, "cam")
    test = test.model_copy(update={"windows": test.windows[:3]})
    holdout = subset(recorded, "hold")
    name, share = holdout_best(holdout, 0.2)
    uniform = simulate(test, UniformScheduler(name, share), gpus=2).mean_accuracy
    thief = simulate(test, ThiefScheduler(), gpus=2).mean_accuracy
    assert thief > uniform
