"""One distributed model update: plan -> ship shards -> async PS training -> stop -> result.

:func:`run_model_update` is the whole of Deep-Edge's online mode for one trigger
(Sec. IV-C2/IV-C3):

1. **Plan.** Use the given :class:`ShardPlan`, or ask ``planner(cluster)`` (Algorithm 1 on
   estimates). Workers with three strikes are removed from the cluster first.
2. **Launch.** A :class:`DataStore` actor cuts the data into the plan's shards ``d_i``;
   a :class:`ParameterServer` actor starts from the initial weights or, when
   ``resume`` is set and ``checkpoint_dir`` holds one, from the last checkpoint; one
   :class:`TrainingWorker` actor per selected worker trains with its ``b_i``, paced to
   its emulated device.
3. **Train.** Epoch ``k``: every worker runs its asynchronous loop over its shard; the
   epoch ends when all have finished (epoch time = max_i epochTime_i). The driver then
   scores the PS's averaged weights (a moving average over about ``average_epochs``
   epochs of updates, which smooths the jitter of asynchronous updates) on the
   validation set, checkpoints the PS (weights, momentum, average, version) and asks the
   accuracy monitor (:func:`decide_stop`, Optimus fit) whether to stop. The result
   carries the averaged weights of the epoch with the best validation accuracy.
4. **Fail over.** A worker whose process dies (Ray reports the actor dead) or that misses
   its heartbeat (no epoch completion within ``epoch_timeout_factor`` x the slowest
   modelled epoch, at least ``min_epoch_timeout_s``) gets a strike; every other process
   of the update is killed; the cluster is re-planned without workers that now have
   three strikes; training resumes from the last PS checkpoint. A parameter server whose
   process dies (a worker's push fails and the PS actor is found dead) restarts the update
   the same way, from its last checkpoint and without a strike for any worker. Each step is
   a status event (:class:`StatusLog`), so a job's status shows failures, restarts and
   strikes.

The function is synchronous and returns an :class:`UpdateResult`; it raises
:class:`RunFailedError` when restarts are exhausted or no worker is left, and
:class:`InvalidInputError` on inconsistent inputs.
"""

from __future__ import annotations

import enum
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError, RunFailedError
from deepedge.learning.convergence import StoppingRule, StopReason, decide_stop
from deepedge.learning.models import set_flat_weights
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.planning.shard_plan import ShardPlan
from deepedge.planning.shard_spec import ClusterSpec
from deepedge.runtime.datastore import DataStore
from deepedge.runtime.emulation import EMULATION_LABEL, emulated_devices
from deepedge.runtime.gradient_channel import ChannelAddress
from deepedge.runtime.monitor import (
    PARAMETER_SERVER_ID,
    FailureEvent,
    FailureKind,
    StatusLog,
    StrikeBook,
    UpdateEvent,
    UpdateStatus,
)
from deepedge.runtime.parameter_server import CHECKPOINT_FILE, ParameterServer, load_checkpoint
from deepedge.runtime.session import actor_options, ensure_ray
from deepedge.runtime.worker import LossKind, TrainingWorker, WorkerEpochStats

log = logging.getLogger(__name__)

Planner = Callable[[ClusterSpec], ShardPlan]


@dataclass(frozen=True)
class FaultInjection:
    """Crash ``worker_id`` after ``after_steps`` steps, on each of its first ``times`` launches.

    ``worker_id = PARAMETER_SERVER_ID`` crashes the parameter server instead, after
    ``after_steps`` updates of the launch.
    """

    worker_id: str
    after_steps: int
    times: int = 1


class PushTransport(enum.Enum):
    """How a worker's per-step push reaches the PS (:mod:`deepedge.runtime.gradient_channel`)."""

    CHANNEL = "channel"  # a direct socket between the worker and the PS processes
    RAY_CALL = "ray-call"  # a Ray actor call per push


