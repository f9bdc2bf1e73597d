#!/usr/bin/env python
"""Profiling on request: the node agent on n1 profiles and fits its device type's models.

Starts a head and raylet n1 on this machine (LocalRayCluster), an agent on each, asks n1's
agent to run ``deepedge profile --quick`` and ``deepedge perfmodels fit --quick`` on its node,
then plans from the agents' reports with those learned models. Runs stress-ng load for
about 30 s: run it under ``flock /tmp/deepedge-bench.lock`` on a shared machine.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import ray

from deepedge.perfmodel.devices import DeviceType
from deepedge.runtime.cluster.live_cluster import LiveCluster, live_planner, performance_model_for
from deepedge.runtime.cluster.local_cluster import LocalRayCluster
from deepedge.runtime.cluster.node_agent import start_agent
from deepedge.runtime.cluster.session import ensure_ray


def main() -> None:
    started = time.time()
    cluster = LocalRayCluster(worker_ids=("n1",), start_timeout_s=120)
    with cluster, tempfile.TemporaryDirectory() as models:
        ensure_ray(address=cluster.address)
        agents = [start_agent(n, DeviceType.RASPBERRY_PI_4) for n in ("head", "n1")]
        t1 = time.time()
        where = ray.get(agents[1].profile.remote(models, True))
        fitted = sorted(p.name for p in Path(where, "models").iterdir())
        print(f"profiled on n1 in {time.time() - t1:.1f} s -> {where} {fitted}")
        live = LiveCluster(ps_node="head")
        live.wait_for(("head", "n1"))
        spec = live.spec(500)
        print("planning models:", performance_model_for(spec, Path(models))[1])
        plan = live_planner(Path(models))(spec)
        chosen = [(w.id, w.selected, w.shard, w.batch_size) for w in plan.workers]
        print("plan:", chosen, "feasible", plan.feasible)
        del agents
        ray.shutdown()
    print(f"total {time.time() - started:.1f} s")


if __name__ == "__main__":
    main()
