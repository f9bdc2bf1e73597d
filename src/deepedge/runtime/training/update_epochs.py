"""Stage 3 of a model update: the epoch loop of one launch, and failure detection.

Epoch ``k``: every worker runs its asynchronous loop over its shard; the epoch ends when
all have finished (epoch time = max_i epochTime_i). The driver then scores the PS's
averaged weights on the validation set, with running statistics of the training data for a
model that keeps them (recomputed for those weights, or the PS's average of the workers':
``UpdateConfig.norm_statistics``), checkpoints the PS (weights, momentum, average,
version, the accuracy history and the strikes) and asks the accuracy monitor
(:func:`decide_stop`, Optimus fit) whether to stop.

A worker whose process dies (or whose thread crashes, with the threads executor), or that
misses its heartbeat, gets a strike and the loop raises :class:`WorkerFailure`; a dead
parameter server raises it too, without a strike, and so does a member whose node drains
(a graceful leave: it moves, no strike). The loop drives the launch through its executor-
neutral interface (:class:`~deepedge.runtime.training.update_launch.Launch`), so the rules are the
same for Ray actors and for threads.
The caller (:func:`deepedge.runtime.training.update.run_model_update`) kills the launch and
restarts from the last checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np
from torch import nn

from deepedge.core.errors import RunFailedError
from deepedge.learning.convergence import StopReason, decide_stop
from deepedge.learning.model_state import State, buffer_arrays, load_buffers, recalibrate_norms
from deepedge.learning.models import set_trainable_flat
from deepedge.learning.objective import MetricKind
from deepedge.learning.training import metric_score
from deepedge.runtime.training.monitor import (
    PARAMETER_SERVER_ID,
    FailureEvent,
    FailureKind,
    StatusLog,
    StrikeBook,
    UpdateStatus,
)
from deepedge.runtime.training.update_config import (
    LrSchedule,
    NormStatistics,
    UpdateConfig,
    lr_scale,
)
from deepedge.runtime.training.update_launch import Launch, ParameterServerLost, WorkerDied
from deepedge.runtime.training.worker import WorkerEpochStats

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Departures:
    """Members of a launch (worker ids, or PARAMETER_SERVER_ID) whose node went away."""

    lost: set[str] = field(default_factory=set)  # heartbeats stopped or the raylet died
    drained: dict[str, str] = field(default_factory=dict)  # member -> its draining node


NodeWatch = Callable[[], Departures]
"""A live cluster's departures from the launch, asked every ``WATCH_PERIOD_S``."""

WATCH_PERIOD_S = 0.5


@dataclass(frozen=True)
class EpochRecord:
    epoch: int
    accuracy: float
    wall_s: float  # launch of the epoch to the last worker's return
    workers: tuple[WorkerEpochStats, ...]


@dataclass
class Best:
    """The best validation accuracy seen so far and its weights (kept across restarts)."""

    accuracy: float = -1.0
    epoch: int = 0
    weights: np.ndarray | None = None
    buffers: State = field(default_factory=dict)  # the running statistics scored with them

    def offer(self, accuracy: float, epoch: int, weights: np.ndarray, buffers: State) -> None:
        if accuracy > self.accuracy:
            self.accuracy, self.epoch = accuracy, epoch
            self.weights = np.array(weights, dtype=np.float32, copy=True)
            self.buffers = {k: np.array(v, copy=True) for k, v in buffers.items()}


class WorkerFailure(Exception):
    """A launch failed: a worker (with a strike) or the parameter server (without)."""

    def __init__(self, event: FailureEvent) -> None:
        super().__init__(event.worker_id)
        self.event = event


@dataclass
class EpochLedger:
    """What the epochs of an update have produced so far (across its launches)."""

    accuracies: list[float]
    epochs: list[EpochRecord] = field(default_factory=list)
    best: Best = field(default_factory=Best)

    def record(self, record: EpochRecord, weights: np.ndarray, buffers: State) -> None:
        self.accuracies.append(record.accuracy)
        self.epochs.append(record)
        self.best.offer(record.accuracy, record.epoch, weights, buffers)

    def drop_last(self) -> None:
        """Forget the last epoch's accuracy and record (it never reached a checkpoint)."""
        self.accuracies.pop()
        self.epochs.pop()

    def rewind(self, accuracies: list[float]) -> None:
        """Back to a checkpoint's accuracy history: later epochs are trained again."""
        self.accuracies[:] = accuracies
        self.epochs[:] = [e for e in self.epochs if e.epoch <= len(accuracies)]


