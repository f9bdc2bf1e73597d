"""A drifting stream of colour photo crops: the realistic workload's data (no download).

Classes
-------
Each class is one of scikit-image's bundled colour photographs (:data:`PHOTOS`:
astronaut, chelsea, coffee, rocket, hubble_deep_field, immunohistochemistry, retina,
colorwheel). A sample of class ``c`` is a random square crop of photo ``c`` (side
``crop_min_frac..crop_max_frac`` of the photo's short side, anywhere in it, mirrored with
probability 1/2), resized to ``image_size`` x ``image_size`` (area interpolation), RGB in
[0, 1], shape (3, S, S). The task is the one of a fixed edge camera that must tell which
scene (or part of it) it sees: every crop is new, the scenes are the same.

Drift
-----
Window ``t`` has the severity ``s(t) = clip((t - onset_window) / ramp_windows, 0, 1)`` of
:mod:`deepedge.learning.stream`, and every sample of the window is seen at "dusk":

* lighting: ``x <- gain * x ** gamma`` with ``gain = 1 - s (1 - min_gain)`` and
  ``gamma = 1 + s (max_gamma - 1)`` (darker, less contrast in the shadows), times a
  per-sample exposure jitter ``U(1 - exposure_jitter, 1 + exposure_jitter)`` at every
  severity (natural variation);
* colour cast: channel gains ``1 + s * cast`` (``cast = (-0.35, -0.1, +0.3)`` by default:
  the blue of twilight and of a white balance set for daylight);
* lens/motion blur: Gaussian of sigma ``s * max_blur_sigma`` pixels;
* sensor noise: Gaussian of std ``base_noise_std + s * max_noise_std``; then clip to [0, 1];
* class mix: ``p(t) = (1 - s) p0 + s p1`` as in :mod:`deepedge.learning.stream` (more of
  the first half of the classes before the drift, more of the second half after).

:class:`ScheduledPhotoStream` follows a scene schedule instead of one ramp (scene values in
[-1, 1]: severity ``|scene|``, the colour cast turned the other way when negative), as the
digits' :class:`~deepedge.learning.scheduled_stream.ScheduledStream` does.

Window ``t`` is generated from ``numpy.random.default_rng([seed, t])`` (training crops) and
``[seed, t, 1]`` (held-out crops, scored only), so the same seed gives the same window in
any order. :class:`PhotoStream` has the interface of
:class:`~deepedge.learning.stream.DriftingStream` (``window``, ``windows``,
``augmented_pool``, ``n_classes``, ``image_size``) and returns the same
:class:`~deepedge.learning.stream.Window`, with 3-channel images.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from deepedge.core.errors import InvalidInputError
from deepedge.learning.stream import Transform, Window, drifting_class_mix

log = logging.getLogger(__name__)

PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "colorwheel",
)
_SOURCE_SIDE_PX = 160  # photos are stored downscaled to this short side before cropping


@dataclass(frozen=True)
class PhotoDriftConfig:
    """Parameters of the photo stream and of its drift (module docstring)."""

    seed: int = 0
    window_size: int = 256  # training samples per window
    eval_size: int = 256  # held-out samples per window, for accuracy
    onset_window: int = 2  # the last window with no drift
    ramp_windows: int = 2  # windows over which severity rises from 0 to 1
    crop_min_frac: float = 0.3
    crop_max_frac: float = 0.7
    exposure_jitter: float = 0.15
    min_gain: float = 0.45
    max_gamma: float = 1.6
    cast: tuple[float, float, float] = (-0.35, -0.1, 0.3)
    max_blur_sigma: float = 1.2
    base_noise_std: float = 0.02
    max_noise_std: float = 0.06
    class_skew: float = 2.0

    def __post_init__(self) -> None:
        if self.window_size < 1 or self.eval_size < 1:
            raise InvalidInputError("window sizes must be >= 1", field="window_size")
        if self.ramp_windows < 1:
            raise InvalidInputError("ramp_windows must be >= 1", field="ramp_windows")
        if not 0.0 < self.crop_min_frac <= self.crop_max_frac <= 1.0:
            raise InvalidInputError(
                "need 0 < crop_min_frac <= crop_max_frac <= 1", field="crop_min_frac"
            )
        if not 0.0 < self.min_gain <= 1.0 or self.max_gamma < 1.0:
            raise InvalidInputError("need 0 < min_gain <= 1 and max_gamma >= 1", field="min_gain")

    def severity(self, t: int) -> float:
        """s(t) = clip((t - onset_window) / ramp_windows, 0, 1)."""
        return float(np.clip((t - self.onset_window) / self.ramp_windows, 0.0, 1.0))


@functools.cache
def _photo(name: str) -> np.ndarray:
    """Photo ``name`` as float32 RGB (H, W, 3) in [0, 1], short side ``_SOURCE_SIDE_PX``."""
    import cv2
    from skimage import data

    img = np.asarray(getattr(data, name)())
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    img = img[:, :, :3].astype(np.float32) / 255.0
    scale = _SOURCE_SIDE_PX / min(img.shape[:2])
    size = (round(img.shape[1] * scale), round(img.shape[0] * scale))
    return np.ascontiguousarray(cv2.resize(img, size, interpolation=cv2.INTER_AREA))


class PhotoStream:
    """Windows of drifting photo crops (module docstring)."""

    def __init__(self, config: PhotoDriftConfig | None = None, image_size: int = 64) -> None:
        if image_size < 16:
            raise InvalidInputError("image_size must be >= 16", field="image_size")
        self.config = config or PhotoDriftConfig()
        self.image_size = image_size
        self.class_names = PHOTOS
        self.channels = 3
        self._photos = [_photo(name) for name in PHOTOS]

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    def scene_at(self, t: int) -> float:
        """Window ``t``'s scene: its severity ``s(t)`` (a scheduled stream's may be
        negative: :class:`ScheduledPhotoStream`)."""
        return self.config.severity(t)

    def class_mix_at(self, t: int) -> np.ndarray:
        """p(t) = (1 - s) p0 + s p1 (module docstring)."""
        return drifting_class_mix(self.n_classes, self.config.class_skew, abs(self.scene_at(t)))

    def transform_at(self, t: int) -> Transform:
        s = abs(self.scene_at(t))
        c = self.config
        return Transform(
            severity=s,
            rotation_deg=0.0,
            contrast=1.0 - s * (1.0 - c.min_gain),
            brightness=0.0,
            blur_sigma=s * c.max_blur_sigma,
            noise_std=c.base_noise_std + s * c.max_noise_std,
        )

    def crops(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One fresh random crop (3, S, S) of photo ``labels[i]`` per label, undrifted."""
        import cv2

        c = self.config
        size = self.image_size
        out = np.empty((len(labels), 3, size, size), dtype=np.float32)
        for i, label in enumerate(labels):
            photo = self._photos[int(label)]
            h, w = photo.shape[:2]
            side = round(rng.uniform(c.crop_min_frac, c.crop_max_frac) * min(h, w))
            top = int(rng.integers(0, h - side + 1))
            left = int(rng.integers(0, w - side + 1))
            crop = photo[top : top + side, left : left + side]
            if rng.random() < 0.5:
                crop = crop[:, ::-1]
            crop = cv2.resize(
                np.ascontiguousarray(crop), (size, size), interpolation=cv2.INTER_AREA
            )
            out[i] = crop.transpose(2, 0, 1)
        return out

    def apply_drift(self, images: np.ndarray, scene: float, rng: np.random.Generator) -> np.ndarray:
        """Dusk at severity ``s = |scene|`` on (N, 3, S, S) images (module docstring); a
        negative scene turns the colour cast the other way."""
        import cv2

        c = self.config
        s, sign = abs(scene), (-1.0 if scene < 0 else 1.0)
        gain = 1.0 - s * (1.0 - c.min_gain)
        gamma = 1.0 + s * (c.max_gamma - 1.0)
        exposure = rng.uniform(1 - c.exposure_jitter, 1 + c.exposure_jitter, (len(images), 1, 1, 1))
        cast = 1.0 + sign * s * np.asarray(c.cast, dtype=np.float32)[None, :, None, None]
        out = (gain * np.power(images, gamma) * exposure * cast).astype(np.float32)
        sigma = s * c.max_blur_sigma
        if sigma > 0.05:
            for i in range(len(out)):
                hwc = np.ascontiguousarray(out[i].transpose(1, 2, 0))
                out[i] = cv2.GaussianBlur(hwc, (0, 0), sigma).transpose(2, 0, 1)
        out += rng.normal(0.0, c.base_noise_std + s * c.max_noise_std, out.shape).astype(np.float32)
        return np.clip(out, 0.0, 1.0)

    def _sample(self, n: int, mix: np.ndarray, scene: float, rng: np.random.Generator) -> Window:
        labels = rng.choice(self.n_classes, size=n, p=mix).astype(np.int64)
        return Window(
            index=-1,
            transform=self.transform_at(0),
            class_mix=mix,
            images=self.apply_drift(self.crops(labels, rng), scene, rng),
            labels=labels,
            eval_images=np.zeros((0, 3, self.image_size, self.image_size), np.float32),
            eval_labels=np.zeros(0, np.int64),
        )

    def window(self, t: int) -> Window:
        """Window ``t`` (deterministic in ``(seed, t)``)."""
        if t < 0:
            raise InvalidInputError("window index must be >= 0", field="t")
        c = self.config
        scene = self.scene_at(t)
        s = abs(scene)
        mix = self.class_mix_at(t)
        train = self._sample(c.window_size, mix, scene, np.random.default_rng([c.seed, t]))
        held = self._sample(c.eval_size, mix, scene, np.random.default_rng([c.seed, t, 1]))
        log.debug("photo window %d scene %.2f", t, scene)
        return Window(
            index=t,
            transform=self.transform_at(t),
            class_mix=mix,
            images=train.images,
            labels=train.labels,
            eval_images=held.images,
            eval_labels=held.labels,
            meta={"gamma": 1.0 + s * (c.max_gamma - 1.0)},
        )

    def windows(self, n: int, start: int = 0) -> Iterator[Window]:
        for t in range(start, start + n):
            yield self.window(t)

    def augmented_pool(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` samples under random severities in [0, 1], uniform class mix (a golden
        model trained on it is robust to every drift of the stream)."""
        rng = np.random.default_rng([self.config.seed, seed, 7])
        uniform = np.full(self.n_classes, 1.0 / self.n_classes)
        images: list[np.ndarray] = []
        labels: list[np.ndarray] = []
        for start in range(0, n, 64):
            part = self._sample(min(64, n - start), uniform, float(rng.uniform()), rng)
            images.append(part.images)
            labels.append(part.labels)
        return np.concatenate(images), np.concatenate(labels)


def make_photo_stream(
    seed: int = 0, window_size: int = 256, eval_size: int = 256, image_size: int = 64
) -> PhotoStream:
    """A :class:`PhotoStream` with the default drift (a workload entry point)."""
    return PhotoStream(
        PhotoDriftConfig(seed=seed, window_size=window_size, eval_size=eval_size), image_size
    )


class ScheduledPhotoStream(PhotoStream):
    """A :class:`PhotoStream` whose scene follows a schedule (as
    :class:`~deepedge.learning.scheduled_stream.ScheduledStream` for the digits): scene
    ``sigma`` in [-1, 1] is dusk at severity ``|sigma|``; a negative one has the colour cast
    turned the other way (a warm cast, as under sodium street lights, where dusk is blue).
    A window past the schedule keeps its last scene."""

    def __init__(
        self, scenes: Sequence[float], config: PhotoDriftConfig | None = None, image_size: int = 64
    ) -> None:
        super().__init__(config, image_size)
        if not scenes or any(not -1.0 <= float(x) <= 1.0 for x in scenes):
            raise InvalidInputError("scenes must be values in [-1, 1], at least one", "scenes")
        self.scenes = tuple(float(x) for x in scenes)

    def scene_at(self, t: int) -> float:
        return self.scenes[min(t, len(self.scenes) - 1)]


def make_scheduled_photo_stream(
    scenes: Sequence[float], seed: int = 0, window_size: int = 256, eval_size: int = 256,
    image_size: int = 64,
) -> ScheduledPhotoStream:  # fmt: skip
    """A :class:`ScheduledPhotoStream` (a workload entry point: ``data.kwargs.scenes``)."""
    return ScheduledPhotoStream(
        scenes, PhotoDriftConfig(seed=seed, window_size=window_size, eval_size=eval_size),
        image_size,
    )  # fmt: skip
