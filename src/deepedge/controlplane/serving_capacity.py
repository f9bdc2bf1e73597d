"""Serving inside the quota: which deployments the data plane serves when not all fit.

A deployment's serving demand is its replicas times each replica's CPUs and GPUs
(``serving``). It counts against its tenant's ``max_cores`` and ``max_gpus`` (with the
tenant's other serving deployments) and against the data plane's capacity (the embedded
Ray head's CPUs and GPUs; on a cluster, Ray places the replicas and only the tenants'
quotas are checked here). Deployments are admitted oldest first; one that does not fit
waits, and its event says why (what it asks, what is taken and by whom), instead of a
replica that Ray never places.

:func:`admit` is pure: deployments in, one :class:`Admission` each out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

EPSILON = 1e-9


@dataclass(frozen=True)
class Demand:
    """What one live deployment asks of the data plane."""

    deployment_id: str
    name: str
    tenant_id: str
    created_at: float
    cpus: float
    gpus: float


@dataclass(frozen=True)
class Quota:
    cores: float
    gpus: float


@dataclass(frozen=True)
class Admission:
    admitted: bool
    reason: str = ""


def demand_of(deployment_id: str, name: str, tenant_id: str, created_at: float,
              replicas: int, cpus: float, gpus: float) -> Demand:  # fmt: skip
    return Demand(deployment_id, name, tenant_id, created_at, replicas * cpus, replicas * gpus)


def admit(
    demands: Sequence[Demand],
    quotas: Mapping[str, Quota],
    capacity_cpus: float | None,
    capacity_gpus: float | None,
) -> dict[str, Admission]:
    """Each deployment's admission, oldest first (module text); a capacity of None is not
    checked."""
    used_by_tenant: dict[str, list[float]] = {}
    cpus_taken = gpus_taken = 0.0
    holders: list[str] = []
    out: dict[str, Admission] = {}
    for d in sorted(demands, key=lambda d: (d.created_at, d.deployment_id)):
        quota = quotas.get(d.tenant_id, Quota(0.0, 0.0))
        cores, gpus = used_by_tenant.setdefault(d.tenant_id, [0.0, 0.0])
        asks = f"{d.cpus:g} CPUs" + (f" and {d.gpus:g} GPUs" if d.gpus else "")
        if cores + d.cpus > quota.cores + EPSILON or gpus + d.gpus > quota.gpus + EPSILON:
            out[d.deployment_id] = Admission(False, f"serving waits: it asks {asks}; its "
                                             f"tenant's quota is {quota.cores:g} cores and "
                                             f"{quota.gpus:g} GPUs, {cores:g} cores and "
                                             f"{gpus:g} GPUs of it serving already")  # fmt: skip
            continue
        over_cpus = capacity_cpus is not None and cpus_taken + d.cpus > capacity_cpus + EPSILON
        over_gpus = capacity_gpus is not None and gpus_taken + d.gpus > capacity_gpus + EPSILON
        if over_cpus or over_gpus:
            held = ", ".join(holders) or "nothing"
            out[d.deployment_id] = Admission(False, f"serving waits: it asks {asks}; the data "
                                             f"plane has {capacity_cpus:g} CPUs and "
                                             f"{capacity_gpus or 0:g} GPUs, {cpus_taken:g} "
                                             f"CPUs taken by {held}")  # fmt: skip
            continue
        used_by_tenant[d.tenant_id] = [cores + d.cpus, gpus + d.gpus]
        cpus_taken, gpus_taken = cpus_taken + d.cpus, gpus_taken + d.gpus
        holders.append(f"{d.name} ({d.cpus:g})")
        out[d.deployment_id] = Admission(True)
    return out


def serving_cores(demands: Sequence[Demand], admitted: Mapping[str, Admission],
                  tenant_id: str) -> tuple[float, float]:  # fmt: skip
    """The cores and GPUs a tenant's admitted deployments serve with (what its jobs' own
    quota leaves out)."""
    mine = [d for d in demands if d.tenant_id == tenant_id and admitted[d.deployment_id].admitted]
    return sum(d.cpus for d in mine), sum(d.gpus for d in mine)
