"""``deepedge demo --site``: a site running on live traffic, watched on the dashboard.

Starts the service (API, manager with the control loop, dashboard, and the data plane: a
Ray head with Ray Serve) on loopback over a data folder, creates a tenant and one
deployment of the bundled digits (golden-model labeller, canary, automatic rollback), waits
until its endpoint answers, creates an inference key and starts a camera
(:mod:`deepedge.dataplane.camera`) that sends the drifting digits as live Open Inference
Protocol requests. It prints the dashboard URL and token (and writes the context,
so that the client commands find the service, printing the ``export`` lines for other
shells), the camera's view of each window
(answers, accuracy against the true labels, versions, canary share) and every decision: the
drift seen in the sampled live traffic, the Deep-Edge ``model-update`` job, the gate, the
canary on live requests, the promotion. The demo then registers an untrained model as an
operator would (gate and canary skipped) and the control plane rolls it back after its
first window. The run stops once the story is told or after ``--site-windows`` windows; with
``--keep-serving`` the service (and the context) stays until Ctrl-C whatever the story
did. ``--port`` and ``--data-plane-port`` choose the service's ports (a free one each by
default). With ``--site-edge-server`` a second deployment of the
same stream is served by the edge server with Ekya windows (``ekya-window`` jobs: Thief's
GPU/CPU shares per window, on the dashboard), fed by a second camera, and its decisions
are printed at the end. The story goes to ``say`` (the CLI: stdout); the windows done, and
what the demo waits for before them, go to stderr (the progress helper).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
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
from deepedge.cli.demo_site_bounds import chosen_ports, story_ending
from deepedge.cli.progress import Progress
from deepedge.core.errors import DependencyUnavailableError, RunFailedError

DEPLOYMENT = "camera-1"
SPEC: dict[str, Any] = {
    "name": DEPLOYMENT,
    "labeller": "golden-model",
    "window_s": 5.0,
    # The first version learns the camera's first scene; the demo drives the scene after
    # (Story): a drift at once, its recovery, the first scene again, a planted model.
    "stream": {"seed": 0, "window_size": 400, "onset_window": 10_000, "ramp_windows": 1},
    # an update trains the default 30 epochs (about a second for the edge CNN): with 5, a
    # drift's updates stopped still learning (0.83 -> 0.89 over their 5 epochs) and the
    # site took 11 windows to recover
    "update": {"label_fraction": 1.0, "recent_windows": 1},
    "trigger": {"sample_count": None, "accuracy_threshold": 0.8, "cooldown_windows": 0},
    "canary": {"fraction": 0.25, "windows": 1},
    "serving": {"cpus": 0.5, "sample_fraction": 1.0, "max_batch_size": 16},
}
DRIFT_AFTER_WINDOWS = 6  # camera windows of the first scene before the drift
RECOVERED_WITHIN = 0.03  # the drift is over once served accuracy is this close to before
SETTLED_WINDOWS = 2  # ... for this many windows in a row
CAMERA_RATE = 60.0  # requests per second: 300 per 5 s window
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
         "deployments", "server.log", "samples")  # fmt: skip


def _fresh_store(data_dir: Path) -> str:
    """A new store and tenant in ``data_dir`` (the golden labeller's cache is kept)."""
    from deepedge.service.store import JobStore, sqlite_url
    from deepedge.service.tenants import new_token
    from deepedge.service.uid_range import claim_uid_range

    data_dir.mkdir(parents=True, exist_ok=True)
    for name in FRESH:
        path = data_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    store = JobStore(sqlite_url(data_dir / "service.db"))
    store.migrate()
    claim_uid_range(store.tenancy, data_dir)  # the service it starts claims the same range
    token = new_token()
    store.create_tenant("demo", token, max_active_jobs=2, max_cores=8.0)
    store.dispose()
    return token


def _start(
    data_dir: Path, port: int, serving_port: int, address: str | None = None
) -> subprocess.Popen[bytes]:
    log = open(data_dir / "server.log", "ab")  # noqa: SIM115 - the child keeps writing
    command = [sys.executable, "-m", "deepedge.api.server", "--data-dir", str(data_dir),
               "--port", str(port), "--data-plane",
               "--data-plane-port", str(serving_port)]  # fmt: skip
    if address:  # the data plane and the learners run on this cluster (else an embedded head)
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
    port: int = 0,
    data_plane_port: int = 0,
) -> None:
    """The site demo (module docstring). ``port`` and ``data_plane_port`` are the service's
    API and data-plane ports on loopback (0: a free one each). Its end is
    :func:`story_ending`'s: with ``keep_serving`` the service and the context stay until
    Ctrl-C whatever the story did, and a story that did not finish still fails the run
    (:class:`RunFailedError`) once the service stops."""
    import httpx

    port, serving_port = chosen_ports(port, data_plane_port)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so that the cleanup below runs
    token = _fresh_store(data_dir)
    proc = _start(data_dir, port, serving_port, address)
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                          timeout=60.0, trust_env=False)  # fmt: skip
    cameras: list[Camera] = []
    story = Story(int(SPEC["stream"]["seed"]))
    token_file = write_token_file(data_dir / TOKEN_FILE, token)
    written: tuple[Context, str | None] | None = None
    bar = Progress("demo --site", total=windows, unit="windows")
    try:
        bar.start()
        bar.update(note="starting the service")
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
        say(f"deployment {DEPLOYMENT} created; the golden labeller is trained on first use, "
            "then the first version, then its endpoint starts")  # fmt: skip
        if edge_server:
            client.post("/v1/deployments", json=EDGE_SPEC).raise_for_status()
            say(f"deployment {EDGE_DEPLOYMENT} created on the edge server edge-1 (emulated): "
                "updates are Ekya windows")  # fmt: skip
        for name in [DEPLOYMENT] + ([EDGE_DEPLOYMENT] if edge_server else []):
            bar.update(note=f"waiting for the endpoint of {name}")
            cameras.append(_start_camera(client, name, serving_port, say, story))
        told = _follow(client, windows, say, cameras[0], bar, story)
        bar.stop()
        if edge_server:
            events = client.get(f"/v1/deployments/{EDGE_DEPLOYMENT}/events?limit=200").json()
            for e in events["events"]:
                if e["kind"] in {"allocation", "gate-passed", "gate-failed", "promoted",
                                 "rolled-back"}:  # fmt: skip
                    say(f"  {EDGE_DEPLOYMENT}: {e['kind']}: {e['message']}")
        _say_traffic(client, say)
        ending = story_ending(told, keep_serving, windows, url, data_dir)
        if ending.line:
            say(ending.line)
        if ending.serve_on:
            with contextlib.suppress(KeyboardInterrupt):
                while proc.poll() is None:
                    time.sleep(1.0)
            if proc.returncode is not None:
                say(f"the service exited by itself (status {proc.returncode}); see "
                    f"{data_dir / 'server.log'}")  # fmt: skip
        if ending.failure is not None:
            raise RunFailedError(ending.failure)
    finally:
        bar.stop()
        for camera in cameras:
            camera.stop()
        with contextlib.suppress(Exception):
            _halt_jobs(client)
        client.close()
        if written is not None:
            restore_context(*written)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


