"""From a workload document to a checked, ready :class:`Workload`.

:func:`load_workload` validates the document, resolves its relative paths (the folder of
the document; a string in an entry point's ``kwargs`` that names an existing file or
folder there is resolved too), imports and builds the model (freezing its layers, loading
``training.warm_start``), opens the data source, builds the labeller and probes them
together on real data (:mod:`deepedge.workload.probe`: a real batch through the model and
the labeller, the outputs against the classes, the labels, the value ranges against the
declared normalisation, every image of the windows it reads). The first failure raises
:class:`InvalidInputError` naming the field (``model.entry_point``, ``frozen.prefixes``,
``input``, ``classes``, ``data.root``, ``labeller``...): exit status 2 on the CLI, HTTP 422
in the service, before any Ray work starts; what is suspicious but usable is a warning.

A :class:`Workload` measures each window's drift severity from its data
(:mod:`deepedge.learning.drift_severity`, against window 0) unless the source applies a
synthetic drift whose severity it knows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
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
    StreamSource,
    WindowData,
    WindowSource,
    csv_source,
    folder_source,
)
from deepedge.workload.spec import (
    CsvData,
    DigitsData,
    EntryPointLabeller,
    FolderData,
    StreamData,
    TableData,
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
    warnings: tuple[str, ...] = ()  # what the probe found suspicious but usable
    example: np.ndarray | None = None  # a real batch of the model's input (window 0)
    _reference: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One input's shape: ``(C, H, W)`` for images, ``(F,)`` for a table's features."""
        if self.example is not None:
            return tuple(int(d) for d in self.example.shape[1:])
        return (self.spec.input.channels, *self.spec.input.size)

    def example_batch(self, n: int = 8) -> torch.Tensor:
        """A batch of real inputs (window 0), to run the model on (exports, probes)."""
        if self.example is not None and len(self.example):
            return torch.as_tensor(self.example[:n], dtype=torch.float32)
        return torch.zeros((2, *self.input_shape))

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
        """Window ``t``, with its drift severity measured against window 0 when the
        source does not know it (module docstring)."""
        data = self.source.window(t)
        if t == 0 or data.severity > 0 or getattr(self.spec.data, "synthetic_drift", False):
            return data
        from deepedge.learning.drift_severity import drift_severity

        if "images" not in self._reference:
            self._reference["images"] = self.source.window(0).images
        measured = drift_severity(self._reference["images"], data.images, seed=self.spec.seed + t)
        return replace(data, severity=measured)

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
    if isinstance(data, TableData):
        from deepedge.workload.table import TableSource

        return TableSource(data, spec.seed, spec.classes, base_dir, python_path)
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


def _resolve_path(value: Path, base_dir: Path) -> Path:
    return value if value.is_absolute() else (base_dir / value).resolve()


def _resolve_kwargs(kwargs: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """``kwargs`` with every relative path string that names an existing file or folder
    under ``base_dir`` made absolute (nested lists and mappings too)."""

    def one(value: Any) -> Any:
        if isinstance(value, str) and value and not Path(value).is_absolute():
            candidate = base_dir / value
            if "\n" not in value and len(value) < 4096 and candidate.exists():
                return str(candidate.resolve())
        if isinstance(value, list):
            return [one(v) for v in value]
        if isinstance(value, dict):
            return {k: one(v) for k, v in value.items()}
        return value

    return {k: one(v) for k, v in kwargs.items()}


def resolve_paths(spec: WorkloadSpec, base_dir: Path) -> WorkloadSpec:
    """``spec`` with its relative paths read from ``base_dir`` (module docstring)."""
    update: dict[str, Any] = {}
    model = spec.model
    if model.torchscript is not None:
        update["model"] = model.model_copy(
            update={"torchscript": _resolve_path(model.torchscript, base_dir)}
        )
    elif model.kwargs:
        update["model"] = model.model_copy(
            update={"kwargs": _resolve_kwargs(model.kwargs, base_dir)}
        )
    data = spec.data
    if isinstance(data, StreamData | TableData) and data.kwargs:
        data = data.model_copy(update={"kwargs": _resolve_kwargs(data.kwargs, base_dir)})
    if isinstance(data, TableData) and data.path is not None:
        data = data.model_copy(update={"path": _resolve_path(data.path, base_dir)})
    if isinstance(data, FolderData):
        data = data.model_copy(update={"root": _resolve_path(data.root, base_dir)})
    if isinstance(data, CsvData):
        data = data.model_copy(update={"manifest": _resolve_path(data.manifest, base_dir)})
    update["data"] = data
    if isinstance(spec.labeller, EntryPointLabeller) and spec.labeller.kwargs:
        update["labeller"] = spec.labeller.model_copy(
            update={"kwargs": _resolve_kwargs(spec.labeller.kwargs, base_dir)}
        )
    if spec.training.warm_start is not None:
        update["training"] = spec.training.model_copy(
            update={"warm_start": _resolve_path(spec.training.warm_start, base_dir)}
        )
    update["python_path"] = [_resolve_path(p, base_dir) for p in spec.python_path]
    return spec.model_copy(update=update)


def model_factory(reference: str | Path | Mapping[str, Any]) -> ModelFactory:
    """The workload's model factory alone (its document read, no model built, no data
    opened): what a process that only loads versions of the model needs."""
    spec, base_dir = read_workload(reference)
    spec = resolve_paths(spec, base_dir)
    return ModelFactory(spec.model, spec.frozen, spec.seed, base_dir, tuple(spec.python_path),
                        spec.training.warm_start)  # fmt: skip


def labeller_of(reference: str | Path | Mapping[str, Any]) -> Labels | None:
    """The workload's labeller alone (None: ``labels-present``), with no model built and no
    window read: what labelling a window of live traffic needs."""
    spec, base_dir = read_workload(reference)
    spec = resolve_paths(spec, base_dir)
    if not isinstance(spec.labeller, EntryPointLabeller):
        return None
    python_path = tuple(spec.python_path)
    if spec.classes is not None:
        classes: tuple[str, ...] = tuple(spec.classes)
    else:
        classes = _source(spec, base_dir, python_path).class_names
    return _labeller(spec.labeller, len(classes), python_path)


def load_workload(reference: str | Path | Mapping[str, Any]) -> Workload:
    """Read, build and probe a workload (module docstring)."""
    from deepedge.workload.probe import probe

    spec, base_dir = read_workload(reference)
    spec = resolve_paths(spec, base_dir)
    python_path = tuple(spec.python_path)
    factory = ModelFactory(spec.model, spec.frozen, spec.seed, base_dir, python_path,
                           spec.training.warm_start)  # fmt: skip
    model = factory.build_unfrozen()
    frozen = freeze(model, spec.frozen)
    source = _source(spec, base_dir, python_path)
    classes = tuple(spec.classes) if spec.classes is not None else source.class_names
    labeller: Labels | None = None
    if isinstance(spec.labeller, EntryPointLabeller):
        labeller = _labeller(spec.labeller, len(classes), python_path)
    found = probe(spec, model, source, classes, labeller)
    return Workload(
        spec=spec,
        model_factory=factory,
        source=source,
        labeller=labeller,
        class_names=classes,
        frozen_names=tuple(frozen),
        parameters=parameter_count(model),
        trainable=sum(p.numel() for p in trainable_parameters(model)),
        warnings=tuple(found.warnings),
        example=found.example,
    )
