"""The JSON profile format the Ekya simulator replays (``deepedge.ekya-trace/1``).

A trace describes one edge server and its streams over consecutive retraining windows::

    {
      "format": "deepedge.ekya-trace/1",
      "window_s": 120,             # T, seconds per retraining window
      "gpus": 3,                   # G (the CLI / benchmark may override it)
      "delta_gpus": 0.1,           # allocation quantum of the thief / oracle
      "a_min": 0.4,                # floor of instantaneous accuracy
      "streams": [                 # static per stream
        {"stream_id": "A", "initial_accuracy": 0.65, "floor_accuracy": 0.0,
         "inference_configs": [{"name": "r100", "accuracy_factor": 1.0, "gpu_demand": 1.0}]}
      ],
      "windows": [                 # one entry per window, one row per stream
        {"streams": [
          {"stream_id": "A", "drift": 0.0,
           "retraining": [
             {"name": "cfg1", "accuracy_after": 0.75, "gpu_seconds": 85,
              "estimated_accuracy_after": 0.73, "estimated_gpu_seconds": 88}]}]}
      ]
    }

Semantics. ``accuracy_after`` and ``gpu_seconds`` are the ground truth the simulator plays
(accuracy of the retrained model on this window's data; seconds of training at 100% of one
GPU). The ``estimated_*`` fields are what a scheduler is told (the micro-profiler's output);
absent, they equal the truth. At the start of window ``w`` a stream's deployed model has
accuracy ``max(floor_accuracy, a_end(w-1) - drift_w)``, where ``a_end(w-1)`` is the accuracy
the stream ended window ``w-1`` with (``initial_accuracy`` before window 0). Instantaneous
inference accuracy is deployed accuracy x the ``accuracy_factor`` of the inference config the
scheduler picked.

Optional fields of recorded traces (:mod:`deepedge.sim.recorded`): per stream-window
``samples`` (training-pool size) and ``profiling_s`` (micro-profiling wall seconds); per
retraining row ``start_accuracy`` (the accuracy of the model that retraining started from:
the simulator then treats ``accuracy_after`` as relative to that start, see
:mod:`deepedge.sim.outcome_transfer`); and a top-level ``provenance`` object of strings
(command, seed, date, machine).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepedge.planning.window.documents import Fraction, InferenceConfig, RetrainingHyperparameters

TRACE_FORMAT: Literal["deepedge.ekya-trace/1"] = "deepedge.ekya-trace/1"


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class TraceRetraining(_Doc):
    """One retraining configuration of one stream in one window: truth and estimate."""

    name: str = Field(min_length=1)
    accuracy_after: Fraction
    gpu_seconds: float = Field(ge=0.0)
    estimated_accuracy_after: Fraction | None = None
    estimated_gpu_seconds: float | None = Field(default=None, ge=0.0)
    hyperparameters: RetrainingHyperparameters | None = None
    reprofiled_accuracy_after: list[Fraction] | None = Field(
        default=None,
        description="further micro-profiler estimates of accuracy_after, each independent of "
        "the first (its own validation split and profiling samples; recorded traces)",
    )
    start_accuracy: Fraction | None = Field(
        default=None,
        description="accuracy on this window of the model the retraining started from "
        "(recorded traces; the simulator then carries the outcome over to the stream's "
        "own starting accuracy, see deepedge.sim.outcome_transfer)",
    )

    @property
    def est_accuracy(self) -> float:
        return (
            self.accuracy_after
            if self.estimated_accuracy_after is None
            else self.estimated_accuracy_after
        )

    @property
    def est_gpu_seconds(self) -> float:
        return (
            self.gpu_seconds if self.estimated_gpu_seconds is None else self.estimated_gpu_seconds
        )


class TraceStreamWindow(_Doc):
    stream_id: str = Field(min_length=1)
    drift: float = Field(default=0.0, ge=-1.0, le=1.0, description="accuracy lost at window start")
    retraining: list[TraceRetraining] = Field(default_factory=list)
    samples: int | None = Field(default=None, ge=0, description="training samples (recorded)")
    profiling_s: float | None = Field(
        default=None, ge=0.0, description="wall seconds the micro-profiler took (recorded)"
    )
    reprofiling_s: float | None = Field(
        default=None, ge=0.0, description="wall seconds the second profile took (recorded)"
    )


class TraceWindow(_Doc):
    streams: list[TraceStreamWindow] = Field(min_length=1)


class TraceStream(_Doc):
    stream_id: str = Field(min_length=1)
    initial_accuracy: Fraction
    floor_accuracy: Fraction = 0.0
    inference_configs: list[InferenceConfig] = Field(min_length=1)


class EkyaTrace(_Doc):
    """A replayable multi-window profile of one edge server."""

    format: Literal["deepedge.ekya-trace/1"] = TRACE_FORMAT
    window_s: float = Field(gt=0.0)
    gpus: float = Field(gt=0.0)
    delta_gpus: float = Field(default=0.1, gt=0.0)
    a_min: Fraction = 0.0
    streams: list[TraceStream] = Field(min_length=1)
    windows: list[TraceWindow] = Field(min_length=1)
    provenance: dict[str, str] | None = Field(
        default=None, description="how the trace was made: command, seed, date, machine"
    )

    @model_validator(mode="after")
    def _consistent(self) -> EkyaTrace:
        ids = [s.stream_id for s in self.streams]
        if len(set(ids)) != len(ids):
            raise ValueError("streams: duplicate stream_id")
        for w, window in enumerate(self.windows):
            if sorted(s.stream_id for s in window.streams) != sorted(ids):
                raise ValueError(f"windows.{w}: must list each stream exactly once")
        for s in self.streams:
            reach = max(c.accuracy_factor for c in s.inference_configs)
            if s.initial_accuracy * reach < self.a_min:
                raise ValueError(
                    f"a_min {self.a_min} is above every inference config of stream {s.stream_id}"
                )
        return self

    def without_estimates(self) -> EkyaTrace:
        """This trace with every estimate removed: schedulers are told the true outcomes.

        Replaying it bounds what any micro-profiler could give a scheduler on these inputs.
        """
        truth = {"estimated_accuracy_after": None, "estimated_gpu_seconds": None}

        def row(r: TraceStreamWindow) -> TraceStreamWindow:
            return r.model_copy(
                update={"retraining": [c.model_copy(update=truth) for c in r.retraining]}
            )

        windows = [
            w.model_copy(update={"streams": [row(r) for r in w.streams]}) for w in self.windows
        ]
        return self.model_copy(update={"windows": windows})

    def stream(self, stream_id: str) -> TraceStream:
        for s in self.streams:
            if s.stream_id == stream_id:
                return s
        raise KeyError(stream_id)
