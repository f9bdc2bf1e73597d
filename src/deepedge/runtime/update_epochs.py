"""Stage 3 of a model update: the epoch loop of one launch, and failure detection.

Epoch ``k``: every worker runs its asynchronous loop over its shard; the epoch ends when
all have finished (epoch time = max_i epochTime_i). The driver then scores the PS's
averaged weights on the validation set, checkpoints the PS (weights, momentum, average,
version, the accuracy history and the strikes) and asks the accuracy monitor
(:func:`decide_stop`, Optimus fit) whether to stop.

A worker whose process dies, or that misses its heartbeat, gets a strike and the loop
raises :class:`WorkerFailure`; a dead parameter server raises it too, without a strike.
The caller (:func:`deepedge.runtime.update.run_model_update`) kills the launch and
restarts from the last checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch
from torch import nn

from deepedge.learning.convergence import StopReason, decide_stop
from deepedge.learning.models import set_trainable_flat
from deepedge.runtime.monitor import (
    PARAMETER_SERVER_ID,
    FailureEvent,
    FailureKind,
    StatusLog,
    StrikeBook,
)
from deepedge.runtime.update_config import UpdateConfig
from deepedge.runtime.update_launch import Launch
from deepedge.runtime.worker import WorkerEpochStats

log = logging.getLogger(__name__)

NodeWatch = Callable[[], set[str]]
"""Members of the launch (worker ids, or PARAMETER_SERVER_ID) whose node was lost."""

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

    def offer(self, accuracy: float, epoch: int, weights: np.ndarray) -> None:
        if accuracy > self.accuracy:
            self.accuracy, self.epoch = accuracy, epoch
            self.weights = np.array(weights, dtype=np.float32, copy=True)


class WorkerFailure(Exception):
    """A launch failed: a worker (with a strike) or the parameter server (without)."""

    def __init__(self, event: FailureEvent) -> None:
        super().__init__(event.worker_id)
        self.event = event


@dataclass
class EpochLedger:
    """What the epochs of an update have produced so far (across its launches)."""

    accuracies: list[float]
    epochs: list[EpochRecord]
    failures: list[FailureEvent]
    best: Best


def validation_accuracy(
    model: nn.Module, weights: np.ndarray, inputs: np.ndarray, targets: np.ndarray
) -> float:
    """Accuracy of the trainable flat ``weights`` (the PS's vector) on the validation set
    (classification); ``model``'s frozen parameters are those of the update's initial model."""
    set_trainable_flat(model, weights)
    model.eval()
    with torch.no_grad():
        out = model(torch.as_tensor(inputs, dtype=torch.float32))
    return float((out.argmax(dim=1).numpy() == targets).mean())


def train_epochs(
    launch: Launch,
    eval_model: nn.Module,
    validation: tuple[np.ndarray, np.ndarray],
    ledger: EpochLedger,
    config: UpdateConfig,
    status: StatusLog,
    timeout_s: float,
    strikes: StrikeBook,
    launch_no: int,
    watch: NodeWatch | None = None,
) -> StopReason:
    """Epoch loop of one launch; raises :class:`WorkerFailure` on the first failure."""
    x_val, y_val = validation
    accuracies, failures = ledger.accuracies, ledger.failures
    while True:
        epoch = len(accuracies) + 1
        started = time.perf_counter()
        stats = _run_epoch(launch, epoch, timeout_s, strikes, failures, status, watch)
        wall_s = time.perf_counter() - started
        try:
            weights = ray.get(launch.ps.pull_average.remote())[1]
        except ray.exceptions.RayActorError as exc:
            fail_ps(epoch, failures, status, type(exc).__name__)
        acc = validation_accuracy(eval_model, weights, x_val, y_val)
        accuracies.append(acc)
        ledger.best.offer(acc, epoch, weights)
        ledger.epochs.append(EpochRecord(epoch, acc, wall_s, tuple(stats)))
        decision = decide_stop(accuracies, config.stopping)
        try:
            ray.get(
                launch.ps.checkpoint.remote(
                    {"accuracies": accuracies, "strikes": strikes.as_dict(), "launch": launch_no}
                )
            )
        except ray.exceptions.RayActorError as exc:
            # The epoch's accuracy is not in a checkpoint: the restart repeats the epoch.
            accuracies.pop()
            ledger.epochs.pop()
            fail_ps(epoch, failures, status, type(exc).__name__)
        status.note(
            f"epoch {epoch}: accuracy {acc:.3f}, epoch time {wall_s:.2f} s",
            epoch=epoch,
            accuracy=acc,
            wall_s=wall_s,
            predicted_gain=decision.predicted_gain,
            epochs_still_needed=decision.epochs_still_needed,
        )
        if decision.stop:
            return decision.reason


def _check_nodes(
    watch: NodeWatch,
    epoch: int,
    strikes: StrikeBook,
    failures: list[FailureEvent],
    status: StatusLog,
) -> None:
    """Raise :class:`WorkerFailure` when a member of the launch sits on a lost node."""
    lost = watch()
    if PARAMETER_SERVER_ID in lost:
        fail_ps(epoch, failures, status, "its node was lost")
    if lost:
        worker = sorted(lost)[0]
        fail_worker(worker, FailureKind.NODE_LOST, epoch, strikes, failures, status, "node lost")


def _run_epoch(
    launch: Launch,
    epoch: int,
    timeout_s: float,
    strikes: StrikeBook,
    failures: list[FailureEvent],
    status: StatusLog,
    watch: NodeWatch | None = None,
) -> list[WorkerEpochStats]:
    """Every worker's pass over its shard; the first failure raises :class:`WorkerFailure`.

    With a ``watch`` (a live cluster) the wait wakes every ``WATCH_PERIOD_S`` to check
    that no member's node was lost, so a dead node is found even while Ray still waits.
    """
    started = time.perf_counter()
    refs = {
        h.run_epoch.remote(launch.ps, epoch, launch.channel): w for w, h in launch.workers.items()
    }
    pending = list(refs)
    stats: list[WorkerEpochStats] = []
    while pending:
        remaining = timeout_s - (time.perf_counter() - started)
        wait_s = max(0.0, remaining) if watch is None else min(WATCH_PERIOD_S, max(0.0, remaining))
        done, pending = ray.wait(pending, num_returns=1, timeout=wait_s)
        if watch is not None:
            _check_nodes(watch, epoch, strikes, failures, status)
            if not done and remaining > wait_s:
                continue
        if not done:
            fail_worker(
                refs[pending[0]],
                FailureKind.MISSED_HEARTBEAT,
                epoch,
                strikes,
                failures,
                status,
                f"no epoch completion in {timeout_s:.1f} s",
            )
        try:
            stats.append(ray.get(done[0]))
        except Exception as exc:
            # A worker's epoch also fails when the PS under it died: blame the PS then.
            if not ps_alive(launch.ps):
                fail_ps(epoch, failures, status, type(exc).__name__)
            if not isinstance(
                exc, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError)
            ):
                raise
            fail_worker(
                refs[done[0]],
                FailureKind.PROCESS_DIED,
                epoch,
                strikes,
                failures,
                status,
                type(exc).__name__,
            )
    return stats


def fail_worker(
    worker_id: str,
    kind: FailureKind,
    epoch: int,
    strikes: StrikeBook,
    failures: list[FailureEvent],
    status: StatusLog,
    detail: str,
) -> None:
    """Record a strike for ``worker_id`` and raise :class:`WorkerFailure`."""
    count = strikes.record(worker_id)
    event = FailureEvent(worker_id, kind, epoch, count, strikes.is_excluded(worker_id), detail)
    failures.append(event)
    status.note(
        f"worker {worker_id} failed ({kind.value}) in epoch {epoch}: strike {count}"
        + (" - excluded by the three-strike rule" if event.excluded else ""),
        worker=worker_id,
        strikes=count,
        excluded=event.excluded,
    )
    log.warning("worker %s failed (%s): strike %d", worker_id, kind.value, count)
    raise WorkerFailure(event)


def ps_alive(ps: Any, timeout_s: float = 30.0) -> bool:
    """False when the parameter server's actor is dead (a busy PS counts as alive)."""
    try:
        ray.get(ps.pull.remote(), timeout=timeout_s)
    except ray.exceptions.RayActorError:
        return False
    except ray.exceptions.GetTimeoutError:
        return True
    return True


def fail_ps(epoch: int, failures: list[FailureEvent], status: StatusLog, detail: str) -> None:
    """The PS died: no worker gets a strike; the update restarts from the last checkpoint."""
    event = FailureEvent(PARAMETER_SERVER_ID, FailureKind.PS_DIED, epoch, 0, False, detail)
    failures.append(event)
    status.note(
        f"the parameter server failed in epoch {epoch} ({detail})", worker=PARAMETER_SERVER_ID
    )
    log.warning("parameter server failed in epoch %d (%s)", epoch, detail)
    raise WorkerFailure(event)
