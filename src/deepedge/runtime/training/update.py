"""One distributed model update: plan -> ship shards -> async PS training -> stop -> result.

:func:`run_model_update` is the whole of Deep-Edge's online mode for one trigger
(Sec. IV-C2/IV-C3):

1. **Plan.** Use the given :class:`ShardPlan`, or ask ``planner(cluster)`` (Algorithm 1 on
   estimates). Workers with three strikes are removed from the cluster first.
2. **Launch.** A :class:`DataStore` cuts the data into the plan's shards ``d_i``; a
   :class:`ParameterServer` starts from the initial weights' trainable part (frozen
   parameters stay on the workers, set once from the initial weights) or, when ``resume``
   is set and ``checkpoint_dir`` holds one, from the last checkpoint; one
   :class:`TrainingWorker` per selected worker trains with its ``b_i``, paced to its
   emulated device. The executor (``UpdateConfig.executor``) decides the processes: Ray
   actors (:mod:`~deepedge.runtime.training.ray_launch`: a process each, on the workers' nodes of a
   live cluster) or threads of this process (:mod:`~deepedge.runtime.training.thread_launch`: no
   Ray to start, for one machine); everything else below is the same for both.
3. **Train.** Epoch ``k``: every worker runs its asynchronous loop over its shard; the
   epoch ends when all have finished (epoch time = max_i epochTime_i). The driver then
   scores the PS's averaged weights (a moving average over about ``average_epochs``
   epochs of updates, which smooths the jitter of asynchronous updates) on the
   validation set, checkpoints the PS (weights, momentum, average, version) and asks the
   accuracy monitor (:func:`decide_stop`, Optimus fit) whether to stop. The result
   carries the averaged weights of the epoch with the best validation accuracy.
4. **Fail over.** A worker whose process dies (Ray reports the actor dead; with threads,
   its thread crashes) or that misses its heartbeat (no epoch completion within
   ``epoch_timeout_factor`` x the slowest modelled epoch, at least
   ``min_epoch_timeout_s``) gets a strike; every other part of the update is stopped;
   the cluster is re-planned without workers that now have three strikes; training
   resumes from the last PS checkpoint. A parameter server that dies (a worker's push
   fails and the PS is found dead) restarts the update the same way, from its last
   checkpoint and without a strike for any worker. Each step is a status event
   (:class:`StatusLog`), so a job's status shows failures, restarts and strikes. On a
   live cluster a member whose node is lost counts as a dead process; a member whose node
   *drains* (its agent got SIGTERM: DRAINING, then LEFT) is moved the same way but
   without a strike, and the event names the drain.

The stages are named functions, and the state that flows between them is explicit: the
update's fixed inputs (:class:`~deepedge.runtime.training.update_launch.UpdateInputs`), what carries
over from one launch to the next (:class:`Progress`: the epoch ledger, the failure book,
the plans and placements, the restart count) and one launch's decision (:class:`LaunchPlan`).
:func:`_plan_launch` (1), :func:`_start` (2) and
:func:`~deepedge.runtime.training.update_epochs.train_epochs` (3) run each launch, :func:`_finish`
builds the result and :func:`_restart` fails over (4). The knobs are in
:mod:`~deepedge.runtime.training.update_config`, what a launch starts and the executors' one
interface in :mod:`~deepedge.runtime.training.update_launch`, the epoch loop and failure detection
in
:mod:`~deepedge.runtime.training.update_epochs`. The result records the executor and the seconds
each stage took (:class:`UpdatePhases`).

The function is synchronous and returns an :class:`UpdateResult`; it raises
:class:`RunFailedError` when restarts are exhausted or no worker is left, and
:class:`InvalidInputError` on inconsistent inputs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from torch import nn

from deepedge.core.errors import InvalidInputError, RunFailedError
from deepedge.learning.convergence import StopReason
from deepedge.learning.model_state import State, buffer_arrays, load_buffers
from deepedge.learning.models import set_flat_weights, trainable_mask
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.planning.sharding import Planner
from deepedge.planning.sharding.plan import ShardPlan
from deepedge.planning.sharding.spec import ClusterSpec
from deepedge.runtime.training.emulation import EMULATION_LABEL, EmulatedDevice, emulated_devices
from deepedge.runtime.training.monitor import (
    PARAMETER_SERVER_ID,
    FailureEvent,
    FailureKind,
    StatusLog,
    StrikeBook,
    UpdateEvent,
    UpdateStatus,
)
from deepedge.runtime.training.parameter_server import CHECKPOINT_FILE, PSStats, load_checkpoint
from deepedge.runtime.training.update_config import (
    FaultInjection,
    PushTransport,
    UpdateConfig,
    UpdateExecutor,
)
from deepedge.runtime.training.update_epochs import (
    Departures,
    EpochLedger,
    EpochRecord,
    EpochRun,
    FailureBook,
    NodeWatch,
    WorkerFailure,
    train_epochs,
    validation_accuracy,
)
from deepedge.runtime.training.update_executors import executor
from deepedge.runtime.training.update_launch import (
    Data,
    Executor,
    FaultBudget,
    Launch,
    UpdateInputs,
    epoch_timeout_s,
)

if TYPE_CHECKING:  # the live cluster's module imports Ray; an update on threads never does
    from deepedge.runtime.cluster.live_cluster import LiveCluster

__all__ = [
    "EpochRecord",
    "FaultInjection",
    "PushTransport",
    "UpdateConfig",
    "UpdateExecutor",
    "UpdatePhases",
    "UpdateResult",
    "run_model_update",
    "validation_accuracy",
]

log = logging.getLogger(__name__)


@dataclass
class UpdatePhases:
    """Seconds one update spent in each stage, summed over its launches."""

    runtime_s: float = 0.0  # the executor's start: Ray started or joined (threads: nothing)
    plan_s: float = 0.0  # stage 1 of every launch: the cluster now, the plan, the devices
    launch_s: float = 0.0  # stage 2: every launch's PS, data store and workers started
    train_s: float = 0.0  # stage 3: the epochs (scores, checkpoints) up to the launch's end


class _Lap:
    """Seconds since the previous call (the first: since it was made)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()

    def __call__(self) -> float:
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        return elapsed


