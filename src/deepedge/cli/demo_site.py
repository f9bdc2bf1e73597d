"""``deepedge demo --site``: the control plane running a site, watched on the dashboard.

Starts the service (API, manager with the control loop, dashboard) on loopback over a data
folder, creates a tenant and one deployment of the bundled digits on the emulated testbed
(golden-model labeller, canary on one node, automatic rollback), and prints the dashboard
URL and token; it writes the context (the URL and the token file, so that the client
commands find the service) and prints the ``export`` lines for other shells. It then follows
the deployment's decisions as they happen: the stream drifts, the accuracy drop triggers a
Deep-Edge ``model-update`` job, the new version passes the gate, serves as a canary and is
promoted. The demo then registers an untrained model
as an operator would (gate and canary skipped) and the control plane rolls it back after
its first window. The run stops after ``--windows`` windows (or keeps serving with
``--keep-serving`` until Ctrl-C). With ``--site-edge-server`` a second deployment of the
same stream is served by the edge server with Ekya windows (``ekya-window`` jobs: Thief's
GPU/CPU shares per window, on the dashboard), and its decisions are printed at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deepedge.cli.context import (
    Context,
    context_path,
    export_lines,
    restore_context,
    write_context,
    write_token_file,
)
from deepedge.core.errors import DependencyUnavailableError

DEPLOYMENT = "camera-1"
SPEC: dict[str, Any] = {
    "name": DEPLOYMENT,
    "labeller": "golden-model",
    "window_s": 5.0,
    # The scene changes at once (window 4): the window that shows the drop is all new data,
    # and the update trains on it alone.
    "stream": {"seed": 0, "window_size": 400, "onset_window": 3, "ramp_windows": 1},
    "update": {"epochs": 5, "label_fraction": 1.0, "recent_windows": 1},
    "trigger": {"accuracy_threshold": 0.8, "cooldown_windows": 1},
    "canary": {"fraction": 0.25, "windows": 1},
}
EDGE_DEPLOYMENT = "camera-2"
EDGE_SPEC: dict[str, Any] = {
    **SPEC,
    "name": EDGE_DEPLOYMENT,
    "target": {"kind": "edge-server", "gpus": 1.0, "inference_gpus": 0.4},
    "update": {"policy": "ekya-window", "label_fraction": 1.0, "recent_windows": 1,
               "retraining_window_s": 30.0},
}  # fmt: skip
TOKEN_FILE = "demo.token"  # the demo tenant's token (mode 0600), named by the context
FRESH = ("service.db", "service.db-wal", "service.db-shm", "service.db.writelock", "jobs",
         "deployments", "server.log")  # fmt: skip


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _fresh_store(data_dir: Path) -> str:
    """A new store and tenant in ``data_dir`` (the golden labeller's cache is kept)."""
    from deepedge.service.store import JobStore, sqlite_url
    from deepedge.service.tenants import new_token

    data_dir.mkdir(parents=True, exist_ok=True)
    for name in FRESH:
        path = data_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    store = JobStore(sqlite_url(data_dir / "service.db"))
    store.migrate()
    token = new_token()
    store.create_tenant("demo", token, max_active_jobs=2, max_cores=8.0)
    store.dispose()
    return token


def _start(data_dir: Path, port: int, address: str | None = None) -> subprocess.Popen[bytes]:
    log = open(data_dir / "server.log", "ab")  # noqa: SIM115 - the child keeps writing
    command = [sys.executable, "-m", "deepedge.api.server", "--data-dir", str(data_dir),
               "--port", str(port)]  # fmt: skip
    if address:  # the learners connect to this cluster (else each starts an embedded Ray)
        command += ["--ray-address", address]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return proc


def run_site_demo(
    data_dir: Path,
    windows: int,
    keep_serving: bool,
    say: Callable[[str], None],
    address: str | None = None,
    edge_server: bool = False,
) -> None:
    import httpx

    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so that the cleanup below runs
    token = _fresh_store(data_dir)
    port = _free_port()
    proc = _start(data_dir, port, address)
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                          timeout=60.0, trust_env=False)  # fmt: skip
    token_file = write_token_file(data_dir / TOKEN_FILE, token)
    written: tuple[Context, str | None] | None = None
    try:
        _untrained_weights()  # imports torch now, not while following the windows
        _wait_healthy(client, proc, data_dir)
        written = write_context(
            Context(url=url, token_file=str(token_file), tenant="demo",
                    data_dir=str(data_dir.resolve()), written_by="deepedge demo --site")
        )  # fmt: skip
        say(f"service up at {url} (data {data_dir}, log {data_dir / 'server.log'})")
        say(f"dashboard: {url}/dashboard   log in with the tenant token: {token}")
        say(f"the CLI finds this service through the context {context_path()}; other shells:")
        for line in export_lines(url, token_file):
            say(f"  {line}")
        answer = client.post("/v1/deployments", json=SPEC)
        answer.raise_for_status()
        nodes = ", ".join(answer.json()["nodes"])
        say(f"deployment {DEPLOYMENT} created on {nodes} (emulated testbed); the golden "
            "labeller is trained on first use, then the first version")  # fmt: skip
        if edge_server:
            client.post("/v1/deployments", json=EDGE_SPEC).raise_for_status()
            say(f"deployment {EDGE_DEPLOYMENT} created on the edge server edge-1 (emulated): "
                "updates are Ekya windows")  # fmt: skip
        _follow(client, windows, say)
        if edge_server:
            events = client.get(f"/v1/deployments/{EDGE_DEPLOYMENT}/events?limit=200").json()
            for e in events["events"]:
                if e["kind"] in {"allocation", "gate-passed", "gate-failed", "promoted",
                                 "rolled-back"}:  # fmt: skip
                    say(f"  {EDGE_DEPLOYMENT}: {e['kind']}: {e['message']}")
        say(
            "done: drift, update, canary, promotion and an automatic rollback; the service "
            "stops now" + (" after Ctrl-C" if keep_serving else " (--keep-serving keeps it)")
        )
        if keep_serving:
            say(f"still serving at {url}/dashboard; Ctrl-C to stop")
            with contextlib.suppress(KeyboardInterrupt):
                while proc.poll() is None:
                    time.sleep(1.0)
    finally:
        with contextlib.suppress(Exception):
            _halt_jobs(client)
        client.close()
        if written is not None:
            restore_context(*written)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _exit_on_sigterm(_signum: int, _frame: object) -> None:
    raise SystemExit(143)


