"""The process limits of one learner, applied in the child between fork and exec.

The same limits hold wherever a learner runs: under its collector on the service's machine
(:mod:`deepedge.service.collector`) or under its Ray task on a cluster node
(:mod:`deepedge.runtime.cluster.ray_learner`), and for every other sandboxed run of tenant code.
Standard library only: the collector starts fast.
"""

from __future__ import annotations

import argparse
import enum
import os
import resource
from dataclasses import dataclass


class LimitReached(enum.StrEnum):
    """Which limit ended a run, as its collector records it (none: it ended by itself)."""

    MEMORY = "memory"  # its memory cgroup's OOM killer (deepedge.core.memory_cgroup)
    DISK = "disk"  # its tenant's disk quota (deepedge.service.disk_quota)


@dataclass(frozen=True)
class LearnerLimits:
    mem_mb: int  # address-space limit (RLIMIT_AS)
    cpu_time_s: int | None = None  # CPU seconds (RLIMIT_CPU); SIGKILL 5 s past it
    nofile: int = 1024  # open files (RLIMIT_NOFILE)
    nice: int = 0  # CPU priority below the parent's (0: the same)
    max_processes: int | None = None  # processes and threads of the user (RLIMIT_NPROC)
    max_file_mb: int | None = None  # largest file it may write (RLIMIT_FSIZE)

    def apply(self) -> None:
        """Cap memory, CPU time, files, processes (of its user: a sandboxed tenant's own)
        and file size; no core dumps; lower the CPU priority by ``nice``."""
        if self.nice:
            os.nice(self.nice)
            # With autogroup scheduling the kernel shares the CPU between sessions first, and
            # a process's nice value only counts inside its own: lower the session's as well.
            try:
                with open("/proc/self/autogroup", "w") as group:
                    group.write(str(self.nice))
            except OSError:
                pass
        limit_b = self.mem_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit_b, limit_b))
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if self.cpu_time_s is not None:
            resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_time_s, self.cpu_time_s + 5))
        if self.max_processes is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (self.max_processes, self.max_processes))
        if self.max_file_mb is not None:
            size_b = self.max_file_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_FSIZE, (size_b, size_b))

    def argv(self) -> list[str]:
        """The same limits as command-line options (the collector's and the Ray driver's),
        read back by :func:`from_options`."""
        options = ["--mem-mb", str(self.mem_mb), "--nofile", str(self.nofile),
                   "--nice", str(self.nice)]  # fmt: skip
        named = {
            "--cpu-time-s": self.cpu_time_s,
            "--max-processes": self.max_processes, "--max-file-mb": self.max_file_mb,
        }  # fmt: skip
        for flag, value in named.items():
            if value is not None:
                options += [flag, str(value)]
        return options


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """The options of :meth:`LearnerLimits.argv` on a parser."""
    parser.add_argument("--mem-mb", type=int, required=True)
    parser.add_argument("--cpu-time-s", type=int, default=None)
    parser.add_argument("--nofile", type=int, default=1024)
    parser.add_argument("--nice", type=int, default=0)
    parser.add_argument("--max-processes", type=int, default=None)
    parser.add_argument("--max-file-mb", type=int, default=None)


def from_options(args: argparse.Namespace) -> LearnerLimits:
    """The limits a namespace parsed with :func:`add_limit_options` holds."""
    return LearnerLimits(
        mem_mb=args.mem_mb, cpu_time_s=args.cpu_time_s, nofile=args.nofile, nice=args.nice,
        max_processes=args.max_processes, max_file_mb=args.max_file_mb,
    )  # fmt: skip
