"""The workload document: the user's model, data and labeller (one pydantic model).

A :class:`WorkloadSpec` says everything deepedge needs to retrain a user's model on the
user's data; every entry point (``deepedge update``, ``demo``, ``ekya``, the service's
``model-update`` and ``ekya-window`` jobs) takes one. Its JSON Schema is committed as
``docs/schemas/workload.schema.json`` (:func:`workload_schema`).

* ``model``: a Python entry point ``package.module:factory`` (called with ``kwargs`` after
  ``torch.manual_seed(seed)``; returns an ``nn.Module``) or a TorchScript file.
* ``frozen``: parameters that are not trained, pushed or checkpointed, by name prefix
  and/or the first ``count`` *layers* (a layer is a module owning parameters directly, in
  ``named_modules()`` order).
* ``loss`` and ``metric`` (:mod:`deepedge.learning.objective`).
* ``input``: the size and channels the model takes and the normalisation
  ``x' = (x - mean_c) / std_c`` applied to images scaled to [0, 1].
* ``data``: where time-ordered windows come from (:mod:`deepedge.workload.sources`).
* ``labeller``: the golden labeller, an entry point, or ``labels-present`` (the data's
  own labels are the ground truth).

``python_path`` lists folders (the user's own package) that every process of deepedge,
Ray workers included, puts on ``sys.path`` before it imports an entry point.

Relative paths (``torchscript``, ``root``, ``manifest``, ``python_path``) are read relative
to the folder of the document they come from. Checks that need the model or the files
(:func:`deepedge.workload.resolve.load_workload`) come after this document validates.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepedge.learning.objective import LossKind, MetricKind

ENTRY_POINT = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
MAX_IMAGE_SIDE = 4096


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


EntryPoint = Annotated[
    str,
    Field(
        pattern=ENTRY_POINT.pattern,
        description="a Python entry point `package.module:attribute`",
        examples=["mypackage.models:make_model"],
    ),
]


class ModelSource(_Document):
    """Exactly one of ``entry_point`` (with ``kwargs``) and ``torchscript``."""

    entry_point: EntryPoint | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments")
    torchscript: Path | None = Field(
        default=None, description="a TorchScript file (torch.jit.save)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> ModelSource:
        if (self.entry_point is None) == (self.torchscript is None):
            raise ValueError("give exactly one of entry_point and torchscript")
        if self.torchscript is not None and self.kwargs:
            raise ValueError("kwargs go with an entry_point, not a torchscript file")
        return self


class FrozenLayers(_Document):
    """Parameters kept fixed: names starting with a prefix, and the first ``count`` layers."""

    prefixes: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    count: int = Field(
        default=0, ge=0, description="the first N layers (modules owning parameters)"
    )


class InputSpec(_Document):
    """What one model input is: ``channels`` x ``size`` images, normalised per channel."""

    size: tuple[
        Annotated[int, Field(ge=4, le=MAX_IMAGE_SIDE)],
        Annotated[int, Field(ge=4, le=MAX_IMAGE_SIDE)],
    ] = Field(default=(16, 16), description="(height, width) in pixels")
    channels: Literal[1, 3] = Field(default=1, description="1: grey, 3: colour (RGB)")
    mean: list[float] = Field(default_factory=lambda: [0.0], description="per channel")
    std: list[Annotated[float, Field(gt=0.0)]] = Field(
        default_factory=lambda: [1.0], description="per channel"
    )

    @model_validator(mode="after")
    def _per_channel(self) -> InputSpec:
        for name in ("mean", "std"):
            if len(getattr(self, name)) not in {1, self.channels}:
                raise ValueError(f"{name} needs 1 or {self.channels} values (one per channel)")
        return self


class _Source(_Document):
    synthetic_drift: bool = Field(
        default=False, description="add deepedge's seeded drift (rotation, contrast, blur, noise)"
    )
    eval_fraction: float = Field(
        default=0.2, gt=0.0, lt=1.0, description="share of each window held out for scoring"
    )
    max_window_images: int | None = Field(
        default=None,
        ge=2,
        description="decode at most this many images of a window (seeded sample)",
    )


class DigitsData(_Source):
    """The bundled digits stream (zero set-up; synthetic drift on by default)."""

    kind: Literal["digits"] = "digits"
    synthetic_drift: bool = True
    window_size: int = Field(default=400, ge=10, le=100_000, description="images per window")


class FolderData(_Source):
    """``ROOT/<window>/<class>/<image>``; windows in the sort order of their folder names."""

    kind: Literal["folder"] = "folder"
    root: Path


class CsvData(_Source):
    """A manifest with columns ``path,label,timestamp``; windows of ``window_s`` seconds.

    ``timestamp``: seconds (a number) or ISO 8601; ``label``: a class name, empty when the
    labeller labels the data; ``path``: relative to the manifest's folder or absolute.
    """

    kind: Literal["csv"] = "csv"
    manifest: Path
    window_s: float = Field(default=3600.0, gt=0.0)


class StreamData(_Source):
    """Any Python stream: ``entry_point(**kwargs)`` returns an object with ``window(t)``
    (``.images`` (N, C, H, W) float32 in [0, 1], ``.labels`` (N,) int64) and
    ``class_names``; an ``n_windows`` attribute bounds it."""

    kind: Literal["stream"] = "stream"
    entry_point: EntryPoint
    kwargs: dict[str, Any] = Field(default_factory=dict)


DataSource = Annotated[DigitsData | FolderData | CsvData | StreamData, Field(discriminator="kind")]


class LabelsPresent(_Document):
    """The data's own labels are the ground truth."""

    kind: Literal["labels-present"] = "labels-present"


class EntryPointLabeller(_Document):
    """``entry_point(**kwargs)`` returns an ``nn.Module`` (its arg-max is the label) or a
    callable ``images (N, C, H, W) float32 -> labels (N,) int``; it sees normalised inputs."""

    kind: Literal["entry-point"] = "entry-point"
    entry_point: EntryPoint
    kwargs: dict[str, Any] = Field(default_factory=dict)


Labeller = Annotated[LabelsPresent | EntryPointLabeller, Field(discriminator="kind")]


class WorkloadSpec(_Document):
    """The user's model, data and labeller (module docstring)."""

    name: str = Field(default="workload", min_length=1, max_length=100)
    model: ModelSource
    frozen: FrozenLayers = FrozenLayers()
    loss: LossKind = LossKind.CROSS_ENTROPY
    metric: MetricKind = MetricKind.ACCURACY
    input: InputSpec = InputSpec()
    data: DataSource = DigitsData()
    labeller: Labeller = LabelsPresent()
    classes: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, description="class names in label order; default: the data's, sorted"
    )
    python_path: list[Path] = Field(
        default_factory=list,
        description="folders put on sys.path (in every process) before importing entry points",
    )
    seed: int = 0

    @model_validator(mode="after")
    def _classes_unique(self) -> WorkloadSpec:
        if self.classes is not None and len(set(self.classes)) != len(self.classes):
            raise ValueError("classes must be unique")
        return self


def workload_schema() -> dict[str, Any]:
    """JSON Schema of :class:`WorkloadSpec` (committed as docs/schemas/workload.schema.json)."""
    return WorkloadSpec.model_json_schema()