@dataclass(frozen=True)
class UpdateResult:
    weights: np.ndarray  # full flat weights of the epoch with the best validation accuracy
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
    ps_peak_rss_mb: float = 0.0  # peak resident set of the last launch's PS process
    ps_pss_mb: float = 0.0  # its proportional set at the end (shared pages split)
    # per launch: worker id (and PARAMETER_SERVER_ID) -> the Ray node it ran on
    placements: tuple[dict[str, str | None], ...] = ()
    # the model's buffers scored with ``weights`` (running statistics; empty: none)
    buffers: State = field(default_factory=dict)
    executor: UpdateExecutor = UpdateExecutor.RAY  # where the PS and the workers ran
    phases: UpdatePhases = field(default_factory=UpdatePhases)

    def model(self, model_factory: Callable[[], nn.Module]) -> nn.Module:
        """The updated model, whole: ``weights`` and ``buffers`` in ``model_factory()``."""
        model = model_factory()
        set_flat_weights(model, self.weights)
        load_buffers(model, self.buffers)
        return model

    @property
    def peak_rss_mb(self) -> float:
        """Peak resident memory of the update's last launch: its PS plus every worker (the
        sum of each process's own peak, an upper bound of the peak of the sum)."""
        workers: dict[str, float] = {}
        for record in self.epochs:
            for w in record.workers:
                workers[w.worker_id] = max(workers.get(w.worker_id, 0.0), w.peak_rss_mb)
        return self.ps_peak_rss_mb + sum(workers.values())

    @property
    def pss_mb(self) -> float:
        """Proportional set of the last launch at its end, PS plus workers (each worker's
        last epoch): shared library pages count once in total, not once per process."""
        workers = {w.worker_id: w.pss_mb for record in self.epochs for w in record.workers}
        return self.ps_pss_mb + sum(workers.values())

    @property
    def final_accuracy(self) -> float:
        """Validation accuracy of the returned weights (the best epoch)."""
        return self.accuracies[self.best_epoch - 1] if self.accuracies else float("nan")

    @property
    def plan(self) -> ShardPlan:
        return self.plans[-1]


