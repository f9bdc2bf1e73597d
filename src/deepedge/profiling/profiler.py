"""The profiler: sweep stress points x batch sizes x workers and measure everything for real.

The sweep makes ``repeats`` passes over every stress level ``s`` (CPU x memory x disk I/O x
GPU when present), each pass in its own seeded random order, so that slow drift of the host
is spread over the levels instead of following the grid, and so that the repeats of a
configuration are minutes apart: their spread (the noise floor) then includes that drift.
At each visit of a level the stressors start, the SIFT background app keeps processing
frames, and

1. X^initial is measured over ``idle_window_s`` (stress + background app, no update task);
   it is the initial state of every configuration measured in that visit;
2. for each configuration ``(b, |W|)`` of the level (in an order rotated per pass),
   ``|W| - 1`` emulated peers push to the loopback parameter server while the update task
   runs with batch ``b`` for ``window_s``; X^new, t_compute, t_update and the SIFT frames
   of that same window are one row.

The number of configurations per stress level is chosen so that the whole sweep fits
``budget_s``; the sweep also stops (and marks itself ``truncated``) at the budget. A
progress callback receives the completed count and an ETA after every window.
"""

from __future__ import annotations

import itertools
import logging
import os
import platform
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import psutil
import torch
from torch import nn

from deepedge.cluster.metrics import CpuScope, MetricsSampler, NodeAgent
from deepedge.cluster.state import NodeState
from deepedge.core.errors import InvalidInputError
from deepedge.profiling.dataset import COLUMN_NAMES, ProfileDataset, Provenance
from deepedge.profiling.loopback_ps import LoopbackParameterServer, PeerWorkers
from deepedge.profiling.sift_app import FrameStats, SiftApp
from deepedge.profiling.stressors import (
    StressBackend,
    StressLevel,
    Stressor,
    cuda_available,
    resolve_backend,
    stress_ng_path,
)
from deepedge.profiling.update_task import UpdateTask, flat_weights

log = logging.getLogger(__name__)

_OVERHEAD_PER_WINDOW_S = 0.15  # peer start/stop and bookkeeping, measured on a 2-core host
_LEVEL_START_S = 0.4  # starting the stressors of a level
_MIN_FRAMES = 2  # SIFT frames a window must overlap


@dataclass(frozen=True)
class Workload:
    """The model-update workload: a fresh model per sweep and its training data."""

    name: str
    model_factory: Callable[[], nn.Module]
    images: np.ndarray  # (N, C, H, W) float32
    labels: np.ndarray  # (N,) int


def edge_workload(image_size: int = 16, seed: int = 0) -> Workload:
    """The edge CNN retrained on scikit-learn's bundled handwritten digits."""
    from deepedge.learning.models import make_edge_model
    from deepedge.learning.stream import load_digits_images

    images = load_digits_images(image_size)
    return Workload(
        name=f"EdgeCNN on digits {image_size}x{image_size}",
        model_factory=lambda: make_edge_model(images.n_classes, image_size, seed=seed),
        images=images.images,
        labels=images.labels,
    )


def workload_profile(reference: str, windows: int = 1) -> Workload:
    """A user's workload (:mod:`deepedge.workload`): its model and its first ``windows``
    windows, labelled by its labeller."""
    import numpy as np

    from deepedge.workload.resolve import load_workload

    workload = load_workload(reference)
    workload.require_windows(windows)
    parts = [workload.window(t) for t in range(windows)]
    return Workload(
        name=f"{workload.spec.name} ({workload.trainable:,} trainable parameters)",
        model_factory=workload.model_factory,
        images=np.concatenate([w.images for w in parts]),
        labels=np.concatenate([workload.label(w.images, w.labels) for w in parts]),
    )


