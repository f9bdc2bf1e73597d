"""Admission of queued jobs: FIFO per tenant, within the tenant's quota (pure).

A tenant holds ``jobs`` active or pending jobs, ``cores`` and ``gpus`` (its jobs' and its
deployments' serving share: one quota for both). Its queued jobs, oldest first, are
admitted while each fits: one more job under ``max_active_jobs``, its cores and GPUs
within what is left. The first that does not fit stops the tenant's admission (FIFO: a
small job never overtakes an older large one), and the tenant is then *saturated* (the
API says so to a submitter).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EPS = 1e-9


@dataclass(frozen=True)
class Held:
    jobs: int
    cores: float
    gpus: float


@dataclass(frozen=True)
class Quota:
    max_active_jobs: int
    max_cores: float
    max_gpus: int


@dataclass(frozen=True)
class Queued:
    job_id: str
    cores: float
    gpus: int


@dataclass(frozen=True)
class Admission:
    admitted: tuple[str, ...]
    saturated: bool


def admit(held: Held, quota: Quota, queued: Sequence[Queued]) -> Admission:
    """The oldest of ``queued`` that fit (module docstring)."""
    jobs, cores, gpus = held.jobs, held.cores, held.gpus
    admitted: list[str] = []
    for job in queued:
        fits = (
            jobs < quota.max_active_jobs
            and cores + job.cores <= quota.max_cores + EPS
            and gpus + job.gpus <= quota.max_gpus
        )
        if not fits:
            return Admission(tuple(admitted), saturated=True)
        admitted.append(job.job_id)
        jobs, cores, gpus = jobs + 1, cores + job.cores, gpus + job.gpus
    return Admission(tuple(admitted), saturated=jobs >= quota.max_active_jobs)
