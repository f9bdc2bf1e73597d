"""Time-ordered windows of a workload's data, read from disk one window at a time.

A :class:`WindowSource` yields :class:`WindowData` ``t = 0, 1, ...``: the window's images
(``(N, C, H, W)`` float32, at the workload's input size and channels, normalised), their
labels (``-1`` where the data has none and the labeller must label), and a held-out share
(``eval_fraction``) to score on. Sources:

* :class:`DigitsSource` - the bundled drifting digits stream (zero set-up default).
* :class:`FileSource` - a user's images, from ``ROOT/<window>/<class>/<image>`` (windows in
  the sort order of their folder names: name them ``000``, ``001``... or by ISO date) or from
  a CSV manifest ``path,label,timestamp`` cut into windows of ``window_s`` seconds from the
  first timestamp (empty windows are skipped). Only the file list is read up front; a
  window's images are decoded when the window is asked for, so memory holds one window
  (at most ``max_window_images`` of it, a seeded sample), never the whole data set.
* :class:`StreamSource` - any Python stream named by an entry point; its labels are class
  indices or class names (mapped through its ``class_names``).
* a table of feature columns: :mod:`deepedge.workload.table`.

A sample that cannot be used (a file that does not decode, a label that is not a class) is
skipped and counted in the window's ``skipped`` (:mod:`deepedge.workload.samples`); past
``max_bad_fraction`` of a window the read fails, naming the first.

Natural drift in the user's data is kept as it is. ``synthetic_drift`` adds deepedge's
seeded drift on top (:class:`deepedge.learning.stream.DriftConfig`: rotation, contrast and
brightness, blur, noise, with severity ``s(t)``), applied to every channel alike.
"""

from __future__ import annotations

import csv
import logging
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from scipy import ndimage

from deepedge.core.errors import InvalidInputError
from deepedge.learning.stream import (
    IMAGE_SUFFIXES,
    DriftConfig,
    DriftingStream,
    Transform,
    load_digits_images,
)
from deepedge.workload.samples import BadSample, check_bad_fraction
from deepedge.workload.spec import CsvData, DigitsData, FolderData, InputSpec, StreamData

log = logging.getLogger(__name__)

NO_LABEL = -1
BAD_LABEL = -2  # a label that names no class: the sample is skipped
_NO_DRIFT = 10**9  # an onset window never reached: severity 0 throughout


@dataclass(frozen=True)
class WindowData:
    """One window: images to label and train on, and held-out images to score."""

    index: int
    name: str
    images: np.ndarray  # (N, C, H, W) float32, normalised
    labels: np.ndarray  # (N,) int64; NO_LABEL where unknown
    eval_images: np.ndarray
    eval_labels: np.ndarray
    severity: float = 0.0  # of the synthetic drift (0 without it: measured by the workload)
    skipped: tuple[BadSample, ...] = ()  # samples left out, and why
    raw_range: tuple[float, float] | None = None  # min, max of the inputs as the data gave them


class WindowSource(Protocol):
    class_names: tuple[str, ...]
    n_windows: int | None  # None: unbounded

    def window(self, t: int) -> WindowData: ...


def normalise(images: np.ndarray, spec: InputSpec) -> np.ndarray:
    """``(x - mean_c) / std_c`` of images in [0, 1]."""
    mean = np.asarray(spec.mean, dtype=np.float32).reshape(1, -1, 1, 1)
    std = np.asarray(spec.std, dtype=np.float32).reshape(1, -1, 1, 1)
    return ((images - mean) / std).astype(np.float32)


def conform(images: np.ndarray, spec: InputSpec) -> np.ndarray:
    """Images ``(N, C, H, W)`` in [0, 1] resized (bilinear) and converted to the spec's
    size and channels (grey -> colour repeats; colour -> grey takes the luminance)."""
    if images.ndim != 4 or images.shape[1] not in {1, 3}:
        raise InvalidInputError(
            f"a window's images must be (N, 1|3, H, W), got {images.shape}", field="data"
        )
    x = torch.as_tensor(np.asarray(images, dtype=np.float32))
    if tuple(x.shape[-2:]) != tuple(spec.size) and len(x):
        x = torch.nn.functional.interpolate(x, size=tuple(spec.size), mode="bilinear")
    if x.shape[1] == 1 and spec.channels == 3:
        x = x.repeat(1, 3, 1, 1)
    elif x.shape[1] == 3 and spec.channels == 1:
        weights = torch.tensor([0.2125, 0.7154, 0.0721]).reshape(1, 3, 1, 1)
        x = (x * weights).sum(dim=1, keepdim=True)
    return x.clamp(0.0, 1.0).numpy()


