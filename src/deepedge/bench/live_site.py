"""The control plane on a live site: ``python -m deepedge.bench.live_site``.

What an operator runs when the service manages a real Ray cluster. On this machine it
starts one (:class:`~deepedge.runtime.local_cluster.LocalRayCluster`: a head and raylets
n1, n2, n3, each a ``ray start`` with its own ports and ``deepedge-node:`` resource), an
agent per node (the head a Raspberry Pi 4, n1 and n2 Jetson Nanos, n3 a Jetson TX2), and
the service as a child process with ``--ray-address``, ``--trusted-tenants`` and its data
plane on that cluster. Through the API only, it then creates:

1. **A placed deployment on the live nodes** (``target.live``, n1-n3, the parameter server
   on the head) with an MVSP problem that puts one camera nearest each worker node, the head
   spare. Three cameras, each with its ``deepedge-camera`` id, start once their readiness
   probe (``GET .../ready``) is answered by their own group, then send open-loop traffic
   and the true labels of what was sampled. ``route_match`` is the share of the requests
   answered from then until the update that the variant on the node the decision routes
   their camera to answered.
2. **A node lost during an update and traffic.** An update is requested; once its job
   reports its first finished epoch (``--kill-after-epochs``: so the loss falls in its
   training, however fast it trains), the raylet of a worker node that also serves a camera
   is killed (SIGKILL).
   ``serve_avail_node_loss`` is the share of the requests sent from the kill until the
   update's version, the move of the lost camera's group, and at least ``--after-kill-s``
   that were answered; ``update_recovered`` is 1 when the update registered its version
   after relaunching without the lost node (its ``allocation`` event's launches).
3. **Two edge-server deployments on a live node** (``kind: edge-server``, ``live: true``:
   the head), whose Ekya windows plan both streams' inference and retraining shares on that
   node. The streams' inference at the full frame rate takes 3 and 2 of the node's 8
   logical CPUs (Ekya's ``D_v``), so a window's share buys more threads than a replica's
   default one. ``ekya_share_applied`` is the share of the streams whose answers, from
   ``--settle-s`` after each window's allocation event to the next, all came from a replica
   on that node that reports that allocation's share and runs its forward passes with the
   threads the share gives (``max(1, round(share))`` on a node without a GPU).

``on_named_nodes`` is, over every alive replica of the placed deployment's groups (before
the loss), every actor of the update's first launch (read just before the kill) and every
replica of the edge deployments, the share on the Ray node of the agent their decision
names, from Ray's own actor table.

Last line: ``RESULT nodes=... on_named_nodes=... route_match=... ekya_share_applied=...
serve_avail_node_loss=... update_recovered=...``; ``--out DIR`` keeps every request and
the deployments' events.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from deepedge.api.local_server import ServerProcess, free_port, make_tenant
from deepedge.bench.controlplane import Client, wait_until
from deepedge.bench.report import machine_description, result_line
from deepedge.dataplane.serving_table import InferenceShare
from deepedge.service.config import ServiceSettings
from deepedge.service.sandbox import Isolation

log = logging.getLogger(__name__)

TOKEN = "tok-live-site"
WORKERS = ("n1", "n2", "n3")
NODES = ("head", *WORKERS)
DEVICES = {"head": "raspberry-pi-4", "n1": "jetson-nano", "n2": "jetson-nano",
           "n3": "jetson-tx2"}  # fmt: skip
CAMERAS = {"c1": "n1", "c2": "n2", "c3": "n3"}  # camera -> the worker node nearest it
EDGE_NODE = "head"
EDGE_CPUS = 8  # logical: so that a window's shares differ from a replica's default thread
PLACED = "cams"
EDGES = ("edge-a", "edge-b")
EDGE_INFERENCE = {"edge-a": 3.0, "edge-b": 2.0}  # D_v: logical CPUs at the full frame rate


@dataclass(frozen=True)
class Scale:
    camera_rate: float  # requests per second per camera
    window_s: float
    window_size: int
    epochs: int
    min_samples: int  # labelled samples stored before the update is asked for


FULL = Scale(camera_rate=4.0, window_s=5.0, window_size=100, epochs=6, min_samples=300)


def placement_problem() -> dict[str, Any]:
    """One camera nearest each worker node; one b8 instance fits a node and carries one
    camera; the head is far from every camera, spare for a re-placement."""
    return {
        "name": "site",
        "sources": [{"id": c, "demands": [{"model": "cam", "rate_rps": 20.0,
                                           "max_latency_ms": 800.0}]} for c in CAMERAS],
        "edge_nodes": [{"id": n, "memory_mb": 1500.0} for n in NODES],
        "links": [{"a": c, "b": n, "delay_ms": 1.0 if n == near else 20.0 if n == "head"
                   else 5.0} for c, near in CAMERAS.items() for n in NODES],
        "models": [{"id": "cam", "variants": [
            {"id": "b1", "batch_size": 1, "latency_ms": 5.0, "memory_mb": 900.0,
             "max_load_rps": 6.0},
            {"id": "b8", "batch_size": 8, "latency_ms": 20.0, "memory_mb": 1400.0,
             "max_load_rps": 40.0}]}],
    }  # fmt: skip


def placed_spec(scale: Scale) -> dict[str, Any]:
    return {
        "name": PLACED,
        "labeller": "ground-truth",
        "target": {"live": True, "nodes": list(WORKERS)},
        "placement": placement_problem(),
        "window_s": scale.window_s,
        "stream": {"window_size": scale.window_size, "onset_window": 1, "ramp_windows": 1},
        "update": {"ps_node": "head", "epochs": scale.epochs, "label_fraction": 1.0,
                   "recent_windows": 4},
        "trigger": {"accuracy_threshold": 0.0},  # updates only on request
        "canary": {"windows": 0},
        "base_windows": 1,
        "base_epochs": 2,
        "serving": {"cpus": 0.25, "sample_fraction": 1.0, "max_batch_size": 8},
    }  # fmt: skip


def edge_specs(scale: Scale) -> list[dict[str, Any]]:
    """Two streams on the live edge node, drifting at different windows: each Ekya window
    plans both."""
    return [
        {
            "name": name,
            "labeller": "ground-truth",
            "target": {"kind": "edge-server", "live": True, "nodes": [EDGE_NODE],
                       "inference_gpus": EDGE_INFERENCE[name]},
            "window_s": scale.window_s,
            "stream": {"seed": 7 + k, "window_size": scale.window_size, "onset_window": 1 + k,
                       "ramp_windows": 1},
            # 8 windows of a camera at camera_rate: enough samples for a window to train on
            "update": {"policy": "ekya-window", "label_fraction": 1.0, "recent_windows": 8,
                       "retraining_window_s": 30.0, "epochs": 2},
            "trigger": {"accuracy_threshold": 0.0, "sample_count": 150},
            "canary": {"windows": 0},
            "base_windows": 1,
            "base_epochs": 2,
            "serving": {"sample_fraction": 1.0, "max_batch_size": 8},
        }
        for k, name in enumerate(EDGES)
    ]  # fmt: skip


# -- what the cameras saw (pure) ------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One request of a camera: when it was sent, and who answered (None: no answer)."""

    camera: str
    sent_at: float
    replica: str | None  # "<variant>@<node>"
    threads: int | None = None  # the replica's forward thread's torch threads
    share: float | None = None  # the Ekya share the replica reports (edge servers)
    fallback: bool = False  # the router sent it past the group its camera is routed to
    status: int = 200  # the HTTP status (0: no answer within the client's 30 s)
    took_s: float = 0.0


