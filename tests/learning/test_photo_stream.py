"""The photo stream: format, seed, held-out crops, the dusk drift and the class mix."""

from __future__ import annotations

import numpy as np
import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.learning.photo_stream import PHOTOS, PhotoDriftConfig, PhotoStream, make_photo_stream


@pytest.fixture(scope="module")
def stream() -> PhotoStream:
    return make_photo_stream(seed=0, window_size=96, eval_size=64, image_size=32)


def test_window_format(stream: PhotoStream) -> None:
    w = stream.window(0)
    assert w.images.shape == (96, 3, 32, 32) and w.images.dtype == np.float32
    assert w.eval_images.shape == (64, 3, 32, 32)
    assert w.labels.dtype == np.int64 and set(np.unique(w.labels)) <= set(range(len(PHOTOS)))
    assert w.images.min() >= 0.0 and w.images.max() <= 1.0
    assert stream.n_classes == len(PHOTOS) == 8 and stream.channels == 3


def test_same_seed_same_window_any_order() -> None:
    a = make_photo_stream(seed=3, window_size=16, eval_size=8, image_size=32)
    b = make_photo_stream(seed=3, window_size=16, eval_size=8, image_size=32)
    b.window(1)
    np.testing.assert_array_equal(a.window(4).images, b.window(4).images)
    c = make_photo_stream(seed=4, window_size=16, eval_size=8, image_size=32)
    assert not np.array_equal(a.window(4).images, c.window(4).images)


def test_held_out_crops_are_not_training_crops(stream: PhotoStream) -> None:
    w = stream.window(1)
    train = w.images.reshape(len(w.images), -1)
    held = w.eval_images.reshape(len(w.eval_images), -1)
    nearest = np.abs(held[:, None, :] - train[None, :, :]).mean(axis=2).min(axis=1)
    assert nearest.min() > 1e-3


def test_drift_darkens_and_casts_blue(stream: PhotoStream) -> None:
    assert stream.window(0).transform.severity == 0.0
    assert stream.window(5).transform.severity == 1.0
    crops = stream.crops(np.arange(8).repeat(4), np.random.default_rng(0))
    day = stream.apply_drift(crops, 0.0, np.random.default_rng(1)).mean(axis=(0, 2, 3))
    dusk = stream.apply_drift(crops, 1.0, np.random.default_rng(1)).mean(axis=(0, 2, 3))
    assert dusk.sum() < 0.7 * day.sum()
    ratio = dusk / day  # per channel R, G, B
    assert ratio[2] > 1.5 * ratio[0]  # blue kept far more than red


def test_drift_blurs(stream: PhotoStream) -> None:
    # same crops (same rng) at severity 0 and 1: the blurred ones have less fine detail
    labels = np.arange(8).repeat(4)
    crops = stream.crops(labels, np.random.default_rng(0))
    quiet = PhotoStream(PhotoDriftConfig(base_noise_std=0.0, max_noise_std=0.0), image_size=32)
    sharp = quiet.apply_drift(crops, 0.0, np.random.default_rng(1))
    blurred = quiet.apply_drift(crops, 1.0, np.random.default_rng(1))
    detail = lambda x: np.abs(np.diff(x, axis=3)).mean() / x.mean()  # noqa: E731
    assert detail(blurred) < 0.8 * detail(sharp)


def test_class_mix_moves_to_the_second_half(stream: PhotoStream) -> None:
    p0, p1 = stream.class_mix_at(0), stream.class_mix_at(9)
    assert p0.sum() == pytest.approx(1.0) and p1.sum() == pytest.approx(1.0)
    assert p0[:4].sum() > 0.6 and p1[4:].sum() > 0.6


def test_augmented_pool_covers_every_class(stream: PhotoStream) -> None:
    x, y = stream.augmented_pool(80, seed=1)
    assert x.shape == (80, 3, 32, 32) and set(np.unique(y)) == set(range(8))


@pytest.mark.parametrize(
    "bad",
    [
        {"window_size": 0},
        {"ramp_windows": 0},
        {"crop_min_frac": 0.8, "crop_max_frac": 0.5},
        {"min_gain": 0.0},
    ],
)
def test_bad_configs_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(InvalidInputError):
        PhotoDriftConfig(**bad)  # type: ignore[arg-type]


def test_negative_window_is_refused(stream: PhotoStream) -> None:
    with pytest.raises(InvalidInputError):
        stream.window(-1)
