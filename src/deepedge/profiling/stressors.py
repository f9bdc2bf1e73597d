"""Stressors: CPU, memory, disk-I/O and GPU load at target levels, always cleaned up.

A :class:`StressLevel` names the load to add; a :class:`Stressor` is the context manager
that runs it and, on leaving the block for any reason (normal exit, exception, Ctrl-C),
terminates every process it started:

* each load runs in its own session (process group), so the whole tree - stress-ng and its
  workers - is signalled with ``killpg`` (stress-ng: SIGKILL; the Python loads: SIGTERM,
  then SIGKILL after a grace period);
* each process gets ``PR_SET_PDEATHSIG = SIGKILL``, so it dies with its parent even if the
  parent is killed without a chance to clean up;
* each process also carries a safety timeout (stress-ng ``--timeout``), and live stressors
  are stopped by an ``atexit`` hook.

Backends: stress-ng (the Debian package) when installed, otherwise plain-Python load
processes (:mod:`deepedge.profiling.fallback_load`) with a warning. GPU load is a torch
matmul at a duty cycle (:mod:`deepedge.profiling.gpu_load`) and needs CUDA.

Targets: ``cpu_load`` c keeps every core busy a fraction c of the time (so the machine's
CPU utilisation rises by c); ``mem_mb`` holds that many MiB resident; ``io_workers`` runs
that many write-and-sync disk writers; ``gpu_duty`` keeps the GPU busy that fraction of
the time.
"""

from __future__ import annotations

import atexit
import enum
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from types import TracebackType

import psutil

from deepedge.core.errors import InvalidInputError, RunFailedError
from deepedge.profiling.child import start_child, stderr_tail, stop_children

log = logging.getLogger(__name__)

_LIVE: set[Stressor] = set()
_LIVE_LOCK = threading.Lock()


class StressBackend(enum.Enum):
    """How CPU/memory/I-O load is generated."""

    AUTO = "auto"  # stress-ng when installed, else the Python fallback with a warning
    STRESS_NG = "stress-ng"  # stress-ng, and an error when it is missing
    PYTHON = "python"  # plain-Python load processes


class StressNgMissingWarning(UserWarning):
    """stress-ng is not installed; the plain-Python load generators are used instead."""


@dataclass(frozen=True, slots=True)
class StressLevel:
    cpu_load: float = 0.0  # fraction of every core kept busy, 0..1
    mem_mb: int = 0  # MiB held resident
    io_workers: int = 0  # concurrent write+sync disk writers
    gpu_duty: float = 0.0  # fraction of time the GPU runs matmuls, 0..1

    def __post_init__(self) -> None:
        if not 0.0 <= self.cpu_load <= 1.0:
            raise InvalidInputError(f"cpu_load must be in [0, 1], got {self.cpu_load}", "cpu_load")
        if not 0.0 <= self.gpu_duty <= 1.0:
            raise InvalidInputError(f"gpu_duty must be in [0, 1], got {self.gpu_duty}", "gpu_duty")
        if self.mem_mb < 0:
            raise InvalidInputError(f"mem_mb must be >= 0, got {self.mem_mb}", "mem_mb")
        if self.io_workers < 0:
            raise InvalidInputError(f"io_workers must be >= 0, got {self.io_workers}", "io_workers")

    @property
    def is_idle(self) -> bool:
        return (
            self.cpu_load == 0 and self.mem_mb == 0 and self.io_workers == 0 and self.gpu_duty == 0
        )


def stress_ng_path() -> str | None:
    return shutil.which("stress-ng")


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def resolve_backend(requested: StressBackend) -> StressBackend:
    """The backend to use; an explicit stress-ng request fails when it is not installed."""
    if requested is StressBackend.PYTHON:
        return requested
    if stress_ng_path() is not None:
        return StressBackend.STRESS_NG
    if requested is StressBackend.STRESS_NG:
        raise InvalidInputError(
            "stress-ng is not installed (apt-get install stress-ng), or use --backend python",
            field="backend",
        )
    message = "stress-ng is not installed; using plain-Python load generators instead"
    log.warning(message)
    warnings.warn(message, StressNgMissingWarning, stacklevel=2)
    return StressBackend.PYTHON