def route_match(answers: Iterable[Answer], routes: dict[str, str], until: float) -> float:
    """The share of the answered requests sent before ``until`` that the replica the
    decision routes their camera to (``routes``: camera -> ``variant@node``) answered."""
    judged = [a for a in answers if a.sent_at < until and a.replica is not None]
    if not judged:
        return 0.0
    return sum(a.replica == routes.get(a.camera) for a in judged) / len(judged)


def answered_by(answers: Iterable[Answer], since: float, until: float) -> dict[str, Counter[str]]:
    """camera -> how many of its requests sent in [since, until) each replica answered
    (``-``: none; a ``*`` after a replica: the router's fallback)."""
    out: dict[str, Counter[str]] = {}
    for a in answers:
        if since <= a.sent_at < until:
            name = "-" if a.replica is None else a.replica + ("*" if a.fallback else "")
            out.setdefault(a.camera, Counter())[name] += 1
    return out


def availability(answers: Iterable[Answer], since: float, until: float) -> tuple[float, int]:
    """(answered / sent, sent) over the requests sent in [since, until)."""
    window = [a for a in answers if since <= a.sent_at < until]
    if not window:
        return 0.0, 0
    return sum(a.replica is not None for a in window) / len(window), len(window)


def share_threads(share: float) -> int:
    """The CPU threads an inference share buys on a server without a GPU (one replica)."""
    return InferenceShare(share).threads()