def _without_excluded(cluster: ClusterSpec, strikes: StrikeBook) -> ClusterSpec:
    workers = [w for w in cluster.workers if not strikes.is_excluded(w.id)]
    if not workers:
        raise RunFailedError(
            "every worker is excluded by the three-strike rule", cause="add or repair workers"
        )
    return cluster.model_copy(update={"workers": workers})


@dataclass
class Progress:
    """What carries over from one launch of an update to the next."""

    ledger: EpochLedger
    book: FailureBook
    plans: list[ShardPlan] = field(default_factory=list)  # every plan used, first to last
    placements: list[dict[str, str | None]] = field(default_factory=list)  # per launch
    restarts: int = 0


@dataclass(frozen=True)
class LaunchPlan:
    """Stage 1's decision for one launch."""

    active: ClusterSpec  # the cluster without excluded workers (and lost nodes)
    plan: ShardPlan
    devices: dict[str, EmulatedDevice]


def _check_inputs(
    cluster: ClusterSpec,
    train: Data,
    config: UpdateConfig,
    plan: ShardPlan | None,
    planner: Planner | None,
    live: LiveCluster | None,
) -> None:
    if live is not None and config.time_scale != 0:
        raise InvalidInputError("a live cluster runs unpaced: time_scale must be 0", "time_scale")
    if live is not None and config.executor is not UpdateExecutor.RAY:
        raise InvalidInputError(
            "a live cluster's workers run on their nodes: the update needs the ray executor",
            "executor",
        )
    x_train, y_train = train
    if len(x_train) != cluster.dataset_size or len(y_train) != len(x_train):
        raise InvalidInputError(
            f"dataset_size {cluster.dataset_size} != {len(x_train)} training samples",
            field="dataset_size",
        )
    if plan is None and planner is None:
        raise InvalidInputError("give a plan or a planner", field="plan")


def _choose_plan(
    active: ClusterSpec,
    plan: ShardPlan | None,
    planner: Planner | None,
    progress: Progress,
) -> ShardPlan:
    """Stage 1: the given plan on the first launch (unless it names an excluded worker),
    else the planner's; after a PS failure with no planner, the same plan again."""
    plans, failures, strikes = progress.plans, progress.book.failures, progress.book.strikes
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
    return current


def _plan_launch(
    cluster: ClusterSpec,
    plan: ShardPlan | None,
    planner: Planner | None,
    live: LiveCluster | None,
    catalog: DeviceCatalog | None,
    config: UpdateConfig,
    progress: Progress,
) -> LaunchPlan:
    """Stage 1, plan: the cluster as it is now, the plan for it and its emulated devices."""
    progress.book.status.move(UpdateStatus.PLANNING, "planning shards")
    active = _without_excluded(live.refresh(cluster) if live else cluster, progress.book.strikes)
    current = _choose_plan(active, plan, planner, progress)
    progress.plans.append(current)
    devices = emulated_devices(active, current, config.time_scale, catalog)
    return LaunchPlan(active, current, devices)


def _launch_nodes(plan: ShardPlan, cluster: ClusterSpec) -> set[str]:
    nodes = {w.id for w in plan.workers if w.selected}
    if cluster.parameter_server.node is not None:
        nodes.add(cluster.parameter_server.node)
    return nodes


def _watch(live: LiveCluster, plan: ShardPlan, cluster: ClusterSpec) -> NodeWatch:
    """Members of the launch whose node is lost or drains (PARAMETER_SERVER_ID for the
    PS's); a draining or departed node is a graceful leave, never a loss."""
    ps_node = cluster.parameter_server.node

    def member(node: str) -> str:
        return PARAMETER_SERVER_ID if node == ps_node else node

    def departures() -> Departures:
        nodes = _launch_nodes(plan, cluster)
        drained = live.draining(nodes)
        lost = live.lost(nodes) - drained
        return Departures({member(n) for n in lost}, {member(n): n for n in drained})

    return departures


