"""The control plane on a live site: ``python -m deepedge.bench.live_site``.

What an operator runs when the service manages a real Ray cluster. On this machine it
starts one (:class:`~deepedge.runtime.cluster.local_cluster.LocalRayCluster`: a head and raylets
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
import contextlib
import dataclasses
import json
import logging
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from deepedge.bench.harness.cameras import Answer, RecordingCameras
from deepedge.bench.harness.http import Client, wait_until
from deepedge.bench.harness.report import machine_description, result_line
from deepedge.bench.harness.scale import Scale
from deepedge.bench.harness.site import ClusterSite, Tenant
from deepedge.bench.live_site_parts import (
    answered_by,
    app_replicas_on,
    availability,
    decided_routes,
    ekya_allocations,
    epochs_done,
    events,
    job_running,
    replicas_on_named_nodes,
    route_match,
    share_applied,
    share_threads,
    stored_samples,
    training_nodes,
    update_actor_nodes,
    update_actors_named,
    update_job,
    update_outcome,
    update_recovered,
)

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
class SiteScale(Scale):
    camera_rate: float  # requests per second per camera
    window_s: float
    window_size: int
    epochs: int
    min_samples: int  # labelled samples stored before the update is asked for


FULL = SiteScale(camera_rate=4.0, window_s=5.0, window_size=100, epochs=6, min_samples=300)


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


def placed_spec(scale: SiteScale) -> dict[str, Any]:
    return {
        "name": PLACED,
        "labeller": "ground-truth",
        "target": {"live": True, "nodes": list(WORKERS)},
        "placement": placement_problem(),
        "window_s": scale.window_s,
        "stream": {"window_size": scale.window_size, "onset_window": 1, "ramp_windows": 1},
        "update": {"ps_node": "head", "epochs": scale.epochs, "label_fraction": 1.0,
                   "recent_windows": 4},
        "trigger": {"sample_count": None, "accuracy_threshold": 0.0},  # updates only on request
        "canary": {"windows": 0},
        "base_windows": 1,
        "base_epochs": 2,
        "serving": {"cpus": 0.25, "sample_fraction": 1.0, "max_batch_size": 8},
    }  # fmt: skip


def edge_specs(scale: SiteScale) -> list[dict[str, Any]]:
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


def run(args: argparse.Namespace) -> dict[str, Any]:
    scale = FULL
    say: Callable[[str], None] = print
    root = Path(tempfile.mkdtemp(prefix="deepedge-live-site-"))
    site = ClusterSite(root, DEVICES, Tenant("site", TOKEN, quota={"max_cores": 64.0}),
                       cpus_per_node=2, node_cpus={EDGE_NODE: EDGE_CPUS})  # fmt: skip
    cameras: RecordingCameras | None = None
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
        routes = decided_routes(client, PLACED)
        say(f"{PLACED}: serving v1, decision routes {routes}")
        cameras = RecordingCameras(client)
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
