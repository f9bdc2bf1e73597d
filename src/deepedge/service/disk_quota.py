"""Disk quotas of tenants: what a tenant's folders hold, against its ``max_disk_mb``.

The filesystem offers no project quotas here, so the quota is kept by accounting::

    used(t) = blocks allocated under jobs/<t>/ (work, results, checkpoints, logs),
              runs/<t>/ and deployments/<t>/ of the data folder (each inode once,
              no link followed)
    used(t) <= max_disk_mb(t)

Three parts keep it:

1. **Per file**: a learner's ``RLIMIT_FSIZE`` is at most the tenant's quota
   (:meth:`deepedge.service.guardian.Deployment.limits`): no single file passes it.
2. **Per job, fast**: each learner's collector counts its own job's folder every
   :data:`JOB_POLL_S` against the budget :class:`DiskBudget` left when the attempt started,
   ``max_disk_mb - used(t outside this job)``. Past it the collector kills the sandbox and
   records the reason; the job ends FAILED (``DISK_QUOTA``). Reaction time: at most one
   poll plus one walk of the job's folder (milliseconds for a job's few files).
3. **Per tenant, slower**: the manager counts every tenant with running or queued jobs
   each ``disk_poll_s`` (:class:`~deepedge.service.config.ServiceSettings`): jobs that
   fill the quota together, and the service's runs for the tenant. A tenant over its
   quota has its running jobs stopped FAILED and its queued ones held until it frees
   space (deleting jobs).

Not bounded: what a job writes between two polls (its write rate times the reaction time);
files outside these folders (none is writable by a sandbox but its private ``/tmp``,
which is memory: :mod:`deepedge.core.memory_cgroup`).

Standard library only: the collector imports it.
"""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

JOB_POLL_S = 0.1  # the collector's count of its job's folder
DEFAULT_MAX_DISK_MB = 10_240  # a tenant's quota unless the operator sets another
_MB = 1024 * 1024
TENANT_TREES = ("jobs", "runs", "deployments")  # the data folder's per-tenant subtrees


def tenant_folders(data_dir: Path, tenant_id: str) -> list[Path]:
    """The folders of the data folder that hold ``tenant_id``'s files."""
    return [data_dir / tree / tenant_id for tree in TENANT_TREES]


def usage_bytes(folders: Iterable[Path]) -> int:
    """Bytes allocated on disk under ``folders`` (``st_blocks``: sparse files count what
    they hold), folders included, each inode once; links are counted, never followed.
    Files that vanish during the walk are skipped."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(f) for f in folders]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
            info = os.lstat(folder)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                stack.append(entry.path)
            elif (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


class Quota(Protocol):
    """What the manager's poll needs of a tenant (:class:`~deepedge.service.records.Tenant`)."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def max_disk_mb(self) -> int: ...


def tenants_over_quota(data_dir: Path, tenants: Iterable[Quota]) -> dict[str, str]:
    """Tenant id -> the reason, for each of ``tenants`` whose folders hold more than its
    quota (one walk of each tenant's folders)."""
    over = {}
    for tenant in tenants:
        used_mb = usage_bytes(tenant_folders(data_dir, tenant.id)) / _MB
        if used_mb > tenant.max_disk_mb:
            over[tenant.id] = quota_reason(tenant.name, used_mb, tenant.max_disk_mb)
    return over


def quota_reason(tenant: str, used_mb: float, max_disk_mb: int) -> str:
    return f"disk quota of tenant {tenant} reached ({used_mb:.0f} MB of {max_disk_mb} MB)"


@dataclass(frozen=True)
class DiskBudget:
    """What one attempt's collector enforces: ``folder`` (its job's) may grow until the
    tenant's total reaches ``max_disk_mb``; ``elsewhere_mb`` is what the tenant held
    outside ``folder`` when the attempt started."""

    tenant: str  # its name, for the reason
    folder: Path
    max_disk_mb: int
    elsewhere_mb: float

    def reached(self) -> str | None:
        """The reason to stop, once the tenant's total passes its quota (None: not yet)."""
        used_mb = self.elsewhere_mb + usage_bytes([self.folder]) / _MB
        return quota_reason(self.tenant, used_mb, self.max_disk_mb) if (
            used_mb > self.max_disk_mb
        ) else None  # fmt: skip

    @classmethod
    def measure(
        cls, tenant: str, tenant_id: str, data_dir: Path, folder: Path, max_disk_mb: int
    ) -> DiskBudget:
        """The budget of a job in ``folder`` now (one walk of the tenant's folders)."""
        total = usage_bytes(tenant_folders(data_dir, tenant_id))
        here = usage_bytes([folder])
        return cls(tenant, folder, max_disk_mb, max(total - here, 0) / _MB)

    def argv(self) -> list[str]:
        """The collector's options (read back by :func:`from_options`)."""
        return ["--disk-tenant", self.tenant, "--disk-folder", str(self.folder),
                "--disk-quota-mb", str(self.max_disk_mb),
                "--disk-elsewhere-mb", f"{self.elsewhere_mb:.3f}"]  # fmt: skip


def add_budget_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--disk-tenant", default=None)
    parser.add_argument("--disk-folder", default=None)
    parser.add_argument("--disk-quota-mb", type=int, default=None)
    parser.add_argument("--disk-elsewhere-mb", type=float, default=0.0)


def from_options(args: argparse.Namespace) -> DiskBudget | None:
    if args.disk_quota_mb is None or args.disk_folder is None:
        return None
    return DiskBudget(args.disk_tenant or "?", Path(args.disk_folder), args.disk_quota_mb,
                      args.disk_elsewhere_mb)  # fmt: skip