@dataclass(frozen=True)
class SweepConfig:
    cpu_loads: tuple[float, ...] = (0.0, 0.3, 0.6, 0.9)
    mem_mbs: tuple[int, ...] = (0, 1024)
    io_workers: tuple[int, ...] = (0, 1)
    gpu_duties: tuple[float, ...] = (0.0, 0.5)  # used only when CUDA is present
    batch_sizes: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
    worker_counts: tuple[int, ...] = (1, 2, 3, 4)
    repeats: int = 3  # passes over every level; a configuration is measured once per pass
    settle_s: float = 0.5
    idle_window_s: float = 1.5  # X^initial, once per visit of a level
    window_s: float = 1.5
    budget_s: float = 540.0
    sift_period_s: float = 0.2
    seed: int = 0
    # stress-ng busy slice in ms; 0 keeps its default, a random 0-500 ms busy time. 10 ms
    # slices made the stressor's own CPU share steadier per window, but the measured
    # targets (compute, update, SIFT times) spread more with them, side by side
    cpu_load_slice_ms: int = 0
    torch_threads: int = 1  # intra-op threads of the update task (steadier under contention)
    backend: StressBackend = StressBackend.AUTO
    cpu_scope: CpuScope = CpuScope.SYSTEM  # TREE on a host shared with foreign jobs
    device: str = field(default_factory=platform.node)

    def __post_init__(self) -> None:
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise InvalidInputError("batch_sizes must be positive", field="batch_sizes")
        if not self.worker_counts or min(self.worker_counts) < 1:
            raise InvalidInputError("worker_counts must be >= 1", field="worker_counts")
        if self.repeats < 1 or self.budget_s <= 0 or self.window_s <= 0 or self.idle_window_s <= 0:
            raise InvalidInputError(
                "repeats, budget_s and windows must be positive", field="budget_s"
            )
        if self.cpu_load_slice_ms < 0:
            raise InvalidInputError(
                "cpu_load_slice_ms must be >= 0 (0: stress-ng's default)",
                field="cpu_load_slice_ms",
            )
        for cpu in self.cpu_loads:
            StressLevel(cpu_load=cpu)

    @classmethod
    def quick(cls, **overrides: Any) -> SweepConfig:
        """A sweep that fits in well under a minute (tests, smoke runs)."""
        base = cls(
            cpu_loads=(0.0, 0.6),
            mem_mbs=(0,),
            io_workers=(0,),
            gpu_duties=(0.0, 0.5),
            batch_sizes=(8, 32, 128),
            worker_counts=(1, 3),
            repeats=2,
            settle_s=0.3,
            idle_window_s=0.3,
            window_s=0.5,
            budget_s=36.0,
        )
        return replace(base, **overrides)

    @property
    def seconds_per_config(self) -> float:
        return self.repeats * (self.window_s + _OVERHEAD_PER_WINDOW_S)

    @property
    def seconds_per_level(self) -> float:
        """Fixed cost of one level over all passes: stressor start, settling, X^initial."""
        return self.repeats * (_LEVEL_START_S + self.settle_s + self.idle_window_s)


@dataclass(frozen=True, slots=True)
class ProfilePoint:
    config_id: int
    stress: StressLevel
    batch_size: int
    n_workers: int
    peer_batch_sizes: tuple[int, ...]

    @property
    def batch_mean(self) -> float:
        return float(np.mean((self.batch_size, *self.peer_batch_sizes)))


@dataclass(frozen=True, slots=True)
class Progress:
    done: int
    total: int
    elapsed_s: float
    eta_s: float
    point: ProfilePoint


def stress_levels(cfg: SweepConfig, has_gpu: bool) -> list[StressLevel]:
    gpus = cfg.gpu_duties if has_gpu else (0.0,)
    return [
        StressLevel(cpu_load=c, mem_mb=m, io_workers=i, gpu_duty=g)
        for c, m, i, g in itertools.product(cfg.cpu_loads, cfg.mem_mbs, cfg.io_workers, gpus)
    ]