def drift(
    images: np.ndarray, transform: Transform, jitter_deg: float, rng: np.random.Generator
) -> np.ndarray:
    """The stream's drift on ``(N, C, H, W)`` images in [0, 1], every channel alike."""
    out = np.empty_like(images)
    for i, img in enumerate(images):
        angle = transform.rotation_deg + rng.uniform(-jitter_deg, jitter_deg)
        x = ndimage.rotate(img, angle, axes=(1, 2), reshape=False, order=1, cval=0.0)
        x = x * transform.contrast + transform.brightness
        if transform.blur_sigma > 0.05:
            x = ndimage.gaussian_filter(x, (0, transform.blur_sigma, transform.blur_sigma))
        out[i] = x
    out += rng.normal(0.0, transform.noise_std, size=out.shape).astype(np.float32)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def split_eval(n: int, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(stream, eval) indices: a seeded ``fraction`` of ``n`` (at least 1, if n >= 2)."""
    order = rng.permutation(n)
    n_eval = min(n - 1, max(1, round(fraction * n))) if n >= 2 else 0
    return np.sort(order[n_eval:]), np.sort(order[:n_eval])


class DigitsSource:
    """The bundled drifting digits (:class:`~deepedge.learning.stream.DriftingStream`)."""

    n_windows: int | None = None

    def __init__(self, data: DigitsData, spec: InputSpec, seed: int) -> None:
        self.spec = spec
        eval_size = max(10, round(data.window_size * data.eval_fraction))
        onset = DriftConfig().onset_window if data.synthetic_drift else _NO_DRIFT
        config = DriftConfig(
            seed=seed, window_size=data.window_size, eval_size=eval_size, onset_window=onset
        )
        self.stream = DriftingStream(load_digits_images(16), config)
        self.class_names = self.stream.source.class_names

    def window(self, t: int) -> WindowData:
        w = self.stream.window(t)
        return WindowData(
            index=t,
            name=str(t),
            images=normalise(conform(w.images, self.spec), self.spec),
            labels=w.labels,
            eval_images=normalise(conform(w.eval_images, self.spec), self.spec),
            eval_labels=w.eval_labels,
            severity=w.transform.severity,
        )


@dataclass(frozen=True)
class ImageRef:
    path: Path
    label: int  # NO_LABEL when the data carries none


def decode(path: Path, spec: InputSpec) -> np.ndarray:
    """One image file as ``(C, H, W)`` float32 in [0, 1] at the spec's size and channels."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            converted = img.convert("RGB" if spec.channels == 3 else "L")
            resized = converted.resize((spec.size[1], spec.size[0]), Image.Resampling.BILINEAR)
            array = np.asarray(resized, dtype=np.float32) / 255.0
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"data: cannot read image {path}: {exc}", field="data") from exc
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


class FileSource:
    """Windows of image files (folder layout or CSV manifest), decoded window by window."""

    def __init__(
        self,
        windows: list[tuple[str, list[ImageRef]]],
        class_names: tuple[str, ...],
        spec: InputSpec,
        seed: int,
        eval_fraction: float,
        synthetic_drift: bool,
        max_window_images: int | None = None,
        max_bad_fraction: float = 0.05,
    ) -> None:
        if not windows:
            raise InvalidInputError("data: no window holds an image", field="data")
        self.windows = windows
        self.class_names = class_names
        self.n_windows: int | None = len(windows)
        self.spec = spec
        self.seed = seed
        self.eval_fraction = eval_fraction
        self.drift = DriftConfig(seed=seed) if synthetic_drift else None
        self.max_window_images = max_window_images
        self.max_bad_fraction = max_bad_fraction

    def refs(self, t: int) -> list[ImageRef]:
        if not 0 <= t < len(self.windows):
            raise InvalidInputError(
                f"window {t} does not exist: the data has {len(self.windows)} windows",
                field="window",
            )
        refs = self.windows[t][1]
        if self.max_window_images is not None and len(refs) > self.max_window_images:
            rng = np.random.default_rng([self.seed, t, 17])
            keep = np.sort(rng.choice(len(refs), self.max_window_images, replace=False))
            refs = [refs[i] for i in keep]
        return refs

    def decoded(self, t: int) -> tuple[list[np.ndarray], list[ImageRef], list[BadSample]]:
        """Window ``t``'s images that decode, their references, and those that do not."""
        images, kept, bad = [], [], []
        for ref in self.refs(t):
            try:
                images.append(decode(ref.path, self.spec))
            except InvalidInputError as exc:
                bad.append(BadSample(str(ref.path), exc.message.split(": ", 2)[-1]))
                continue
            kept.append(ref)
        return images, kept, bad

    def window(self, t: int) -> WindowData:
        decoded, refs, bad = self.decoded(t)
        check_bad_fraction(self.windows[t][0], len(refs) + len(bad), bad, self.max_bad_fraction)
        for b in bad:
            log.warning("window %s: skipped %s", self.windows[t][0], b)
        images = np.stack(decoded)
        labels = np.asarray([r.label for r in refs], dtype=np.int64)
        rng = np.random.default_rng([self.seed, t])
        severity = 0.0
        if self.drift is not None:
            transform = self.drift.transform(self.drift.severity(t))
            severity = transform.severity
            images = drift(images, transform, self.drift.rotation_jitter_deg, rng)
        stream_idx, eval_idx = split_eval(len(labels), self.eval_fraction, rng)
        images = normalise(images, self.spec)
        return WindowData(
            index=t,
            name=self.windows[t][0],
            images=images[stream_idx],
            labels=labels[stream_idx],
            eval_images=images[eval_idx],
            eval_labels=labels[eval_idx],
            severity=severity,
            skipped=tuple(bad),
        )


