"""The retraining-window problem of joint retraining and inference (Ekya, Sec. 4.1).

An edge server with ``G`` GPUs (on CPU-only machines: cores, used the same way) runs one
inference job per video stream and, during a retraining window of ``T`` seconds, at most one
retraining job per stream. For every stream ``v`` a scheduler decides

* the retraining configuration ``gamma`` (or none),
* the inference configuration ``lambda``,
* the GPUs ``R_v`` of the retraining job and ``I_v`` of the inference job,

so that ``sum_v (R_v + I_v) <= G`` and the inference accuracy averaged over the window and
over the streams is the highest, while the instantaneous inference accuracy of every stream
never falls below ``a_min``.

Inference-accuracy model: a stream's instantaneous accuracy is the accuracy of its deployed
model times the ``accuracy_factor`` of its inference configuration (frame sampling,
resolution); a configuration keeps up with the live frame rate only if its ``gpu_demand`` fits
in the inference job's allocation.

This module holds the documents (inputs and decisions, exported as JSON Schema); the
scheduler protocol and registry are in :mod:`deepedge.planning.window`, the accuracy estimate
in :mod:`deepedge.planning.window.accuracy`.
"""

from __future__ import annotations

import enum
from typing import Annotated, NewType

from pydantic import BaseModel, ConfigDict, Field, model_validator

StreamId = NewType("StreamId", str)

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class SchedulerKind(enum.StrEnum):
    """The window schedulers deepedge ships."""

    THIEF = "thief"
    UNIFORM = "uniform"
    ORACLE = "oracle"


MAX_QUANTA = 4096
"""The most allocation quanta ``G / Delta`` a window problem may have (the thief's work grows
with it; the paper's setting, 8 GPUs at Delta = 0.1, is 80)."""


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Input(_Document):
    """A document a user writes: NaN and infinities are refused (a plan may report inf)."""

    model_config = ConfigDict(allow_inf_nan=False)


class InferenceConfig(_Input):
    """One inference configuration of a stream (frame sampling x resolution)."""

    name: str = Field(min_length=1)
    accuracy_factor: float = Field(
        gt=0.0, le=1.0, description="instantaneous accuracy = model accuracy x this factor"
    )
    gpu_demand: float = Field(ge=0.0, description="GPUs needed to keep up with the live frame rate")


class RetrainingHyperparameters(_Input):
    """The knobs a retraining configuration sets (Ekya Sec. 3.1)."""

    epochs: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    last_layer_neurons: int = Field(ge=1)
    frozen_layers: int = Field(ge=0)
    data_fraction: float = Field(gt=0.0, le=1.0)


class RetrainingConfig(_Input):
    """A retraining configuration with its (estimated) outcome and cost."""

    name: str = Field(min_length=1)
    accuracy_after: Fraction = Field(description="model accuracy once retraining finishes")
    gpu_seconds: float = Field(
        ge=0.0, description="seconds to retrain with 100% of one GPU, on this window's data"
    )
    hyperparameters: RetrainingHyperparameters | None = None


class StreamWindow(_Input):
    """One video stream at the start of (the rest of) a retraining window."""

    stream_id: str = Field(min_length=1)
    current_accuracy: Fraction = Field(description="accuracy of the deployed model now")
    inference_configs: list[InferenceConfig] = Field(min_length=1)
    retraining_configs: list[RetrainingConfig] = Field(default_factory=list)
    data_scale: float = Field(
        default=1.0,
        gt=0.0,
        description="this window's training-set size / the size gpu_seconds was measured on",
    )
    drift_per_window: float = Field(
        default=0.0,
        ge=-1.0,
        le=1.0,
        description="accuracy the deployed model is expected to lose at each next window's "
        "start (the drift the stream has shown); used only by horizon-aware schedulers",
    )

    @model_validator(mode="after")
    def _unique_names(self) -> StreamWindow:
        for kind, names in (
            ("inference_configs", [c.name for c in self.inference_configs]),
            ("retraining_configs", [c.name for c in self.retraining_configs]),
        ):
            if len(set(names)) != len(names):
                raise ValueError(f"stream {self.stream_id}: duplicate names in {kind}")
        return self


class WindowProblem(_Input):
    """Input of a window scheduler: the server, the window and the streams."""

    window_s: float = Field(gt=0.0, description="length of the (remaining) retraining window")
    gpus: float = Field(gt=0.0, description="G: GPUs (or cores) of the edge server")
    delta_gpus: float = Field(default=0.1, gt=0.0, description="allocation quantum Delta")
    a_min: Fraction = Field(default=0.0, description="floor of instantaneous accuracy")
    period_s: float | None = Field(
        default=None,
        gt=0.0,
        description="length of a whole retraining window (the next windows' length for "
        "horizon-aware schedulers); None: window_s",
    )
    streams: list[StreamWindow] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> WindowProblem:
        ids = [s.stream_id for s in self.streams]
        if len(set(ids)) != len(ids):
            raise ValueError("streams: duplicate stream_id")
        if self.delta_gpus > self.gpus:
            raise ValueError(f"delta_gpus {self.delta_gpus} exceeds gpus {self.gpus}")
        if self.gpus / self.delta_gpus > MAX_QUANTA:
            raise ValueError(
                f"gpus / delta_gpus = {self.gpus / self.delta_gpus:.4g} quanta; at most "
                f"{MAX_QUANTA} (raise delta_gpus)"
            )
        for s in self.streams:
            best = s.current_accuracy * max(c.accuracy_factor for c in s.inference_configs)
            if best < self.a_min:
                raise ValueError(
                    f"a_min {self.a_min} is above every inference config of stream "
                    f"{s.stream_id} (best {best:.4g})"
                )
        return self

    def stream(self, stream_id: str) -> StreamWindow:
        for s in self.streams:
            if s.stream_id == stream_id:
                return s
        raise KeyError(stream_id)


class StreamDecision(_Document):
    """What a scheduler decided for one stream, with the accuracy it expects."""

    stream_id: str
    inference_gpus: float = Field(ge=0.0)
    retraining_gpus: float = Field(ge=0.0)
    inference_config: str | None = Field(description="None: no config keeps up")
    retraining_config: str | None = Field(description="None: do not retrain")
    retraining_duration_s: float | None = None
    accuracy_during_retraining: Fraction
    accuracy_after_retraining: Fraction
    window_accuracy: Fraction = Field(description="instantaneous accuracy averaged over T")


class GpuSlot(_Document):
    """One quantised job share placed on one GPU."""

    stream_id: str
    job: str = Field(description="'inference' or 'retraining'")
    gpu_index: int = Field(ge=0)
    share: float = Field(gt=0.0, le=1.0)


class GpuPacking(_Document):
    """Quantised placement of the allocations onto whole GPUs."""

    slots: list[GpuSlot]
    gpu_load: list[float]
    quantization_error_gpus: float = Field(
        ge=0.0, description="sum over jobs of |continuous share - packed share|"
    )
    fragmentation: float = Field(ge=0.0, le=1.0, description="1 - largest free / total free")


class WindowPlan(_Document):
    """Output of a window scheduler."""

    scheduler: SchedulerKind
    window_s: float
    gpus: float
    streams: list[StreamDecision]
    mean_accuracy: Fraction = Field(description="window accuracy averaged over streams")
    allocated_gpus: float
    packing: GpuPacking | None = None

    def decision(self, stream_id: str) -> StreamDecision:
        for d in self.streams:
            if d.stream_id == stream_id:
                return d
        raise KeyError(stream_id)
