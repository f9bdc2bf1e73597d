"""Cameras for a benchmark's site: senders of a deployment's stream as live requests, each
sending the true label of what was sampled back as feedback (the labels a golden labeller
would give), on one event loop in a thread of their own.

* :class:`StreamCameras`: one camera per deployment (its stream and drift, or its workload's
  windows), each :func:`~deepedge.dataplane.camera.run_camera` once the deployment's
  endpoint answers ready.
* :class:`RecordingCameras`: named cameras (``deepedge-camera``) of a deployment sending
  open-loop traffic once their own replica group answers their readiness probe, recording
  every request as an :class:`Answer`.
* :func:`camera_request`: one request of a camera, to send again and again (a load loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from deepedge.bench.harness.http import Client, InferenceKey

if TYPE_CHECKING:
    import numpy as np


def camera_request(workload: str) -> tuple[bytes, dict[str, str], np.ndarray]:
    """One camera's inference request on ``workload``'s stream (seed 0, the drift from
    window 3): the body and headers of its first image of window 0, and that window's
    images."""
    from deepedge.cli.serving import camera_source
    from deepedge.dataplane.camera import infer_body

    images, _ = camera_source(workload, 0, 3, 1)(0)
    body, headers = infer_body(images[0])
    return body, headers, images


class StreamCameras:
    """One camera per deployment ``specs`` describe, at ``rate`` requests per second each,
    sending back ``feedback`` of the true labels; each starts once its deployment's
    endpoint answers."""

    def __init__(
        self, client: Client, specs: list[dict[str, Any]], rate: float, feedback: float = 1.0,
    ) -> None:  # fmt: skip
        self._stop = threading.Event()
        self.started: dict[str, float] = {}  # deployment -> wall time its camera's window 0 began
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._run(client, specs, rate, feedback)), daemon=True,
            name="cameras",
        )  # fmt: skip
        self._thread.start()

    async def _run(
        self, client: Client, specs: list[dict[str, Any]], rate: float, feedback: float
    ) -> None:
        await asyncio.gather(*(self._one(client, spec, rate, feedback) for spec in specs))

    async def _one(
        self, client: Client, spec: dict[str, Any], rate: float, feedback: float
    ) -> None:
        from deepedge.cli.serving import camera_source
        from deepedge.dataplane.camera import CameraConfig, run_camera

        key = InferenceKey.of(
            await asyncio.to_thread(client.post, f"/v1/deployments/{spec['name']}/keys", {})
        )
        while not self._stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
                    if (await http.get(f"{key.endpoint}/ready", headers=key.auth())
                            ).status_code == 200:  # fmt: skip
                        break
            await asyncio.sleep(1.0)
        if "workload" in spec:  # the workload's own windows, read as its document says
            source = await asyncio.to_thread(camera_source, str(spec["workload"]), 0, 0, 0)
        else:
            stream = spec["stream"]
            source = camera_source("digits", stream["seed"], stream["onset_window"],
                                   stream["ramp_windows"])  # fmt: skip
        config = CameraConfig(key.base_url, key.model, key.key, rate=rate,
                              window_s=spec["window_s"], windows=1_000_000, feedback=feedback,
                              concurrency=16)  # fmt: skip
        self.started[spec["name"]] = time.time()
        await run_camera(config, source, None, self._stop.is_set)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


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


@dataclass
class RecordingCameras:
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

        key = InferenceKey.of(self.client.post(f"/v1/deployments/{spec['name']}/keys", {}))
        stream = Site(site_dir).stream(DeploymentSpec.model_validate(spec))
        thread = threading.Thread(
            target=lambda: asyncio.run(self._run(key, stream, spec["window_s"], list(cameras),
                                                 rate)),
            daemon=True, name=f"cameras-{spec['name']}",
        )  # fmt: skip
        thread.start()
        self._threads.append(thread)

    async def _run(
        self, key: InferenceKey, stream: Any, window_s: float, cameras: list[str | None],
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
        self, key: InferenceKey, window: Callable[[], Any], camera: str | None, rate: float
    ) -> None:
        import aiohttp
        import numpy as np

        from deepedge.dataplane.camera import infer_body
        from deepedge.dataplane.replica_groups import CAMERA_HEADER
        from deepedge.runtime.serving.camera_router import FALLBACK_HEADER

        headers = key.auth()
        if camera is not None:
            headers[CAMERA_HEADER] = camera
        infer_url, feedback_url, ready_url = (key.route(r) for r in ("infer", "feedback", "ready"))
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