def share_applied(
    answers: Iterable[Answer], camera: str, allocations: list[tuple[float, float]], node: str,
    settle_s: float,
) -> float:  # fmt: skip
    """The share of ``camera``'s answers given by a replica on ``node`` that reports the
    share of the allocation in force and runs with its threads (``allocations``: (recorded
    at, share), oldest first), judging the requests sent from ``settle_s`` after each
    allocation (the replicas' long poll of the table) to the next."""
    judged: list[bool] = []
    for k, (at, share) in enumerate(allocations):
        until = allocations[k + 1][0] if k + 1 < len(allocations) else float("inf")
        judged += [(a.replica or "").rsplit("@", 1)[-1] == node
                   and a.share is not None and abs(a.share - share) < 1e-6
                   and a.threads == share_threads(share)
                   for a in answers if a.camera == camera and a.replica is not None
                   and at + settle_s <= a.sent_at < until]  # fmt: skip
    return sum(judged) / len(judged) if judged else 0.0


def ekya_allocations(history: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(recorded at, inference share) of each Ekya window's allocation for the stream, in
    the order recorded."""
    out = []
    for event in history:
        detail = event["detail"]
        if event["kind"] == "allocation" and detail.get("policy") == "ekya-window":
            own = next(s for s in detail["streams"] if s["stream_id"] == detail["stream"])
            out.append((float(event["at"]), float(own["inference_gpus"])))
    return out


def update_recovered(history: list[dict[str, Any]], victim: str) -> bool:
    """Whether the update registered its version after losing ``victim``: by its
    ``allocation`` event, launched first with a worker on ``victim``, relaunched, and ending
    on nodes without it."""
    for event in history:
        if event["kind"] == "allocation" and event["version"] == 2:
            launches = event["detail"].get("placements") or []
            return (len(launches) >= 2 and victim in launches[0].values()
                    and victim not in launches[-1].values())  # fmt: skip
    return False


def update_outcome(history: list[dict[str, Any]]) -> str:
    """The update's decision or failure, as its events say."""
    said = [e["message"] for e in history
            if (e["kind"] in {"allocation", "job-failed"} and e["version"] == 2)]  # fmt: skip
    return "; ".join(said) or "nothing recorded"


# -- the site -------------------------------------------------------------------------------


@dataclass
class Cameras:
    """Open-loop cameras on one event loop in a thread, each recording every request."""

    client: Client
    answers: list[Answer] = field(default_factory=list)
    ready: dict[str, float] = field(default_factory=dict)  # camera -> when its probe passed
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(
        self, spec: dict[str, Any], cameras: Iterable[str | None], rate: float, site_dir: Path
    ) -> None:
        """Cameras of the deployment ``spec`` describes, sending its stream's windows (the
        window of the deployment's clock) at ``rate`` requests per second each."""
        from deepedge.controlplane.deployment_spec import DeploymentSpec
        from deepedge.controlplane.site import Site

        key = self.client.post(f"/v1/deployments/{spec['name']}/keys", {})
        stream = Site(site_dir).stream(DeploymentSpec.model_validate(spec))
        thread = threading.Thread(
            target=lambda: asyncio.run(self._run(key, stream, spec["window_s"], list(cameras),
                                                 rate)),
            daemon=True, name=f"cameras-{spec['name']}",
        )  # fmt: skip
        thread.start()
        self._threads.append(thread)

    async def _run(
        self, key: dict[str, Any], stream: Any, window_s: float, cameras: list[str | None],
        rate: float,
    ) -> None:  # fmt: skip
        windows: dict[int, Any] = {}

        def window(t: int) -> Any:
            if t not in windows:
                windows[t] = stream.window(t)
            return windows[t]

        started = time.monotonic()

        def current() -> Any:  # window 0 trained the first version
            return window(1 + int((time.monotonic() - started) // window_s))

        await asyncio.gather(*(self._one(key, current, camera, rate) for camera in cameras))

    async def _one(
        self, key: dict[str, Any], window: Callable[[], Any], camera: str | None, rate: float
    ) -> None:
        import aiohttp
        import numpy as np

        from deepedge.dataplane.camera import infer_body
        from deepedge.dataplane.replica_groups import CAMERA_HEADER
        from deepedge.runtime.camera_router import FALLBACK_HEADER

        headers = {"Authorization": f"Bearer {key['key']}"}
        if camera is not None:
            headers[CAMERA_HEADER] = camera
        base = key["endpoint"].split("/v2/")[0]
        infer_url = f"{base}/v2/models/{key['model']}/infer"
        feedback_url = f"{base}/v2/models/{key['model']}/feedback"
        ready_url = f"{base}/v2/models/{key['model']}/ready"
        rng = np.random.default_rng(sum(map(ord, camera or "")))
        tasks: set[asyncio.Task[None]] = set()
        timeout = aiohttp.ClientTimeout(total=30.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            # as a client behind a readiness probe: traffic once its own group answers
            while not self._stop.is_set():
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(ready_url, headers=headers) as probe:
                        if probe.status == 200 and probe.headers.get(FALLBACK_HEADER) != "1":
                            break
                await asyncio.sleep(1.0)
            self.ready[camera or ""] = time.time()

            async def one(image: Any, label: int) -> None:
                sent_at, status, params, fallback = time.time(), 0, {}, False
                body, extra = infer_body(image)
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                    async with session.post(infer_url, data=body,
                                            headers={**extra, **headers}) as answer:  # fmt: skip
                        status = answer.status
                        if status == 200:
                            params = (await answer.json()).get("parameters", {})
                            fallback = answer.headers.get(FALLBACK_HEADER) == "1"
                took = time.time() - sent_at
                replica = (f"{params.get('variant') or '-'}@{params.get('node')}"
                           if status == 200 else None)  # fmt: skip
                self.answers.append(Answer(camera or "", sent_at, replica, params.get("threads"),
                                           params.get("share"), fallback, status,
                                           took))  # fmt: skip
                if params.get("sampled"):  # the application's ground truth, as feedback
                    document = {"request_id": params["request_id"], "label": label}
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        async with session.post(feedback_url, json=document,
                                                headers=headers) as f:  # fmt: skip
                            await f.read()

            while not self._stop.is_set():
                now = window()
                i = int(rng.integers(len(now.labels)))
                task = asyncio.create_task(one(now.images[i], int(now.labels[i])))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                await asyncio.sleep(1.0 / rate)
            if tasks:
                await asyncio.wait(tasks, timeout=35.0)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


class Site:
    """The cluster, its agents and the service (started in that order, stopped in reverse)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cluster: Any = None
        self.agents: list[Any] = []
        self.server: ServerProcess | None = None

    def start(self) -> Client:
        from deepedge.cluster.devices import DeviceType
        from deepedge.runtime.live_cluster import LiveCluster
        from deepedge.runtime.local_cluster import LocalRayCluster
        from deepedge.runtime.node_agent import start_agent
        from deepedge.runtime.session import ensure_ray

        # two logical CPUs a node: a serving group (0.25) beside an update worker (1); the
        # edge node has EDGE_CPUS, the "GPUs" its Ekya windows share out as CPU threads
        self.cluster = LocalRayCluster(worker_ids=WORKERS, cpus_per_node=2,
                                       node_cpus={EDGE_NODE: EDGE_CPUS})  # fmt: skip
        self.cluster.start()
        ensure_ray(address=self.cluster.address)
        devices = {n: DeviceType(d) for n, d in DEVICES.items()}
        self.agents = [start_agent(n, d, (), 0.5, 3.0) for n, d in devices.items()]
        LiveCluster().wait_for(devices, timeout_s=180)
        settings = ServiceSettings(data_dir=self.root / "service", isolation=Isolation.TRUSTED,
                                   ray_address=self.cluster.address, serving=True,
                                   serving_port=free_port())  # fmt: skip
        make_tenant(settings, "site", TOKEN, max_cores=64.0)
        self.server = ServerProcess(settings)
        self.server.start(timeout_s=180)
        return Client(self.server.url, TOKEN)

    def kill_node(self, node: str) -> None:
        self.cluster.stop_node(node)

    def stop(self) -> None:
        from deepedge.runtime.session import shutdown_ray

        if self.server is not None:
            self.server.stop()
        shutdown_ray()
        if self.cluster is not None:
            self.cluster.stop()


def replicas_on_named_nodes(model: str, routes: dict[str, str]) -> tuple[int, int]:
    """(on the node named, all) over the alive replicas of the decision's groups
    (``variant@node``): on the Ray node of the agent the decision names (Ray's actor
    table)."""
    from deepedge.dataplane.replica_groups import ReplicaGroup
    from deepedge.runtime.camera_router import group_apps_prefix, group_deployment
    from deepedge.runtime.session import alive_actor_nodes, ray_nodes_by_node_id

    replicas = alive_actor_nodes(f"ServeReplica:{group_apps_prefix(model)}")
    by_deployment = {name.rsplit(":", 1)[1]: nodes for name, nodes in replicas.items()}
    ray_nodes = ray_nodes_by_node_id()
    named = total = 0
    for group in set(routes.values()):
        variant, node = group.split("@")
        ran = by_deployment.get(group_deployment(ReplicaGroup(variant, node, 1)), [])
        named += sum(r == ray_nodes.get(node) for r in ran)
        total += max(1, len(ran))  # a group without a replica counts as misplaced
    return named, total


def app_replicas_on(model: str, node: str) -> tuple[int, int]:
    """(on ``node``, all) over the alive replicas of ``model``'s own application."""
    from deepedge.runtime.serve_apps import app_name
    from deepedge.runtime.session import alive_actor_nodes, ray_nodes_by_node_id

    ran = [r for nodes in alive_actor_nodes(f"ServeReplica:{app_name(model)}:").values()
           for r in nodes]  # fmt: skip
    return sum(r == ray_nodes_by_node_id().get(node) for r in ran), max(1, len(ran))


def update_actor_nodes() -> list[tuple[str, str]]:
    """(actor class, deepedge node) of every alive actor of an update (Ray's actor table)."""
    from deepedge.runtime.session import alive_actor_nodes, ray_nodes_by_node_id

    by_ray = {ray_id: node for node, ray_id in ray_nodes_by_node_id().items()}
    return [(cls, by_ray.get(r, "?")) for prefix in ("TrainingWorker", "ParameterServer")
            for cls, nodes in alive_actor_nodes(prefix).items() for r in nodes]  # fmt: skip


def update_actors_named(seen: list[tuple[str, str]], history: list[dict[str, Any]]
                        ) -> tuple[int, int]:  # fmt: skip
    """(on the node named, all) over the update's actors ``seen`` during its first launch:
    a worker on a node its decision's first launch names as a worker, the parameter server
    on the node it names for it (the version's ``allocation`` event)."""
    decision = next((e["detail"] for e in history
                     if e["kind"] == "allocation" and e["version"] == 2), None)  # fmt: skip
    if decision is None or not decision.get("placements"):
        return 0, max(1, len(seen))
    first = decision["placements"][0]
    workers = {member for member in first if member != "parameter-server"}
    named = sum((node in workers) if cls == "TrainingWorker" else node == decision["ps_node"]
                for cls, node in seen)  # fmt: skip
    return named, max(1, len(seen))


def events(client: Client, name: str) -> list[dict[str, Any]]:
    return list(client.get(f"/v1/deployments/{name}/events?limit=5000")["events"])


def decided_routes(client: Client) -> dict[str, str]:
    """camera -> ``variant@node`` of the placed deployment's decision."""
    decided = next(
        e for e in reversed(events(client, PLACED))
        if e["kind"] == "placement" and e["detail"].get("state") == "decided"
    )  # fmt: skip
    return {r["source"]: f"{r['variant']}@{r['node']}" for r in decided["detail"]["routes"]}


def update_job(client: Client, name: str) -> str:
    """The newest update job of the deployment (its ``job-submitted`` event's)."""
    submitted = [e for e in events(client, name) if e["kind"] == "job-submitted"]
    return str(submitted[-1]["job_id"])


def epochs_done(client: Client, job: str) -> int:
    """Epochs the job reported finished (its metrics)."""
    return len(client.get(f"/v1/jobs/{job}/metrics?limit=1000")["samples"])


def job_running(client: Client, job: str) -> bool:
    return str(client.get(f"/v1/jobs/{job}")["status"]) not in {"COMPLETED", "FAILED", "HALTED"}


def stored_samples(client: Client, name: str) -> int:
    return int(client.get(f"/v1/deployments/{name}/traffic")["samples"]["stored"])


def training_nodes() -> set[str]:
    """deepedge nodes an update's training worker runs on now (Ray's actor table)."""
    return {node for cls, node in update_actor_nodes() if cls == "TrainingWorker"}


def run(args: argparse.Namespace) -> dict[str, Any]:
    scale = FULL
    say: Callable[[str], None] = print
    root = Path(tempfile.mkdtemp(prefix="deepedge-live-site-"))
    site = Site(root)
    cameras: Cameras | None = None
    client: Client | None = None
    result: dict[str, Any] = {"nodes": 0, "on_named_nodes": 0.0, "route_match": 0.0,
                              "ekya_share_applied": 0.0, "serve_avail_node_loss": 0.0,
                              "update_recovered": 0}  # fmt: skip
    try:
        started = time.monotonic()
        client = site.start()
        say(f"cluster {site.cluster.address}: head + {', '.join(WORKERS)}, agents and the "
            f"service up in {time.monotonic() - started:.0f} s; data {root}")  # fmt: skip

        def live_nodes() -> list[dict[str, Any]]:
            with contextlib.suppress(httpx.HTTPError, RuntimeError):
                return list(client.get("/v1/nodes")["nodes"])
            return []

        wait_until("the service's node view", lambda: len(live_nodes()) == len(NODES), 180)
        result["nodes"] = sum(n["state"] == "up" for n in live_nodes())
        client.post("/v1/deployments", placed_spec(scale))

        def serving(name: str) -> Callable[[], bool]:
            return lambda: client.get(f"/v1/deployments/{name}")["serving_version"] == 1

        def placement_decided() -> bool:
            return any(e["kind"] == "placement" and e["detail"].get("state") == "decided"
                       for e in events(client, PLACED))  # fmt: skip

        wait_until("the placed deployment's first version", serving(PLACED), args.timeout_s)
        wait_until("its placement decision", placement_decided, args.timeout_s)
        routes = decided_routes(client)
        say(f"{PLACED}: serving v1, decision routes {routes}")
        cameras = Cameras(client)
        cameras_at = time.time()
        cameras.start(placed_spec(scale), CAMERAS, scale.camera_rate, root / "camera")

        wait_until("every camera's readiness probe", lambda: len(cameras.ready) == len(CAMERAS),
                   args.timeout_s)  # fmt: skip
        ready_at = max(cameras.ready.values())
        say(f"every camera's group ready {ready_at - cameras_at:.0f} s after the cameras began")
        wait_until(f"{scale.min_samples} stored samples",
                   lambda: stored_samples(client, PLACED) >= scale.min_samples,
                   args.timeout_s)  # fmt: skip
        time.sleep(max(0.0, ready_at + args.steady_s - time.time()))
        steady_until = time.time()
        serving_named = replicas_on_named_nodes(f"site.{PLACED}", routes)
        on_named = list(serving_named)
        placed_answers = [a for a in cameras.answers if a.camera in CAMERAS]
        result["route_match"] = route_match(
            [a for a in placed_answers if a.sent_at >= ready_at], routes, steady_until
        )
        say(f"{steady_until - ready_at:.0f} s once ready: "
            f"{answered_by(placed_answers, ready_at, steady_until)}; replicas on their named "
            f"nodes {serving_named[0]} of {serving_named[1]}, answers as routed "
            f"{result['route_match']:.4f}")  # fmt: skip

        # -- an update, and a serving worker node lost in its middle ----------------------
        client.post(f"/v1/deployments/{PLACED}/update", {})
        wait_until("the update's training workers", lambda: bool(training_nodes()),
                   args.timeout_s, poll_s=1.0)  # fmt: skip
        job = update_job(client, PLACED)

        def training() -> bool:  # the job's first epochs done, its workers still at it
            return epochs_done(client, job) >= args.kill_after_epochs or not job_running(
                client, job
            )

        wait_until(f"{args.kill_after_epochs} epoch(s) of the update", training, args.timeout_s,
                   poll_s=0.2)  # fmt: skip
        if not job_running(client, job):  # (the kill must fall in its training to measure it)
            say(f"the update's job {job} ended before a node could be killed in its training")
        serving_nodes = {replica.split("@")[1] for replica in routes.values()}
        victims = sorted((training_nodes() & serving_nodes) or serving_nodes & set(WORKERS))
        victim = victims[0]
        update_seen = update_actor_nodes()  # the first launch's actors, before the loss
        killed_at = time.time()
        site.kill_node(victim)
        lost_cameras = [c for c, r in routes.items() if r.endswith("@" + victim)]
        say(f"killed the raylet of {victim} (training workers on {sorted(training_nodes())}, "
            f"serving {lost_cameras})")  # fmt: skip

        def update_settled() -> bool:  # v2 registered, or the update's failure
            return any((e["kind"] == "version-registered" and e["version"] == 2)
                       or (e["kind"] == "job-failed" and e["at"] > killed_at)
                       for e in events(client, PLACED))  # fmt: skip

        wait_until("the update's version", update_settled, args.timeout_s, poll_s=1.0)

        def moved() -> bool:
            recent = [a for a in cameras.answers if a.camera in lost_cameras
                      and a.sent_at > time.time() - 10 and a.replica is not None]  # fmt: skip
            return bool(recent) and all(
                a.replica is not None and not a.replica.endswith("@" + victim) for a in recent
            )

        wait_until("the lost node's cameras answered from elsewhere", moved, args.timeout_s)
        time.sleep(max(10.0, killed_at + args.after_kill_s - time.time()))
        ended = time.time()
        history = events(client, PLACED)
        result["update_recovered"] = int(update_recovered(history, victim))
        update_named = update_actors_named(update_seen, history)
        on_named[0] += update_named[0]
        on_named[1] += update_named[1]
        say(f"the update's actors before the loss {update_seen}: {update_named[0]} of "
            f"{update_named[1]} on the nodes its decision names")  # fmt: skip
        placed_answers = [a for a in cameras.answers if a.camera in CAMERAS]
        avail, sent = availability(placed_answers, killed_at, ended)
        result["serve_avail_node_loss"] = avail
        say(f"answers from the kill on: {answered_by(placed_answers, killed_at, ended)}")
        say(f"from the kill to {ended - killed_at:.0f} s later: {avail:.4f} of {sent} requests "
            f"answered; the update: {update_outcome(history)}")  # fmt: skip

        # -- the edge server's Ekya share, applied on its live node ------------------------
        for spec in edge_specs(scale):
            client.post("/v1/deployments", spec)
        for spec in edge_specs(scale):
            wait_until(f"{spec['name']}'s first version", serving(spec["name"]), args.timeout_s)
            cameras.start(spec, [spec["name"]], scale.camera_rate, root / "camera")

        def windows_done() -> bool:  # two windows of allocations, each stream
            return all(len(ekya_allocations(events(client, name))) >= 2 for name in EDGES)

        wait_until("two Ekya windows on the edge node", windows_done, args.timeout_s, 1.0)
        time.sleep(args.settle_s + 15.0)  # answers under the newest allocation too
        applied, judged = 0, 0
        for name in EDGES:
            allocations = ekya_allocations(events(client, name))
            share = share_applied(cameras.answers, name, allocations, EDGE_NODE, args.settle_s)
            named = app_replicas_on(f"site.{name}", EDGE_NODE)
            on_named[0] += named[0]
            on_named[1] += named[1]
            applied += share >= 1.0
            judged += 1
            seen = Counter((a.share, a.threads) for a in cameras.answers if a.camera == name)
            say(
                f"{name}: Ekya's inference share per window (at s, share, threads) "
                f"{[(round(at - cameras_at), s, share_threads(s)) for at, s in allocations]}; "
                f"answers with it on {EDGE_NODE}: {share:.4f}; replicas on {EDGE_NODE} "
                f"{named[0]} of {named[1]}; answers by (share, threads) {dict(seen)}"
            )
        result["ekya_share_applied"] = applied / judged
        result["on_named_nodes"] = on_named[0] / on_named[1]
    finally:
        if cameras is not None:
            cameras.stop()
        if args.out is not None and client is not None:
            keep_record(args.out, cameras.answers if cameras is not None else [], client, result)
        site.stop()
    say(f"machine: {machine_description()}")
    return result


def keep_record(out: Path, answers: list[Answer], client: Client, result: dict[str, Any]) -> None:
    """Every request the cameras sent and both deployments' events, for a look afterwards."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "answers.jsonl").open("w") as f:
        for a in answers:
            f.write(json.dumps(dataclasses.asdict(a)) + "\n")
    history = {}
    for name in (PLACED, *EDGES):
        with contextlib.suppress(httpx.HTTPError, RuntimeError):
            history[name] = events(client, name)
    (out / "events.json").write_text(json.dumps(history, indent=1))
    (out / "result.json").write_text(json.dumps(result, indent=1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout-s", type=float, default=600.0,
                        help="longest wait for any one step")  # fmt: skip
    parser.add_argument("--kill-after-epochs", type=int, default=1,
                        help="epochs the update reports done before the node is killed "
                        "(in its training, whatever its speed)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None,
                        help="keep every request and the deployments' events here")  # fmt: skip
    parser.add_argument("--settle-s", type=float, default=10.0,
                        help="allocations are judged from this long after")  # fmt: skip
    parser.add_argument("--steady-s", type=float, default=60.0,
                        help="routing is measured this long before the update")  # fmt: skip
    parser.add_argument("--after-kill-s", type=float, default=90.0,
                        help="serving is measured at least this long after the kill")  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result = run(args)
    print(result_line(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