def _resume_ledger(inputs: UpdateInputs, resume: bool, book: FailureBook) -> EpochLedger:
    """The accuracy history to resume from (and the strikes it carries) or a fresh start."""
    checkpoint_dir = inputs.checkpoint_dir
    if not resume:  # a fresh update must never restart from an older update's checkpoint
        (checkpoint_dir / CHECKPOINT_FILE).unlink(missing_ok=True)
        return EpochLedger([])
    start_ckpt = load_checkpoint(checkpoint_dir)
    if start_ckpt is None:
        return EpochLedger([])
    if start_ckpt.weights.shape != (int(inputs.trainable.sum()),):
        raise InvalidInputError("checkpoint does not match the model", field="checkpoint")
    accuracies = [float(a) for a in start_ckpt.meta.get("accuracies", [])]
    for worker_id, n in start_ckpt.meta.get("strikes", {}).items():
        while book.strikes.count(worker_id) < n:
            book.strikes.record(worker_id)
    book.status.note("resuming from checkpoint", epochs_done=len(accuracies))
    return EpochLedger(accuracies)


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
    live: LiveCluster | None = None,
    initial_buffers: State | None = None,
) -> UpdateResult:
    """Run one model update end to end (module docstring); with the Ray executor Ray is
    started if needed, with threads nothing is.

    ``initial_buffers`` are the initial model's buffers (BatchNorm's running statistics;
    default: the factory's); the result carries the buffers scored with its weights.

    ``cluster.dataset_size`` must equal ``len(train[0])``. ``plan`` is used for the first
    launch when given; ``planner`` makes every (re-)plan otherwise and is required for
    restarts after a failure. ``strikes`` is updated in place so the caller keeps the
    three-strike history across updates; the checkpoint meta carries it too.

    ``live`` (a real cluster, :mod:`deepedge.runtime.cluster.live_cluster`): every (re-)plan starts
    from the alive nodes' latest reports, workers and the PS run on their nodes, a lost node
    fails the launch (a strike for its worker; the PS restarts elsewhere), a draining node
    fails it without a strike (the re-plan leaves it out), and nothing is paced
    (``config.time_scale`` must be 0, ``config.executor`` Ray).
    """
    config = config or UpdateConfig()
    _check_inputs(cluster, train, config, plan, planner, live)
    book = FailureBook(strikes if strikes is not None else StrikeBook(), StatusLog(on_event))
    phases, lap = UpdatePhases(), _Lap()
    runner = executor(config.executor)
    runner.start()
    phases.runtime_s += lap()
    inputs, eval_model = _prepare(
        train, validation, model_factory, initial_weights, Path(checkpoint_dir), config,
        initial_buffers,
    )  # fmt: skip
    progress = Progress(_resume_ledger(inputs, resume, book), book)
    faults = FaultBudget.of(config.faults)
    phases.launch_s += lap()  # the inputs every launch starts from, prepared once
    while True:
        chosen = _plan_launch(cluster, plan, planner, live, catalog, config, progress)
        phases.plan_s += lap()
        launch = runner.launch()
        try:
            run = _start(launch, inputs, eval_model, chosen, faults, progress, live, runner)
            phases.launch_s += lap()
            stop = train_epochs(run, progress.ledger, book)
            ps_stats = launch.stats()
            launch.kill()
            phases.train_s += lap()
            return _finish(inputs, progress, stop, ps_stats, runner.kind, phases)
        except WorkerFailure as failure:
            failed_at = time.monotonic()
            launch.kill()
            phases.train_s += lap()
            _restart(failure, inputs, chosen, progress, live, failed_at)
        except BaseException:
            launch.kill()
            raise


def _prepare(
    train: Data,
    validation: Data,
    model_factory: Callable[[], nn.Module],
    initial_weights: np.ndarray,
    checkpoint_dir: Path,
    config: UpdateConfig,
    initial_buffers: State | None = None,
) -> tuple[UpdateInputs, nn.Module]:
    """The update's fixed inputs, and the model that scores the PS's weights (it holds the
    initial weights' frozen parameters and the initial buffers)."""
    eval_model = model_factory()
    weights = np.asarray(initial_weights, dtype=np.float32)
    set_flat_weights(eval_model, weights)  # raises on a vector of the wrong size
    if initial_buffers:
        load_buffers(eval_model, initial_buffers)
    trainable = trainable_mask(eval_model)
    inputs = UpdateInputs(train, validation, model_factory, weights, trainable, checkpoint_dir,
                          config, buffer_arrays(eval_model))  # fmt: skip
    return inputs, eval_model


