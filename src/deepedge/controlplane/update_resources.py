"""What an update's learner asks for: resources that fit the cluster it runs on.

A learner's ``mem_mb`` is one figure with two uses (the job manifest's): the learner's
address-space limit (``RLIMIT_AS``, :class:`deepedge.core.limits.LearnerLimits`) and, where
learners run as Ray tasks, the task's ``memory`` request. A learner that joins Ray maps its
node's whole object store into its address space, so::

    mem_mb >= object_store_mb + LEARNER_BASE_MB                       (1: it can start)
    derived mem_mb = object_store_mb + LEARNER_BASE_MB + DATA_COPIES * data_mb
    some alive node n: cpus <= CPU(n), gpus <= GPU(n), mem_mb <= memory(n)
                                                      (2: on Ray, a node can take it)

``object_store_mb`` is the largest object store of the alive nodes (the learner may run on
any of them, or on the service's host joined to the cluster). A stated ``mem_mb`` that
breaks (1) is refused naming both figures; a request no node can take (2) is refused naming
the request and the largest node. Without a cluster the learner starts a private Ray sized
by Ray from the host's memory, and nothing places it: the default is then an address-space
limit only (:data:`NO_CLUSTER_MEM_MB`). Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepedge.cluster.live_nodes import LiveNodes
from deepedge.controlplane.deployment_spec import UpdateResources
from deepedge.core.errors import InvalidInputError

# Address space of a learner's interpreter with torch and Ray's core worker, the object
# store aside: a driver measured 2133 MiB of VmSize (80 MiB object store included) on
# 2026-11-27 (Ray 2.60, torch CPU); rounded up for the allocator's per-thread arenas.
LEARNER_BASE_MB = 4096
DATA_COPIES = 4  # the staged arrays, their shards and tensors a learner holds at once
NO_CLUSTER_MEM_MB = 1_048_576  # an address-space limit only: nothing places the learner


@dataclass(frozen=True)
class LearnerRequest:
    """The resources of one update job (its manifest's ``resources``)."""

    cpus: float
    gpus: int
    mem_mb: int
    derived: bool  # mem_mb was derived, not stated
    object_store_mb: float | None  # the mapping it was sized against (None: no cluster)


def _largest_store(snapshot: LiveNodes) -> tuple[float, str]:
    alive = snapshot.alive()
    if not alive:
        return 0.0, "no alive node"
    node = max(alive, key=lambda n: (n.resources.object_store_mb, n.node_id))
    return node.resources.object_store_mb, node.node_id


def learner_request(
    resources: UpdateResources,
    data_mb: float,
    snapshot: LiveNodes | None,
    on_ray: bool = False,
    field: str = "update.resources.mem_mb",
) -> LearnerRequest:
    """The job's resources (module docstring); ``on_ray``: the service runs learners as
    Ray tasks, so (2) must hold too. Raises InvalidInputError naming the figures."""
    if snapshot is None:
        mem_mb = resources.mem_mb if resources.mem_mb is not None else NO_CLUSTER_MEM_MB
        return LearnerRequest(resources.cpus, resources.gpus, mem_mb,
                              resources.mem_mb is None, None)  # fmt: skip
    store_mb, store_node = _largest_store(snapshot)
    floor_mb = math.ceil(store_mb) + LEARNER_BASE_MB
    if resources.mem_mb is None:
        mem_mb = floor_mb + math.ceil(DATA_COPIES * data_mb)
    elif resources.mem_mb < floor_mb:
        raise InvalidInputError(
            f"{field}: {resources.mem_mb} MiB is the learner's address-space limit, and it "
            f"maps Ray's object store of {store_mb:.0f} MiB (node {store_node}) besides "
            f"{LEARNER_BASE_MB} MiB for its interpreter, torch and Ray: give at least "
            f"{floor_mb} MiB, or leave mem_mb out to derive it",
            field=field,
            mem_mb=resources.mem_mb,
            object_store_mb=store_mb,
            needed_mb=floor_mb,
        )
    else:
        mem_mb = resources.mem_mb
    if on_ray:
        _check_placeable(resources, mem_mb, snapshot, resources.mem_mb is None, field)
    return LearnerRequest(resources.cpus, resources.gpus, mem_mb,
                          resources.mem_mb is None, store_mb)  # fmt: skip


def _check_placeable(
    resources: UpdateResources, mem_mb: int, snapshot: LiveNodes, derived: bool, field: str
) -> None:
    alive = snapshot.alive()
    for node in alive:
        r = node.resources
        if resources.cpus <= r.cpus and resources.gpus <= r.gpus and mem_mb <= r.memory_mb:
            return
    biggest = max(alive, key=lambda n: n.resources.memory_mb, default=None)
    has = "no alive node"
    if biggest is not None:
        r = biggest.resources
        has = (f"the most Ray memory is {r.memory_mb:.0f} MiB (node {biggest.node_id}, "
               f"{r.cpus:g} CPU, {r.gpus:g} GPU)")  # fmt: skip
    how = (f"derived: object store {_largest_store(snapshot)[0]:.0f} MiB + "
           f"{LEARNER_BASE_MB} MiB + data" if derived else "stated")  # fmt: skip
    raise InvalidInputError(
        f"{field}: no alive node of the cluster at {snapshot.ray_address} can take the "
        f"learner's {resources.cpus:g} CPU, {resources.gpus} GPU, {mem_mb} MiB ({how}); {has}. "
        "Give the nodes a smaller object store (ray start --object-store-memory) or more "
        "memory, or fewer CPUs/GPUs",
        field=field,
        mem_mb=mem_mb,
    )
