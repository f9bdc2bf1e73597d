"""The analytic device catalog: an emulation of Deep-Edge's five estimators.

It implements :class:`deepedge.perfmodel.protocol.PerformanceModel` in closed form for the
device classes of the paper's testbed (Jetson TX2, Jetson Nano, a Raspberry Pi 4 class
board). The benchmarks use it as the **ground truth** of an emulated cluster; planners see
it only through a noisy wrapper (:mod:`deepedge.perfmodel.noisy`) or a learned model.

Model (per device ``k``, node state ``X = (c, g, m)``, batch size ``b``)::

    t_compute(X, b)   = (forward_k + backward_k / b) * s_gpu(g) * s_cpu(c)       [s/sample]
    s_gpu(g)          = 1 + gpu_slowdown_k * (g / 0.77)**4
    s_cpu(c)          = 1 + cpu_slowdown_k * c**2
    t_update(X, B, X_ps, n)
                      = (comm_k * (1 + 0.3 c) + ps_update * s_ps(X_ps)) * contention
    contention        = 1 + kappa * (n - 1) * mean_j(b_ref / b_j)
    s_ps(X_ps)        = 1 + ps_cpu_slowdown * c_ps**2
    EstState(X, b)    = (c + load_cpu_k (1 - c),  g + load_gpu_k (1 - g),
                         m + (model_mem_k + b * sample_mem_k) / mem_total_k)
    EstExecTime(a, X) = base_{a,k} * (1 + gpu_sens_a g**2) / (1 - cpu_sens_a c)
                        * (1 + mem_sens_a * max(0, m - 0.95) / 0.05)

Calibration (Section II-A and V-B of the paper):

* **Step time.** At the reference point (idle worker, idle parameter server, 4 workers all
  at batch ``b_ref = 16``) one step ``b * t_compute + t_update`` takes 1.89 s on a TX2 and
  2.69 s on a Nano, the means of the paper's Figure 3 (TX2 ~30 % faster). ``forward_k`` is
  *derived* from that figure (:attr:`DeviceProfile.forward_s`), so the published number
  holds exactly. The Pi 4 class board has no CUDA GPU; its step time (9.5 s) is assumed,
  not published.
* **GPU interference.** ``s_gpu(0.77) = 1.20``: an initial GPU utilisation of 66-88 %
  (midpoint 77 %) raises the step time by ~20 %, as in the paper's Figure 4 (the quartic
  gives +11 % at 66 % and +34 % at 88 %, mean +22 %). The quartic makes contention grow
  sharply as a co-runner saturates the GPU (time slicing leaves the training ~half the GPU
  at 100 %: s_gpu(1) = 1.57).
* **CPU interference, batch, memory, update time.** The paper reports the trends of its
  Figure 9 (compute grows with CPU and GPU utilisation and falls with batch size; memory
  grows with batch size; update time falls with batch size and grows with the number of
  workers and with the parameter server's CPU utilisation), not their magnitudes. The
  coefficients below follow those trends with magnitudes that are assumptions, chosen to
  be plausible for Inception-v3 transfer learning on these boards. The largest one is
  ``cpu_slowdown = 3`` on Jetsons: a CPU saturated by a stressor starves the GPU of
  decoded, augmented batches (4 ARM cores), so the step time can triple at 100 % CPU.
* **The workload.** The figures above are for the paper's workload, Inception-v3 transfer
  learning (:data:`REFERENCE_MODEL`: about 5.7 GFLOPs per training sample, a forward pass
  with the backward pass through the retrained head only; 2.05M trainable parameters, the
  2048 x 1000 head). A catalog built for another model (:class:`ModelCost`) scales the
  compute terms (``forward_k``, ``backward_k``) by the ratio of training GFLOPs per sample
  and the update terms (``comm_k``, ``ps_update``) by the ratio of trainable parameters
  (the bytes pushed, pulled and applied), both linear::

      t_compute'(X, b) = t_compute(X, b) * gflops / gflops_ref
      t_update'(...)   = t_update(...)   * params / params_ref

  Memory, state and background-app terms do not change. ``DeviceCatalog()`` without a
  model is the reference, as before.
* **Background apps.** SIFT on a 640x320 frame runs in 70-95 ms on idle boards, well inside
  its 200 ms period. It queues behind other CPU work (``1 / (1 - 0.55 c)``, M/M/1-like),
  slows mildly with GPU load on Jetsons (CPU and GPU share one LPDDR4 memory), and sharply
  once memory nears full (swapping). In the benchmark's random stressed states, running
  the training pushes ~15 % of the (initially feasible) workers past the 200 ms deadline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from deepedge.cluster.devices import AppKind, DeviceType
from deepedge.cluster.state import NodeState
from deepedge.core.errors import InvalidInputError

REFERENCE_BATCH = 16  # b_ref: batch size of the published step-time figures (assumed)
REFERENCE_WORKERS = 4  # the paper's testbed: 1 TX2 + 3 Nano
CONTENTION_PER_WORKER = 0.10  # kappa: extra parameter-server queueing per additional worker
WORKER_CPU_COMM_FACTOR = 0.3  # push/pull slow down with the worker's CPU load (network stack)
MEM_SWAP_THRESHOLD = 0.95  # memory utilisation above which background apps start to swap


@dataclass(frozen=True, slots=True)
class DeviceProfile:
    """Calibrated constants of one device class (see the module docstring)."""

    device: DeviceType
    mem_total_mb: float  # physical memory (shared CPU/GPU on Jetsons)
    step_time_ref_s: float  # mean step time at the reference point (published for TX2/Nano)
    backward_s: float  # per-batch backward cost at idle (the paper's backward_i)
    comm_s: float  # push + pull of one update, no contention, idle CPU
    gpu_slowdown: float  # s_gpu(g) = 1 + gpu_slowdown * (g / 0.77)**4
    cpu_slowdown: float  # s_cpu(c) = 1 + cpu_slowdown * c**2
    load_cpu: float  # share of the idle CPU the training task takes
    load_gpu: float  # share of the idle GPU the training task takes
    model_mem_mb: float  # weights + optimiser state + framework of the training process
    sample_mem_mb: float  # activation memory per sample of a batch
    ps_update_s: float  # time to apply one update when this device is the parameter server
    ps_cpu_slowdown: float  # s_ps(c_ps) = 1 + ps_cpu_slowdown * c_ps**2

    @property
    def reference_update_s(self) -> float:
        """t_update at the reference point when a device of this class is the PS too."""
        contention = 1.0 + CONTENTION_PER_WORKER * (REFERENCE_WORKERS - 1)
        return (self.comm_s + PI4_PS_UPDATE_S) * contention

    @property
    def forward_s(self) -> float:
        """forward_k, derived so that the reference step takes ``step_time_ref_s``."""
        compute_per_step = self.step_time_ref_s - self.reference_update_s
        return (compute_per_step - self.backward_s) / REFERENCE_BATCH


@dataclass(frozen=True, slots=True)
class ModelCost:
    """What one training sample and one update of a model cost (module docstring)."""

    train_gflops_per_sample: float  # forward + backward of one sample, trainable part only
    trainable_params: int  # values pushed, pulled and applied per update

    def __post_init__(self) -> None:
        if self.train_gflops_per_sample <= 0 or self.trainable_params < 1:
            raise InvalidInputError(
                "a model costs > 0 GFLOPs per sample and has >= 1 trainable parameter",
                field="model",
            )

    @classmethod
    def of(cls, forward_gflops: float, params: int, trainable_params: int) -> ModelCost:
        """Training cost from the forward cost: backward ~ 2x forward over the trainable
        share of the parameters, so 3x forward fully trainable and 1x with only a small head
        trainable (the reference's own regime)."""
        share = trainable_params / max(1, params)
        return cls(forward_gflops * (1.0 + 2.0 * share), trainable_params)


# Inception-v3 transfer learning (the paper's workload): 5.7 GFLOPs forward at 299x299,
# the backward pass through the 2048 x 1000 head only.
REFERENCE_MODEL = ModelCost(train_gflops_per_sample=5.7, trainable_params=2_049_000)


@dataclass(frozen=True, slots=True)
class AppProfile:
    """Execution-time model of one latency-critical background application."""

    kind: AppKind
    base_s: Mapping[DeviceType, float]  # execution time on an idle device
    cpu_sens: float
    gpu_sens: float
    mem_sens: float


PI4_PS_UPDATE_S = 0.08  # SGD update of the Inception head on a Pi 4 parameter server

_GPU_SLOWDOWN = 0.2  # s_gpu(0.77) = 1.2: +20 % step time at 77 % initial GPU use (Fig. 4)
GPU_REFERENCE_UTIL = 0.77

DEVICE_PROFILES: Mapping[DeviceType, DeviceProfile] = {
    DeviceType.JETSON_TX2: DeviceProfile(
        device=DeviceType.JETSON_TX2,
        mem_total_mb=8192.0,
        step_time_ref_s=1.89,  # Figure 3
        backward_s=0.30,
        comm_s=0.10,
        gpu_slowdown=_GPU_SLOWDOWN,
        cpu_slowdown=3.0,  # assumed: a saturated CPU starves the GPU's input pipeline
        load_cpu=0.20,
        load_gpu=0.80,
        model_mem_mb=600.0,
        sample_mem_mb=45.0,
        ps_update_s=0.05,
        ps_cpu_slowdown=1.0,
    ),
    DeviceType.JETSON_NANO: DeviceProfile(
        device=DeviceType.JETSON_NANO,
        mem_total_mb=4096.0,
        step_time_ref_s=2.69,  # Figure 3
        backward_s=0.45,
        comm_s=0.12,
        gpu_slowdown=_GPU_SLOWDOWN,
        cpu_slowdown=3.0,
        load_cpu=0.25,
        load_gpu=0.90,
        model_mem_mb=600.0,
        sample_mem_mb=45.0,
        ps_update_s=0.07,
        ps_cpu_slowdown=1.0,
    ),
    DeviceType.RASPBERRY_PI_4: DeviceProfile(
        device=DeviceType.RASPBERRY_PI_4,
        mem_total_mb=4096.0,
        step_time_ref_s=9.5,  # assumed: CPU-only training, ~3.5x a Nano
        backward_s=1.6,
        comm_s=0.12,
        gpu_slowdown=0.0,
        cpu_slowdown=2.0,  # training competes for the same four cores
        load_cpu=0.85,
        load_gpu=0.0,
        model_mem_mb=600.0,
        sample_mem_mb=45.0,
        ps_update_s=PI4_PS_UPDATE_S,
        ps_cpu_slowdown=1.5,
    ),
}

APP_PROFILES: Mapping[AppKind, AppProfile] = {
    AppKind.SIFT: AppProfile(
        kind=AppKind.SIFT,
        base_s={
            DeviceType.JETSON_TX2: 0.070,
            DeviceType.JETSON_NANO: 0.095,
            DeviceType.RASPBERRY_PI_4: 0.085,
        },
        cpu_sens=0.55,  # SIFT queues behind other runnable work on the cores
        gpu_sens=0.25,  # memory-bandwidth contention with the integrated GPU
        mem_sens=1.0,
    ),
    AppKind.DNN_INFERENCE: AppProfile(
        kind=AppKind.DNN_INFERENCE,
        base_s={
            DeviceType.JETSON_TX2: 0.030,
            DeviceType.JETSON_NANO: 0.045,
            DeviceType.RASPBERRY_PI_4: 0.250,
        },
        cpu_sens=0.2,
        gpu_sens=1.2,  # it needs the GPU itself
        mem_sens=1.0,
    ),
}


_PROFILE_BY_NAME = {d.value: p for d, p in DEVICE_PROFILES.items()}
_COMM_BY_NAME = {name: p.comm_s for name, p in _PROFILE_BY_NAME.items()}
_CPU_UTIL = attrgetter("cpu_util")


def _device(device: str) -> DeviceProfile:
    profile = _PROFILE_BY_NAME.get(device)
    if profile is not None:
        return profile
    try:
        return DEVICE_PROFILES[DeviceType(device)]
    except ValueError:
        known = ", ".join(d.value for d in DeviceType)
        raise InvalidInputError(
            f"unknown device type {device!r} (known: {known})", field="device"
        ) from None


def _app(app: str) -> AppProfile:
    try:
        return APP_PROFILES[AppKind(app)]
    except ValueError:
        known = ", ".join(a.value for a in AppKind)
        raise InvalidInputError(
            f"unknown background app kind {app!r} (known: {known})", field="kind"
        ) from None


def _gpu(state: NodeState) -> float:
    return 0.0 if state.gpu_util is None else state.gpu_util


class DeviceCatalog:
    """Closed-form :class:`PerformanceModel` of the device classes in :data:`DEVICE_PROFILES`.

    ``ps_device`` is the device class of the parameter server: the Protocol passes the PS
    state but not its type, so the catalog is built for one PS class (the paper uses a
    Raspberry Pi 4).
    """

    def __init__(
        self,
        ps_device: DeviceType | str = DeviceType.RASPBERRY_PI_4,
        model: ModelCost | None = None,
    ) -> None:
        self.ps_profile = _device(str(ps_device))
        self.model = model or REFERENCE_MODEL
        # compute and update terms relative to the calibration (module docstring)
        self.compute_scale = (
            self.model.train_gflops_per_sample / REFERENCE_MODEL.train_gflops_per_sample
        )
        self.update_scale = self.model.trainable_params / REFERENCE_MODEL.trainable_params

    # -- EstComputeTime (eq. 5) ------------------------------------------------------------
    def est_compute_time_s(self, device: str, state: NodeState, batch_size: int) -> float:
        """Seconds per sample: ``(forward + backward / b) * s_gpu(g) * s_cpu(c)``."""
        p = _device(device)
        if batch_size < 1:
            raise InvalidInputError(f"batch size must be >= 1, got {batch_size}", field="batch")
        g = _gpu(state)
        s_gpu = 1.0 + p.gpu_slowdown * (g / GPU_REFERENCE_UTIL) ** 4
        slowdown = s_gpu * (1.0 + p.cpu_slowdown * state.cpu_util**2)
        return (p.forward_s + p.backward_s / batch_size) * slowdown * self.compute_scale

    # -- EstUpdateTime (eq. 6) -------------------------------------------------------------
    def _ps_term_s(self, ps_state: NodeState) -> float:
        ps = self.ps_profile
        return ps.ps_update_s * (1.0 + ps.ps_cpu_slowdown * ps_state.cpu_util**2)

    @staticmethod
    def _contention(batch_sizes: Sequence[int], n_workers: int) -> float:
        if len(batch_sizes) == 0 or n_workers < 1:
            raise InvalidInputError("update time needs at least one worker", field="workers")
        batches = np.asarray(batch_sizes, dtype=np.float64)
        if batches.min() < 1:
            raise InvalidInputError("batch sizes must be >= 1", field="batch")
        mean_rate = float(np.mean(REFERENCE_BATCH / batches))
        return 1.0 + CONTENTION_PER_WORKER * (n_workers - 1) * mean_rate

    def est_update_time_s(
        self,
        device: str,
        state: NodeState,
        batch_sizes: Sequence[int],
        ps_state: NodeState,
        n_workers: int,
    ) -> float:
        """Seconds per iteration for push + update + pull (see the module docstring)."""
        p = _device(device)
        comm = p.comm_s * (1.0 + WORKER_CPU_COMM_FACTOR * state.cpu_util)
        contention = self._contention(batch_sizes, n_workers)
        return (comm + self._ps_term_s(ps_state)) * contention * self.update_scale

    def est_update_times_s(
        self,
        devices: Sequence[str],
        states: Sequence[NodeState],
        batch_sizes: Sequence[int],
        ps_state: NodeState,
        n_workers: int,
    ) -> list[float]:
        """:meth:`est_update_time_s` for every worker of ``batch_sizes`` at once, in O(N)."""
        if len(devices) != len(states):
            raise InvalidInputError("one state per device is required", field="states")
        contention = self._contention(batch_sizes, n_workers)
        ps_term = self._ps_term_s(ps_state)
        count = len(devices)
        try:
            comm = np.fromiter(map(_COMM_BY_NAME.__getitem__, devices), np.float64, count)
        except KeyError:
            comm = np.fromiter((_device(d).comm_s for d in devices), np.float64, count)
        cpu = np.fromiter(map(_CPU_UTIL, states), np.float64, count)
        times = (comm * (1.0 + WORKER_CPU_COMM_FACTOR * cpu) + ps_term) * contention
        times *= self.update_scale
        result: list[float] = times.tolist()
        return result

    # -- EstState (eq. 7) ------------------------------------------------------------------
    def est_state(self, device: str, initial: NodeState, batch_size: int) -> NodeState:
        """The node state while the training task runs at batch ``batch_size``."""
        p = _device(device)
        cpu = initial.cpu_util + p.load_cpu * (1.0 - initial.cpu_util)
        gpu = None
        if initial.gpu_util is not None:
            gpu = initial.gpu_util + p.load_gpu * (1.0 - initial.gpu_util)
        mem = initial.mem_util + self.footprint_mb(device, batch_size) / p.mem_total_mb
        return NodeState(cpu_util=min(cpu, 1.0), mem_util=min(mem, 1.0), gpu_util=gpu)

    def footprint_mb(self, device: str, batch_size: int) -> float:
        """Memory the training process takes at batch ``batch_size``."""
        p = _device(device)
        return p.model_mem_mb + batch_size * p.sample_mem_mb

    # -- EstExecTime (eq. 8) ---------------------------------------------------------------
    def est_exec_time_s(self, device: str, app: str, state: NodeState) -> float:
        """Execution time of background app ``app`` on ``device`` in state ``state``."""
        p = _device(device)
        a = _app(app)
        g = _gpu(state)
        # CPU: the app queues behind other runnable work (1 / (1 - rho) growth);
        # GPU: it shares memory bandwidth (Jetson) or the GPU itself.
        contention = (1.0 + a.gpu_sens * g * g) / (1.0 - a.cpu_sens * state.cpu_util)
        swap = 1.0 + a.mem_sens * max(0.0, state.mem_util - MEM_SWAP_THRESHOLD) / (
            1.0 - MEM_SWAP_THRESHOLD
        )
        return a.base_s[p.device] * contention * swap

    # -- GetMaxBatchSize -------------------------------------------------------------------
    def max_batch_size(
        self,
        device: str,
        initial: NodeState,
        mem_capacity_mb: float,
        min_batch: int,
        max_batch: int,
    ) -> int:
        """Largest ``b`` in ``[min_batch, max_batch]`` with EstState^mem within capacity.

        ``mem_capacity_mb`` is the most memory the node may have in use while training
        (physical memory less what the operator reserves). The condition
        ``EstState(X, b).mem * mem_total <= mem_capacity_mb`` is linear in ``b``, so it is
        solved in closed form; 0 when even ``min_batch`` does not fit.
        """
        p = _device(device)
        if min_batch < 1 or max_batch < min_batch:
            raise InvalidInputError(
                f"batch bounds must satisfy 1 <= min <= max, got [{min_batch}, {max_batch}]",
                field="batch",
            )
        free_mb = mem_capacity_mb - initial.mem_util * p.mem_total_mb - p.model_mem_mb
        fits = math.floor(free_mb / p.sample_mem_mb + 1e-9) if free_mb > 0 else 0
        if fits < min_batch:
            return 0
        return min(fits, max_batch)
