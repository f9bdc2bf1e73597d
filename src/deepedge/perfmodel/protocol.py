"""The five estimators of Deep-Edge (Section IV-C1, equations 5-8), as one Protocol.

Both implementations satisfy it: the analytic device catalog (emulation, calibrated to the
paper's published behaviour) and the learned models fitted on real profiling data. Planners
depend on this Protocol only, never on an implementation.

* ``est_compute_time_s(device, X_i, b_i)`` -> t_compute_i, seconds per sample (eq. 5)
* ``est_update_time_s(device, X_i, B, X_ps, |W|)`` -> t_update_i, seconds per iteration
  (push + update + pull, eq. 6)
* ``est_state(device, X_initial, b_i)`` -> X_new while the update task runs (eq. 7)
* ``est_exec_time_s(device, app, X_new)`` -> execution time of background app ``app``
  (the pressure it experiences, eq. 8)
* ``max_batch_size(device, X_initial, mem_capacity_mb, lo, hi)`` -> GetMaxBatchSize: the
  largest b in [lo, hi] whose EstState^mem stays within capacity, or 0 when even ``lo``
  does not fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from deepedge.cluster.state import NodeState


@runtime_checkable
class PerformanceModel(Protocol):
    def est_compute_time_s(self, device: str, state: NodeState, batch_size: int) -> float: ...

    def est_update_time_s(
        self,
        device: str,
        state: NodeState,
        batch_sizes: Sequence[int],
        ps_state: NodeState,
        n_workers: int,
    ) -> float: ...

    def est_state(self, device: str, initial: NodeState, batch_size: int) -> NodeState: ...

    def est_exec_time_s(self, device: str, app: str, state: NodeState) -> float: ...

    def max_batch_size(
        self,
        device: str,
        initial: NodeState,
        mem_capacity_mb: float,
        min_batch: int,
        max_batch: int,
    ) -> int: ...