class Story:
    """The scene the demo's cameras see, set as the story goes (0: the first scene, 1: the
    drift: rotated, darker, blurred, noisier, another class mix). Each camera window keeps
    the scene it was first drawn with, so a window's images are the same whoever draws
    them (:class:`~deepedge.learning.scheduled_stream.ScheduledStream`'s scenes)."""

    def __init__(self, seed: int) -> None:
        self.scene = 0.0
        self._scenes: dict[int, float] = {}
        self._lock = threading.Lock()
        self._seed = seed
        self._stream: Any = None

    def scene_of(self, t: int) -> float:
        with self._lock:
            return self._scenes.setdefault(t, self.scene)

    def window(self, t: int) -> tuple[Any, Any]:
        if self._stream is None:
            from deepedge.learning.scheduled_stream import ScheduledStream
            from deepedge.learning.stream import DriftConfig, load_digits_images

            story = self

            class _Scenes(ScheduledStream):
                def _scene(self, t: int) -> float:
                    return story.scene_of(t)

            config = DriftConfig(seed=self._seed, window_size=400, eval_size=1)
            self._stream = _Scenes(load_digits_images(16), config, (0.0,))
        w = self._stream.window(t)
        return w.images, w.labels


class Camera:
    """A camera of the demo: :func:`~deepedge.dataplane.camera.run_camera` in a thread."""

    def __init__(self, config: Any, say: Callable[[str], None], name: str, story: Story) -> None:
        import asyncio

        from deepedge.dataplane.camera import run_camera

        self.reports: list[Any] = []
        self._stop = threading.Event()
        source = story.window
        self.thread = threading.Thread(
            target=lambda: asyncio.run(run_camera(config, source, self.reports.append,
                                                  self._stop.is_set)),
            name=f"camera-{name}", daemon=True,
        )  # fmt: skip
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=60)