def _halt_jobs(client: Any) -> None:
    """Halt the update jobs still running (their learners outlive a stopped service)."""
    live = {"QUEUED", "PENDING", "DEPLOYING", "PROCESSING", "RESTARTED"}
    running = [j["id"] for j in client.get("/v1/jobs?limit=500").json()["jobs"]
               if j["status"] in live]  # fmt: skip
    for job_id in running:
        client.post(f"/v1/jobs/{job_id}/halt")
    deadline = time.monotonic() + 15
    while running and time.monotonic() < deadline:
        time.sleep(0.5)
        running = [i for i in running if client.get(f"/v1/jobs/{i}").json()["status"] in live]


def _wait_healthy(client: Any, proc: subprocess.Popen[bytes], data_dir: Path) -> None:
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DependencyUnavailableError(f"the service exited; see {data_dir / 'server.log'}")
        with contextlib.suppress(httpx.HTTPError):
            if client.get("/healthz").status_code == 200:
                return
        time.sleep(0.2)
    raise DependencyUnavailableError(f"the service did not start; see {data_dir / 'server.log'}")


def _follow(client: Any, windows: int, say: Callable[[str], None]) -> None:
    """Print windows and decisions until the story is told (an update promoted, the bad
    model planted and rolled back, two more windows) or ``windows`` windows are done; the
    bad model is planted once a trained update has been promoted and the deployment is idle."""
    bad = _untrained_weights()
    seen_events, seen_windows, planted, promoted = -1, -1, False, False
    told_at: int | None = None
    path = f"/v1/deployments/{DEPLOYMENT}"
    while seen_windows < windows - 1 and (told_at is None or seen_windows < told_at + 2):
        time.sleep(0.5)
        events = client.get(f"{path}/events?limit=50").json()["events"]
        points = client.get(f"{path}/windows?limit=50").json()["windows"]
        for w in points:
            if w["window"] > seen_windows:
                seen_windows = w["window"]
                canary = (f", canary v{w['canary_version']} {w['canary_accuracy']:.3f}"
                          if w["canary_accuracy"] is not None else "")  # fmt: skip
                say(f"window {w['window']:>3}: drift severity {w['severity']:.2f}, v"
                    f"{w['served_version']} accuracy {w['accuracy']:.3f} (golden labels)"
                    f"{canary}")  # fmt: skip
        for e in events:
            if e["seq"] > seen_events:
                seen_events = e["seq"]
                say(f"  decision: {e['kind']}: {e['message']}")
                promoted = promoted or (e["kind"] == "promoted" and (e["version"] or 0) >= 2)
                if planted and e["kind"] == "rolled-back" and told_at is None:
                    told_at = seen_windows
        if promoted and not planted:
            planted = _plant(client, bad, say)


def _untrained_weights() -> str:
    """An untrained edge CNN's weights, base64 float32 (what the upload endpoint takes)."""
    import base64

    import numpy as np

    from deepedge.learning.models import make_edge_model, parameter_count

    size = parameter_count(make_edge_model(10, 16, 8))
    weights = np.random.default_rng(1).normal(0.0, 0.3, size).astype("<f4")
    return base64.b64encode(weights.tobytes()).decode()


def _plant(client: Any, weights_b64: str, say: Callable[[str], None]) -> bool:
    """Register the untrained model (gate and canary skipped); False while an update runs."""
    body = {"weights_b64": weights_b64, "skip_gate": True, "skip_canary": True,
            "note": "an untrained model pushed by mistake"}  # fmt: skip
    answer = client.post(f"/v1/deployments/{DEPLOYMENT}/versions", json=body)
    if answer.status_code != 201:
        return False  # 409 while an update or canary runs: retried at the next poll
    say(f"  operator: registered v{answer.json()['version']} (untrained; gate and canary "
        "skipped): watch the automatic rollback")  # fmt: skip
    return True
