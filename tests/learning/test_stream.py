"""The drifting stream is seeded, drifts, keeps evaluation images held out, loads folders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.learning.stream import (
    DriftConfig,
    DriftingStream,
    ImageSet,
    bundled_digits,
    load_digits_images,
    load_image_folder,
)


@pytest.fixture(scope="module")
def digits() -> ImageSet:
    return load_digits_images(16)


def test_digits_format(digits: ImageSet) -> None:
    assert digits.images.shape == (1797, 1, 16, 16)
    assert digits.images.dtype == np.float32
    assert digits.images.min() >= 0.0 and digits.images.max() <= 1.0
    assert digits.n_classes == 10


def test_the_bundled_digits_are_scikit_learns_read_without_importing_it() -> None:
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    pixels, labels = bundled_digits()
    reference = load_digits()
    np.testing.assert_array_equal(pixels, reference.images)
    np.testing.assert_array_equal(labels, reference.target)
    assert labels.dtype == np.int64
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys; from deepedge.learning.stream import bundled_digits; "
         "bundled_digits(); print(sorted(m for m in sys.modules if m.startswith('sklearn')))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert loaded.strip() == "[]"


def test_same_seed_same_window_any_order(digits: ImageSet) -> None:
    a = DriftingStream(digits, DriftConfig(seed=3, window_size=50, eval_size=20))
    b = DriftingStream(digits, DriftConfig(seed=3, window_size=50, eval_size=20))
    b.window(1)
    np.testing.assert_array_equal(a.window(4).images, b.window(4).images)
    c = DriftingStream(digits, DriftConfig(seed=4, window_size=50, eval_size=20))
    assert not np.array_equal(a.window(4).images, c.window(4).images)


@pytest.mark.parametrize(("t", "severity"), [(0, 0.0), (2, 0.0), (3, 0.5), (4, 1.0), (9, 1.0)])
def test_severity_schedule(digits: ImageSet, t: int, severity: float) -> None:
    stream = DriftingStream(digits, DriftConfig(onset_window=2, ramp_windows=2))
    assert stream.transform_at(t).severity == pytest.approx(severity)


def test_class_mix_drifts_to_the_second_half(digits: ImageSet) -> None:
    stream = DriftingStream(digits, DriftConfig(window_size=2000, eval_size=10))
    early, late = stream.window(0), stream.window(6)
    assert np.mean(early.labels < 5) > 0.6
    assert np.mean(late.labels >= 5) > 0.6


def test_evaluation_images_are_held_out(digits: ImageSet) -> None:
    stream = DriftingStream(digits, DriftConfig())
    stream_rows = {r.tobytes() for r in stream.stream_pool.images}
    assert not any(r.tobytes() in stream_rows for r in stream.holdout_pool.images)


def test_validation_part_is_disjoint_and_optional(digits: ImageSet) -> None:
    plain = DriftingStream(digits, DriftConfig(seed=2))
    assert plain.validation_pool is None
    with pytest.raises(InvalidInputError):
        plain.validation_set(1, 10)
    stream = DriftingStream(digits, DriftConfig(seed=2, validation_frac=0.1))
    assert stream.validation_pool is not None
    val_rows = {r.tobytes() for r in stream.validation_pool.images}
    assert len(stream.validation_pool.labels) == round(0.1 * len(digits.labels))
    for pool in (stream.stream_pool, stream.holdout_pool):
        assert not any(r.tobytes() in val_rows for r in pool.images)
    # the held-out part is the one the plain stream has; the stream part gave up the rest
    assert np.array_equal(stream.holdout_pool.images, plain.holdout_pool.images)
    n = len(digits.labels)
    assert len(stream.stream_pool.labels) + len(stream.validation_pool.labels) == len(
        plain.stream_pool.labels
    )
    assert len(stream.stream_pool.labels) < n
    images, labels = stream.validation_set(4, 50, draw=1)
    again, _ = stream.validation_set(4, 50, draw=1)
    other, _ = stream.validation_set(4, 50, draw=2)
    assert images.shape == (50, 1, 16, 16) and labels.shape == (50,)
    assert np.array_equal(images, again) and not np.array_equal(images, other)
    with pytest.raises(InvalidInputError):
        DriftConfig(holdout_frac=0.5, validation_frac=0.5)


def test_image_folder(tmp_path: Path) -> None:
    from skimage import io

    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        (tmp_path / name).mkdir()
        for i in range(3):
            io.imsave(
                tmp_path / name / f"{i}.png",
                (rng.random((20, 24, 3)) * 255).astype(np.uint8),
                check_contrast=False,
            )
    images = load_image_folder(tmp_path, image_size=16)
    assert images.images.shape == (6, 1, 16, 16)
    assert images.class_names == ("cat", "dog")
    assert list(images.labels) == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("layout", ["missing", "empty", "no-images"])
def test_bad_folders(tmp_path: Path, layout: str) -> None:
    root = tmp_path / "data"
    if layout != "missing":
        root.mkdir()
    if layout == "no-images":
        (root / "a").mkdir()
        (root / "a" / "x.txt").write_text("hi")
    with pytest.raises(InvalidInputError):
        load_image_folder(root)