def _start(
    launch: Launch,
    inputs: UpdateInputs,
    eval_model: nn.Module,
    chosen: LaunchPlan,
    faults: FaultBudget,
    progress: Progress,
    live: LiveCluster | None,
    runner: Executor,
) -> EpochRun:
    """Stage 2, launch: start the PS, data and workers of ``chosen`` on the executor's
    processes and say so; what the epochs run with."""
    current, devices, config = chosen.plan, chosen.devices, inputs.config
    launch_no = len(progress.plans)
    launch.start(inputs, current, devices, faults, launch_no, chosen.active.parameter_server.node)
    progress.placements.append(launch.placement())
    emulated = config.time_scale > 0
    workers = len(launch.worker_ids)
    progress.book.status.move(
        UpdateStatus.RUNNING,
        f"training on {workers} {EMULATION_LABEL + ' ' if emulated else ''}workers "
        f"({runner.kind.value})",
        executor=runner.kind.value,
        plan={w.id: (w.shard, w.batch_size) for w in current.workers if w.selected},
        devices={d.worker_id: d.label for d in devices.values()},
        placement=progress.placements[-1],
    )
    watch = None if live is None else _watch(live, current, chosen.active)
    timeout_s = epoch_timeout_s(current, devices, config)
    return EpochRun(launch, eval_model, inputs.validation, config, timeout_s, launch_no, watch,
                    calibration=inputs.train[0])  # fmt: skip


def _finish(
    inputs: UpdateInputs,
    progress: Progress,
    stop: StopReason,
    ps_stats: PSStats,
    kind: UpdateExecutor,
    phases: UpdatePhases,
) -> UpdateResult:
    """Stage 3 done: the result, with the best epoch's trainable weights in the full vector."""
    ledger, book = progress.ledger, progress.book
    book.status.move(
        UpdateStatus.COMPLETED,
        f"update done after {len(ledger.accuracies)} epochs ({stop.value})",
        accuracy=ledger.accuracies[-1] if ledger.accuracies else None,
    )
    assert ledger.best.weights is not None
    best = inputs.initial_weights.copy()
    best[inputs.trainable] = ledger.best.weights
    return UpdateResult(
        weights=best,
        best_epoch=max(1, ledger.best.epoch),
        epochs=tuple(ledger.epochs),
        accuracies=tuple(ledger.accuracies),
        stop_reason=stop,
        plans=tuple(progress.plans),
        failures=tuple(book.failures),
        strikes=book.strikes.as_dict(),
        excluded=tuple(book.strikes.excluded),
        restarts=progress.restarts,
        events=tuple(book.status.events),
        ps_version=int(ps_stats.version),
        emulated=inputs.config.time_scale > 0,
        ps_peak_rss_mb=ps_stats.peak_rss_mb,
        ps_pss_mb=ps_stats.pss_mb,
        placements=tuple(progress.placements),
        buffers=ledger.best.buffers or dict(inputs.initial_buffers),
        executor=kind,
        phases=phases,
    )


def _restart(
    failure: WorkerFailure,
    inputs: UpdateInputs,
    chosen: LaunchPlan,
    progress: Progress,
    live: LiveCluster | None,
    failed_at: float,
) -> None:
    """Stage 4, fail over: count the restart (raise when they are exhausted) and rewind the
    ledger to the last checkpoint."""
    progress.restarts += 1
    book = progress.book
    if live is not None:  # let the registry decide which nodes are gone
        live.settle(_launch_nodes(chosen.plan, chosen.active), failed_at)
    book.status.move(
        UpdateStatus.RESTARTING,
        f"killed the update's processes after {failure.event.kind.value} of "
        f"{failure.event.worker_id}; restart {progress.restarts} from the last checkpoint",
        strikes=book.strikes.as_dict(),
        excluded=book.strikes.excluded,
    )
    if progress.restarts > inputs.config.max_restarts:
        book.status.move(UpdateStatus.FAILED, "restarts exhausted")
        raise RunFailedError(
            f"model update failed {progress.restarts} times", cause="check the workers"
        ) from None
    ckpt = load_checkpoint(inputs.checkpoint_dir)
    progress.ledger.rewind([float(a) for a in ckpt.meta.get("accuracies", [])] if ckpt else [])
