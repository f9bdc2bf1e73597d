"""A graceful leave of a deepedge node: drain it, then go (``SIGTERM`` to ``deepedge agent``).

:func:`drain_node` is the agent's side:

1. the registry marks the node DRAINING
(:meth:`~deepedge.runtime.cluster.node_agent.NodeRegistry.drain`):
   nothing new is placed on it, a model update's watch moves its worker or its parameter
   server off it without a strike (:mod:`deepedge.runtime.training.update`), the data plane moves
   its replicas;
2. it waits, at most ``timeout_s``, until no deepedge work holds the node's
   ``deepedge-node:<id>`` resource (every actor or task pinned to the node asks for a
   sliver of it): by Ray's resource view, in use = total - available - the agent's own
   share;
3. it hands back what it saw (:class:`DrainOutcome`); the caller then leaves (LEFT) and
   stops its raylet, also after a timeout (the work left is then cut off, as by a loss).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from deepedge.runtime.cluster.session import node_resource

log = logging.getLogger(__name__)

DEFAULT_DRAIN_TIMEOUT_S = 60.0
POLL_S = 0.25
_RESOURCE_QUANTUM = 1e-4  # Ray keeps resources in fixed point: less than this is nothing


@dataclass(frozen=True)
class DrainOutcome:
    """How a drain ended."""

    node_id: str
    drained: bool  # no deepedge work was left on the node (False: the timeout came first)
    waited_s: float
    work_left: float  # the node's resource still in use by others (0 when drained)

    def describe(self) -> str:
        if self.drained:
            return f"node {self.node_id} drained in {self.waited_s:.1f} s: no deepedge work left"
        return (
            f"node {self.node_id} still held {self.work_left:.4g} of its resource after "
            f"{self.waited_s:.1f} s: leaving anyway (that work is cut off)"
        )


def work_on_node(node_id: str, own_share: float) -> float:
    """How much of ``node_id``'s ``deepedge-node:`` resource others use (Ray connected)."""
    resource = node_resource(node_id)
    total = float(ray.cluster_resources().get(resource, 0.0))
    free = float(ray.available_resources().get(resource, 0.0))  # absent: all of it in use
    used = total - free - own_share
    return used if used >= _RESOURCE_QUANTUM / 2 else 0.0


def drain_node(
    registry_handle: Any,
    node_id: str,
    timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
    *,
    own_share: float = 0.0,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
) -> DrainOutcome:
    """Mark ``node_id`` DRAINING and wait until its work moved (module docstring)."""
    ray.get(registry_handle.drain.remote(node_id), timeout=30)
    started = clock()
    log.info("node %s drains: waiting up to %.0f s for its work to move", node_id, timeout_s)
    while True:
        left = work_on_node(node_id, own_share)
        waited_s = clock() - started
        if left == 0.0 or waited_s >= timeout_s:
            outcome = DrainOutcome(node_id, left == 0.0, waited_s, left)
            log.info("%s", outcome.describe())
            return outcome
        time.sleep(min(poll_s, max(0.0, timeout_s - waited_s)))
