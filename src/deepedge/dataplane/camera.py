"""A camera: a workload's windows sent as live requests to a deployment's endpoint.

``deepedge camera`` runs :func:`run_camera`. Window ``t`` of the source (the site's drifting
digits, a bundled or user workload, or a folder of images) is sent during the ``t``-th
``window_s`` seconds, one image per request at ``rate`` requests per second (open loop: a
request is sent on its schedule whether or not earlier ones were answered, up to
``concurrency`` in flight), as an Open Inference Protocol request with the image's bytes in
the binary tensor extension and the camera's inference key. The camera knows each image's
true label: it reports the accuracy of what it was answered, per window and per version
(with ``keep_answers``, every answered request: image, label, answer, version, times), and
with ``feedback`` it sends the true label of that share of the sampled requests back to
the endpoint, as an application with ground truth would.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deepedge.dataplane.replica_groups import CAMERA_HEADER

WindowImages = tuple[np.ndarray, np.ndarray]  # (images (N, C, H, W) float32, labels (N,))


@dataclass(frozen=True)
class CameraConfig:
    url: str  # the data plane, e.g. http://127.0.0.1:8000
    model: str  # the OIP model name, <tenant>.<deployment>
    key: str
    rate: float = 50.0  # requests per second
    window_s: float = 2.0
    windows: int = 10
    first_window: int = 0
    feedback: float = 0.0  # share of sampled requests whose true label is sent back
    concurrency: int = 64
    timeout_s: float = 30.0
    seed: int = 0
    camera: str | None = None  # the camera's id: a placed deployment routes on it
    keep_answers: bool = False  # each report keeps every answered request (Answered)


@dataclass(frozen=True)
class Answered:
    """One answered request: the window's image it sent, its true label, what it was
    answered, by which version, when it was sent and when the answer came (wall-clock
    seconds)."""

    index: int
    label: int
    predicted: int
    version: str
    at: float
    sent_at: float


@dataclass
class WindowReport:
    """What one window of the camera saw."""

    window: int
    sent: int = 0
    answered: int = 0
    failed: int = 0
    correct: int = 0
    sampled: int = 0
    feedback_sent: int = 0
    by_version: Counter[str] = field(default_factory=Counter)
    by_route: Counter[str] = field(default_factory=Counter)
    by_replica: Counter[str] = field(default_factory=Counter)  # variant@node that answered
    statuses: Counter[int] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    answers: list[Answered] = field(default_factory=list)  # with CameraConfig.keep_answers

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.answered if self.answered else None

    def latency_ms(self, q: float) -> float | None:
        return float(np.quantile(self.latencies_ms, q)) if self.latencies_ms else None

    def document(self) -> dict[str, Any]:
        routed = self.by_route["serving"] + self.by_route["canary"]
        return {
            "window": self.window,
            "sent": self.sent,
            "answered": self.answered,
            "failed": self.failed,
            "accuracy": self.accuracy,
            "versions": dict(self.by_version),
            "canary_share": self.by_route["canary"] / routed if routed else None,
            "sampled": self.sampled,
            "feedback": self.feedback_sent,
            "latency_p50_ms": self.latency_ms(0.5),
            "latency_p99_ms": self.latency_ms(0.99),
            "statuses": {str(k): v for k, v in self.statuses.items()},
            "replicas": dict(self.by_replica),
        }


def infer_body(image: np.ndarray) -> tuple[bytes, dict[str, str]]:
    """One image as a binary-extension infer request: body and headers."""
    raw = np.ascontiguousarray(image, dtype="<f4").tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [1, *image.shape],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "label"}],
        },
        separators=(",", ":"),
    ).encode()
    headers = {
        "Inference-Header-Content-Length": str(len(header)),
        "Content-Type": "application/octet-stream",
    }
    return header + raw, headers


async def run_camera(
    config: CameraConfig,
    window: Callable[[int], WindowImages],
    on_window: Callable[[WindowReport], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[WindowReport]:
    """Send ``config.windows`` windows (module docstring), or fewer if ``should_stop()``
    turns true; the report of each."""
    import aiohttp

    rng = random.Random(config.seed)
    auth = {"Authorization": f"Bearer {config.key}"}
    if config.camera is not None:
        auth[CAMERA_HEADER] = config.camera
    infer_url = f"{config.url}/v2/models/{config.model}/infer"
    feedback_url = f"{config.url}/v2/models/{config.model}/feedback"
    limit = asyncio.Semaphore(config.concurrency)
    reports: list[WindowReport] = []
    pending: set[asyncio.Task[None]] = set()
    connector = aiohttp.TCPConnector(limit=config.concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=config.timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(report: WindowReport, index: int, image: np.ndarray, label: int) -> None:
            body, headers = infer_body(image)
            started, sent_at = time.perf_counter(), time.time()
            try:
                async with session.post(infer_url, data=body, headers={**headers, **auth}) as r:
                    payload = await r.read()
                    report.statuses[r.status] += 1
                    if r.status != 200:
                        report.failed += 1
                        return
            except (aiohttp.ClientError, TimeoutError):
                report.failed += 1
                report.statuses[0] += 1
                return
            finally:
                limit.release()
            report.latencies_ms.append((time.perf_counter() - started) * 1000)
            answer = json.loads(payload)
            predicted = int(answer["outputs"][0]["data"][0])
            params = answer.get("parameters", {})
            report.answered += 1
            report.correct += predicted == label
            version = str(answer.get("model_version"))
            report.by_version[version] += 1
            if config.keep_answers:
                report.answers.append(
                    Answered(index, label, predicted, version, time.time(), sent_at)
                )
            report.by_route[str(params.get("route"))] += 1
            if params.get("node") is not None:
                report.by_replica[f"{params.get('variant') or '-'}@{params['node']}"] += 1
            if params.get("sampled"):
                report.sampled += 1
                if config.feedback > 0 and rng.random() < config.feedback:
                    document = {"request_id": params["request_id"], "label": label}
                    try:
                        async with session.post(feedback_url, json=document, headers=auth) as f:
                            await f.read()
                            report.feedback_sent += f.status == 200
                    except (aiohttp.ClientError, TimeoutError):
                        pass

        start = time.monotonic()
        for w in range(config.first_window, config.first_window + config.windows):
            if should_stop is not None and should_stop():
                break
            report = WindowReport(w)
            reports.append(report)
            images, labels = window(w)
            begins = start + (w - config.first_window) * config.window_s
            for i, at in _schedule(len(images), config, begins, rng):
                if should_stop is not None and should_stop():
                    break
                delay = at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await limit.acquire()
                report.sent += 1
                task = asyncio.create_task(one(report, i, images[i], int(labels[i])))
                pending.add(task)
                task.add_done_callback(pending.discard)
            ends = begins + config.window_s
            if ends > time.monotonic():
                await asyncio.sleep(ends - time.monotonic())
            if on_window is not None and len(reports) >= 2:
                on_window(reports[-2])  # the previous window's answers are in by now
        if pending:
            await asyncio.wait(pending, timeout=config.timeout_s)
        if on_window is not None and reports:
            on_window(reports[-1])
    return reports


def _schedule(
    n_images: int, config: CameraConfig, begins: float, rng: random.Random
) -> Iterator[tuple[int, float]]:
    """(image index, send time) of one window: ``rate * window_s`` requests evenly spaced,
    cycling through the window's images in a shuffled order."""
    count = max(1, round(config.rate * config.window_s))
    order = list(range(n_images))
    rng.shuffle(order)
    gap = config.window_s / count
    for k in range(count):
        yield order[k % n_images], begins + k * gap