def _class_index(
    names: list[str], declared: list[str] | None, field_name: str
) -> tuple[tuple[str, ...], dict[str, int]]:
    classes = list(declared) if declared is not None else sorted(set(names) - {""})
    unknown = sorted(set(names) - set(classes) - {""})
    if unknown:
        raise InvalidInputError(
            f"classes: the data has classes {unknown[:5]} that classes does not list",
            field="classes",
        )
    if not classes:
        raise InvalidInputError(f"{field_name}: the data names no class", field=field_name)
    return tuple(classes), {c: i for i, c in enumerate(classes)}


def folder_source(
    data: FolderData, spec: InputSpec, seed: int, declared: list[str] | None, base_dir: Path
) -> FileSource:
    """``ROOT/<window>/<class>/<image>`` (module docstring)."""
    root = data.root if data.root.is_absolute() else base_dir / data.root
    if not root.is_dir():
        raise InvalidInputError(f"data.root: {root} is not a folder", field="data.root")
    window_dirs = sorted(p for p in root.iterdir() if p.is_dir())
    listing: list[tuple[str, list[tuple[Path, str]]]] = []
    for wdir in window_dirs:
        files = [
            (path, cdir.name)
            for cdir in sorted(p for p in wdir.iterdir() if p.is_dir())
            for path in sorted(cdir.iterdir())
            if path.suffix.lower() in IMAGE_SUFFIXES
        ]
        if files:
            listing.append((wdir.name, files))
    if not listing:
        raise InvalidInputError(
            f"data.root: {root} has no ROOT/<window>/<class>/<image> files", field="data.root"
        )
    classes, index = _class_index(
        [c for _, files in listing for _, c in files], declared, "data.root"
    )
    windows = [(name, [ImageRef(p, index[c]) for p, c in files]) for name, files in listing]
    return FileSource(
        windows,
        classes,
        spec,
        seed,
        data.eval_fraction,
        data.synthetic_drift,
        data.max_window_images,
        data.max_bad_fraction,
    )


def _timestamp(text: str, row: int) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError as exc:
        raise InvalidInputError(
            f"data.manifest: row {row}: timestamp {text!r} is neither seconds nor ISO 8601",
            field="data.manifest",
        ) from exc