def _start_camera(client: Any, name: str, serving_port: int, say: Callable[[str], None],
                  story: Story) -> Camera:  # fmt: skip
    """Wait for the deployment's endpoint, give it a key, and start its camera."""
    import httpx

    from deepedge.dataplane.camera import CameraConfig

    key = client.post(f"/v1/deployments/{name}/keys", json={"name": "demo-camera"}).json()
    ready = f"{key['endpoint']}/ready"
    headers = {"Authorization": f"Bearer {key['key']}"}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(ready, headers=headers, timeout=5.0, trust_env=False).status_code == 200:
                break
        time.sleep(1.0)
    else:
        raise DependencyUnavailableError(f"the endpoint of {name} did not become ready")
    say(f"{name} serves at {key['endpoint']} (Open Inference Protocol); its camera holds "
        f"inference key {key['prefix']}... and sends {CAMERA_RATE:.0f} requests/s")  # fmt: skip
    config = CameraConfig(f"http://127.0.0.1:{serving_port}", key["model"], key["key"],
                          rate=CAMERA_RATE, window_s=float(SPEC["window_s"]),
                          windows=10_000)  # fmt: skip
    return Camera(config, say, name, story)


def _say_traffic(client: Any, say: Callable[[str], None]) -> None:
    t = client.get(f"/v1/deployments/{DEPLOYMENT}/traffic?span_s=30").json()
    r, s = t["traffic"], t["samples"]
    latency = r.get("latency_ms") or {}
    proxy, replica = latency.get("proxy") or {}, latency.get("replica") or {}

    def ms(part: dict[str, Any]) -> str:
        p50, p99 = part.get("p50"), part.get("p99")
        return "-" if p50 is None or p99 is None else f"p50 {p50:.1f} ms, p99 {p99:.1f} ms"

    say(f"{DEPLOYMENT}: {r['rps']:.1f} requests/s over the last 30 s; latency at the ingress "
        f"(what the camera sees) {ms(proxy)}, inside the replica {ms(replica)}; "
        f"{r['failed']} failed; sample store {s['stored']} samples")  # fmt: skip


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


def _follow(
    client: Any, windows: int, say: Callable[[str], None], camera: Camera, bar: Progress,
    story: Story,
) -> bool:  # fmt: skip
    """Print windows and decisions as the story goes (:class:`Plot`), until it is told (a
    drift recovered to within ``RECOVERED_WITHIN`` of the accuracy before it, the first
    scene back and served again, a planted model rolled back, two more windows) or
    ``windows`` windows are done. ``bar`` counts the windows done. True when told."""
    plot = Plot(story, say, _untrained_weights())
    seen_events, seen_windows, seen_camera = -1, -1, 0
    path = f"/v1/deployments/{DEPLOYMENT}"
    while seen_windows < windows - 1 and (plot.told_at is None or seen_windows < plot.told_at + 2):
        time.sleep(0.5)
        events = client.get(f"{path}/events?limit=50").json()["events"]
        points = client.get(f"{path}/windows?limit=50").json()["windows"]
        while seen_camera < len(camera.reports):
            d = camera.reports[seen_camera].document()
            seen_camera += 1
            acc = "-" if d["accuracy"] is None else f"{d['accuracy']:.3f}"
            share = "" if not d["canary_share"] else f", canary share {d['canary_share']:.0%}"
            versions = ", ".join(f"v{v} {n}" for v, n in sorted(d["versions"].items()))
            say(f"camera {d['window']:>3}: {d['answered']}/{d['sent']} answered, accuracy "
                f"{acc} (true labels), by {versions or 'none'}{share}")  # fmt: skip
            plot.camera_window(d["window"], d["accuracy"])
        for w in points:
            if w["window"] > seen_windows:
                seen_windows = w["window"]
                bar.update(seen_windows + 1, note=_window_note(w, plot.stage))
                if w["accuracy"] is None:
                    continue  # no traffic yet
                canary = (f", canary v{w['canary_version']} {w['canary_accuracy']:.3f}"
                          if w["canary_accuracy"] is not None else "")  # fmt: skip
                say(f"window {w['window']:>3}: {w['samples']} labelled live samples, input "
                    f"shift {w['severity']:.2f}, v{w['served_version']} accuracy "
                    f"{w['accuracy']:.3f} (golden labels){canary}")  # fmt: skip
        for e in events:
            if e["seq"] > seen_events:
                seen_events = e["seq"]
                say(f"  decision: {e['kind']}: {e['message']}")
                plot.decision(e, seen_windows)
        plot.act(client)
    return plot.told_at is not None


