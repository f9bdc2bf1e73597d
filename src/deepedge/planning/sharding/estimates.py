"""A memoised view of a :class:`PerformanceModel` over one cluster's workers.

Algorithm 1 asks the same questions many times (t_compute at an unchanged batch, the
pressure of an unchanged state); the cache answers each (worker, batch) question once.
Only ``t_update`` depends on the whole batch vector ``B`` and on ``|W|``; it is asked once
per iteration for all active workers, through the model's optional vectorised form
(:class:`VectorUpdateModel`) when it has one, else one scalar call per worker.

Workers are addressed by their index in ``cluster.workers``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

from deepedge.cluster.state import NodeState
from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding.spec import ClusterSpec


@runtime_checkable
class VectorUpdateModel(Protocol):
    """Optional extension: EstUpdateTime for every active worker in one call."""

    def est_update_times_s(
        self,
        devices: Sequence[str],
        states: Sequence[NodeState],
        batch_sizes: Sequence[int],
        ps_state: NodeState,
        n_workers: int,
    ) -> list[float]: ...


@dataclass(frozen=True, slots=True)
class AppPressure:
    """pressure_i^a = EstExecTime(EstState(X_i, b_i)) against delta_a."""

    app: str
    pressure_s: float
    deadline_s: float

    def violates(self, margin: float = 0.0) -> bool:
        return self.pressure_s * (1.0 + margin) > self.deadline_s


class EstimateCache:
    """Memoised estimators for the workers of ``cluster`` under ``model``."""

    def __init__(self, cluster: ClusterSpec, model: PerformanceModel) -> None:
        self.cluster = cluster
        self.model = model
        self.devices = [w.device.value for w in cluster.workers]
        self.states = [w.state.to_node_state() for w in cluster.workers]
        self.ps_state = cluster.parameter_server.state.to_node_state()
        self._vector = isinstance(model, VectorUpdateModel)
        self._max_batch: dict[int, int] = {}
        self._compute: dict[tuple[int, int], float] = {}
        self._pressures: dict[tuple[int, int], tuple[AppPressure, ...]] = {}
        self._cautious: dict[tuple[int, int, float], tuple[AppPressure, ...]] = {}

    def max_batch(self, i: int) -> int:
        """GetMaxBatchSize(X_i^mem) within the worker's bounds; 0 if b_min does not fit."""
        cached = self._max_batch.get(i)
        if cached is None:
            w = self.cluster.workers[i]
            cached = self.model.max_batch_size(
                self.devices[i], self.states[i], w.mem_capacity_mb, w.min_batch, w.max_batch
            )
            self._max_batch[i] = cached
        return cached

    def compute_s(self, i: int, batch: int) -> float:
        """t_compute_i = EstComputeTime(X_i, b_i), seconds per sample."""
        key = (i, batch)
        cached = self._compute.get(key)
        if cached is None:
            cached = self.model.est_compute_time_s(self.devices[i], self.states[i], batch)
            self._compute[key] = cached
        return cached

    def update_s(self, active: Sequence[int], batches: Sequence[int]) -> list[float]:
        """t_update_i = EstUpdateTime(X_i, B, X_ps, |W|) for every active worker."""
        n = len(active)
        devices = [self.devices[i] for i in active]
        states = [self.states[i] for i in active]
        if self._vector:
            vector_model = cast(VectorUpdateModel, self.model)
            return vector_model.est_update_times_s(devices, states, batches, self.ps_state, n)
        return [
            self.model.est_update_time_s(d, s, batches, self.ps_state, n)
            for d, s in zip(devices, states, strict=True)
        ]

    def pressures(self, i: int, batch: int) -> tuple[AppPressure, ...]:
        """Estimated pressure of each background app of worker ``i`` training at ``batch``."""
        key = (i, batch)
        cached = self._pressures.get(key)
        if cached is None:
            apps = self.cluster.workers[i].background_apps
            if apps:
                new_state = self.model.est_state(self.devices[i], self.states[i], batch)
                cached = tuple(
                    AppPressure(
                        app=a.name,
                        pressure_s=self.model.est_exec_time_s(
                            self.devices[i], a.kind.value, new_state
                        ),
                        deadline_s=a.deadline_s,
                    )
                    for a in apps
                )
            else:
                cached = ()
            self._pressures[key] = cached
        return cached

    def blocker(self, i: int, batch: int, margin: float = 0.0) -> AppPressure | None:
        """The first background app of worker ``i`` that would miss its deadline, if any."""
        for p in self.pressures(i, batch):
            if p.violates(margin):
                return p
        return None

    def cautious_pressures(self, i: int, batch: int, margin: float) -> tuple[AppPressure, ...]:
        """Pressures at the state whose estimated memory change is ``1 + margin`` larger.

        ``X'.mem = X.mem + (1 + margin) (EstState(X, b).mem - X.mem)`` (clipped to 1), the
        other components as estimated. The batch moves the memory footprint, and near a
        full node an app's time is steep in memory (swapping): there a 1 % error in
        EstState^mem moves the pressure by far more than ``margin`` of it. A policy that
        takes the largest batch that passes sits exactly on that slope.
        """
        key = (i, batch, margin)
        cached = self._cautious.get(key)
        if cached is None:
            apps = self.cluster.workers[i].background_apps
            cached = ()
            if apps:
                before = self.states[i]
                after = self.model.est_state(self.devices[i], before, batch)

                def grow(x: float, y: float) -> float:
                    return min(1.0, max(0.0, x + (1.0 + margin) * (y - x)))

                state = NodeState(
                    cpu_util=after.cpu_util,
                    mem_util=grow(before.mem_util, after.mem_util),
                    gpu_util=after.gpu_util,
                )
                cached = tuple(
                    AppPressure(
                        app=a.name,
                        pressure_s=self.model.est_exec_time_s(self.devices[i], a.kind.value, state),
                        deadline_s=a.deadline_s,
                    )
                    for a in apps
                )
            self._cautious[key] = cached
        return cached

    def cautious_blocker(self, i: int, batch: int, margin: float) -> AppPressure | None:
        """:meth:`blocker`, and the margin on the estimated memory change too (same at 0)."""
        plain = self.blocker(i, batch, margin)
        if plain is not None or margin == 0.0:
            return plain
        for p in self.cautious_pressures(i, batch, margin):
            if p.violates(margin):
                return p
        return None
