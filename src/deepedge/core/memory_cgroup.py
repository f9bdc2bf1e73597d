"""A kernel memory cgroup per sandbox run: the bound on everything the run holds.

``RLIMIT_AS`` (:mod:`deepedge.core.limits`) bounds each process's address space: a run of
``n`` processes holds up to ``n`` times it, and the pages of a tmpfs (the sandbox's ``/tmp``
and ``/dev/shm``) lie in no address space at all. The kernel charges a memory cgroup with
what its processes use, tmpfs pages included (charged to the cgroup of the process that
writes them)::

    charged(run) = anonymous memory + page cache + tmpfs pages written   <= limit_mb

Past the limit the kernel reclaims what it can (clean page cache); what it cannot (anonymous
memory, tmpfs without swap) ends in its OOM killer, which kills a process of the run (on v2
all of them: ``memory.oom.group``). Swap is not a way around: ``memsw`` (v1) or
``memory.swap.max`` 0 (v2).

Layouts (:class:`Hierarchy`): cgroup v2 where the unified hierarchy offers the ``memory``
controller to this process's cgroup, else cgroup v1's ``memory`` hierarchy. A run's group is
``<this process's cgroup>/deepedge-sandboxes/run-<pid>-<start>-<random>``: nested under its
creator's own, so it stays inside whatever bounds the creator (a container's limit), and
named after its creator (pid and start time), so :func:`sweep_stale` can remove the groups
of creators that died (a collector killed with the service) without touching a live one.

Lifecycle::

    group = MemoryCgroup.create(limit_mb)          # OSError where none can be made
    child = Popen(..., preexec_fn=group.enter)     # joins between fork and exec: no
    child.wait()                                   # instruction of the run runs outside
    usage = group.usage()                          # peak, OOM kills
    group.remove()                                 # kills what is left, removes it

Standard library only: the collector imports it and must start fast.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import re
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

GROUP_FOLDER = "deepedge-sandboxes"
_RUN_NAME = re.compile(r"^run-(\d+)-(\d+)-[0-9a-f]+$")
_MB = 1024 * 1024
REMOVE_WAIT_S = 5.0  # a run's last processes may take this long to exit after a SIGKILL


class Layout(enum.StrEnum):
    V2 = "v2"  # the unified hierarchy: memory.max, memory.events, memory.peak
    V1 = "v1"  # the memory hierarchy: memory.limit_in_bytes, memory.oom_control


@dataclass(frozen=True)
class Hierarchy:
    """Where this process's memory cgroup lies, and in which layout."""

    layout: Layout
    own: Path  # this process's cgroup folder

    @property
    def runs(self) -> Path:
        return self.own / GROUP_FOLDER

    @classmethod
    def here(cls) -> Hierarchy:
        """This process's memory hierarchy; OSError saying why there is none."""
        with (
            open("/proc/self/cgroup", encoding="utf-8") as a,
            open("/proc/self/mountinfo", encoding="utf-8") as b,
        ):
            found = cls.find(a.read(), b.read())
        if isinstance(found, str):
            raise OSError(errno.ENOENT, found)
        return found

    @classmethod
    def find(cls, proc_cgroup: str, mountinfo: str, root: Path = Path("/")) -> Hierarchy | str:
        """The hierarchy ``/proc/self/cgroup`` and ``/proc/self/mountinfo`` describe (files
        read under ``root``), or why there is none: v2 when its ``cgroup.controllers`` in
        this process's cgroup lists ``memory``, else v1's memory hierarchy."""
        paths: dict[str, str] = {}  # "v2" or "v1" -> this process's cgroup path
        for line in proc_cgroup.splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            if parts[0] == "0" and parts[1] == "":
                paths[Layout.V2] = parts[2]
            elif "memory" in parts[1].split(","):
                paths[Layout.V1] = parts[2]
        mounts: dict[str, tuple[str, str]] = {}  # layout -> (mount root, mount point)
        for line in mountinfo.splitlines():
            fields = line.split()
            if "-" not in fields:
                continue
            after = fields[fields.index("-") + 1 :]
            if len(after) < 3:
                continue
            fstype, options = after[0], after[2].split(",")
            if fstype == "cgroup2":
                mounts.setdefault(Layout.V2, (fields[3], _unescape(fields[4])))
            elif fstype == "cgroup" and "memory" in options:
                mounts.setdefault(Layout.V1, (fields[3], _unescape(fields[4])))
        reasons = []
        for layout in (Layout.V2, Layout.V1):
            if layout not in paths or layout not in mounts:
                continue
            mount_root, mount_point = mounts[layout]
            relative = os.path.relpath(paths[layout], mount_root)
            if relative.startswith(".."):
                reasons.append(f"{layout}: this process's cgroup is outside the mounted part")
                continue
            own = Path(os.path.normpath(root / mount_point.lstrip("/") / relative))
            if layout is Layout.V2:
                controllers = _read(own / "cgroup.controllers").split()
                if "memory" not in controllers:
                    reasons.append(f"cgroup v2 offers no memory controller at {own}")
                    continue
            return cls(layout, own)
        return "; ".join(reasons) or "no memory cgroup hierarchy is mounted"