@dataclass(frozen=True)
class UpdateConfig:
    """Knobs of one update (defaults suit the edge CNN on the digits stream)."""

    stopping: StoppingRule = field(default_factory=lambda: StoppingRule(max_epochs=30))
    lr: float = 0.05
    momentum: float = 0.3  # asynchrony itself adds implicit momentum: keep this low
    time_scale: float = 0.02  # emulated seconds per modelled device second; 0 = host speed
    checkpoint_every_updates: int = 50
    epoch_timeout_factor: float = 6.0
    min_epoch_timeout_s: float = 120.0  # generous: a loaded host must not look like a failure
    max_restarts: int = 6
    # Pushes a worker may have unanswered while it computes the next batch (0: wait for
    # each reply); see deepedge.runtime.worker.
    push_window: int = 1
    # How pushes travel: the PS's gradient channel (a direct socket) or Ray actor calls.
    transport: PushTransport = PushTransport.CHANNEL
    # Span of the PS's weight average in epochs (0: score the raw weights); the decay is
    # beta = 1 - 1 / (average_epochs x PS updates per epoch of the plan).
    average_epochs: float = 1.0
    seed: int = 0
    faults: tuple[FaultInjection, ...] = ()


@dataclass(frozen=True)
class EpochRecord:
    epoch: int
    accuracy: float
    wall_s: float  # launch of the epoch to the last worker's return
    workers: tuple[WorkerEpochStats, ...]


@dataclass(frozen=True)
class UpdateResult:
    weights: np.ndarray  # flat weights of the epoch with the best validation accuracy
    best_epoch: int  # 1-based epoch those weights come from
    epochs: tuple[EpochRecord, ...]  # of the last (successful) launch, plus resumed history
    accuracies: tuple[float, ...]  # validation accuracy after each epoch 1..k
    stop_reason: StopReason
    plans: tuple[ShardPlan, ...]  # every plan used, first to last
    failures: tuple[FailureEvent, ...]
    strikes: dict[str, int]
    excluded: tuple[str, ...]
    restarts: int
    events: tuple[UpdateEvent, ...]
    ps_version: int
    emulated: bool

    @property
    def final_accuracy(self) -> float:
        """Validation accuracy of the returned weights (the best epoch)."""
        return self.accuracies[self.best_epoch - 1] if self.accuracies else float("nan")

    @property
    def plan(self) -> ShardPlan:
        return self.plans[-1]


def validation_accuracy(
    model: nn.Module, weights: np.ndarray, inputs: np.ndarray, targets: np.ndarray
) -> float:
    """Accuracy of ``weights`` on the validation set (classification)."""
    set_flat_weights(model, weights)
    model.eval()
    with torch.no_grad():
        out = model(torch.as_tensor(inputs, dtype=torch.float32))
    return float((out.argmax(dim=1).numpy() == targets).mean())


class _Launch:
    """The Ray actors of one launch (PS, data store, workers); killed as one."""

    def __init__(self) -> None:
        self.ps: Any = None
        self.store: Any = None
        self.workers: dict[str, Any] = {}
        self.channel: ChannelAddress | None = None  # the PS's gradient channel, if open

    def kill(self) -> None:
        for handle in [*self.workers.values(), self.ps, self.store]:
            if handle is not None:
                ray.kill(handle, no_restart=True)
        self.workers = {}
        self.ps = self.store = self.channel = None


def _without_excluded(cluster: ClusterSpec, strikes: StrikeBook) -> ClusterSpec:
    workers = [w for w in cluster.workers if not strikes.is_excluded(w.id)]
    if not workers:
        raise RunFailedError(
            "every worker is excluded by the three-strike rule", cause="add or repair workers"
        )
    return cluster.model_copy(update={"workers": workers})


