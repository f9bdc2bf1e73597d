"""The process limits of one learner, applied in the child between fork and exec.

The same limits hold wherever a learner runs: under its collector on the service's machine
(:mod:`deepedge.service.collector`) or under its Ray task on a cluster node
(:mod:`deepedge.runtime.ray_learner`). Standard library only: the collector starts fast.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass


@dataclass(frozen=True)
class LearnerLimits:
    mem_mb: int  # address-space limit (RLIMIT_AS)
    cpu_time_s: int | None = None  # CPU seconds (RLIMIT_CPU); SIGKILL 5 s past it
    nofile: int = 1024  # open files (RLIMIT_NOFILE)
    nice: int = 0  # CPU priority below the parent's (0: the same)

    def apply(self) -> None:
        """Cap memory, CPU time, files; no core dumps; lower the CPU priority by ``nice``."""
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
