"""A seeded drifting image stream built from real images (rotated-MNIST style drift).

Format
------
An :class:`ImageSet` is the labelled source pool: ``images`` float32 ``(N, 1, H, W)`` in
[0, 1] (grey scale), ``labels`` int64 ``(N,)`` in ``0..n_classes-1`` and ``class_names``.
Two loaders produce one:

* :func:`load_digits_images` - scikit-learn's bundled handwritten digits (1797 real 8x8
  images, 10 classes), upscaled to ``image_size`` (no download).
* :func:`load_image_folder` - a user's own data laid out as ``ROOT/<class_name>/<image>``
  (png/jpg/bmp/tif, any size, colour or grey); the class names are the sorted folder names.

A :class:`DriftingStream` splits the pool once into a *stream* part and a disjoint
*held-out* part (so evaluation never sees a training image), then yields
:class:`Window` ``t = 0, 1, ...``. With ``DriftConfig.validation_frac > 0`` it also keeps a
third, disjoint *validation* part: :meth:`DriftingStream.validation_set` draws a window's
validation images from it the way the evaluation images are drawn from the held-out part.
Windows sample the stream part with replacement, so a validation split of a window's own
images shares base images with the window's training images (about 30% of them on the
recorded Ekya streams, scored 7 points above the rest); the validation part avoids that.

Window ``t`` has a drift severity

    s(t) = clip((t - onset_window) / ramp_windows, 0, 1)

and applies, to samples drawn from the pool with the window's class mix,

* rotation by ``s * max_rotation_deg`` (+- ``rotation_jitter_deg`` per sample),
* brightness/contrast: ``x * (1 - s * (1 - min_contrast)) + s * brightness_shift``,
* Gaussian blur of sigma ``s * max_blur_sigma`` (pixels at ``image_size``),
* additive Gaussian noise of std ``base_noise_std + s * max_noise_std``, then clip to [0, 1];

and a class mix that moves from ``p0`` (more weight on the first half of the classes) to
``p1`` (more weight on the second half): ``p(t) = (1 - s) p0 + s p1`` with
``p0_c ∝ 1 + class_skew * [c < C/2]`` and ``p1_c ∝ 1 + class_skew * [c >= C/2]``.

Every window is generated from ``numpy.random.default_rng([seed, t])``: the same seed gives
the same window whatever the order windows are asked for.
"""

from __future__ import annotations

import gzip
import importlib.util
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import ndimage

from deepedge.core.errors import InvalidInputError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".gif"})


@dataclass(frozen=True)
class ImageSet:
    """A labelled image pool: ``images`` (N, 1, H, W) float32 in [0, 1], ``labels`` (N,)."""

    images: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.images.ndim != 4 or self.images.shape[1] != 1:
            raise InvalidInputError(
                f"images must have shape (N, 1, H, W), got {self.images.shape}", field="images"
            )
        if len(self.images) != len(self.labels):
            raise InvalidInputError("images and labels differ in length", field="labels")
        if len(self.images) == 0:
            raise InvalidInputError("the image set is empty", field="images")

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def image_size(self) -> int:
        return int(self.images.shape[-1])

    def subset(self, index: np.ndarray) -> ImageSet:
        return ImageSet(self.images[index], self.labels[index], self.class_names)


def _resize(images: np.ndarray, image_size: int) -> np.ndarray:
    """Bilinear resize of (N, H, W) to (N, image_size, image_size)."""
    _, h, w = images.shape
    if h == image_size and w == image_size:
        return images.astype(np.float32)
    zoom = (1.0, image_size / h, image_size / w)
    out = ndimage.zoom(images.astype(np.float32), zoom, order=1)
    return np.clip(out[:, :image_size, :image_size], 0.0, 1.0).astype(np.float32)


def bundled_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits: ``(images (1797, 8, 8) of 0..16, digits)``.

    Read from the file scikit-learn ships (``datasets/data/digits.csv.gz``: 64 pixels and
    the digit per row), as its ``load_digits`` reads it, but without importing scikit-learn:
    that import is about 1.7 s of CPU on a 2-core host, which a job's learner paid at every
    start. Where the file is not found, scikit-learn's own loader is used."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, "rt") as text:
                table = np.loadtxt(text, delimiter=",")
            return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.images, digits.target.astype(np.int64)