def _unescape(path: str) -> str:
    """A mountinfo path with its octal escapes (``\\040`` for a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _start_ticks(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (None: no such process): with the
    pid, it names one process for ever (a reused pid starts later)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


@dataclass(frozen=True)
class MemoryUsage:
    """What a run charged to its group, read back when it ended."""

    limit_mb: int
    peak_mb: float
    oom_kills: int  # processes of the run the kernel's OOM killer ended

    @property
    def limit_reached(self) -> bool:
        return self.oom_kills > 0

    def reason(self) -> str:
        return f"memory limit {self.limit_mb} MB reached (peak {self.peak_mb:.0f} MB)"


@dataclass(frozen=True)
class MemoryCgroup:
    """One run's group: ``limit_mb`` of memory for all its processes together."""

    path: Path
    layout: Layout
    limit_mb: int

    @classmethod
    def create(cls, limit_mb: int, hierarchy: Hierarchy | None = None) -> MemoryCgroup:
        """A new, empty group limited to ``limit_mb`` (OSError where none can be made: no
        hierarchy, no permission). Stale groups of dead creators go first."""
        where = hierarchy or Hierarchy.here()
        _prepare_runs_folder(where)
        sweep_stale(where)
        pid = os.getpid()
        name = f"run-{pid}-{_start_ticks(pid) or 0}-{secrets.token_hex(4)}"
        group = cls(where.runs / name, where.layout, limit_mb)
        group.path.mkdir()
        try:
            group._set_limit()
        except OSError:
            group.remove()
            raise
        return group

    def _set_limit(self) -> None:
        limit_b = str(self.limit_mb * _MB)
        if self.layout is Layout.V2:
            _write(self.path / "memory.max", limit_b)
            if (self.path / "memory.swap.max").exists():
                _write(self.path / "memory.swap.max", "0")
            if (self.path / "memory.oom.group").exists():
                _write(self.path / "memory.oom.group", "1")
            return
        # memsw (memory + swap) may never be below the memory limit: memory first
        _write(self.path / "memory.limit_in_bytes", limit_b)
        if (self.path / "memory.memsw.limit_in_bytes").exists():
            _write(self.path / "memory.memsw.limit_in_bytes", limit_b)

    def enter(self) -> None:
        """Move the calling process into the group (``preexec_fn``, between fork and exec:
        what it executes, and every process that starts, is charged here)."""
        join(self.path)

    def pids(self) -> list[int]:
        return [int(p) for p in _read(self.path / "cgroup.procs").split()]

    def usage(self) -> MemoryUsage:
        if self.layout is Layout.V2:
            peak = _read(self.path / "memory.peak") or _read(self.path / "memory.current")
            events = _read(self.path / "memory.events")
        else:
            peak = _read(self.path / "memory.max_usage_in_bytes")
            events = _read(self.path / "memory.oom_control")
        kills = re.search(r"^oom_kill (\d+)$", events, re.MULTILINE)
        return MemoryUsage(self.limit_mb, int(peak.strip() or 0) / _MB,
                           int(kills.group(1)) if kills else 0)  # fmt: skip

    def kill(self) -> None:
        """SIGKILL every process of the group."""
        if self.layout is Layout.V2 and (self.path / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(self.path / "cgroup.kill", "1")
                return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self, wait_s: float = REMOVE_WAIT_S) -> None:
        """Kill what is left of the run and remove the group (logged if it stays)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    log.warning("memory cgroup %s not removed: %s", self.path, exc)
                    return
            self.kill()
            time.sleep(0.02)


def join(path: Path) -> None:
    """Move the calling process into the group at ``path`` (OSError: it cannot)."""
    _write(path / "cgroup.procs", "0")


def _prepare_runs_folder(where: Hierarchy) -> None:
    """The folder of this process's runs; on v2 it hands the memory controller down."""
    where.runs.mkdir(exist_ok=True)
    if where.layout is not Layout.V2:
        return
    for folder in (where.own, where.runs):
        control = folder / "cgroup.subtree_control"
        if "memory" not in _read(control).split():
            # EBUSY where this process's own group holds processes (not the root):
            # the service must run in a group delegated to it, below which it may nest
            _write(control, "+memory")


def sweep_stale(hierarchy: Hierarchy | None = None) -> list[Path]:
    """Remove the groups of runs whose creator is dead (a crash of the service or of a
    collector left them), killing what still runs in them; the removed paths."""
    try:
        where = hierarchy or Hierarchy.here()
        entries = list(where.runs.iterdir())
    except OSError:
        return []
    removed = []
    for entry in entries:
        match = _RUN_NAME.match(entry.name)
        if match is None:
            continue
        pid, ticks = int(match.group(1)), int(match.group(2))
        if _start_ticks(pid) == ticks:
            continue  # its creator runs: the group is in use, or about to be
        MemoryCgroup(entry, where.layout, 0).remove()
        if not entry.exists():
            removed.append(entry)
    return removed


_unavailable_said = False


def for_run(limit_mb: int) -> MemoryCgroup | None:
    """A group for one run, or None where none can be made here: said once per process in
    the log, and the run keeps its rlimits only."""
    global _unavailable_said
    try:
        return MemoryCgroup.create(limit_mb)
    except OSError as exc:
        if not _unavailable_said:
            _unavailable_said = True
            log.warning(
                "no memory cgroup for sandboxed runs (%s): memory is bounded by rlimits "
                "only, per process and without tmpfs", exc.strerror or exc,
            )  # fmt: skip
        return None


def unavailable_reason() -> str | None:
    """None when runs get a memory cgroup here; else why not (a group made and removed)."""
    try:
        MemoryCgroup.create(16).remove()
    except OSError as exc:
        return str(exc.strerror or exc)
    return None
