"""Control-plane benchmark: ``python -m deepedge.bench.controlplane [--quick]``.

One real service on loopback (supervisor, API, manager and data-plane processes; SQLite
store; an embedded Ray head with Ray Serve) runs ``--deployments`` deployments of the
bundled digits workload on the emulated testbed (small windows, ``labeller:
ground-truth``), each fed by its own camera (``--camera-rate`` requests/s of its drifting
stream, every true label sent back as feedback: the labels a golden labeller would give,
without training one ensemble per stream). Their drifts start at staggered windows. The run
measures:

1. **Trigger lag.** For every update triggered by an accuracy drop: from the moment the
   window that shows the drop was due to the moment its ``model-update`` job was
   acknowledged by the store (events ``trigger`` and ``job-submitted``).
   ``missed`` counts windows whose accuracy was under the threshold while the deployment
   was idle and outside its cooldown, and that did not trigger.
2. **Automatic rollback.** One extra deployment (no drift) gets an untrained model
   registered as its next version with the gate and canary skipped (a planted bad
   model). ``rollback_ok``: it served exactly one window, was ROLLED_BACK, and the version
   it replaced serves again.
3. **Crash.** While update jobs are PROCESSING, ``kill -9`` of the whole service
   (supervisor, API, manager; the learners live on) and a fresh start on the same data
   folder. ``lost`` = deployments + versions acknowledged before the kill that are missing
   after it; the loops must resume (every deployment's window advances after the restart)
   and the in-flight updates must reach a verdict.
4. **Dashboard.** Page loads as the dashboard does them
   (:func:`deepedge.bench.dashboard.measure_page_loads`) while the loops and updates run.
5. **One edge server.** ``--edge-deployments`` more deployments of the stream on the edge
   server ``edge-1`` (``update.policy: ekya-window``; two drift at the same window): their
   updates are the server's joint Ekya windows. ``edge_windows`` counts the windows
   recorded, ``edge_streams_max`` the most deployments one window scheduled together, and
   ``edge_share_max`` the largest total share (inference + retraining, summed over every
   deployment's own allocation event of one window) over the server's GPUs: at most 1.

Last line: ``RESULT deployments=... trigger_lag_s=... rollback_ok=... lost=...
dashboard_p95_ms=...`` (trigger lag: the largest over all triggers).
"""

from __future__ import annotations

import argparse
import base64
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.bench.dashboard import measure_page_loads
from deepedge.bench.harness.cameras import StreamCameras
from deepedge.bench.harness.http import Client, wait_until
from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.bench.harness.site import Tenant, site_settings, start_service

TOKEN = "tok-controlplane"
THRESHOLD = 0.8
PLANTED = "planted"


def deployment_spec(index: int, window_s: float, onset: int) -> dict[str, Any]:
    return {
        "name": f"line-{index:02d}",
        "labeller": "ground-truth",
        "window_s": window_s,
        "stream": {"seed": index, "window_size": 100, "onset_window": onset, "ramp_windows": 1},
        "update": {"epochs": 3, "label_fraction": 1.0, "recent_windows": 2},
        "trigger": {"sample_count": None, "accuracy_threshold": THRESHOLD, "cooldown_windows": 1},
        "canary": {"fraction": 0.25, "windows": 1},
        "base_epochs": 8,
        # a small CPU reservation: two dozen replicas share the head's cores
        "serving": {"cpus": 0.05, "sample_fraction": 1.0, "max_batch_size": 16},
    }


EDGE_SERVER, EDGE_GPUS = "edge-1", 1.0


def edge_deployment_spec(index: int, window_s: float, onset: int) -> dict[str, Any]:
    spec = deployment_spec(50 + index, window_s, onset)
    return spec | {
        "name": f"edge-{index:02d}",
        "target": {"kind": "edge-server", "nodes": [EDGE_SERVER], "gpus": EDGE_GPUS,
                   "inference_gpus": 0.3},
        "update": {"policy": "ekya-window", "label_fraction": 1.0, "recent_windows": 2,
                   "retraining_window_s": 30.0},
    }  # fmt: skip


def edge_windows(client: Client, names: list[str]) -> tuple[int, int, float]:
    """(windows, most deployments in one window, largest total share / the server's GPUs)
    from the edge deployments' ``allocation`` events, grouped by the window's job."""
    by_job: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        for event in client.get(f"/v1/deployments/{name}/events?limit=5000")["events"]:
            detail = event["detail"]
            if event["kind"] == "allocation" and detail.get("policy") == "ekya-window":
                own = next(s for s in detail["streams"] if s["stream_id"] == name)
                by_job.setdefault(event["job_id"], []).append(own | {"gpus": detail["gpus"]})
    shares = [
        sum(s["inference_gpus"] + s["retraining_gpus"] for s in streams) / streams[0]["gpus"]
        for streams in by_job.values()
    ]
    return len(by_job), max((len(v) for v in by_job.values()), default=0), max(shares, default=0)