def stress_commands(
    level: StressLevel,
    backend: StressBackend,
    cores: int,
    temp_dir: str,
    safety_timeout_s: int,
    cpu_load_slice_ms: int = 0,
) -> list[list[str]]:
    """The command lines that produce ``level`` (one process tree per command).

    ``cpu_load_slice_ms`` > 0 makes stress-ng alternate busy slices of that length with idle
    gaps (``--cpu-load-slice``); 0 keeps its default, a random busy time of 0-500 ms.
    """
    if backend is StressBackend.AUTO:
        raise InvalidInputError("resolve the backend before building commands", "backend")
    commands: list[list[str]] = []
    if backend is StressBackend.STRESS_NG:
        base = [stress_ng_path() or "stress-ng", "--timeout", str(safety_timeout_s), "--quiet"]
        if level.cpu_load > 0:
            pct = str(round(level.cpu_load * 100))
            cpu = [*base, "--cpu", str(cores), "--cpu-load", pct, "--cpu-method", "int64"]
            if cpu_load_slice_ms > 0:
                cpu += ["--cpu-load-slice", str(cpu_load_slice_ms)]
            commands.append(cpu)
        if level.mem_mb > 0:
            commands.append(
                [
                    *base,
                    "--vm",
                    "1",
                    "--vm-bytes",
                    f"{level.mem_mb}M",
                    "--vm-hang",
                    "0",
                    "--vm-keep",
                ]
            )
        if level.io_workers > 0:
            commands.append(
                [
                    *base,
                    "--hdd",
                    str(level.io_workers),
                    "--hdd-bytes",
                    "32M",
                    "--temp-path",
                    temp_dir,
                ]
            )
    else:
        fallback = [sys.executable, "-m", "deepedge.profiling.fallback_load"]
        limit = ["--timeout-s", str(safety_timeout_s)]
        if level.cpu_load > 0:
            commands.append(
                [*fallback, "cpu", "--workers", str(cores), "--load", str(level.cpu_load), *limit]
            )
        if level.mem_mb > 0:
            commands.append([*fallback, "mem", "--mb", str(level.mem_mb), *limit])
        if level.io_workers > 0:
            commands.append(
                [*fallback, "io", "--workers", str(level.io_workers), "--dir", temp_dir, *limit]
            )
    if level.gpu_duty > 0:
        commands.append(
            [
                sys.executable, "-m", "deepedge.profiling.gpu_load",
                "--duty", str(level.gpu_duty), "--timeout-s", str(safety_timeout_s),
            ]
        )  # fmt: skip
    return commands


class Stressor:
    """Runs a :class:`StressLevel` for the duration of a ``with`` block.

    ``cores`` defaults to all logical CPUs. ``safety_timeout_s`` bounds every load process
    even if cleanup never runs. Entering an idle level starts nothing.
    """

    def __init__(
        self,
        level: StressLevel,
        backend: StressBackend = StressBackend.AUTO,
        cores: int | None = None,
        safety_timeout_s: int = 1800,
        cpu_load_slice_ms: int = 0,
    ) -> None:
        if level.gpu_duty > 0 and not cuda_available():
            raise InvalidInputError(
                "GPU stress needs CUDA, and no CUDA device is present", "gpu_duty"
            )
        self.level = level
        self.backend = resolve_backend(backend)
        self.cores = cores if cores is not None else (os.cpu_count() or 1)
        self.safety_timeout_s = safety_timeout_s
        self.cpu_load_slice_ms = cpu_load_slice_ms
        self._procs: list[subprocess.Popen[bytes]] = []
        self._temp_dir: str | None = None

    def __enter__(self) -> Stressor:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self._procs:
            return
        self._temp_dir = tempfile.mkdtemp(prefix="deepedge-stress-")
        commands = stress_commands(
            self.level,
            self.backend,
            self.cores,
            self._temp_dir,
            self.safety_timeout_s,
            self.cpu_load_slice_ms,
        )
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            for cmd in commands:
                log.debug("starting stressor: %s", " ".join(cmd))
                self._procs.append(start_child(cmd))
            time.sleep(0.05)
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RunFailedError(
                        f"stressor exited at start (status {proc.returncode}): {stderr_tail(proc)}"
                    )
        except BaseException:
            self.stop()
            raise

    @property
    def pids(self) -> list[int]:
        """Every live process of this stressor (load launchers and their workers)."""
        out: list[int] = []
        for proc in self._procs:
            try:
                parent = psutil.Process(proc.pid)
                out.append(parent.pid)
                out.extend(child.pid for child in parent.children(recursive=True))
            except psutil.NoSuchProcess:
                continue
        return out

    def stop(self) -> None:
        """Terminate every process group and reap it. stress-ng gets SIGKILL at once: it
        keeps no state outside its processes and our temporary directory, and a held 1 GiB
        memory worker ignored SIGTERM for the whole 2 s grace period, at every level visit;
        other loads get SIGTERM, then SIGKILL after the grace period."""
        procs, self._procs = self._procs, []
        first = signal.SIGKILL if self.backend is StressBackend.STRESS_NG else signal.SIGTERM
        stop_children(procs, first)
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None
        with _LIVE_LOCK:
            _LIVE.discard(self)


@atexit.register
def _stop_all_live() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for stressor in live:
        stressor.stop()
