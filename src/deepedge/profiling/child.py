"""Child processes of the profiler: started in their own group, always reaped.

Profiling children (load generators, the background app, the parameter server, peers) are
plain ``python -m deepedge.profiling.<module>`` processes, never ``multiprocessing`` spawns,
so starting one never re-imports the caller's main module. Each child

* runs in a new session, so ``killpg`` reaches every process it forks;
* gets ``PR_SET_PDEATHSIG = SIGKILL``, so it dies with its parent even after a SIGKILL;
* is stopped by :func:`stop_children`: SIGTERM (or a given signal) to the group, SIGKILL
  after a grace period,
  then SIGKILL to any descendant that left the group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

import psutil

_PR_SET_PDEATHSIG = 1
TERM_GRACE_S = 2.0


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL the calling process when its parent dies (Linux)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def start_child(
    cmd: list[str],
    stdin: int | None = subprocess.DEVNULL,
    stdout: int | None = subprocess.DEVNULL,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own session with parent-death SIGKILL; stderr is piped."""
    return subprocess.Popen(
        cmd,
        stdin=stdin,
        stdout=stdout,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=die_with_parent,
        env=env,
    )


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def stop_children(
    procs: list[subprocess.Popen[bytes]], first: signal.Signals = signal.SIGTERM
) -> None:
    """Signal every child's process group (``first``, then SIGKILL) and reap it."""
    tree = [child for proc in procs for child in descendants(proc.pid)]
    for proc in procs:
        _signal_group(proc.pid, first)
    deadline = time.monotonic() + TERM_GRACE_S
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=TERM_GRACE_S)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
    # psutil checks the creation time, so a recycled pid is never hit
    for child in tree:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            child.kill()


def stderr_tail(proc: subprocess.Popen[bytes], limit: int = 300) -> str:
    if proc.stderr is None or proc.poll() is None:
        return ""
    with contextlib.suppress(OSError, ValueError):
        return proc.stderr.read().decode(errors="replace").strip()[-limit:]
    return ""
