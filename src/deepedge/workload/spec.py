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
  ``x' = (x - mean_c) / std_c`` applied to images scaled to [0, 1] (``kind: image``), or
  ``kind: features`` for a table's encoded feature vector (set by ``data.kind: table``).
* ``data``: where time-ordered windows come from (:mod:`deepedge.workload.sources`):
  images (the digits, a folder, a CSV manifest, a Python stream) or a table of feature
  columns (:class:`TableData`: CSV or Parquet, :mod:`deepedge.workload.table`).
* ``labeller``: the golden labeller, an entry point, or ``labels-present`` (the data's
  own labels are the ground truth).
* ``training``: how the model trains (:class:`TrainingSpec`: optimizer, learning rate,
  epochs, batch limits, stop rule, warm start), with defaults ``workload check`` prints.

``python_path`` lists folders (the user's own package) that every process of deepedge,
Ray workers included, puts on ``sys.path`` before it imports an entry point.

Relative paths (``torchscript``, ``root``, ``manifest``, ``path``, ``python_path``,
``training.warm_start``, and any string in an entry point's ``kwargs`` that names a file or
folder there) are read relative to the folder of the document they come from. Checks that
need the model or the files (:func:`deepedge.workload.resolve.load_workload`) come after
this document validates.
"""

from __future__ import annotations

import enum
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepedge.learning.convergence import StopRuleKind
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
    """What one model input is: ``channels`` x ``size`` images, normalised per channel
    (``kind: image``); or a table's encoded feature vector (``kind: features``, the other
    fields unused: the table declares its columns and their normalisation)."""

    kind: Literal["image", "features"] = "image"
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
    max_bad_fraction: float = Field(
        default=0.05,
        ge=0.0,
        lt=1.0,
        description="a window's samples that may be bad (undecodable, unknown label, not a "
        "number): they are skipped and counted; more fails the run, naming the first",
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


class FeatureColumn(_Document):
    """One feature column of a table and how it is encoded."""

    name: str = Field(min_length=1)
    type: Literal["numeric", "categorical"] = Field(
        default="numeric",
        description="numeric: normalised; categorical: one-hot over the categories of the "
        "fitting windows, plus one for any other",
    )


class TableData(_Source):
    """Rows of feature columns with a label and a timestamp, cut into windows of
    ``window_s`` seconds from the first timestamp (:mod:`deepedge.workload.table`).

    The rows come from ``path`` (a CSV or Parquet file, or a folder of them read in name
    order: one file an hour, for example) or from ``entry_point(**kwargs)`` returning a
    pandas DataFrame. Each row becomes one float32 vector: numeric columns normalised with
    statistics fitted on the first ``fit_windows`` windows, categorical ones one-hot.
    Labels are class names (strings) or integers, mapped through ``classes``.
    """

    kind: Literal["table"] = "table"
    path: Path | None = Field(default=None, description="a .csv/.parquet file or a folder")
    entry_point: EntryPoint | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)
    features: list[FeatureColumn] | None = Field(
        default=None,
        description="the feature columns (default: every other column; numbers numeric, "
        "the rest categorical)",
    )
    label: str = Field(default="label", min_length=1, description="the label column")
    timestamp: str = Field(
        default="timestamp", min_length=1, description="seconds, or a date and time"
    )
    window_s: float = Field(default=3600.0, gt=0.0)
    normalise: Literal["standard", "minmax", "none"] = Field(
        default="standard",
        description="standard: (x - mean) / std; minmax: to [0, 1]; of the fitting windows",
    )
    fit_windows: int = Field(
        default=1, ge=1, description="the first windows the normalisation is fitted on"
    )

    @model_validator(mode="after")
    def _one_table(self) -> TableData:
        if (self.path is None) == (self.entry_point is None):
            raise ValueError("give exactly one of path and entry_point")
        if self.path is not None and self.kwargs:
            raise ValueError("kwargs go with an entry_point, not a path")
        names = [c.name for c in self.features or []]
        if len(set(names)) != len(names):
            raise ValueError("features must be unique")
        if {self.label, self.timestamp} & set(names) or self.label == self.timestamp:
            raise ValueError("label, timestamp and the features must be distinct columns")
        return self


DataSource = Annotated[
    DigitsData | FolderData | CsvData | StreamData | TableData, Field(discriminator="kind")
]


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


class OptimizerKind(enum.StrEnum):
    SGD = "sgd"  # with momentum (the parameter server compensates it for asynchrony)
    ADAM = "adam"  # decoupled weight decay (AdamW) when weight_decay > 0


class StopSpec(_Document):
    """When an update stops before ``max_epochs`` (:mod:`deepedge.learning.convergence`).

    Never while the best validation accuracy is within ``chance_margin`` of chance
    (``1 / classes``; on a small validation set, within two standard errors of a guesser's
    accuracy if that is wider): a model that learned nothing has not converged."""

    rule: StopRuleKind = StopRuleKind.OPTIMUS
    min_epochs: int = Field(default=3, ge=2, le=1000)
    horizon_epochs: int = Field(default=3, ge=1, le=1000)
    min_gain: float = Field(default=0.005, ge=0.0, le=1.0)
    chance_margin: float = Field(default=0.05, ge=0.0, le=1.0)
    target_accuracy: float | None = Field(default=None, gt=0.0, le=1.0)


class TrainingSpec(_Document):
    """How the workload's model trains: the first version, every update, Ekya's
    retraining from it. ``lr`` defaults to 0.05 for SGD and 0.001 for Adam."""

    optimizer: OptimizerKind = OptimizerKind.SGD
    lr: float | None = Field(default=None, gt=0.0, le=10.0)
    momentum: float = Field(default=0.9, ge=0.0, lt=1.0, description="SGD only")
    weight_decay: float = Field(default=0.0, ge=0.0, le=1.0)
    batch_size: int = Field(default=32, ge=1, le=65536, description="local training's batch")
    min_batch: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="smallest batch an update plans (default: each worker's)",
    )
    max_batch: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="largest batch an update plans (default: each worker's)",
    )
    max_epochs: int = Field(default=30, ge=1, le=1000)
    max_batches_per_epoch: int | None = Field(
        default=None, ge=1, description="local training: at most this many batches an epoch"
    )
    stop: StopSpec = StopSpec()
    norm_statistics: Literal["recalibrate", "ps-average"] = Field(
        default="recalibrate",
        description="running statistics (BatchNorm) served with an asynchronous update's "
        "weights: recomputed on the training window, or the PS's average of the workers'",
    )
    warm_start: Path | None = Field(
        default=None,
        description="weights trained elsewhere, loaded into the model before anything "
        "trains: a torch.save state_dict, a TorchScript archive or a flat .npy",
    )

    @model_validator(mode="after")
    def _batches(self) -> TrainingSpec:
        if (
            self.max_batch is not None
            and self.min_batch is not None
            and (self.max_batch < self.min_batch)
        ):
            raise ValueError(f"max_batch {self.max_batch} < min_batch {self.min_batch}")
        return self

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return self.lr
        return 0.001 if self.optimizer is OptimizerKind.ADAM else 0.05


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
    training: TrainingSpec = TrainingSpec()
    classes: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, description="class names in label order; default: the data's, sorted"
    )
    python_path: list[Path] = Field(
        default_factory=list,
        description="folders put on sys.path (in every process) before importing entry points",
    )
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _table_takes_features(cls, raw: Any) -> Any:
        """A table's model takes its encoded feature vector: ``input.kind: features``."""
        data = raw.get("data") if isinstance(raw, dict) else None
        if isinstance(data, dict) and data.get("kind") == "table" and "input" not in raw:
            return {**raw, "input": {"kind": "features"}}
        return raw

    @model_validator(mode="after")
    def _classes_unique(self) -> WorkloadSpec:
        if self.classes is not None and len(set(self.classes)) != len(self.classes):
            raise ValueError("classes must be unique")
        table = isinstance(self.data, TableData)
        if table != (self.input.kind == "features"):
            raise ValueError(
                "input.kind features goes with data.kind table (and image with the others)"
            )
        return self


def workload_schema() -> dict[str, Any]:
    """JSON Schema of :class:`WorkloadSpec` (committed as docs/schemas/workload.schema.json)."""
    return WorkloadSpec.model_json_schema()
