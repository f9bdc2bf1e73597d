"""The threads executor: a launch's PS, data store and workers in the update's own process.

On one machine (the emulated testbed, a ``cluster`` document, every target but a live
one) the Ray executor's actors are processes of this host anyway; what Ray adds there is
its start (a GCS, a raylet and its agents, one worker process per actor, each importing
torch): tens of seconds on a quiet 2-core edge host, minutes on a loaded one
(docs/DESIGN.md, "An update pays no Ray start on one machine"). :class:`ThreadLaunch` runs
the same launch without it:

* the :class:`~deepedge.runtime.training.parameter_server.ParameterServer` is an object of this
  process, built from the same arguments
  (:func:`~deepedge.runtime.training.update_launch.ps_arguments`:
  checkpoint, compensated SGD, weight average, injected crash);
* the :class:`~deepedge.runtime.training.datastore.DataStore` cuts the same seeded shards;
* each selected worker is the same :class:`~deepedge.runtime.training.worker.TrainingWorker` (same
  seed, batch size, emulated device and pacing), whose epoch runs in a thread of a pool
  of one thread per worker, pushing through a
  :class:`~deepedge.runtime.training.ps_link.DirectLink`: a call of the PS under its lock, the new
  weights written into the gradient's buffer. A call costs microseconds, so nothing is left
  to hide behind the next batch: the workers push with window 0 (each step starts on the
  reply to its own last push). torch's own threads are set to one per worker, as each
  actor's are, and the caller's count is restored when the launch ends.

The failure rules hold as they are (:mod:`deepedge.runtime.training.update_epochs`): a worker whose
thread crashes (:class:`~deepedge.runtime.training.monitor.InjectedCrash`) gets a strike
(:class:`~deepedge.runtime.training.update_launch.WorkerDied`), one that misses its heartbeat gets
one from the epoch loop's wait, a crashed PS ends the launch without a strike
(:class:`~deepedge.runtime.training.update_launch.ParameterServerLost`). A thread cannot be killed:
:meth:`ThreadLaunch.kill` closes every worker's link (its next call raises
:class:`~deepedge.runtime.training.ps_link.LinkClosed`, which ends its epoch within one step) and
retires the PS (it writes no checkpoint any more: the next launch owns the folder).
"""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from typing import Any

import numpy as np
import torch

from deepedge.learning.model_state import State
from deepedge.planning.sharding.plan import ShardPlan
from deepedge.runtime.training.datastore import DataStore
from deepedge.runtime.training.emulation import EmulatedDevice
from deepedge.runtime.training.monitor import PARAMETER_SERVER_ID, InjectedCrash
from deepedge.runtime.training.parameter_server import ParameterServer, PSStats
from deepedge.runtime.training.ps_link import DirectLink
from deepedge.runtime.training.update_config import UpdateExecutor
from deepedge.runtime.training.update_launch import (
    FaultBudget,
    ParameterServerLost,
    UpdateInputs,
    WorkerDied,
    ps_arguments,
    worker_arguments,
)
from deepedge.runtime.training.worker import TrainingWorker, WorkerEpochStats

log = logging.getLogger(__name__)

KILL_GRACE_S = 5.0  # how long kill waits for the workers' threads to end their epochs


class ThreadExecutor:
    """Launches as threads of this process (module docstring); nothing to start."""

    kind = UpdateExecutor.THREADS

    def start(self) -> None:
        return None

    def launch(self) -> ThreadLaunch:
        return ThreadLaunch()


class ThreadLaunch:
    """The PS, data store and worker threads of one launch (module docstring)."""

    def __init__(self) -> None:
        self.ps: ParameterServer | None = None
        self.workers: dict[str, TrainingWorker] = {}
        self.stopped = threading.Event()
        self._pool: futures.ThreadPoolExecutor | None = None
        self._epoch: list[futures.Future[WorkerEpochStats]] = []  # the last epoch's
        self._torch_threads = torch.get_num_threads()

    @property
    def worker_ids(self) -> list[str]:
        return list(self.workers)

    def start(
        self,
        inputs: UpdateInputs,
        plan: ShardPlan,
        devices: dict[str, EmulatedDevice],
        faults: FaultBudget,
        launch_no: int,
        ps_node: str | None = None,
    ) -> None:
        """The PS, the shards and the workers of ``plan`` in this process (``ps_node``
        names no other process here: every part runs in this one)."""
        self.ps = ParameterServer(**ps_arguments(inputs, plan, faults), own_process=False)
        x_train, y_train = inputs.train
        store = DataStore(x_train, y_train, inputs.config.seed)
        store.assign(plan.shards)
        for assignment in plan.workers:
            if assignment.selected:
                wid = assignment.id
                arguments = worker_arguments(inputs, assignment, devices[wid], faults, launch_no,
                                             push_window=0, own_process=False)  # fmt: skip
                worker = TrainingWorker(**arguments)
                worker.load_shard(store.shard(wid))
                self.workers[wid] = worker
        self._pool = futures.ThreadPoolExecutor(
            max_workers=max(1, len(self.workers)), thread_name_prefix="update-worker"
        )

    def _live_ps(self) -> ParameterServer:
        if self.ps is None or self.ps.crashed:
            raise ParameterServerLost("the parameter server crashed")
        return self.ps

    def start_epoch(self, epoch: int) -> dict[Any, str]:
        ps, pool = self._live_ps(), self._pool
        assert pool is not None, "start the launch first"
        pending = {
            pool.submit(worker.train_epoch, DirectLink(ps, wid, self.stopped), epoch): wid
            for wid, worker in self.workers.items()
        }
        self._epoch = list(pending)
        return pending

    def wait(self, pending: list[Any], timeout_s: float) -> tuple[list[Any], list[Any]]:
        done, _ = futures.wait(pending, timeout=timeout_s, return_when=futures.FIRST_COMPLETED)
        first = next((f for f in pending if f in done), None)
        if first is None:
            return [], list(pending)
        return [first], [f for f in pending if f is not first]

    def result(self, done: Any) -> WorkerEpochStats:
        try:
            stats: WorkerEpochStats = done.result()
        except Exception as exc:
            # A worker's epoch also fails when the PS under it crashed: blame the PS then.
            if self.ps is None or self.ps.crashed:
                raise ParameterServerLost("the parameter server crashed") from exc
            if isinstance(exc, InjectedCrash):
                raise WorkerDied(f"its thread crashed: {exc}") from exc
            raise
        return stats

    def pull_average(self) -> np.ndarray:
        return self._live_ps().pull_average()[1]

    def pull_buffers(self) -> State:
        return self._live_ps().pull_buffers()

    def checkpoint(self, meta: dict[str, Any]) -> None:
        self._live_ps().checkpoint(meta)

    def set_lr_scale(self, scale: float) -> None:
        self._live_ps().set_lr_scale(scale)

    def stats(self) -> PSStats:
        return self._live_ps().stats()

    def placement(self) -> dict[str, str | None]:
        """No node of a cluster: every part ran in this process."""
        return {**dict.fromkeys(self.workers), PARAMETER_SERVER_ID: None}

    def kill(self) -> None:
        self.stopped.set()
        if self.ps is not None:
            self.ps.retire()
        running = [f for f in self._epoch if not f.done()]
        if running:
            # a thread ends its epoch at its next call of the PS; a hung one is left behind
            _, hung = futures.wait(running, timeout=KILL_GRACE_S)
            if hung:
                log.warning("%d worker thread(s) of a stopped launch still run", len(hung))
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        torch.set_num_threads(self._torch_threads)