def plant_bad_model(client: Client, name: str, wait_s: float = 300.0) -> int:
    """Register an untrained edge CNN (random weights) with gate and canary skipped; while
    an update or canary of the deployment runs the service answers 409, and the operator
    tries again once it is over (as the demo does), for up to ``wait_s``."""
    size = _weights_size(client, name)
    weights = np.random.default_rng(7).normal(0.0, 0.3, size).astype("<f4")
    body = {"weights_b64": base64.b64encode(weights.tobytes()).decode(), "skip_gate": True,
            "skip_canary": True, "note": "planted bad model (untrained)"}  # fmt: skip
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return int(client.post(f"/v1/deployments/{name}/versions", body)["version"])
        except RuntimeError as exc:
            if ": 409 " not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(2.0)


def _weights_size(client: Client, name: str) -> int:
    from deepedge.learning.models import make_edge_model, parameter_count

    del client, name  # every deployment serves the bundled digits edge CNN
    return parameter_count(make_edge_model(10, 16, 8))


def trigger_lags(client: Client, names: list[str]) -> tuple[list[float], int]:
    """The lag of every accuracy-drop trigger, and how many deployments' first drop (the
    first window under the threshold, the deployment idle) did not trigger an update."""
    lags: list[float] = []
    missed = 0
    for name in names:
        events = client.get(f"/v1/deployments/{name}/events?limit=5000")["events"]
        windows = client.get(f"/v1/deployments/{name}/windows?limit=5000")["windows"]
        submitted = {e["version"]: e for e in events if e["kind"] == "job-submitted"}
        for event in events:
            if event["kind"] != "trigger" or event["detail"].get("trigger") != "accuracy-drop":
                continue
            job = submitted.get(event["version"])
            if job is not None:
                lags.append(job["at"] - event["detail"]["window_due_at"])
        first_drop = next(
            (w for w in windows if w["accuracy"] is not None and w["accuracy"] < THRESHOLD), None
        )
        if first_drop is not None and first_drop["trigger"] != "accuracy-drop":
            missed += 1
    return lags, missed