def csv_source(
    data: CsvData, spec: InputSpec, seed: int, declared: list[str] | None, base_dir: Path
) -> FileSource:
    """A ``path,label,timestamp`` manifest (module docstring)."""
    manifest = data.manifest if data.manifest.is_absolute() else base_dir / data.manifest
    try:
        with manifest.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
            header = set(rows[0]) if rows else set()
    except OSError as exc:
        raise InvalidInputError(
            f"data.manifest: cannot read {manifest}: {exc.strerror}", field="data.manifest"
        ) from exc
    missing = {"path", "label", "timestamp"} - header
    if not rows or missing:
        raise InvalidInputError(
            f"data.manifest: {manifest} needs a header with path,label,timestamp and rows"
            + (f" (missing {sorted(missing)})" if rows else ""),
            field="data.manifest",
        )
    stamped = [(_timestamp(r["timestamp"].strip(), i + 2), r) for i, r in enumerate(rows)]
    stamped.sort(key=lambda item: item[0])
    t0 = stamped[0][0]
    classes, index = _class_index(
        [(r["label"] or "").strip() for _, r in stamped], declared, "data.manifest"
    )
    by_window: dict[int, list[ImageRef]] = {}
    for ts, r in stamped:
        path = Path(r["path"].strip())
        label = (r["label"] or "").strip()
        ref = ImageRef(
            path if path.is_absolute() else manifest.parent / path, index.get(label, NO_LABEL)
        )
        by_window.setdefault(math.floor((ts - t0) / data.window_s), []).append(ref)
    windows = [(f"w{k}", by_window[k]) for k in sorted(by_window)]
    return FileSource(
        windows,
        classes,
        spec,
        seed,
        data.eval_fraction,
        data.synthetic_drift,
        data.max_window_images,
        data.max_bad_fraction,
    )


def _integer(value: Any) -> int | None:
    """``value`` as an integer class index, or None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None


class StreamSource:
    """A user's Python stream (:class:`~deepedge.workload.spec.StreamData`)."""

    def __init__(self, stream: Any, data: StreamData, spec: InputSpec, seed: int) -> None:
        self.stream = stream
        self.spec = spec
        self.seed = seed
        self.data = data
        try:
            self.class_names = tuple(str(c) for c in stream.class_names)
        except (AttributeError, TypeError) as exc:
            raise InvalidInputError(
                "data.entry_point: the stream has no class_names", field="data.entry_point"
            ) from exc
        n = getattr(stream, "n_windows", None)
        self.n_windows = int(n) if n is not None else None
        self.drift = DriftConfig(seed=seed) if data.synthetic_drift else None

    def _labels(self, raw: Any, t: int) -> tuple[np.ndarray, list[BadSample]]:
        """Class indices of a window's labels (indices, or names of ``class_names``; empty
        or -1: none); a label that is neither is a bad sample (index ``BAD_LABEL``)."""
        index = {c: i for i, c in enumerate(self.class_names)}
        n = len(self.class_names)
        values = np.asarray(raw).reshape(-1).tolist()
        out = np.full(len(values), BAD_LABEL, dtype=np.int64)
        bad = []
        for i, v in enumerate(values):
            text = v.strip() if isinstance(v, str) else None
            if text is not None and text in index:
                out[i] = index[text]
                continue
            number = _integer(text if text is not None else v)
            if text == "" or number == NO_LABEL:
                out[i] = NO_LABEL
            elif number is not None and 0 <= number < n:
                out[i] = number
            else:
                bad.append(BadSample(f"window {t} sample {i}", f"label {v!r} is not a class "
                                     f"(class_names {list(self.class_names)[:6]})"))  # fmt: skip
        return out, bad

    def window(self, t: int) -> WindowData:
        w = self.stream.window(t)
        raw = np.asarray(w.images, dtype=np.float32)
        raw_range = (float(raw.min()), float(raw.max())) if raw.size else None
        labels, bad = self._labels(w.labels, t)
        check_bad_fraction(str(t), len(labels), bad, self.data.max_bad_fraction)
        keep = labels != BAD_LABEL
        images = conform(raw[keep], self.spec)
        labels = labels[keep]
        rng = np.random.default_rng([self.seed, t])
        severity = float(getattr(getattr(w, "transform", None), "severity", 0.0))
        if self.drift is not None:
            transform = self.drift.transform(self.drift.severity(t))
            severity = transform.severity
            images = drift(images, transform, self.drift.rotation_jitter_deg, rng)
        eval_images = getattr(w, "eval_images", None)
        if eval_images is not None:
            eval_labels, eval_bad = self._labels(w.eval_labels, t)
            eval_keep = eval_labels != BAD_LABEL
            return WindowData(
                t,
                str(t),
                normalise(images, self.spec),
                labels,
                normalise(
                    conform(np.asarray(eval_images, np.float32)[eval_keep], self.spec), self.spec
                ),
                eval_labels[eval_keep],
                severity,
                tuple(bad + eval_bad),
                raw_range,
            )
        stream_idx, eval_idx = split_eval(len(labels), self.data.eval_fraction, rng)
        images = normalise(images, self.spec)
        return WindowData(
            t,
            str(t),
            images[stream_idx],
            labels[stream_idx],
            images[eval_idx],
            labels[eval_idx],
            severity,
            tuple(bad),
            raw_range,
        )