@dataclass
class FailureBook:
    """The update's failures, the strikes they gave and the status log they are told to.

    :meth:`worker` and :meth:`parameter_server` record one failure and raise
    :class:`WorkerFailure`; ``strikes`` is the caller's book (kept across updates).
    """

    strikes: StrikeBook
    status: StatusLog
    failures: list[FailureEvent] = field(default_factory=list)

    def worker(self, worker_id: str, kind: FailureKind, epoch: int, detail: str) -> NoReturn:
        """Record a strike for ``worker_id`` and raise :class:`WorkerFailure`."""
        count = self.strikes.record(worker_id)
        excluded = self.strikes.is_excluded(worker_id)
        event = FailureEvent(worker_id, kind, epoch, count, excluded, detail)
        self.failures.append(event)
        self.status.note(
            f"worker {worker_id} failed ({kind.value}) in epoch {epoch}: strike {count}"
            + (" - excluded by the three-strike rule" if event.excluded else ""),
            worker=worker_id,
            strikes=count,
            excluded=event.excluded,
        )
        log.warning("worker %s failed (%s): strike %d", worker_id, kind.value, count)
        raise WorkerFailure(event)

    def drained(self, member: str, node_id: str, epoch: int) -> NoReturn:
        """``member``'s node drains: a graceful leave, so no strike; the launch moves."""
        what = "the parameter server" if member == PARAMETER_SERVER_ID else f"worker {member}"
        count = 0 if member == PARAMETER_SERVER_ID else self.strikes.count(member)
        detail = f"node {node_id} drains"
        event = FailureEvent(member, FailureKind.NODE_DRAINED, epoch, count, False, detail)
        self.failures.append(event)
        self.status.note(
            f"node {node_id} drains: moved {what} without a strike (epoch {epoch})",
            worker=member,
            node=node_id,
            cause="drain",
            strikes=count,
        )
        log.info("node %s drains in epoch %d: %s moves without a strike", node_id, epoch, what)
        raise WorkerFailure(event)

    def parameter_server(self, epoch: int, detail: str) -> NoReturn:
        """The PS died: no worker gets a strike; the update restarts from the last checkpoint."""
        event = FailureEvent(PARAMETER_SERVER_ID, FailureKind.PS_DIED, epoch, 0, False, detail)
        self.failures.append(event)
        self.status.note(
            f"the parameter server failed in epoch {epoch} ({detail})", worker=PARAMETER_SERVER_ID
        )
        log.warning("parameter server failed in epoch %d (%s)", epoch, detail)
        raise WorkerFailure(event)


@dataclass(frozen=True)
class EpochRun:
    """What the epochs of one launch run with."""

    launch: Launch
    eval_model: nn.Module  # scores the PS's weights (frozen parameters: the initial model's)
    validation: tuple[np.ndarray, np.ndarray]
    config: UpdateConfig
    timeout_s: float  # the heartbeat: an epoch not done by then is a failure
    launch_no: int
    watch: NodeWatch | None = None  # a live cluster's lost members
    calibration: np.ndarray | None = None  # training inputs the statistics are recomputed on


def validation_accuracy(
    model: nn.Module,
    weights: np.ndarray,
    inputs: np.ndarray,
    targets: np.ndarray,
    metric: MetricKind = MetricKind.ACCURACY,
) -> float:
    """The fraction of the validation set that ``metric`` counts right for the trainable flat
    ``weights`` (the PS's vector); ``model``'s frozen parameters are those of the update's
    initial model. Scored in batches, so a large model on a large set stays in memory."""
    set_trainable_flat(model, weights)
    return metric_score(model, inputs, targets, metric)


def train_epochs(run: EpochRun, ledger: EpochLedger, book: FailureBook) -> StopReason:
    """Epoch loop of one launch, extending ``ledger``; raises :class:`WorkerFailure` (after
    recording it in ``book``) on the first failure."""
    while True:
        epoch = len(ledger.accuracies) + 1
        started = time.perf_counter()
        stats = _run_epoch(run, epoch, book)
        wall_s = time.perf_counter() - started
        weights = _pull_average(run, epoch, book)
        if not np.all(np.isfinite(weights)):
            book.status.move(UpdateStatus.FAILED, f"the weights diverged in epoch {epoch}")
            raise RunFailedError(
                f"the update diverged in epoch {epoch}: its weights are no longer finite "
                "numbers (lower training.lr, or check the inputs' scale)",
                cause="diverged",
            )
        set_trainable_flat(run.eval_model, weights)
        buffers = _norm_statistics(run, epoch, book)
        acc = metric_score(run.eval_model, *run.validation, run.config.metric)
        ledger.record(EpochRecord(epoch, acc, wall_s, tuple(stats)), weights, buffers)
        decision = decide_stop(ledger.accuracies, run.config.stopping, len(run.validation[1]))
        _checkpoint(run, epoch, ledger, book)
        book.status.note(
            f"epoch {epoch}: accuracy {acc:.3f}, epoch time {wall_s:.2f} s",
            epoch=epoch,
            accuracy=acc,
            wall_s=wall_s,
            predicted_gain=decision.predicted_gain,
            epochs_still_needed=decision.epochs_still_needed,
        )
        if decision.stop:
            return decision.reason