def load_digits_images(image_size: int = 16) -> ImageSet:
    """scikit-learn's bundled digits as an :class:`ImageSet` (values scaled 0..16 -> 0..1)."""
    if image_size < 8:
        raise InvalidInputError("image_size must be >= 8", field="image_size")
    pixels, digits = bundled_digits()
    raw = (pixels / 16.0).astype(np.float32)
    images = _resize(raw, image_size)[:, None, :, :]
    return ImageSet(images, digits, tuple(str(c) for c in range(10)))


def load_image_folder(root: Path, image_size: int = 16) -> ImageSet:
    """Load ``root/<class_name>/<image>`` into an :class:`ImageSet` (grey, resized).

    Raises :class:`InvalidInputError` when the folder is missing, has no class folders or
    a class folder holds no readable image.
    """
    from skimage import io
    from skimage.color import rgb2gray, rgba2rgb

    root = Path(root)
    if not root.is_dir():
        raise InvalidInputError(f"{root} is not a folder", field="image_folder")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise InvalidInputError(f"{root} has no class sub-folders", field="image_folder")
    images: list[np.ndarray] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        files = sorted(p for p in (root / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise InvalidInputError(f"class folder {name} holds no image", field="image_folder")
        for path in files:
            try:
                img = io.imread(path)
            except (OSError, ValueError) as exc:
                raise InvalidInputError(f"cannot read {path}: {exc}", field="image_folder") from exc
            img = np.asarray(img, dtype=np.float32)
            if img.ndim == 3 and img.shape[-1] == 4:
                img = rgba2rgb(img / 255.0 if img.max() > 1 else img)
            if img.ndim == 3:
                img = rgb2gray(img / 255.0 if img.max() > 1 else img)
            elif img.max() > 1:
                img = img / 255.0
            images.append(_resize(img[None, :, :], image_size)[0])
            labels.append(label)
    return ImageSet(
        np.stack(images)[:, None, :, :].astype(np.float32),
        np.asarray(labels, dtype=np.int64),
        tuple(classes),
    )


@dataclass(frozen=True)
class DriftConfig:
    """Parameters of the drift schedule (see the module docstring for the formulas)."""

    seed: int = 0
    window_size: int = 400  # stream samples per window
    eval_size: int = 300  # held-out samples per window, for accuracy
    holdout_frac: float = 0.3  # share of the source pool kept for evaluation only
    # Share kept for validation only (validation_set); 0: none, and the stream part is
    # exactly what it was before this option existed.
    validation_frac: float = 0.0
    onset_window: int = 2  # last window with no drift is onset_window
    ramp_windows: int = 2  # windows over which severity rises from 0 to 1
    max_rotation_deg: float = 40.0
    rotation_jitter_deg: float = 8.0
    min_contrast: float = 0.6
    brightness_shift: float = 0.25
    max_blur_sigma: float = 0.6
    base_noise_std: float = 0.03
    max_noise_std: float = 0.08
    class_skew: float = 2.0

    def __post_init__(self) -> None:
        if self.window_size < 1 or self.eval_size < 1:
            raise InvalidInputError("window sizes must be >= 1", field="window_size")
        if not 0.0 < self.holdout_frac < 1.0:
            raise InvalidInputError("holdout_frac must be in (0, 1)", field="holdout_frac")
        if not 0.0 <= self.validation_frac < 1.0 - self.holdout_frac:
            raise InvalidInputError(
                "validation_frac must be in [0, 1 - holdout_frac)", field="validation_frac"
            )
        if self.ramp_windows < 1:
            raise InvalidInputError("ramp_windows must be >= 1", field="ramp_windows")
        if not 0.0 <= self.min_contrast <= 1.0:
            raise InvalidInputError("min_contrast must be in [0, 1]", field="min_contrast")

    def transform(self, scene: float) -> Transform:
        """The transform at signed severity ``scene``: its sign turns the rotation, its
        magnitude sets every other term."""
        s = abs(scene)
        return Transform(
            severity=s,
            rotation_deg=scene * self.max_rotation_deg,
            contrast=1.0 - s * (1.0 - self.min_contrast),
            brightness=s * self.brightness_shift,
            blur_sigma=s * self.max_blur_sigma,
            noise_std=self.base_noise_std + s * self.max_noise_std,
        )

    def severity(self, t: int) -> float:
        """s(t) = clip((t - onset_window) / ramp_windows, 0, 1)."""
        return float(np.clip((t - self.onset_window) / self.ramp_windows, 0.0, 1.0))


@dataclass(frozen=True)
class Transform:
    """The drift applied to one window (severity and the resulting transform sizes)."""

    severity: float
    rotation_deg: float
    contrast: float
    brightness: float
    blur_sigma: float
    noise_std: float


@dataclass(frozen=True)
class Window:
    """One window of the stream: data to label and train on, and held-out data to score.

    ``labels`` are the true labels; a deployment only knows the golden model's labels for a
    sample of ``images`` (the continuous-learning loop stores both).
    """

    index: int
    transform: Transform
    class_mix: np.ndarray  # (C,) probabilities used to draw the window's samples
    images: np.ndarray  # (window_size, 1, H, W) float32
    labels: np.ndarray  # (window_size,) int64
    eval_images: np.ndarray  # (eval_size, 1, H, W) float32, from held-out source images
    eval_labels: np.ndarray  # (eval_size,) int64
    meta: dict[str, float] = field(default_factory=dict)


def apply_transform(
    images: np.ndarray, transform: Transform, jitter_deg: float, rng: np.random.Generator
) -> np.ndarray:
    """Apply rotation (+ jitter), contrast/brightness, blur and noise to (N, 1, H, W)."""
    out = np.empty_like(images)
    for i, img in enumerate(images[:, 0]):
        angle = transform.rotation_deg + rng.uniform(-jitter_deg, jitter_deg)
        x = ndimage.rotate(img, angle, reshape=False, order=1, mode="constant", cval=0.0)
        x = x * transform.contrast + transform.brightness
        if transform.blur_sigma > 0.05:
            x = ndimage.gaussian_filter(x, transform.blur_sigma)
        out[i, 0] = x
    out += rng.normal(0.0, transform.noise_std, size=out.shape).astype(np.float32)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def drifting_class_mix(n_classes: int, skew: float, severity: float) -> np.ndarray:
    """The class mix at drift ``severity`` s: p = (1 - s) p0 + s p1, where p0 favours the
    first half of the classes by ``1 + skew`` and p1 the second half (normalised)."""
    first = np.arange(n_classes) < n_classes / 2
    p0 = 1.0 + skew * first
    p1 = 1.0 + skew * ~first
    mix = (1.0 - severity) * p0 / p0.sum() + severity * p1 / p1.sum()
    return np.asarray(mix / mix.sum())


class DriftingStream:
    """Windows of drifting data drawn from an :class:`ImageSet` (see the module docstring)."""

    def __init__(self, source: ImageSet, config: DriftConfig | None = None) -> None:
        self.config = config or DriftConfig()
        self.source = source
        rng = np.random.default_rng([self.config.seed, 1_000_003])
        order = rng.permutation(len(source.labels))
        n_hold = max(1, round(self.config.holdout_frac * len(order)))
        n_val = round(self.config.validation_frac * len(order))
        if self.config.validation_frac > 0:
            n_val = max(1, n_val)
        if n_hold + n_val >= len(order):
            raise InvalidInputError("the image set is too small to hold out data", field="images")
        self.stream_pool = source.subset(np.sort(order[n_hold + n_val :]))
        self.holdout_pool = source.subset(np.sort(order[:n_hold]))
        self.validation_pool = (
            source.subset(np.sort(order[n_hold : n_hold + n_val])) if n_val else None
        )

    @property
    def n_classes(self) -> int:
        return self.source.n_classes

    @property
    def image_size(self) -> int:
        return self.source.image_size

    def transform_at(self, t: int) -> Transform:
        return self.config.transform(self.config.severity(t))

    def class_mix_at(self, t: int) -> np.ndarray:
        """p(t) = (1 - s) p0 + s p1 over the classes present in the pool."""
        return drifting_class_mix(self.n_classes, self.config.class_skew, self.config.severity(t))

    def _draw(
        self, pool: ImageSet, n: int, mix: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Indices into ``pool``: sample classes from ``mix``, then an image of that class."""
        present = np.bincount(pool.labels, minlength=self.n_classes) > 0
        weights = np.where(present, mix, 0.0)
        weights = weights / weights.sum()
        classes = rng.choice(self.n_classes, size=n, p=weights)
        by_class = [np.flatnonzero(pool.labels == c) for c in range(self.n_classes)]
        return np.asarray([rng.choice(by_class[c]) for c in classes], dtype=np.int64)

    def window(self, t: int) -> Window:
        """Window ``t`` (deterministic in ``(seed, t)``)."""
        if t < 0:
            raise InvalidInputError("window index must be >= 0", field="t")
        rng = np.random.default_rng([self.config.seed, t])
        transform = self.transform_at(t)
        mix = self.class_mix_at(t)
        idx = self._draw(self.stream_pool, self.config.window_size, mix, rng)
        eidx = self._draw(self.holdout_pool, self.config.eval_size, mix, rng)
        jitter = self.config.rotation_jitter_deg
        images = apply_transform(self.stream_pool.images[idx], transform, jitter, rng)
        eval_images = apply_transform(self.holdout_pool.images[eidx], transform, jitter, rng)
        log.debug("window %d severity %.2f", t, transform.severity)
        return Window(
            index=t,
            transform=transform,
            class_mix=mix,
            images=images,
            labels=self.stream_pool.labels[idx].copy(),
            eval_images=eval_images,
            eval_labels=self.holdout_pool.labels[eidx].copy(),
        )

    def validation_set(self, t: int, n: int, draw: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``n`` validation images and labels for window ``t``: drawn from the validation
        part with the window's class mix and transform, as :meth:`window` draws its
        evaluation images from the held-out part; ``draw`` numbers independent sets
        (deterministic in ``(seed, t, draw)``; the window itself does not change).

        Raises :class:`InvalidInputError` without a validation part (``validation_frac`` 0).
        """
        if self.validation_pool is None:
            raise InvalidInputError(
                "this stream keeps no validation part (validation_frac is 0)",
                field="validation_frac",
            )
        if t < 0 or n < 1:
            raise InvalidInputError("need t >= 0 and n >= 1", field="t")
        rng = np.random.default_rng([self.config.seed, t, 5_000_011, draw])
        idx = self._draw(self.validation_pool, n, self.class_mix_at(t), rng)
        images = apply_transform(
            self.validation_pool.images[idx],
            self.transform_at(t),
            self.config.rotation_jitter_deg,
            rng,
        )
        return images, self.validation_pool.labels[idx].copy()

    def windows(self, n: int, start: int = 0) -> Iterator[Window]:
        for t in range(start, start + n):
            yield self.window(t)

    def augmented_pool(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` stream-pool samples under random severities in [0, 1] (uniform class mix).

        Used to train a golden model that is robust to every drift the stream can produce.
        """
        rng = np.random.default_rng([self.config.seed, seed, 7])
        chunks: list[np.ndarray] = []
        labels: list[np.ndarray] = []
        uniform = np.full(self.n_classes, 1.0 / self.n_classes)
        per = 64
        c = self.config
        for start in range(0, n, per):
            m = min(per, n - start)
            s = float(rng.uniform(0.0, 1.0))
            tr = Transform(
                severity=s,
                rotation_deg=float(rng.choice([-1.0, 1.0])) * s * c.max_rotation_deg,
                contrast=1.0 - s * (1.0 - c.min_contrast),
                brightness=s * c.brightness_shift,
                blur_sigma=s * c.max_blur_sigma,
                noise_std=c.base_noise_std + s * c.max_noise_std,
            )
            idx = self._draw(self.stream_pool, m, uniform, rng)
            chunks.append(
                apply_transform(self.stream_pool.images[idx], tr, c.rotation_jitter_deg, rng)
            )
            labels.append(self.stream_pool.labels[idx])
        return np.concatenate(chunks), np.concatenate(labels)
