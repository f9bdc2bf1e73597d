"""Feedback that arrives after its window closed counts in the next window, once: a camera
whose labels ran 10 s behind left a site's windows empty (no decision for 28 windows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.records import DeploymentId, DeploymentRecord
from deepedge.controlplane.rollout_status import DeploymentStatus
from deepedge.controlplane.site import LATE_LABEL_HORIZON_WINDOWS, Site
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_store import FEEDBACK, GOLDEN, Retention, Sample
from deepedge.service.records import TenantId

WINDOW_S = 5.0


def _deployment() -> DeploymentRecord:
    spec = DeploymentSpec.model_validate(
        {"name": "cam", "labeller": "ground-truth", "window_s": WINDOW_S,
         "trigger": {"sample_count": None, "accuracy_threshold": 0.8}}
    )  # fmt: skip
    fields: dict[str, Any] = dict(
        id=DeploymentId("d"), tenant_id=TenantId("t"), name="cam", spec=spec,
        status=DeploymentStatus.ACTIVE, version=1, created_at=0.0, updated_at=0.0,
        serving_version=1, canary_version=None, previous_version=None, window=9,
        next_window_at=10.0, last_update_window=None, samples_since_update=0,
        canary_windows_done=0, update_requested=False, current_job_id=None,
        last_accuracy=None,
    )  # fmt: skip
    return DeploymentRecord(**fields)


def _served(site: Site, at: list[float]) -> None:
    image = np.zeros((1, 16, 16), np.float32)
    samples = [Sample(f"r{t:07.2f}", t, 1, RouteKind.SERVING, 3, image) for t in at]
    site.samples.append("d", samples, Retention(), now=max(at))


def test_feedback_after_its_window_closed_counts_in_the_next_window_once(
    tmp_path: Path,
) -> None:
    site, deployment = Site(tmp_path), _deployment()
    _served(site, [100.5, 101.0, 102.0, 106.0])
    site.samples.label("d", "r0101.00", 3, FEEDBACK, now=101.2)  # before window 1 closed
    first = site.traffic(deployment, 1, 100.0, 105.0, 105.0, late_since=100.0)
    assert first.request_ids == ("r0101.00",)
    # after it closed: feedback for two of its requests, and for one of window 2's own
    site.samples.label("d", "r0100.50", 3, FEEDBACK, now=108.0)
    site.samples.label("d", "r0102.00", 4, FEEDBACK, now=109.0)
    site.samples.label("d", "r0106.00", 3, FEEDBACK, now=107.0)
    second = site.traffic(deployment, 2, 105.0, 110.0, 110.0, late_since=105.0)
    assert sorted(second.request_ids) == ["r0100.50", "r0102.00", "r0106.00"]
    assert second.labels.tolist() == [3, 4, 3] and second.sampled == 1  # (its own requests)
    # told once: the next window holds none of them again
    third = site.traffic(deployment, 3, 110.0, 115.0, 115.0, late_since=110.0)
    assert third.request_ids == ()
    # no earlier window: nothing is late (a first window, or one the caller does not know)
    assert site.traffic(deployment, 2, 105.0, 110.0, 110.0).request_ids == ("r0106.00",)


def test_late_feedback_counts_within_its_horizon_and_golden_labels_are_never_late(
    tmp_path: Path,
) -> None:
    site, deployment = Site(tmp_path), _deployment()
    old = 200.0 - LATE_LABEL_HORIZON_WINDOWS * WINDOW_S - 1.0  # older than the horizon
    _served(site, [old, 150.0, 160.0])
    site.samples.label("d", f"r{old:07.2f}", 3, FEEDBACK, now=201.0)
    site.samples.label("d", "r0150.00", 3, FEEDBACK, now=201.0)
    site.samples.label("d", "r0160.00", 3, GOLDEN, now=201.0)  # a window's own golden label
    late = site.traffic(deployment, 5, 200.0, 205.0, 205.0, late_since=200.0)
    assert late.request_ids == ("r0150.00",)