def _pull_average(run: EpochRun, epoch: int, book: FailureBook) -> np.ndarray:
    """The PS's averaged trainable weights, to score."""
    try:
        return run.launch.pull_average()
    except ParameterServerLost as exc:
        book.parameter_server(epoch, str(exc))


def _norm_statistics(run: EpochRun, epoch: int, book: FailureBook) -> State:
    """The scoring model's buffers for the weights just loaded into it: recomputed on the
    training inputs, or the PS's average of the workers' (module docstring); empty when
    the model keeps none."""
    model = run.eval_model
    if not buffer_arrays(model):
        return {}
    if run.config.norm_statistics is NormStatistics.PS_AVERAGE:
        try:
            shared = run.launch.pull_buffers()
        except ParameterServerLost as exc:
            book.parameter_server(epoch, str(exc))
        if shared:
            load_buffers(model, shared)
    elif run.calibration is not None:
        recalibrate_norms(
            model, run.calibration, max_samples=run.config.recalibration_samples,
            seed=run.config.seed + epoch,
        )  # fmt: skip
    return buffer_arrays(model)


def _checkpoint(run: EpochRun, epoch: int, ledger: EpochLedger, book: FailureBook) -> None:
    """Checkpoint the PS with the accuracy history and the strikes."""
    meta = {"accuracies": ledger.accuracies, "strikes": book.strikes.as_dict(),
            "launch": run.launch_no}  # fmt: skip
    try:
        run.launch.checkpoint(meta)
    except ParameterServerLost as exc:
        # The epoch's accuracy is not in a checkpoint: the restart repeats the epoch.
        ledger.drop_last()
        book.parameter_server(epoch, str(exc))


def _check_nodes(watch: NodeWatch, epoch: int, book: FailureBook) -> None:
    """Raise :class:`WorkerFailure` when a member of the launch sits on a lost or a
    draining node; a loss first, so that its strike is never skipped for a drain."""
    gone = watch()
    if PARAMETER_SERVER_ID in gone.lost:
        book.parameter_server(epoch, "its node was lost")
    if gone.lost:
        book.worker(sorted(gone.lost)[0], FailureKind.NODE_LOST, epoch, "node lost")
    if gone.drained:
        member = min(gone.drained, key=lambda m: (m != PARAMETER_SERVER_ID, m))
        book.drained(member, gone.drained[member], epoch)


def _run_epoch(run: EpochRun, epoch: int, book: FailureBook) -> list[WorkerEpochStats]:
    """Every worker's pass over its shard; the first failure raises :class:`WorkerFailure`.

    With a ``watch`` (a live cluster) the wait wakes every ``WATCH_PERIOD_S`` to check
    that no member's node was lost, so a dead node is found even while Ray still waits.
    """
    launch, timeout_s, watch = run.launch, run.timeout_s, run.watch
    config = run.config
    if config.lr_schedule is not LrSchedule.CONSTANT:  # (a constant rate is the PS's own)
        launch.set_lr_scale(lr_scale(config.lr_schedule, epoch, config.stopping.max_epochs))
    started = time.perf_counter()
    workers = launch.start_epoch(epoch)
    pending = list(workers)
    stats: list[WorkerEpochStats] = []
    while pending:
        remaining = timeout_s - (time.perf_counter() - started)
        wait_s = max(0.0, remaining) if watch is None else min(WATCH_PERIOD_S, max(0.0, remaining))
        done, pending = launch.wait(pending, wait_s)
        if watch is not None:
            _check_nodes(watch, epoch, book)
            if not done and remaining > wait_s:
                continue
        if not done:
            book.worker(
                workers[pending[0]],
                FailureKind.MISSED_HEARTBEAT,
                epoch,
                f"no epoch completion in {timeout_s:.1f} s",
            )
        try:
            stats.append(launch.result(done[0]))
        except ParameterServerLost as exc:
            book.parameter_server(epoch, str(exc))
        except WorkerDied as exc:
            book.worker(workers[done[0]], FailureKind.PROCESS_DIED, epoch, str(exc))
    return stats
