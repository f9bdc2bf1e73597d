"""The knobs of one model update (:func:`deepedge.runtime.training.update.run_model_update`)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from deepedge.learning.convergence import StoppingRule
from deepedge.learning.objective import MetricKind
from deepedge.runtime.training.gradient_channel import GradientEncoding


@dataclass(frozen=True)
class FaultInjection:
    """Crash ``worker_id`` after ``after_steps`` steps, on each of its first ``times`` launches.

    ``worker_id = PARAMETER_SERVER_ID`` crashes the parameter server instead, after
    ``after_steps`` updates of the launch.
    """

    worker_id: str
    after_steps: int
    times: int = 1


class NormStatistics(enum.StrEnum):
    """Where the served model's running statistics (BatchNorm's buffers) come from.

    The PS serves an average of its weights that no worker ran forward passes with, and
    each worker's buffers follow its own shard; either choice below gives the served
    weights statistics of the training data (docs/DESIGN.md, "A model version is the
    whole model state").
    """

    RECALIBRATE = "recalibrate"  # recomputed on training data for the weights scored
    PS_AVERAGE = "ps-average"  # the PS's sample-weighted mean of the workers' pushes


class UpdateExecutor(enum.StrEnum):
    """Where one update's parameter server, data store and workers run
    (docs/DESIGN.md, "An update pays no Ray start on one machine").

    Both run the same plan, the same
    :class:`~deepedge.runtime.training.parameter_server.ParameterServer`
    and :class:`~deepedge.runtime.training.worker.TrainingWorker` objects and the same epoch loop
    (:mod:`deepedge.runtime.training.update_epochs`); only the processes differ.
    """

    RAY = "ray"  # Ray actors, a process each, on the nodes of the cluster (live targets)
    THREADS = "threads"  # threads of the calling process: nothing to start (one machine)


class PushTransport(enum.Enum):
    """How a worker's per-step push reaches the PS
    (:mod:`deepedge.runtime.training.gradient_channel`)."""

    CHANNEL = "channel"  # a direct socket between the worker and the PS processes
    RAY_CALL = "ray-call"  # a Ray actor call per push


class LrSchedule(enum.StrEnum):
    """How the learning rate moves over an update's epochs."""

    CONSTANT = "constant"
    COSINE = "cosine"  # half a cosine from lr to 0 over the epochs at most


def lr_scale(schedule: LrSchedule, epoch: int, max_epochs: int) -> float:
    """The factor on ``lr`` in epoch ``epoch`` (1 the first) of at most ``max_epochs``:
    1 throughout, or ``(1 + cos(pi (epoch - 1) / max_epochs)) / 2``."""
    if schedule is LrSchedule.CONSTANT or max_epochs <= 0:
        return 1.0
    done = min(max(epoch - 1, 0), max_epochs)
    return 0.5 * (1.0 + math.cos(math.pi * done / max_epochs))


@dataclass(frozen=True)
class UpdateConfig:
    """Knobs of one update (defaults suit the edge CNN on the digits stream)."""

    stopping: StoppingRule = field(default_factory=lambda: StoppingRule(max_epochs=30))
    # SGD of the equivalent synchronous update; the PS pushes at lr and adds only the
    # momentum the asynchrony of the plan's workers does not (parameter_server.asynchronous_sgd).
    # 0.07 without momentum: the step the digits CNN's updates were tuned at on 2+ workers.
    lr: float = 0.07
    momentum: float = 0.0
    # The rate over the epochs: constant, or cosine from lr down over E = stopping.max_epochs
    # (lr_scale)
    lr_schedule: LrSchedule = LrSchedule.CONSTANT
    optimizer: str = "sgd"  # or "adam" (the PS's Adam: lr as given, no compensation)
    weight_decay: float = 0.0
    time_scale: float = 0.02  # emulated seconds per modelled device second; 0 = host speed
    checkpoint_every_updates: int = 50
    epoch_timeout_factor: float = 6.0
    min_epoch_timeout_s: float = 120.0  # generous: a loaded host must not look like a failure
    max_restarts: int = 6
    # Pushes a worker may have unanswered while it computes the next batch (0: wait for
    # each reply); see deepedge.runtime.training.worker.
    push_window: int = 1
    # The fresh-wait rule: a worker waits for its push's reply before the next batch when
    # the round trip is at most this fraction of a batch's compute
    # (deepedge.runtime.training.worker:
    # less staleness for at most this share of throughput; 0: always pipeline).
    fresh_wait_frac: float = 0.02
    # Where the PS and the workers run: Ray actors, or threads of this process.
    executor: UpdateExecutor = UpdateExecutor.RAY
    # How pushes travel (Ray executor): the PS's gradient channel (a direct socket) or Ray
    # actor calls; the threads executor calls the PS directly.
    transport: PushTransport = PushTransport.CHANNEL
    # How gradients travel up the channel: float32, or float16 with a power-of-two scale.
    gradient_encoding: GradientEncoding = GradientEncoding.FLOAT32
    # Span of the PS's weight average in epochs (0: score the raw weights); the decay is
    # beta = 1 - 1 / (average_epochs x PS updates per epoch of the plan).
    average_epochs: float = 1.0
    seed: int = 0
    faults: tuple[FaultInjection, ...] = ()
    # What the validation score (the stop rule's accuracy, the best epoch) counts as right.
    metric: MetricKind = MetricKind.ACCURACY
    # The running statistics scored and served with the weights (models with BatchNorm).
    norm_statistics: NormStatistics = NormStatistics.RECALIBRATE
    recalibration_samples: int = 1024  # training samples a recalibration reads at most
