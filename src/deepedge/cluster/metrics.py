"""The node agent: samples a node's utilisation and reports its state X = (cpu, gpu, mem).

Deep-Edge (Section IV-C1) describes a node by the vector of its CPU, GPU and memory
utilisation and, because the metrics vary while a task runs, summarises a measurement
window by the 95th percentile of each metric:

    X^m = P95({ u^m(t) : t in window })   for m in {cpu, gpu, mem}

* CPU: ``psutil.cpu_percent`` over each sampling period, all cores together (0..1).
  With :attr:`CpuScope.TREE` only one process tree counts (the profiled workload on a host
  shared with foreign jobs, whose load would otherwise pin the reading at 1):
  ``cpu = sum over the tree of delta CPU seconds / (delta wall seconds * cores)``.
* Memory: ``(total - available) / total`` from ``psutil.virtual_memory``.
* GPU: utilisation of device 0 from NVML (``nvidia-ml-py``) when an NVIDIA GPU and driver
  are present. Without one the GPU dimension is *absent* (``None``), never a fake 0.

:class:`NodeAgent` samples on a background thread into a bounded ring buffer; callers ask
for the state over the last ``window_s`` seconds or between two instants of
``time.monotonic`` (the clock every process on a Linux host shares).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any

import numpy as np
import psutil

from deepedge.cluster.state import NodeState
from deepedge.core.errors import InvalidInputError, RunFailedError

log = logging.getLogger(__name__)

STATE_PERCENTILE = 95.0


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """One reading of a node; utilisations are fractions in [0, 1]."""

    t_s: float  # time.monotonic() at the end of the sampling period
    cpu_util: float
    mem_util: float
    gpu_util: float | None = None  # None: the node has no (visible) NVIDIA GPU
    gpu_mem_util: float | None = None


class GpuProbe:
    """Reads utilisation of one NVIDIA GPU through NVML; ``available`` is False without one."""

    def __init__(self, index: int = 0) -> None:
        self._nvml: Any = None
        self._handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = pynvml
        except Exception as exc:
            log.debug("no NVIDIA GPU visible through NVML: %s", exc)
            self._handle = None

    @property
    def available(self) -> bool:
        return self._handle is not None

    def read(self) -> tuple[float, float] | None:
        """``(gpu_util, gpu_mem_util)`` as fractions, or None when no GPU is visible."""
        if self._handle is None:
            return None
        try:
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            mem = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
        except Exception as exc:
            log.warning("NVML read failed, GPU treated as absent: %s", exc)
            return None
        return util.gpu / 100.0, (mem.used / mem.total if mem.total else 0.0)

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                log.debug("nvmlShutdown failed", exc_info=True)
            self._nvml = None
            self._handle = None


def _clip01(value: float) -> float:
    return min(1.0, max(0.0, value))


def percentile_state(samples: Sequence[MetricsSample], q: float = STATE_PERCENTILE) -> NodeState:
    """The node state over ``samples``: the ``q``-th percentile of every metric.

    The GPU dimension is absent as soon as one sample lacks it, so a model never sees a
    state that mixes measured and missing GPU readings.
    """
    if not samples:
        raise InvalidInputError("no metrics samples in the window", field="samples")
    if not 0.0 <= q <= 100.0:
        raise InvalidInputError(f"percentile must be in [0, 100], got {q}", field="q")
    cpu = float(np.percentile([s.cpu_util for s in samples], q))
    mem = float(np.percentile([s.mem_util for s in samples], q))
    gpus = [s.gpu_util for s in samples if s.gpu_util is not None]
    gpu = float(np.percentile(gpus, q)) if len(gpus) == len(samples) else None
    return NodeState(
        cpu_util=_clip01(cpu), mem_util=_clip01(mem), gpu_util=None if gpu is None else _clip01(gpu)
    )


class CpuScope(StrEnum):
    """Whose CPU use the node state counts."""

    SYSTEM = "system"  # every process of the host: the paper's node state
    TREE = "tree"  # one process tree only: a workload on a host shared with foreign jobs


class _TreeCpu:
    """CPU utilisation of the process tree under ``root`` since the previous reading."""

    def __init__(self, root: int) -> None:
        self._root = psutil.Process(root)
        self._cores = os.cpu_count() or 1
        self._seen: dict[tuple[int, float], float] = {}
        self._last_t = time.monotonic()
        self.read()

    def read(self) -> float:
        now = time.monotonic()
        busy_s = 0.0
        seen: dict[tuple[int, float], float] = {}
        for proc in [self._root, *self._root.children(recursive=True)]:
            try:
                key = (proc.pid, proc.create_time())
                times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            total = times.user + times.system
            busy_s += total - self._seen.get(key, 0.0)  # a new process counts from its start
            seen[key] = total
        elapsed = max(now - self._last_t, 1e-6)
        self._seen, self._last_t = seen, now
        return busy_s / (elapsed * self._cores)


class MetricsSampler:
    """Takes one :class:`MetricsSample` per call; CPU is measured since the previous call."""

    def __init__(
        self,
        gpu_probe: GpuProbe | None = None,
        cpu_scope: CpuScope = CpuScope.SYSTEM,
        tree_root: int | None = None,
    ) -> None:
        self._gpu = gpu_probe if gpu_probe is not None else GpuProbe()
        self._tree = (
            _TreeCpu(os.getpid() if tree_root is None else tree_root)
            if cpu_scope is CpuScope.TREE
            else None
        )
        psutil.cpu_percent(interval=None)  # primes the counter: the first reading is void

    @property
    def has_gpu(self) -> bool:
        return self._gpu.available

    def sample(self) -> MetricsSample:
        system_cpu = psutil.cpu_percent(interval=None) / 100.0
        cpu = system_cpu if self._tree is None else self._tree.read()
        vm = psutil.virtual_memory()
        mem = (vm.total - vm.available) / vm.total
        gpu = self._gpu.read()
        return MetricsSample(
            t_s=time.monotonic(),
            cpu_util=_clip01(cpu),
            mem_util=_clip01(mem),
            gpu_util=None if gpu is None else _clip01(gpu[0]),
            gpu_mem_util=None if gpu is None else _clip01(gpu[1]),
        )

    def close(self) -> None:
        self._gpu.close()


class NodeAgent:
    """Samples the node every ``period_s`` on a daemon thread; a context manager.

    Keeps at most ``history_s`` seconds of samples. :meth:`state` summarises a window with
    :func:`percentile_state`.
    """

    def __init__(
        self,
        period_s: float = 0.1,
        history_s: float = 600.0,
        sampler_factory: Callable[[], MetricsSampler] = MetricsSampler,
    ) -> None:
        if period_s <= 0 or history_s < period_s:
            raise InvalidInputError("need period_s > 0 and history_s >= period_s", field="period_s")
        self.period_s = period_s
        self._sampler_factory = sampler_factory
        self._samples: deque[MetricsSample] = deque(maxlen=int(history_s / period_s) + 1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampler: MetricsSampler | None = None

    @property
    def has_gpu(self) -> bool:
        return self._sampler is not None and self._sampler.has_gpu

    def start(self) -> NodeAgent:
        if self._thread is not None:
            return self
        self._sampler = self._sampler_factory()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="node-agent", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.period_s + 1.0)
            self._thread = None
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None

    def __enter__(self) -> NodeAgent:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        sampler = self._sampler
        if sampler is None:
            return
        next_t = time.monotonic() + self.period_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            sample = sampler.sample()
            with self._lock:
                self._samples.append(sample)
            # a fixed schedule: a late wake-up does not stretch later periods
            next_t = max(next_t + self.period_s, time.monotonic())

    def samples(
        self, since_s: float | None = None, until_s: float | None = None
    ) -> list[MetricsSample]:
        """Samples whose time lies in ``[since_s, until_s]`` (monotonic clock)."""
        lo = -np.inf if since_s is None else since_s
        hi = np.inf if until_s is None else until_s
        with self._lock:
            return [s for s in self._samples if lo <= s.t_s <= hi]

    def state(
        self,
        since_s: float | None = None,
        until_s: float | None = None,
        q: float = STATE_PERCENTILE,
    ) -> NodeState:
        """The node state over a window; :class:`InvalidInputError` if it holds no sample."""
        return percentile_state(self.samples(since_s, until_s), q)

    def wait_for_samples(self, n: int, timeout_s: float = 5.0) -> None:
        """Block until at least ``n`` samples are held (tests, first readings)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self._samples) >= n:
                    return
            time.sleep(self.period_s / 2)
        raise RunFailedError(f"node agent took no {n} samples within {timeout_s} s")
