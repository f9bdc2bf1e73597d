"""The processes of one learner attempt, found to be stopped together and named.

A collector runs in a session of its own (:mod:`deepedge.service.supervisor`), and starts
the learner, which may start processes of its own: a private Ray (its GCS, raylet,
dashboard and workers), bubblewrap's helpers, a tenant's subprocesses. Not all of them stay
where a signal to the collector's process group reaches: bubblewrap leads a process group
of its own, a daemon calls ``setsid``, and a process whose parent ended is re-parented
away from the collector's tree. The attempt's processes are therefore taken as:

* the collector and every process descended from it, read before the stop begins (a
  process that later leaves the session or the tree is still in this snapshot), and
* every process still in the collector's session after the stop (one started meanwhile).

:func:`end` kills what of them still runs (SIGKILL: the collector's SIGTERM and its grace
came first) and says which of them are gone. A process is held as a ``psutil.Process``,
which checks its start time before every signal, so a pid reused since is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psutil

POLL_S = 0.02
KILL_WAIT_S = 2.0  # from SIGKILL to the kernel's end of a process (a loaded host)


@dataclass(frozen=True)
class Seen:
    """A process of the attempt as read before its stop (its name: once signalled it may
    be a zombie, whose name cannot be read)."""

    process: psutil.Process
    name: str


@dataclass(frozen=True)
class StoppedProcess:
    """A process of an attempt that ran when its stop began and is gone after it."""

    pid: int
    name: str

    def describe(self) -> str:
        return f"{self.pid} ({self.name})"


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        return False


def session_members(session: int) -> list[psutil.Process]:
    """The processes whose session id is ``session`` (the collector's pid)."""
    members: list[psutil.Process] = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if proc.pid != session and os.getsid(proc.pid) == session:
                members.append(proc)
    return members


def snapshot(collector: int) -> list[Seen]:
    """The collector, its descendants and its session's members now (module docstring);
    empty when the collector is gone."""
    try:
        root = psutil.Process(collector)
        found = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    return [Seen(proc, _name(proc)) for proc in _unique([*found, *session_members(collector)])]


def _unique(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    seen: dict[int, psutil.Process] = {}
    for proc in processes:
        seen.setdefault(proc.pid, proc)
    return list(seen.values())


def _name(proc: psutil.Process) -> str:
    """Its executable's name, with the module a Python runs (``python3 -m
    deepedge.service.collector``)."""
    try:
        name, argv = proc.name(), proc.cmdline()
    except psutil.Error:
        return "?"
    if "-m" in argv[:-1]:
        return f"{name} -m {argv[argv.index('-m') + 1]}"
    return name


def end(before: Sequence[Seen], session: int) -> list[StoppedProcess]:
    """Kill what still runs of ``before`` and of ``session``'s members; the processes of
    ``before`` that are gone, by pid (one that would not die is not listed)."""
    held = [seen.process for seen in before]
    left = [proc for proc in _unique([*held, *session_members(session)]) if not _gone(proc)]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline and not all(_gone(proc) for proc in left):
        time.sleep(POLL_S)
    return sorted(
        (StoppedProcess(seen.process.pid, seen.name) for seen in before if _gone(seen.process)),
        key=lambda stopped: stopped.pid,
    )
