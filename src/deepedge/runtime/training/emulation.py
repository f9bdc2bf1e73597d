"""Emulated edge devices: real torch steps, paced to a device's modelled step time.

On one machine the paper's testbed (TX2, Nanos, Pi-class PS) is **emulated**: every worker
runs real forward/backward passes of the edge model and real pushes and pulls through the
parameter server, then sleeps until the step has lasted as long as the device catalog says
it would on that device in that state::

    modelled_step_s = b_i * t_compute(X_i, b_i) + t_update(X_i, B, X_ps, |W|)   (Sec. III)
    paced_step_s    = time_scale * modelled_step_s

``time_scale`` shrinks the catalog's seconds (calibrated on Inception-v3 steps of 1.9-2.7 s)
so a demo fits in minutes; it multiplies every device alike, so ratios between devices and
plans are preserved. When the real step already took longer than ``paced_step_s`` (the host
is slower than the emulated device), no sleep happens and the overrun is counted, so a
report can say the emulation was host-bound.

The timing ground truth is the noise-free catalog, never the (noisy) estimates the planner
decided from.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from deepedge.cluster.state import NodeState
from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.planning.sharding.plan import ShardPlan
from deepedge.planning.sharding.spec import ClusterSpec

log = logging.getLogger(__name__)

EMULATION_LABEL = "emulated"  # how logs and reports name a paced device


@dataclass(frozen=True)
class EmulatedDevice:
    """One worker's emulation: its device class, state and modelled step time.

    ``time_scale = 0`` disables pacing (the worker runs at host speed: the "real" mode).
    """

    worker_id: str
    device: str
    state: NodeState
    batch_size: int
    modelled_step_s: float  # b t_compute + t_update from the catalog (ground truth)
    time_scale: float

    @property
    def paced_step_s(self) -> float:
        return self.time_scale * self.modelled_step_s

    @property
    def label(self) -> str:
        if self.time_scale <= 0:
            return f"{self.worker_id} (host speed)"
        return f"{self.worker_id} ({EMULATION_LABEL} {self.device}, x{self.time_scale:g})"


@dataclass
class Pacer:
    """Sleeps out the rest of each step; counts steps where the host overran the model."""

    device: EmulatedDevice
    overruns: int = 0
    steps: int = 0
    slept_s: float = 0.0

    def pace(self, step_started_s: float) -> None:
        """Call at the end of a step begun at ``time.perf_counter() == step_started_s``."""
        self.steps += 1
        if self.device.time_scale <= 0:
            return
        elapsed = time.perf_counter() - step_started_s
        remaining = self.device.paced_step_s - elapsed
        if remaining > 0:
            time.sleep(remaining)
            self.slept_s += remaining
        else:
            self.overruns += 1


def emulated_devices(
    spec: ClusterSpec,
    plan: ShardPlan,
    time_scale: float,
    catalog: DeviceCatalog | None = None,
) -> dict[str, EmulatedDevice]:
    """An :class:`EmulatedDevice` per selected worker of ``plan``, timed by ``catalog``."""
    if time_scale < 0:
        raise InvalidInputError("time_scale must be >= 0", field="time_scale")
    catalog = catalog or DeviceCatalog(spec.parameter_server.device)
    by_id = {w.id: w for w in spec.workers}
    selected = [w for w in plan.workers if w.selected]
    batches = [w.batch_size for w in selected]
    ps_state = spec.parameter_server.state.to_node_state()
    out: dict[str, EmulatedDevice] = {}
    for assignment in selected:
        worker = by_id.get(assignment.id)
        if worker is None:
            raise InvalidInputError(f"plan names unknown worker {assignment.id}", field="plan")
        state = worker.state.to_node_state()
        b = assignment.batch_size
        compute = b * catalog.est_compute_time_s(worker.device.value, state, b)
        update = catalog.est_update_time_s(
            worker.device.value, state, batches, ps_state, len(selected)
        )
        out[assignment.id] = EmulatedDevice(
            worker_id=assignment.id,
            device=worker.device.value,
            state=state,
            batch_size=b,
            modelled_step_s=compute + update,
            time_scale=time_scale,
        )
        log.info("%s: modelled step %.3f s", out[assignment.id].label, compute + update)
    return out
