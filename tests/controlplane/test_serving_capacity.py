"""Serving inside the quota: oldest first, each tenant within its cores and GPUs, all
within the data plane's capacity; one that does not fit waits, and says why."""

from __future__ import annotations

import pytest

from deepedge.controlplane.serving_capacity import (
    Demand,
    Quota,
    admit,
    demand_of,
    serving_cores,
)


def d(name: str, tenant: str, at: float, cpus: float, gpus: float = 0.0) -> Demand:
    return demand_of(name, name, tenant, at, 1, cpus, gpus)


QUOTAS = {"alice": Quota(4.0, 0.0), "bob": Quota(4.0, 1.0), "carol": Quota(1.0, 0.0)}


@pytest.mark.parametrize(
    ("demands", "capacity", "admitted", "says"),
    [
        # the hang a hostile pass found: two tenants hold the data plane's 2 CPUs, the
        # third deployment waits, naming who holds them
        (
            [d("a", "alice", 0, 1.0), d("b", "bob", 1, 1.0), d("c", "carol", 2, 1.0)],
            2.0,
            {"a": True, "b": True, "c": False},
            "2 CPUs taken by a (1), b (1)",
        ),
        # a tenant past its own quota waits though the site has room
        (
            [d("c1", "carol", 0, 1.0), d("c2", "carol", 1, 0.5)],
            8.0,
            {"c1": True, "c2": False},
            "tenant's quota is 1 cores",
        ),
        # GPUs count too
        (
            [d("g", "alice", 0, 0.5, 1.0), d("h", "bob", 1, 0.5, 1.0)],
            8.0,
            {"g": False, "h": True},
            "asks 0.5 CPUs and 1 GPUs",
        ),
        # oldest first, whatever the order given
        (
            [d("late", "alice", 5, 2.0), d("early", "bob", 1, 2.0)],
            2.0,
            {"early": True, "late": False},
            "taken by early",
        ),
        # on a cluster (no capacity known here) only the quotas count
        ([d("a", "alice", 0, 3.0), d("b", "bob", 1, 3.0)], None, {"a": True, "b": True}, ""),
    ],
)
def test_admission(demands: list[Demand], capacity: float | None, admitted: dict[str, bool],
                   says: str) -> None:  # fmt: skip
    got = admit(demands, QUOTAS, capacity, 1.0 if capacity is not None else None)
    assert {k: v.admitted for k, v in got.items()} == admitted
    waiting = [v.reason for v in got.values() if not v.admitted]
    assert all(says in r for r in waiting) and all(r.startswith("serving waits") for r in waiting)


def test_replicas_multiply_and_a_tenants_serving_is_what_its_jobs_cannot_use() -> None:
    demands = [demand_of("a", "a", "alice", 0, 3, 0.5, 0.0), d("b", "bob", 1, 1.0)]
    got = admit(demands, QUOTAS, 8.0, 0.0)
    assert demands[0].cpus == 1.5
    assert serving_cores(demands, got, "alice") == (1.5, 0.0)
    assert serving_cores(demands, got, "nobody") == (0.0, 0.0)