def versions_snapshot(client: Client) -> set[tuple[str, int]]:
    return {(v["deployment"], v["version"]) for v in client.get("/v1/models/versions")["versions"]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="deepedge-controlplane-"))
    quota = {"max_active_jobs": args.parallel_jobs, "max_queued_jobs": 10_000, "max_cores": 64.0}
    server = start_service(site_settings(root / "data"), [Tenant("site", TOKEN, quota=quota)])
    client = Client(server.url, TOKEN)
    say = print
    names = [f"line-{i:02d}" for i in range(args.deployments)]
    cameras: StreamCameras | None = None
    try:
        specs = [deployment_spec(i, args.window_s, args.first_onset + (i % args.stagger))
                 for i in range(args.deployments)]  # fmt: skip
        specs.append(deployment_spec(99, args.window_s, 10_000) | {"name": PLANTED})
        edge_names = [f"edge-{i:02d}" for i in range(args.edge_deployments)]
        specs += [
            edge_deployment_spec(i, args.window_s, args.first_onset + max(0, i - 1))
            for i in range(args.edge_deployments)
        ]  # (the first two drift together)
        for spec in specs:
            client.post("/v1/deployments", spec)
        cameras = StreamCameras(client, specs, args.camera_rate)
        say(f"created {args.deployments} deployments + 1 for the planted model + "
            f"{args.edge_deployments} on {EDGE_SERVER}, each with a camera at "
            f"{args.camera_rate:g} requests/s; data {root}")  # fmt: skip

        def serving(name: str) -> Callable[[], bool]:
            return lambda: (client.get(f"/v1/deployments/{name}/windows?limit=5")["windows"] or
                        [{"samples": 0}])[-1]["samples"] > 0  # fmt: skip

        wait_until("the planted deployment's live traffic", serving(PLANTED), 600)
        bad = plant_bad_model(client, PLANTED)
        say(f"planted v{bad} (untrained) on {PLANTED}, gate and canary skipped")

        def updates_running() -> bool:
            jobs = client.get("/v1/jobs?status=PROCESSING&limit=100")["jobs"]
            return len(jobs) >= min(args.parallel_jobs, 2)

        wait_until("update jobs to run", updates_running, args.timeout_s)
        time.sleep(args.kill_after_s)
        before_deployments = {d["name"] for d in client.get("/v1/deployments")["deployments"]}
        before_versions = versions_snapshot(client)
        windows_before = {
            d["name"]: d["window"] for d in client.get("/v1/deployments")["deployments"]
        }
        in_flight = {j["name"] for j in client.get("/v1/jobs?status=PROCESSING&limit=100")["jobs"]}
        processing = len(in_flight)
        say(f"kill -9 of the whole service with {processing} update job(s) PROCESSING, "
            f"{len(before_versions)} versions stored")  # fmt: skip
        client.close()
        server.kill9()
        restart_s = server.start()
        client = Client(server.url, TOKEN)
        after_deployments = {d["name"] for d in client.get("/v1/deployments")["deployments"]}
        lost = len(before_deployments - after_deployments) + len(
            before_versions - versions_snapshot(client)
        )
        say(f"service back in {restart_s:.1f} s; lost {lost}")

        def resumed() -> bool:
            now = {d["name"]: d["window"] for d in client.get("/v1/deployments")["deployments"]}
            return all(now[n] > windows_before[n] for n in windows_before)

        loops_resumed = wait_until("every loop to advance", resumed, 120)
        durations, page_bytes = measure_page_loads(server.url, TOKEN, args.page_loads)

        def first_updates_done() -> bool:
            versions = client.get("/v1/models/versions")["versions"]
            done = {
                v["deployment"]
                for v in versions
                if v["version"] >= 2 and v["status"] not in {"TRAINING", "CANDIDATE"}
            }
            return all(n in done for n in names + edge_names)  # fmt: skip

        updates_done = wait_until("every deployment's first update", first_updates_done,
                                  args.timeout_s, poll_s=2.0)  # fmt: skip
        lags, missed = trigger_lags(client, names)
        n_edge, edge_streams, edge_share = edge_windows(client, edge_names)
        edge_lags, _ = trigger_lags(client, edge_names)  # (not in trigger_lag_s: see below)
        say(f"{EDGE_SERVER}: trigger to window job over {len(edge_lags)} accuracy-drop "
            f"triggers: max {max(edge_lags, default=0):.2f} s, p50 "
            f"{np.median(edge_lags) if edge_lags else 0:.2f} s (one stream window of gathering, "
            "and a trigger while the server's window runs waits for the next)")  # fmt: skip
        say(f"{EDGE_SERVER}: {n_edge} joint Ekya window(s), up to {edge_streams} deployment(s) "
            f"in one, largest total share {edge_share:.2f} of {EDGE_GPUS:g} GPU(s)")  # fmt: skip
        planted_versions = client.get(f"/v1/deployments/{PLANTED}/versions")["versions"]
        bad_version = next(v for v in planted_versions if v["version"] == bad)
        planted_now = client.get(f"/v1/deployments/{PLANTED}")
        rollback_ok = (
            bad_version["status"] == "ROLLED_BACK"
            and bad_version["windows_served"] == 1
            and planted_now["serving_version"] == bad_version["replaced_version"]
        )
        summary = client.get("/v1/deployments")["deployments"]
        verdicts = client.get("/v1/models/versions")["versions"]
        rows = [[d["name"], d["status"], d["serving_version"], d["window"],
                 f"{d['last_accuracy']:.3f}" if d["last_accuracy"] is not None else "-"]
                for d in summary]  # fmt: skip
        say(table(["deployment", "status", "serving", "window", "accuracy"], rows))
        counts: dict[str, int] = {}
        for v in verdicts:
            counts[v["status"]] = counts.get(v["status"], 0) + 1
        say("versions by status: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))
        p95 = float(np.percentile(np.array(durations) * 1000, 95))
        say(f"trigger lag over {len(lags)} accuracy-drop triggers: max "
            f"{max(lags, default=0):.2f} s, p50 {np.median(lags) if lags else 0:.2f} s; "
            f"first drops that did not trigger: {missed}")  # fmt: skip
        say(f"dashboard: {len(durations)} page loads, p50 "
            f"{np.percentile(np.array(durations) * 1000, 50):.0f} ms, p95 {p95:.0f} ms, "
            f"{page_bytes} B page")  # fmt: skip
        say(f"planted v{bad}: {bad_version['status']}, served {bad_version['windows_served']} "
            f"window(s); restart {restart_s:.1f} s, loops resumed after the kill: "
            f"{loops_resumed}; the {processing} update(s) killed mid-way reached a verdict: "
            f"{updates_done}; machine: {machine_description()}")  # fmt: skip
        return {
            "deployments": args.deployments + 1 + args.edge_deployments,
            "trigger_lag_s": round(max(lags, default=float("nan")), 3),
            "rollback_ok": rollback_ok,
            "lost": lost,
            "dashboard_p95_ms": round(p95, 1),
            "missed": missed,
            "loops_resumed": loops_resumed and updates_done,
            "edge_windows": n_edge,
            "edge_streams_max": edge_streams,
            "edge_share_max": round(edge_share, 3),
        }
    finally:
        if cameras is not None:
            cameras.stop()
        client.close()
        server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.controlplane")
    parser.add_argument("--quick", action="store_true", help="3 deployments, short windows")
    parser.add_argument("--deployments", type=int, default=20)
    parser.add_argument("--edge-deployments", type=int, default=3, help="on one edge server")
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--first-onset", type=int, default=3)
    parser.add_argument("--stagger", type=int, default=6, help="onsets spread over N windows")
    parser.add_argument("--parallel-jobs", type=int, default=3, help="tenant's active jobs")
    parser.add_argument("--kill-after-s", type=float, default=3.0)
    parser.add_argument("--page-loads", type=int, default=100)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--camera-rate", type=float, default=60.0, help="requests/s each")
    args = parser.parse_args(argv)
    if args.quick:
        args.deployments, args.stagger, args.page_loads = 2, 2, 10
        args.parallel_jobs, args.edge_deployments = 2, 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    values = run(args)
    print(result_line(values))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