class Plot:
    """Where the demo's story stands, and what it does next: the drift after
    ``DRIFT_AFTER_WINDOWS`` camera windows; once served accuracy (the camera's true
    labels) is back within ``RECOVERED_WITHIN`` of what it was for ``SETTLED_WINDOWS``
    windows, the first scene again (a kept version should serve it within a window, unless
    the version that learned the drift serves it as well as before); then an untrained
    model planted, which the control plane must roll back."""

    def __init__(self, story: Story, say: Callable[[str], None], bad: str) -> None:
        self.story, self.say, self.bad = story, say, bad
        self.stage = "the first scene"
        self.accuracy: dict[int, float] = {}  # camera window -> accuracy (true labels)
        self.level: float | None = None  # before the drift
        self.drift_window = self.back_window = -1
        self.restored = self.planted = False
        self.told_at: int | None = None

    def camera_window(self, window: int, accuracy: float | None) -> None:
        if accuracy is None:
            return
        self.accuracy[window] = accuracy
        if self.stage == "the first scene" and window + 1 >= DRIFT_AFTER_WINDOWS:
            before = [self.accuracy[w] for w in sorted(self.accuracy)[-3:]]
            self.level = sum(before) / len(before)
            self.story.scene, self.drift_window = 1.0, window + 1
            self.stage = "the drift: waiting for its recovery"
            self.say(f"story: the scene drifts from camera window {window + 1} on (served "
                     f"{self.level:.3f} before, true labels)")  # fmt: skip
        elif self.stage.startswith("the drift") and window > self.drift_window:
            if self._settled(window, self.drift_window):
                first, took = window - SETTLED_WINDOWS + 1, window - self.drift_window + 1
                self.say(f"story: recovered: camera windows {first}-{window} served within "
                         f"{RECOVERED_WITHIN * 100:.0f} points of {self.level:.3f}, {took} "
                         "windows after the drift began")  # fmt: skip
                self.story.scene, self.back_window = 0.0, window + 1
                self.stage = "the first scene again: waiting for a kept version"
        elif self.stage.startswith("the first scene again") and window >= self.back_window:
            assert self.level is not None
            if self.accuracy[window] >= self.level - RECOVERED_WITHIN:
                # a kept version served again, or the version that learned the drift serves
                # the first scene as well as before (its updates kept what it knew)
                by = ("" if self.restored else " by the version that learned the drift (it "
                      "did not forget the first scene; no kept version needed)")
                self.say(f"story: the first scene served as before again from camera window "
                         f"{window}, {window - self.back_window} window(s) after it came "
                         f"back{by}")  # fmt: skip
                self.stage = "planting an untrained model"

    def _settled(self, window: int, since: int) -> bool:
        assert self.level is not None
        last = [self.accuracy.get(w) for w in range(window - SETTLED_WINDOWS + 1, window + 1)]
        return all(w > since for w in range(window - SETTLED_WINDOWS + 1, window + 1)) and all(
            a is not None and a >= self.level - RECOVERED_WITHIN for a in last
        )

    def decision(self, event: dict[str, Any], window: int) -> None:
        if event["kind"] == "promoted" and (event.get("detail") or {}).get("restored"):
            self.restored = self.restored or self.stage.startswith("the first scene again")
        if self.planted and event["kind"] == "rolled-back" and self.told_at is None:
            self.told_at = window
            self.stage = "the planted model was rolled back"

    def act(self, client: Any) -> None:
        if self.stage == "planting an untrained model" and not self.planted:
            self.planted = _plant(client, self.bad, self.say)
            if self.planted:
                self.stage = "an untrained model planted; waiting for its rollback"


def _window_note(window: dict[str, Any], stage: str) -> str:
    """A window of the deployment on the progress line."""
    if window["accuracy"] is None:
        return f"window {window['window']}: no traffic yet; {stage}"
    accuracy = f"v{window['served_version']} {window['accuracy']:.3f}"
    return f"window {window['window']}: {accuracy}; {stage}"


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