def plan_points(cfg: SweepConfig, has_gpu: bool) -> list[ProfilePoint]:
    """Every stress level, each with as many ``(b, |W|)`` configs as the budget allows.

    The configs of a level are a seeded permutation of ``batch_sizes x worker_counts``,
    rotated per level so that all combinations appear across levels.
    """
    levels = stress_levels(cfg, has_gpu)
    rng = np.random.default_rng(cfg.seed)
    combos = list(itertools.product(cfg.batch_sizes, cfg.worker_counts))
    per_level_s = cfg.budget_s / len(levels) - cfg.seconds_per_level
    per_level = int(np.clip(per_level_s // cfg.seconds_per_config, 1, len(combos)))
    order = [combos[k] for k in rng.permutation(len(combos))]
    points: list[ProfilePoint] = []
    for li, level in enumerate(levels):
        start = (li * per_level) % len(combos)
        for k in range(per_level):
            b, w = order[(start + k) % len(combos)]
            peers = tuple(int(x) for x in rng.choice(cfg.batch_sizes, size=w - 1))
            points.append(ProfilePoint(len(points), level, b, w, peers))
    return points


def _versions() -> dict[str, str]:
    import cv2
    import sklearn

    from deepedge import __version__

    return {
        "deepedge": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "opencv": cv2.__version__,
        "scikit-learn": sklearn.__version__,
        "psutil": psutil.__version__,
    }


def _stress_ng_version() -> str | None:
    path = stress_ng_path()
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _state_cols(prefix: str, state: NodeState) -> dict[str, float]:
    return {
        f"{prefix}_cpu": state.cpu_util,
        f"{prefix}_mem": state.mem_util,
        f"{prefix}_gpu": np.nan if state.gpu_util is None else state.gpu_util,
    }


@dataclass(frozen=True)
class _Rig:
    """The long-lived processes and measures a sweep shares across its points."""

    agent: NodeAgent
    app: SiftApp
    peers: PeerWorkers
    task: UpdateTask
    reference: dict[int, float]  # per-sample compute at no stress, by batch size
    t0: float  # monotonic start of the sweep


class Profiler:
    """Runs a sweep; :meth:`run` returns the dataset (it does not write files)."""

    def __init__(self, cfg: SweepConfig, workload: Workload) -> None:
        self.cfg = cfg
        self.workload = workload
        self.backend = resolve_backend(cfg.backend)
        self.has_gpu = cuda_available()
        self.points = plan_points(cfg, self.has_gpu)
        self.interrupted = False  # set when Ctrl-C ended the sweep early

    @property
    def planned_s(self) -> float:
        levels = len({p.stress for p in self.points})
        return len(self.points) * self.cfg.seconds_per_config + levels * self.cfg.seconds_per_level

    def run(self, progress: Callable[[Progress], None] | None = None) -> ProfileDataset:
        """Measure every planned point; Ctrl-C during the sweep ends it early with the rows
        measured so far (``interrupted`` and the provenance's ``truncated`` are then set)."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        threads_before = torch.get_num_threads()
        torch.set_num_threads(cfg.torch_threads)
        model = self.workload.model_factory()
        started = datetime.now(UTC)
        t0 = time.monotonic()
        with (
            NodeAgent(
                period_s=0.1, sampler_factory=lambda: MetricsSampler(cpu_scope=cfg.cpu_scope)
            ) as agent,
            SiftApp(period_s=cfg.sift_period_s) as app,
            LoopbackParameterServer(flat_weights(model)) as server,
            PeerWorkers(server, max(cfg.worker_counts) - 1) as peers,
        ):
            client = server.client()
            try:
                task = UpdateTask(
                    model, self.workload.images, self.workload.labels, client, cfg.seed
                )
                # per-sample compute at no stress sets the emulated peers' push cadence
                reference = {b: task.run_window(b, 0.2).t_compute_s for b in cfg.batch_sizes}
                rig = _Rig(agent, app, peers, task, reference, t0)
                rows, truncated = self._sweep(rig, progress)
            finally:
                client.close()
                torch.set_num_threads(threads_before)
        if truncated:
            log.warning("sweep stopped at its %.0f s budget after %d rows", cfg.budget_s, len(rows))
        frame = pd.DataFrame(rows, columns=list(COLUMN_NAMES))
        return ProfileDataset(frame, self._provenance(started, t0, model, truncated))

    def _sweep(
        self, rig: _Rig, progress: Callable[[Progress], None] | None
    ) -> tuple[list[dict[str, Any]], bool]:
        """Every level under its stressors; returns the rows and whether the sweep was cut."""
        rows: list[dict[str, Any]] = []
        try:
            return self._sweep_passes(rig, rows, progress)
        except KeyboardInterrupt:
            # the stressors of the level are already stopped; keep what was measured
            log.warning("sweep interrupted after %d rows", len(rows))
            self.interrupted = True
            return rows, True

    def visits(self) -> list[tuple[int, StressLevel, list[ProfilePoint]]]:
        """``(pass, level, points)`` in measurement order: each pass visits every level once,
        in a seeded random order of its own, with the level's points rotated by the pass."""
        by_level: dict[StressLevel, list[ProfilePoint]] = {}
        for point in self.points:
            by_level.setdefault(point.stress, []).append(point)
        levels = list(by_level)
        out: list[tuple[int, StressLevel, list[ProfilePoint]]] = []
        for repeat in range(self.cfg.repeats):
            order = np.random.default_rng([self.cfg.seed, repeat]).permutation(len(levels))
            for k in order:
                points = by_level[levels[k]]
                shift = repeat % len(points)
                out.append((repeat, levels[k], points[shift:] + points[:shift]))
        return out

    def _sweep_passes(
        self,
        rig: _Rig,
        rows: list[dict[str, Any]],
        progress: Callable[[Progress], None] | None,
    ) -> tuple[list[dict[str, Any]], bool]:
        cfg = self.cfg
        done = 0
        total = len(self.points) * cfg.repeats
        for repeat, level, points in self.visits():
            if time.monotonic() - rig.t0 >= cfg.budget_s:
                return rows, True
            with Stressor(level, backend=self.backend, cpu_load_slice_ms=cfg.cpu_load_slice_ms):
                time.sleep(cfg.settle_s)
                rig.peers.run([])
                idle_start = time.monotonic()
                time.sleep(cfg.idle_window_s)
                initial = rig.agent.state(idle_start, time.monotonic())
                for point in points:
                    if time.monotonic() - rig.t0 >= cfg.budget_s:
                        return rows, True
                    rows.append(self._measure(rig, point, repeat, initial))
                    done += 1
                    rig.app.forget_before(time.monotonic() - 10.0)
                    if progress is not None:
                        elapsed = time.monotonic() - rig.t0
                        eta = elapsed / done * (total - done)
                        eta = min(eta, max(0.0, cfg.budget_s - elapsed))
                        progress(Progress(done, total, elapsed, eta, point))
        return rows, False

    def _measure(
        self, rig: _Rig, point: ProfilePoint, repeat: int, initial: NodeState
    ) -> dict[str, Any]:
        """One update-task window at ``point`` (module docstring, step 2)."""
        cfg = self.cfg
        agent, app, peers = rig.agent, rig.app, rig.peers
        peers.run([b * rig.reference[b] for b in point.peer_batch_sizes])
        start = time.monotonic()
        window = rig.task.run_window(
            point.batch_size,
            cfg.window_s,
            more=lambda: len(app.frames(start, time.monotonic())) < _MIN_FRAMES,
        )
        end = time.monotonic()
        peers.run([])
        time.sleep(agent.period_s)  # let the agent take the sample that closes the window
        new = agent.state(start, end + agent.period_s)
        frames = FrameStats.of(app.frames(start, end))
        s = point.stress
        return {
            "device": cfg.device,
            "config_id": point.config_id,
            "repeat": repeat,
            "stress_cpu": s.cpu_load,
            "stress_mem_mb": s.mem_mb,
            "stress_io": s.io_workers,
            "stress_gpu": s.gpu_duty,
            "batch_size": point.batch_size,
            "n_workers": point.n_workers,
            "batch_mean": point.batch_mean,
            **_state_cols("init", initial),
            **_state_cols("new", new),
            **_state_cols("ps", initial),  # the loopback server shares the host
            "t_compute_s": window.t_compute_s,
            "t_update_s": window.t_update_s,
            "t_update_server_s": window.t_update_server_s,
            "n_steps": window.n_steps,
            "exec_time_s": frames.median_s,
            "exec_mean_s": frames.mean_s,
            "exec_p95_s": frames.p95_s,
            "n_frames": frames.n_frames,
            "miss_frac": frames.miss_frac,
            "t_offset_s": start - rig.t0,
        }

    def _provenance(
        self, started: datetime, t0: float, model: nn.Module, truncated: bool
    ) -> Provenance:
        vm = psutil.virtual_memory()
        sweep = {
            k: (v.value if isinstance(v, StressBackend | CpuScope) else v)
            for k, v in asdict(self.cfg).items()
        }
        return Provenance(
            device=self.cfg.device,
            host=socket.gethostname(),
            cores=os.cpu_count() or 1,
            mem_total_mb=vm.total / 2**20,
            cpu_model=platform.processor() or platform.machine(),
            gpu_name=torch.cuda.get_device_name(0) if self.has_gpu else None,
            started_utc=started.isoformat(timespec="seconds"),
            finished_utc=datetime.now(UTC).isoformat(timespec="seconds"),
            duration_s=time.monotonic() - t0,
            backend=self.backend.value,
            cpu_scope=self.cfg.cpu_scope.value,
            stress_ng_version=_stress_ng_version()
            if self.backend is StressBackend.STRESS_NG
            else None,
            versions=_versions(),
            workload=self.workload.name,
            n_params=int(sum(p.numel() for p in model.parameters())),
            sweep=sweep,
            truncated=truncated,
        )