def run_model_update(
    cluster: ClusterSpec,
    train: tuple[np.ndarray, np.ndarray],
    validation: tuple[np.ndarray, np.ndarray],
    model_factory: Callable[[], nn.Module],
    initial_weights: np.ndarray,
    checkpoint_dir: Path,
    *,
    plan: ShardPlan | None = None,
    planner: Planner | None = None,
    config: UpdateConfig | None = None,
    resume: bool = True,
    strikes: StrikeBook | None = None,
    on_event: Callable[[UpdateEvent], None] | None = None,
    catalog: DeviceCatalog | None = None,
) -> UpdateResult:
    """Run one model update end to end (module docstring); Ray is started if needed.

    ``cluster.dataset_size`` must equal ``len(train[0])``. ``plan`` is used for the first
    launch when given; ``planner`` makes every (re-)plan otherwise and is required for
    restarts after a failure. ``strikes`` is updated in place so the caller keeps the
    three-strike history across updates; the checkpoint meta carries it too.
    """
    config = config or UpdateConfig()
    strikes = strikes if strikes is not None else StrikeBook()
    status = StatusLog(on_event)
    x_train, y_train = train
    if len(x_train) != cluster.dataset_size or len(y_train) != len(x_train):
        raise InvalidInputError(
            f"dataset_size {cluster.dataset_size} != {len(x_train)} training samples",
            field="dataset_size",
        )
    if plan is None and planner is None:
        raise InvalidInputError("give a plan or a planner", field="plan")
    ensure_ray()
    checkpoint_dir = Path(checkpoint_dir)
    eval_model = model_factory()
    accuracies: list[float] = []
    epochs: list[EpochRecord] = []
    plans: list[ShardPlan] = []
    failures: list[FailureEvent] = []
    crashes_left = {f.worker_id: f.times for f in config.faults}
    crash_after = {f.worker_id: f.after_steps for f in config.faults}
    restarts = 0
    best = _Best()
    if not resume:  # a fresh update must never restart from an older update's checkpoint
        (checkpoint_dir / CHECKPOINT_FILE).unlink(missing_ok=True)
    start_ckpt = load_checkpoint(checkpoint_dir) if resume else None
    if start_ckpt is not None:
        if start_ckpt.weights.shape != np.asarray(initial_weights).shape:
            raise InvalidInputError("checkpoint does not match the model", field="checkpoint")
        accuracies = [float(a) for a in start_ckpt.meta.get("accuracies", [])]
        for worker_id, n in start_ckpt.meta.get("strikes", {}).items():
            while strikes.count(worker_id) < n:
                strikes.record(worker_id)
        status.note("resuming from checkpoint", epochs_done=len(accuracies))
    emulated = config.time_scale > 0

    while True:
        status.move(UpdateStatus.PLANNING, "planning shards")
        active = _without_excluded(cluster, strikes)
        if (
            plan is not None
            and not plans
            and all(strikes.count(w.id) < strikes.threshold for w in plan.workers if w.selected)
        ):
            current = plan
        elif planner is not None:
            current = planner(active)
        elif plans and failures and failures[-1].kind is FailureKind.PS_DIED:
            current = plans[-1]  # no worker failed: the same plan still holds
        else:
            raise RunFailedError("a restart needs a planner", cause="pass planner=")
        if not current.feasible or not current.selected_ids:
            raise RunFailedError("the plan selects no worker", cause="no feasible worker")
        plans.append(current)
        devices = emulated_devices(active, current, config.time_scale, catalog)
        launch = _Launch()
        try:
            ckpt = load_checkpoint(checkpoint_dir)
            ps_cls = ray.remote(ParameterServer)
            common: dict[str, Any] = {
                "lr": config.lr,
                "momentum": config.momentum,
                "checkpoint_dir": str(checkpoint_dir),
                "checkpoint_every_updates": config.checkpoint_every_updates,
                "average_decay": _average_decay(current, config.average_epochs),
            }
            if crashes_left.get(PARAMETER_SERVER_ID, 0) > 0:
                crashes_left[PARAMETER_SERVER_ID] -= 1
                start_version = ckpt.version if ckpt is not None else 0
                common["fail_after_updates"] = start_version + crash_after[PARAMETER_SERVER_ID]
            if ckpt is not None:
                launch.ps = ps_cls.options(**actor_options()).remote(
                    weights=ckpt.weights,
                    velocity=ckpt.velocity,
                    version=ckpt.version,
                    meta=ckpt.meta,
                    average=ckpt.average,
                    **common,
                )
            else:
                launch.ps = ps_cls.options(**actor_options()).remote(
                    weights=np.asarray(initial_weights, dtype=np.float32), **common
                )
            if config.transport is PushTransport.CHANNEL:
                launch.channel = ray.get(launch.ps.open_channel.remote())
            launch.store = (
                ray.remote(DataStore)
                .options(**actor_options())
                .remote(x_train, y_train, config.seed)
            )
            ray.get(launch.store.assign.remote(current.shards))
            for assignment in current.workers:
                if not assignment.selected:
                    continue
                wid = assignment.id
                fail_after = None
                if crashes_left.get(wid, 0) > 0:
                    fail_after = crash_after[wid]
                    crashes_left[wid] -= 1
                handle = (
                    ray.remote(TrainingWorker)
                    .options(**actor_options(wid))
                    .remote(
                        wid,
                        model_factory,
                        assignment.batch_size,
                        devices[wid],
                        LossKind.CLASSIFICATION,
                        config.seed + len(plans) * 101 + zlib.crc32(wid.encode()) % 997,
                        fail_after,
                        push_window=config.push_window,
                    )
                )
                launch.workers[wid] = handle
            ray.get(
                [
                    h.load_shard.remote(launch.store.shard.remote(w))
                    for w, h in launch.workers.items()
                ]
            )
            status.move(
                UpdateStatus.RUNNING,
                f"training on {len(launch.workers)} "
                f"{EMULATION_LABEL + ' ' if emulated else ''}workers",
                plan={w.id: (w.shard, w.batch_size) for w in current.workers if w.selected},
                devices={d.worker_id: d.label for d in devices.values()},
            )
            timeout_s = max(
                config.min_epoch_timeout_s,
                config.epoch_timeout_factor
                * max(
                    d.paced_step_s * -(-current.shards[w] // max(1, d.batch_size))
                    for w, d in devices.items()
                ),
            )
            stop = _train_epochs(
                launch,
                eval_model,
                validation,
                accuracies,
                epochs,
                config,
                status,
                timeout_s,
                strikes,
                failures,
                len(plans),
                best,
            )
            ps_version = ray.get(launch.ps.pull.remote())[0]
            launch.kill()
            status.move(
                UpdateStatus.COMPLETED,
                f"update done after {len(accuracies)} epochs ({stop.value})",
                accuracy=accuracies[-1] if accuracies else None,
            )
            assert best.weights is not None
            return UpdateResult(
                weights=best.weights,
                best_epoch=max(1, best.epoch),
                epochs=tuple(epochs),
                accuracies=tuple(accuracies),
                stop_reason=stop,
                plans=tuple(plans),
                failures=tuple(failures),
                strikes=strikes.as_dict(),
                excluded=tuple(strikes.excluded),
                restarts=restarts,
                events=tuple(status.events),
                ps_version=int(ps_version),
                emulated=emulated,
            )
        except _WorkerFailure as failure:
            launch.kill()
            restarts += 1
            status.move(
                UpdateStatus.RESTARTING,
                f"killed the update's processes after {failure.event.kind.value} of "
                f"{failure.event.worker_id}; restart {restarts} from the last checkpoint",
                strikes=strikes.as_dict(),
                excluded=strikes.excluded,
            )
            if restarts > config.max_restarts:
                status.move(UpdateStatus.FAILED, "restarts exhausted")
                raise RunFailedError(
                    f"model update failed {restarts} times", cause="check the workers"
                ) from None
            ckpt = load_checkpoint(checkpoint_dir)
            accuracies = [float(a) for a in ckpt.meta.get("accuracies", [])] if ckpt else []
            epochs = [e for e in epochs if e.epoch <= len(accuracies)]
        except BaseException:
            launch.kill()
            raise


@dataclass
class _Best:
    """The best validation accuracy seen so far and its weights (kept across restarts)."""

    accuracy: float = -1.0
    epoch: int = 0
    weights: np.ndarray | None = None

    def offer(self, accuracy: float, epoch: int, weights: np.ndarray) -> None:
        if accuracy > self.accuracy:
            self.accuracy, self.epoch = accuracy, epoch
            self.weights = np.array(weights, dtype=np.float32, copy=True)


def _average_decay(plan: ShardPlan, average_epochs: float) -> float:
    """beta of the PS's weight average: a span of ``average_epochs`` of ``plan``'s updates."""
    if average_epochs <= 0:
        return 0.0
    updates = sum(-(-w.shard // w.batch_size) for w in plan.workers if w.selected and w.shard)
    return max(0.0, 1.0 - 1.0 / max(1.0, average_epochs * updates))


class _WorkerFailure(Exception):
    def __init__(self, event: FailureEvent) -> None:
        super().__init__(event.worker_id)
        self.event = event


def _train_epochs(
    launch: _Launch,
    eval_model: nn.Module,
    validation: tuple[np.ndarray, np.ndarray],
    accuracies: list[float],
    epochs: list[EpochRecord],
    config: UpdateConfig,
    status: StatusLog,
    timeout_s: float,
    strikes: StrikeBook,
    failures: list[FailureEvent],
    launch_no: int,
    best: _Best,
) -> StopReason:
    """Epoch loop of one launch; raises :class:`_WorkerFailure` on the first failure."""
    x_val, y_val = validation
    while True:
        epoch = len(accuracies) + 1
        started = time.perf_counter()
        refs = {
            h.run_epoch.remote(launch.ps, epoch, launch.channel): w
            for w, h in launch.workers.items()
        }
        pending = list(refs)
        stats: list[WorkerEpochStats] = []
        while pending:
            remaining = timeout_s - (time.perf_counter() - started)
            done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, remaining))
            if not done:
                _fail(
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
                if not _ps_alive(launch.ps):
                    _fail_ps(epoch, failures, status, type(exc).__name__)
                if not isinstance(
                    exc, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError)
                ):
                    raise
                _fail(
                    refs[done[0]],
                    FailureKind.PROCESS_DIED,
                    epoch,
                    strikes,
                    failures,
                    status,
                    type(exc).__name__,
                )
        wall_s = time.perf_counter() - started
        try:
            weights = ray.get(launch.ps.pull_average.remote())[1]
        except ray.exceptions.RayActorError as exc:
            _fail_ps(epoch, failures, status, type(exc).__name__)
        acc = validation_accuracy(eval_model, weights, x_val, y_val)
        accuracies.append(acc)
        best.offer(acc, epoch, weights)
        epochs.append(EpochRecord(epoch, acc, wall_s, tuple(stats)))
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
            epochs.pop()
            _fail_ps(epoch, failures, status, type(exc).__name__)
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


def _fail(
    worker_id: str,
    kind: FailureKind,
    epoch: int,
    strikes: StrikeBook,
    failures: list[FailureEvent],
    status: StatusLog,
    detail: str,
) -> None:
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
    raise _WorkerFailure(event)


def _ps_alive(ps: Any, timeout_s: float = 30.0) -> bool:
    """False when the parameter server's actor is dead (a busy PS counts as alive)."""
    try:
        ray.get(ps.pull.remote(), timeout=timeout_s)
    except ray.exceptions.RayActorError:
        return False
    except ray.exceptions.GetTimeoutError:
        return True
    return True


def _fail_ps(epoch: int, failures: list[FailureEvent], status: StatusLog, detail: str) -> None:
    """The PS died: no worker gets a strike; the update restarts from the last checkpoint."""
    event = FailureEvent(PARAMETER_SERVER_ID, FailureKind.PS_DIED, epoch, 0, False, detail)
    failures.append(event)
    status.note(
        f"the parameter server failed in epoch {epoch} ({detail})", worker=PARAMETER_SERVER_ID
    )
    log.warning("parameter server failed in epoch %d (%s)", epoch, detail)
    raise _WorkerFailure(event)
