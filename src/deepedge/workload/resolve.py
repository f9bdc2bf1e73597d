"""From a workload document to a checked, ready :class:`Workload`.

:func:`load_workload` validates the document, imports and builds the model (freezing its
layers), opens the data source, builds the labeller and tries them together: one forward
pass of a batch of the input's shape, the model's outputs against the data's classes, the
first image of the data, the labeller on that batch. The first failure raises
:class:`InvalidInputError` naming the field (``model.entry_point``, ``frozen.prefixes``,
``input``, ``data.root``, ``labeller``...): exit status 2 on the CLI, HTTP 422 in the
service, before any Ray work starts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import ValidationError
from torch import nn

from deepedge.core.errors import InvalidInputError, describe_validation_error
from deepedge.learning.models import get_trainable_flat, parameter_count, trainable_parameters
from deepedge.workload.bundled import BUNDLED
from deepedge.workload.model import ModelFactory, freeze, import_entry_point
from deepedge.workload.sources import (
    NO_LABEL,
    DigitsSource,
    FileSource,
    StreamSource,
    WindowData,
    WindowSource,
    csv_source,
    decode,
    folder_source,
)
from deepedge.workload.spec import (
    CsvData,
    DigitsData,
    EntryPointLabeller,
    FolderData,
    StreamData,
    WorkloadSpec,
)

Labels = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Workload:
    """A checked workload: its document, model factory, data source and labeller."""

    spec: WorkloadSpec
    model_factory: ModelFactory  # () -> nn.Module with the frozen layers set
    source: WindowSource
    labeller: Labels | None  # None: the data's labels are the ground truth
    class_names: tuple[str, ...]
    frozen_names: tuple[str, ...]
    parameters: int  # all of the model's parameters
    trainable: int  # those an update trains, pushes and checkpoints

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    def initial_weights(self) -> np.ndarray:
        """The factory model's trainable flat vector (what an update starts from)."""
        return get_trainable_flat(self.model_factory())

    def label(self, images: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Golden labels of ``images``: the labeller's, else the data's own ``labels``."""
        if self.labeller is None:
            if (labels == NO_LABEL).any():
                raise InvalidInputError(
                    "labeller: labels-present, but some images have no label", field="labeller"
                )
            return labels
        return self.labeller(images)

    def window(self, t: int) -> WindowData:
        return self.source.window(t)

    def require_windows(self, n: int, why: str = "") -> None:
        """InvalidInputError(field="windows") unless the data has at least ``n`` windows."""
        available = self.source.n_windows
        if available is not None and available < n:
            raise InvalidInputError(
                f"windows: the workload has {available} windows, {n} needed{why}",
                field="windows",
            )


def _field_of(exc: ValidationError) -> str:
    loc = exc.errors()[0].get("loc", ())
    # Discriminated unions add the tag to the location ("data.folder.root"): drop it.
    parts = [str(p) for p in loc if str(p) not in {"digits", "folder", "csv", "stream"}]
    parts = [p for p in parts if p not in {"labels-present", "entry-point"}]
    return ".".join(parts) or "workload"


def parse_workload(raw: Any) -> WorkloadSpec:
    """Validate a document (mapping) as a :class:`WorkloadSpec`; InvalidInputError if bad."""
    try:
        return WorkloadSpec.model_validate(raw)
    except ValidationError as exc:
        raise InvalidInputError(describe_validation_error(exc), field=_field_of(exc)) from exc


def read_workload(reference: str | Path | Mapping[str, Any]) -> tuple[WorkloadSpec, Path]:
    """The document a bundled name, a JSON/YAML file or a mapping gives, and the folder its
    relative paths are read from."""
    if isinstance(reference, Mapping):
        return parse_workload(dict(reference)), Path.cwd()
    if isinstance(reference, str) and reference in BUNDLED:
        return parse_workload(BUNDLED[reference]), Path.cwd()
    path = Path(reference)
    if not path.is_file():
        raise InvalidInputError(
            f"workload: {reference} is neither a file nor a bundled workload "
            f"({', '.join(sorted(BUNDLED))})",
            field="workload",
        )
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix in {".yaml", ".yml"}:
            import yaml

            raw = yaml.safe_load(text)
        else:
            raw = json.loads(text)
    except Exception as exc:  # unreadable, not UTF-8 or not JSON/YAML: bad input
        raise InvalidInputError(f"workload: cannot read {path}: {exc}", field="workload") from exc
    return parse_workload(raw), path.resolve().parent


def _source(spec: WorkloadSpec, base_dir: Path, python_path: tuple[Path, ...]) -> WindowSource:
    data = spec.data
    if isinstance(data, DigitsData):
        return DigitsSource(data, spec.input, spec.seed)
    if isinstance(data, FolderData):
        return folder_source(data, spec.input, spec.seed, spec.classes, base_dir)
    if isinstance(data, CsvData):
        return csv_source(data, spec.input, spec.seed, spec.classes, base_dir)
    assert isinstance(data, StreamData)
    factory = import_entry_point(data.entry_point, "data.entry_point", python_path)
    try:
        stream = factory(**data.kwargs)
    except Exception as exc:
        raise InvalidInputError(
            f"data.entry_point: {data.entry_point}(**kwargs) raised {type(exc).__name__}: {exc}",
            field="data.entry_point",
        ) from exc
    return StreamSource(stream, data, spec.input, spec.seed)


@torch.no_grad()
def _module_labels(module: nn.Module, images: np.ndarray, batch: int = 256) -> np.ndarray:
    module.eval()
    out = [
        module(torch.as_tensor(images[i : i + batch], dtype=torch.float32)).argmax(dim=1).numpy()
        for i in range(0, len(images), batch)
    ]
    return np.concatenate(out).astype(np.int64) if out else np.zeros(0, dtype=np.int64)


def _labeller(spec: EntryPointLabeller, n_classes: int, python_path: tuple[Path, ...]) -> Labels:
    factory = import_entry_point(spec.entry_point, "labeller.entry_point", python_path)
    try:
        built = factory(**spec.kwargs)
    except Exception as exc:
        raise InvalidInputError(
            f"labeller.entry_point: {spec.entry_point}(**kwargs) raised "
            f"{type(exc).__name__}: {exc}",
            field="labeller.entry_point",
        ) from exc
    if not callable(built):
        raise InvalidInputError(
            "labeller.entry_point: returned neither a module nor a callable",
            field="labeller.entry_point",
        )

    def label(images: np.ndarray) -> np.ndarray:
        try:
            if isinstance(built, nn.Module):
                labels = _module_labels(built, images)
            else:
                labels = np.asarray(built(images)).astype(np.int64).reshape(-1)
        except Exception as exc:
            raise InvalidInputError(
                f"labeller: labelling failed: {type(exc).__name__}: {exc}", field="labeller"
            ) from exc
        if labels.shape != (len(images),) or (
            len(labels) and not (labels.min() >= 0 and labels.max() < n_classes)
        ):
            raise InvalidInputError(
                f"labeller: expected {len(images)} labels in [0, {n_classes}), got "
                f"shape {labels.shape}",
                field="labeller",
            )
        return labels

    return label


def _check_forward(model: nn.Module, spec: WorkloadSpec, n_classes: int) -> None:
    shape = (2, spec.input.channels, *spec.input.size)
    model.eval()
    try:
        with torch.no_grad():
            out = model(torch.zeros(shape))
    except Exception as exc:
        raise InvalidInputError(
            f"input: the model cannot take inputs of shape {shape} (input.size, "
            f"input.channels): {type(exc).__name__}: {exc}",
            field="input",
        ) from exc
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != shape[0]:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise InvalidInputError(
            f"model: outputs must be (batch, classes) scores, got {got}", field="model"
        )
    if out.shape[1] < n_classes:
        raise InvalidInputError(
            f"classes: the data has {n_classes} classes but the model outputs {out.shape[1]}",
            field="classes",
        )


def check_first_image(source: WindowSource, spec: WorkloadSpec) -> None:
    """Decode the first image of a file source (a cheap proof that the data is readable)."""
    if isinstance(source, FileSource):
        decode(source.refs(0)[0].path, spec.input)


def load_workload(reference: str | Path | Mapping[str, Any]) -> Workload:
    """Read, build and check a workload (module docstring)."""
    spec, base_dir = read_workload(reference)
    python_path = tuple(
        p if p.is_absolute() else (base_dir / p).resolve() for p in spec.python_path
    )
    factory = ModelFactory(spec.model, spec.frozen, spec.seed, base_dir, python_path)
    model = factory.build_unfrozen()
    frozen = freeze(model, spec.frozen)
    source = _source(spec, base_dir, python_path)
    classes = tuple(spec.classes) if spec.classes is not None else source.class_names
    _check_forward(model, spec, len(classes))
    check_first_image(source, spec)
    labeller: Labels | None = None
    if isinstance(spec.labeller, EntryPointLabeller):
        labeller = _labeller(spec.labeller, len(classes), python_path)
        labeller(np.zeros((2, spec.input.channels, *spec.input.size), dtype=np.float32))
    elif isinstance(source, FileSource) and any(
        r.label == NO_LABEL for _, refs in source.windows for r in refs
    ):
        raise InvalidInputError(
            "labeller: labels-present, but the data has images without a label "
            "(give a labeller entry point)",
            field="labeller",
        )
    return Workload(
        spec=spec,
        model_factory=factory,
        source=source,
        labeller=labeller,
        class_names=classes,
        frozen_names=tuple(frozen),
        parameters=parameter_count(model),
        trainable=sum(p.numel() for p in trainable_parameters(model)),
    )
