"""Serving on the live nodes: a placed deployment's replica groups on a real multi-node Ray.

A head and two raylets (``LocalRayCluster``: each node with its ``deepedge-node:``
resource), the data plane started on that cluster with the store's serving table, and one
deployment whose MVSP placement decision puts two single-replica groups on the two raylets
and routes one camera to each, the head spare (``_placed_deployment``). The test checks,
from Ray's own actor table, that every group's replicas run on the node the decision
names; that each camera's requests are answered by the variant on the node its route names;
and that after the raylet of a group's node is killed, the controller re-places that group
on a surviving node (re-solving the placement over the survivors) and records why, while
at least 99 % of the requests are answered (the camera router stays: only the groups move)
and every camera is answered after the move.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from _placed_deployment import (
    CAMERAS,
    NODES,
    WORKERS,
    Placed,
    body,
    check_routed,
    controller,
    group_name,
    group_replicas,
    ray_node_of,
    router_replicas,
    start_placed,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@dataclass
class Cluster:
    placed: Placed
    cluster: Any


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    import ray
    from ray import serve

    from deepedge.runtime.cluster.local_cluster import LocalRayCluster
    from deepedge.runtime.cluster.session import ensure_ray

    if ray.is_initialized():
        ray.shutdown()
    cluster = LocalRayCluster(worker_ids=WORKERS, cpus_per_node=1)
    store = None
    try:
        cluster.start()
        ensure_ray(address=cluster.address)
        served, store = start_placed(tmp_path_factory.mktemp("placed"), cluster.address)
        yield Cluster(served, cluster)
    finally:
        if ray.is_initialized():
            with contextlib.suppress(Exception):  # a cluster half gone may refuse Serve's goodbye
                serve.shutdown()
            ray.shutdown()
        cluster.stop()
        if store is not None:
            store.dispose()


def test_replicas_run_on_the_named_nodes_and_cameras_are_answered_as_routed(
    site: Cluster,
) -> None:
    check_routed(site.placed)


def test_a_lost_node_is_re_placed_and_serving_goes_on(site: Cluster) -> None:
    placed = site.placed
    import ray

    variant, lost = placed.routes["c1"]
    other_camera_node = placed.routes["c2"][1]
    spare = next(n for n in NODES if n not in {lost, other_camera_node})
    router = router_replicas()
    sent: list[tuple[str, float, int]] = []  # (camera, sent at, status: 0 = no answer)
    answered_by: list[tuple[str, str]] = []  # c1's answers: (node, fallback header)
    moved_at: list[float] = []  # when c1 was first answered by its group's new node

    async def load(min_s: float, after_move_s: float, max_s: float) -> None:
        import aiohttp

        headers = {"Authorization": f"Bearer {placed.key}", "Content-Type": "application/json"}
        request = body(placed.image)
        async with aiohttp.ClientSession() as session:

            async def one(camera: str) -> None:
                at, status = time.monotonic(), 0
                try:
                    async with session.post(
                        f"{placed.url}/v2/models/t.cam/infer", data=request,
                        headers={**headers, "deepedge-camera": camera},
                        timeout=aiohttp.ClientTimeout(total=30),
                    ) as answer:  # fmt: skip
                        status = answer.status
                        if answer.status == 200 and camera == "c1":
                            params = (await answer.json())["parameters"]
                            fallback = answer.headers["deepedge-fallback"]
                            answered_by.append((params["node"], fallback))
                            if (params["node"], fallback) == (spare, "0") and not moved_at:
                                moved_at.append(time.monotonic())
                except Exception:
                    status = 0
                sent.append((camera, at, status))

            tasks = []
            start = time.monotonic()
            while True:
                now = time.monotonic()
                if now - start >= max_s or (
                    now - start >= min_s and moved_at and now - moved_at[0] >= after_move_s
                ):
                    break
                tasks += [asyncio.create_task(one(c)) for c in CAMERAS]
                await asyncio.sleep(0.2)  # 5 requests/s per camera, open loop
            await asyncio.gather(*tasks)

    killed_at = time.monotonic()
    site.cluster.stop_node(lost)
    # Ray declares the node dead after about 20 s; the load goes on until 15 s after c1 is
    # answered by its group's new node
    asyncio.run(load(40.0, 15.0, 170.0))
    decisions = ray.get(controller().decisions.remote())
    moved = [d for d in decisions if d.model == "t.cam" and lost in d.lost]
    assert moved, decisions
    assert f"{lost} not alive" in moved[-1].cause and "re-solved" in moved[-1].cause
    assert {g["node"] for g in moved[-1].after["groups"]} == {spare, other_camera_node}
    assert moved_at, answered_by[-10:]
    total = len(sent)
    answered = sum(status == 200 for _, _, status in sent)
    print(f"killed raylet: {answered} of {total} requests answered "
          f"({answered / total:.4f}); c1 on {spare} {moved_at[0] - killed_at:.1f} s "
          "after the kill")  # fmt: skip
    assert total >= 300 and answered >= 0.99 * total, (answered, total)
    for camera in CAMERAS:  # every camera answered after the move
        after = [status for c, at, status in sent if c == camera and at >= moved_at[0]]
        assert after and all(status == 200 for status in after), (camera, after)
    assert answered_by[-1] == (spare, "0"), answered_by[-10:]
    # the router stayed (the same replica, on the controller's node): only groups moved
    assert router_replicas() == router, (router, router_replicas())
    replicas = group_replicas()
    assert replicas.get(group_name(variant, spare)) == {ray_node_of(spare)}, replicas
    assert time.monotonic() - killed_at < 240
