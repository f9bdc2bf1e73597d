"""Starting and stopping the local Ray runtime, and placing actors on devices.

Embedded default: ``ray.init(num_cpus=..., include_dashboard=False)`` on this machine, with
every actor asking for 0 CPUs so that the emulated testbed (a PS, a data store and up to a
handful of workers) fits on a 2-core host; the emulation paces the work instead.

On a real cluster each device joins with ``ray start --address=HEAD
--resources='{"deepedge-node:<worker-id>": 1}'``; :func:`actor_options` then pins the
worker's actor to that node by asking for a sliver of that resource.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ray

log = logging.getLogger(__name__)

NODE_RESOURCE_PREFIX = "deepedge-node:"


def ensure_ray(num_cpus: int | None = None) -> bool:
    """Start a local Ray unless one is running; True when this call started it."""
    if ray.is_initialized():
        return False
    cpus = num_cpus if num_cpus is not None else max(1, min(4, os.cpu_count() or 1))
    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        ignore_reinit_error=True,
    )
    log.info("started a local Ray with %d CPUs", cpus)
    return True


@contextmanager
def ray_session(num_cpus: int | None = None) -> Iterator[None]:
    """Ray for the duration of the block; shut down only if this block started it."""
    started = ensure_ray(num_cpus)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def actor_options(node_id: str | None = None) -> dict[str, Any]:
    """Ray options of an actor: pinned to ``node_id``'s node when the cluster names it."""
    options: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0, "max_concurrency": 1}
    if node_id is not None:
        resource = NODE_RESOURCE_PREFIX + node_id
        if resource in ray.cluster_resources():
            options["resources"] = {resource: 0.001}
    return options
