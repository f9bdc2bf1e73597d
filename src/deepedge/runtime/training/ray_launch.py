"""The Ray executor: a launch's PS, data store and workers as Ray actors.

:class:`RayLaunch` holds the Ray actors of one attempt: the
:class:`~deepedge.runtime.training.parameter_server.ParameterServer` with its gradient channel, the
:class:`~deepedge.runtime.training.datastore.DataStore` on the driver's node cut into the plan's
shards, and one :class:`~deepedge.runtime.training.worker.TrainingWorker` per selected worker on its
node, holding its shard (sent from the store's actor to the worker's through Ray's object
store, never through the driver) and the full initial weights (one object in the store,
read once by each worker: its frozen parameters). A worker's epoch fails as
:class:`~deepedge.runtime.training.update_launch.WorkerDied` when Ray reports its actor dead, and as
:class:`~deepedge.runtime.training.update_launch.ParameterServerLost` when the PS's actor is dead
under it. The attempt's actors are killed together (:meth:`RayLaunch.kill`).

:class:`RayExecutor` starts (or joins) Ray once per update: the executor of live clusters,
whose workers and PS run on their own nodes.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import ray

from deepedge.learning.model_state import State
from deepedge.planning.sharding.plan import ShardPlan
from deepedge.runtime.cluster.session import (
    actor_node_id,
    actor_options,
    driver_node_options,
    ensure_ray,
)
from deepedge.runtime.training.datastore import DataStore
from deepedge.runtime.training.emulation import EmulatedDevice
from deepedge.runtime.training.gradient_channel import ChannelAddress
from deepedge.runtime.training.monitor import PARAMETER_SERVER_ID
from deepedge.runtime.training.parameter_server import ParameterServer, PSStats
from deepedge.runtime.training.update_config import PushTransport, UpdateExecutor
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


class RayExecutor:
    """Launches as Ray actors (module docstring)."""

    kind = UpdateExecutor.RAY

    def start(self) -> None:
        ensure_ray()

    def launch(self) -> RayLaunch:
        return RayLaunch()


class RayLaunch:
    """The Ray actors of one launch (PS, data store, workers); killed as one."""

    def __init__(self) -> None:
        self.ps: Any = None
        self.store: Any = None
        self.workers: dict[str, Any] = {}
        self.channel: ChannelAddress | None = None  # the PS's gradient channel, if open

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
        """The actors for ``plan``: each worker on its node (its id's ``deepedge-node:``
        resource, when the cluster has it), the PS on ``ps_node`` (likewise) and the data
        store on the driver's node; every worker gets its shard."""
        ps_cls = ray.remote(ParameterServer).options(**actor_options(ps_node))
        self.ps = ps_cls.remote(**ps_arguments(inputs, plan, faults))
        if inputs.config.transport is PushTransport.CHANNEL:
            self.channel = ray.get(self.ps.open_channel.remote())
        x_train, y_train = inputs.train
        self.store = (
            ray.remote(DataStore)
            .options(**driver_node_options())
            .remote(x_train, y_train, inputs.config.seed)
        )
        ray.get(self.store.assign.remote(plan.shards))
        full_weights = ray.put(inputs.initial_weights)
        buffers = ray.put(inputs.initial_buffers)
        for assignment in plan.workers:
            if assignment.selected:
                wid = assignment.id
                arguments = worker_arguments(inputs, assignment, devices[wid], faults, launch_no,
                                             initial_weights=full_weights,
                                             initial_buffers=buffers)  # fmt: skip
                worker_cls = ray.remote(TrainingWorker).options(**actor_options(wid))
                self.workers[wid] = worker_cls.remote(**arguments)
        ray.get([h.load_shard.remote(self.store.shard.remote(w)) for w, h in self.workers.items()])

    def start_epoch(self, epoch: int) -> dict[Any, str]:
        return {h.run_epoch.remote(self.ps, epoch, self.channel): w
                for w, h in self.workers.items()}  # fmt: skip

    def wait(self, pending: list[Any], timeout_s: float) -> tuple[list[Any], list[Any]]:
        done, rest = ray.wait(pending, num_returns=1, timeout=timeout_s)
        return list(done), list(rest)

    def result(self, done: Any) -> WorkerEpochStats:
        try:
            stats: WorkerEpochStats = ray.get(done)
        except Exception as exc:
            # A worker's epoch also fails when the PS under it died: blame the PS then.
            if not ps_alive(self.ps):
                raise ParameterServerLost(type(exc).__name__) from exc
            if isinstance(exc, ray.exceptions.RayActorError | ray.exceptions.WorkerCrashedError):
                raise WorkerDied(type(exc).__name__) from exc
            raise
        return stats

    def _ps_call(self, method: str, *args: Any) -> Any:
        try:
            return ray.get(getattr(self.ps, method).remote(*args))
        except ray.exceptions.RayActorError as exc:
            raise ParameterServerLost(type(exc).__name__) from exc

    def pull_average(self) -> np.ndarray:
        weights: np.ndarray = self._ps_call("pull_average")[1]
        return weights

    def pull_buffers(self) -> State:
        buffers: State = self._ps_call("pull_buffers")
        return buffers

    def checkpoint(self, meta: dict[str, Any]) -> None:
        self._ps_call("checkpoint", meta)

    def set_lr_scale(self, scale: float) -> None:
        self._ps_call("set_lr_scale", scale)

    def stats(self) -> PSStats:
        stats: PSStats = self._ps_call("stats")
        return stats

    def placement(self) -> dict[str, str | None]:
        """The Ray node each worker (by id) and the PS (``PARAMETER_SERVER_ID``) runs on."""
        where = {wid: actor_node_id(h) for wid, h in self.workers.items()}
        if self.ps is not None:
            where[PARAMETER_SERVER_ID] = actor_node_id(self.ps)
        return where

    def kill(self) -> None:
        for handle in [*self.workers.values(), self.ps, self.store]:
            if handle is not None:
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:  # an actor of a lost node may be gone already
                    log.debug("could not kill an actor of the launch", exc_info=True)
        self.workers = {}
        self.ps = self.store = self.channel = None


def ps_alive(ps: Any, timeout_s: float = 30.0) -> bool:
    """False when the parameter server's actor is dead (a busy PS counts as alive)."""
    try:
        ray.get(ps.pull.remote(), timeout=timeout_s)
    except ray.exceptions.RayActorError:
        return False
    except ray.exceptions.GetTimeoutError:
        return True
    return True
