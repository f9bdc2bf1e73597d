"""Probing a workload on real data before anything trains (:func:`probe`).

The probe reads the first and the last window of the data (the first only for an
unbounded stream), decoding every image in them, and then:

* runs a real batch of window 0 through the model in evaluation mode: it must take the
  input (``input.size``, ``input.channels``, or the table's encoded features) and answer
  ``(batch, classes)`` scores, exactly one per class (more outputs than classes would
  train classes that never occur, fewer would never predict some);
* runs one training step's forward and backward pass on that batch: a gradient must reach
  the trainable parameters;
* labels the batch with the labeller (class indices in range), or, with
  ``labels-present``, requires every sample of the windows read to carry a label;
* compares value ranges with the declared normalisation and warns with the figures:
  images a stream gives outside [0, 1] (they are clipped), normalised channels far from
  mean 0 and standard deviation 1, table columns far outside what the normalisation was
  fitted on;
* reports the samples skipped as bad (an image that does not decode, a label that is no
  class) as warnings; past ``data.max_bad_fraction`` of a window reading it fails.

Errors raise :class:`InvalidInputError` naming the field; warnings are returned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.objective import loss_value
from deepedge.workload.samples import BadSample, describe
from deepedge.workload.sources import NO_LABEL, FileSource, WindowData, WindowSource, decode
from deepedge.workload.spec import LabelsPresent, WorkloadSpec

log = logging.getLogger(__name__)

EXAMPLE_BATCH = 8
RANGE_SLACK = 0.01  # raw image values this far outside [0, 1] are rounding, not a mistake
MAX_NORMALISED_MEAN, MIN_NORMALISED_STD, MAX_NORMALISED_STD = 3.0, 0.02, 10.0
MAX_TABLE_SHIFT = 2.0  # a standardised column whose window mean moved this far is suspicious


@dataclass
class ProbeResult:
    example: np.ndarray  # a real batch of window 0 (model inputs)
    windows: list[int] = field(default_factory=list)  # the windows read
    warnings: list[str] = field(default_factory=list)
    skipped: list[BadSample] = field(default_factory=list)


def probe(
    spec: WorkloadSpec,
    model: nn.Module,
    source: WindowSource,
    classes: Sequence[str],
    labeller: Callable[[np.ndarray], np.ndarray] | None,
) -> ProbeResult:
    """Probe the workload (module docstring)."""
    n = source.n_windows
    indices = [0] if n is None or n < 2 else [0, n - 1]
    windows = [_read(source, t, spec) for t in indices]
    first = windows[0]
    if len(first.images) == 0:
        raise InvalidInputError("data: window 0 holds no usable sample", field="data")
    result = ProbeResult(first.images[:EXAMPLE_BATCH].astype(np.float32), indices)
    for w in windows:
        result.skipped += list(w.skipped)
    if result.skipped:
        result.warnings.append(
            f"data: {len(result.skipped)} bad sample(s) in the windows read are skipped at "
            f"run time: {'; '.join(describe(result.skipped, 3))}"
        )
    _check_outputs(model, spec, result.example, len(classes))
    labels = _check_labels(spec, windows, labeller, result.example, len(classes))
    _check_gradient(model, spec, result.example, labels)
    result.warnings += _range_warnings(spec, source, windows)
    return result


def _read(source: WindowSource, t: int, spec: WorkloadSpec) -> WindowData:
    """Window ``t``, every image of it decoded (a file source's undecodable images are in
    the window's ``skipped``)."""
    data = source.window(t)
    if isinstance(source, FileSource):
        sampled = {b.where for b in data.skipped}
        extra = []
        for ref in source.windows[t][1]:  # all of them, not only a capped sample
            if str(ref.path) in sampled:
                continue
            try:
                decode(ref.path, spec.input)
            except InvalidInputError as exc:
                extra.append(BadSample(str(ref.path), exc.message.split(": ", 2)[-1]))
        if extra:
            from dataclasses import replace

            data = replace(data, skipped=(*data.skipped, *extra))
    return data


def _shape_hint(spec: WorkloadSpec, example: np.ndarray) -> str:
    if spec.input.kind == "features":
        return f"the table's {example.shape[1]} encoded features"
    return "input.size, input.channels"


def _check_outputs(
    model: nn.Module, spec: WorkloadSpec, example: np.ndarray, n_classes: int
) -> None:
    model.eval()
    x = torch.as_tensor(example)
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as exc:
        raise InvalidInputError(
            f"input: the model cannot take inputs of shape {tuple(x.shape)} "
            f"({_shape_hint(spec, example)}): {type(exc).__name__}: {exc}",
            field="input",
        ) from exc
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != x.shape[0]:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise InvalidInputError(
            f"model: outputs must be (batch, classes) scores, got {got}", field="model"
        )
    if out.shape[1] != n_classes:
        raise InvalidInputError(
            f"classes: the model outputs {out.shape[1]} scores but the data has {n_classes} "
            f"classes: give the model {n_classes} outputs, or list all the classes it knows "
            "in classes",
            field="classes",
        )
    if not torch.isfinite(out).all():
        raise InvalidInputError(
            "model: the model's outputs on window 0 are not finite numbers", field="model"
        )


def _check_labels(
    spec: WorkloadSpec,
    windows: list[WindowData],
    labeller: Callable[[np.ndarray], np.ndarray] | None,
    example: np.ndarray,
    n_classes: int,
) -> np.ndarray:
    """The example batch's labels (the labeller's, else the data's own)."""
    if labeller is not None:
        return labeller(example)  # raises naming the labeller when it fails
    assert isinstance(spec.labeller, LabelsPresent)
    for w in windows:
        missing = int((w.labels == NO_LABEL).sum() + (w.eval_labels == NO_LABEL).sum())
        if missing:
            raise InvalidInputError(
                f"labeller: labels-present, but {missing} sample(s) of window {w.name} have "
                "no label (give a labeller entry point)",
                field="labeller",
            )
        seen = np.concatenate([w.labels, w.eval_labels])
        if len(seen) and (seen.min() < 0 or seen.max() >= n_classes):
            raise InvalidInputError(
                f"classes: window {w.name} has labels outside 0..{n_classes - 1}", field="classes"
            )
    return windows[0].labels[: len(example)]


def _check_gradient(
    model: nn.Module, spec: WorkloadSpec, example: np.ndarray, labels: np.ndarray
) -> None:
    """One training forward and backward pass must give the trainable parameters a
    gradient (BatchNorm needs two samples in training mode)."""
    if len(example) < 2:
        return
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    try:
        loss = loss_value(spec.loss, model(torch.as_tensor(example)),
                          torch.as_tensor(labels, dtype=torch.long))  # fmt: skip
        if not loss.requires_grad:
            raise InvalidInputError(
                "model: no gradient reaches the trainable parameters (is the output detached?)",
                field="model",
            )
        loss.backward()
    except InvalidInputError:
        raise
    except Exception as exc:
        raise InvalidInputError(
            f"model: a training step on window 0 fails: {type(exc).__name__}: {exc}",
            field="model",
        ) from exc
    finally:
        model.eval()
    if not any(p.grad is not None and torch.any(p.grad != 0) for p in params):
        raise InvalidInputError(
            "model: no gradient reaches the trainable parameters (is the output detached?)",
            field="model",
        )


def _range_warnings(
    spec: WorkloadSpec, source: WindowSource, windows: list[WindowData]
) -> list[str]:
    out: list[str] = []
    for w in windows:
        if w.raw_range is not None:
            lo, hi = w.raw_range
            if lo < -RANGE_SLACK or hi > 1 + RANGE_SLACK:
                out.append(
                    f"data: window {w.name}'s images range over [{lo:.4g}, {hi:.4g}], not "
                    "[0, 1]: they are clipped to [0, 1] before input.mean/std; give the "
                    "stream's images in [0, 1]"
                )
    if spec.input.kind == "image":
        x = windows[0].images
        if len(x):
            mean, std = x.mean(axis=(0, 2, 3)), x.std(axis=(0, 2, 3))
            if (
                np.abs(mean).max() > MAX_NORMALISED_MEAN
                or std.min() < MIN_NORMALISED_STD
                or std.max() > MAX_NORMALISED_STD
            ):
                out.append(
                    f"input: normalised with input.mean {spec.input.mean} and input.std "
                    f"{spec.input.std}, window 0's channels have means "
                    f"{[round(float(v), 3) for v in mean]} and standard deviations "
                    f"{[round(float(v), 3) for v in std]} (expected near 0 and 1)"
                )
        return out
    from deepedge.workload.table import TableSource

    if isinstance(source, TableSource):
        out += _table_warnings(source, windows)
    return out


def _table_warnings(source: object, windows: list[WindowData]) -> list[str]:
    """Columns whose mean in a window read sits far from what the normalisation was fitted
    on: more than ``MAX_TABLE_SHIFT`` fitted standard deviations (``standard``), or outside
    [-0.5, 1.5] (``minmax``). Tails are natural; a moved mean is a drift or a unit change."""
    from deepedge.workload.table import TableSource

    assert isinstance(source, TableSource)
    kind = source.data.normalise
    if kind == "none":
        return []
    out: list[str] = []
    for w in windows:
        values = np.concatenate([w.images, w.eval_images])
        if not len(values):
            continue
        moved, slot = [], 0
        for code in source.codes:
            if code.column.type == "numeric":
                mean = float(values[:, slot].mean())
                far = abs(mean) > MAX_TABLE_SHIFT if kind == "standard" else not -0.5 <= mean <= 1.5
                if far:
                    moved.append(f"{code.column.name!r} {mean:+.2f}")
            slot += code.width
        if moved:
            unit = "fitted standard deviations" if kind == "standard" else "of the fitted range"
            out.append(
                f"data: window {w.name}: {len(moved)} column(s) moved from the first "
                f"{source.data.fit_windows} window(s) the {kind} normalisation was fitted on "
                f"(mean in {unit}): {', '.join(moved[:5])}"
            )
    return out
