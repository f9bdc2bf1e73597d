"""The control loop with an emulated site in front of it: the test double of a camera and
the data plane, for the loop's unit tests (time injected; the real data plane on Ray Serve
is tested in tests/runtime/test_dataplane_serving.py).

Before each tick, every deployment whose window is due gets that window's traffic in the
real sample store: the stream's (or workload's) window ``t`` images, answered by the
serving version (a canary's share by the canary, drawn per request), each version
predicting with its real served graph (ONNX), stamped inside the window's time range. With a
``ground-truth`` labeller the camera sends every true label back as feedback; otherwise the
control loop's golden labeller labels them, as on a site.
"""

from __future__ import annotations

import json

import numpy as np

from deepedge.controlplane.deployment_spec import DeploymentSpec, Labeller
from deepedge.controlplane.loop import ControlPlane
from deepedge.controlplane.records import DeploymentRecord
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_store import FEEDBACK, Retention, Sample
from deepedge.workload.resolve import Workload

_CAMERAS: dict[str, Workload] = {}


def camera_workload(spec: DeploymentSpec) -> Workload | None:
    """The workload as the site's camera reads it (here, in the test: the control loop
    itself never loads it)."""
    if spec.user_workload is None:
        return None
    key = json.dumps(spec.user_workload, sort_keys=True)
    if key not in _CAMERAS:
        from deepedge.workload.resolve import load_workload

        _CAMERAS[key] = load_workload(spec.user_workload)
    return _CAMERAS[key]


def window_images(plane: ControlPlane, deployment: DeploymentRecord, index: int
                  ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    site, spec = plane.site(), deployment.spec
    workload = camera_workload(spec)
    if workload is None:
        window = site.stream(spec).window(index)
        return window.images, window.labels
    n = workload.source.n_windows
    data = workload.window(index % n if n else index)
    return data.images, workload.label(data.images, data.labels)


def emulate_window(plane: ControlPlane, deployment: DeploymentRecord, now: float) -> None:
    """Write the deployment's due window of traffic (module docstring), once."""
    site = plane.site()
    serving = deployment.serving_version
    if serving is None or deployment.next_window_at > now:
        return
    if not site.labeller_ready(deployment.spec):
        return
    index = deployment.window + 1
    end = deployment.next_window_at
    start = end - deployment.spec.window_s
    if site.samples.window(deployment.id, start, end):
        return  # written at an earlier tick
    images, labels = window_images(plane, deployment, index)
    rng = np.random.default_rng([deployment.spec.stream.seed, index, 11])
    canary = deployment.canary_version
    to_canary = (rng.random(len(labels)) < deployment.spec.canary.fraction
                 if canary is not None else np.zeros(len(labels), bool))  # fmt: skip
    routed = np.where(to_canary, canary if canary is not None else serving, serving)
    predictions = np.zeros(len(labels), dtype=np.int64)
    for version in np.unique(routed):
        mask = routed == version
        predictions[mask] = site.predictions(
            deployment, plane.artifact(deployment, int(version)), images[mask]
        )
    times = start + (np.arange(len(labels)) + 0.5) * (end - start) / len(labels)
    samples = [
        Sample(f"w{index}-{i}", float(times[i]), int(routed[i]),
               RouteKind.CANARY if to_canary[i] else RouteKind.SERVING,
               int(predictions[i]), images[i])
        for i in range(len(labels))
    ]  # fmt: skip
    site.samples.append(deployment.id, samples, Retention(), now=end)
    workload = camera_workload(deployment.spec)
    truth_only = (workload.labeller is None if workload is not None
                  else deployment.spec.labeller is Labeller.GROUND_TRUTH)  # fmt: skip
    if truth_only:
        site.samples.label_many(
            deployment.id, [(s.request_id, int(y)) for s, y in zip(samples, labels,
                                                                  strict=True)],
            FEEDBACK, end,
        )  # fmt: skip


class LiveTrafficPlane(ControlPlane):
    """A control plane whose deployments receive the site's emulated traffic just before
    the loop looks at them."""

    def advance(self, deployment: DeploymentRecord, now: float) -> None:
        emulate_window(self, self.deployments.get_by_id(deployment.id), now)
        super().advance(deployment, now)
