"""A window ends where its inputs moved, and the next one holds the new condition only: the
control loop on a real store with real digits windows, time injected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _traffic import LiveTrafficPlane
from test_loop import SPEC, run_windows

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.loop import ControlPlane
from deepedge.controlplane.window_edges import (
    MOVED_WINDOW_SHARE,
    follows_a_move,
    moved_look,
    window_start,
)
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_store import FEEDBACK, Retention, Sample
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore


@pytest.fixture
def plane(tmp_path: Path, sqlite_store: JobStore) -> ControlPlane:
    settings = ServiceSettings(data_dir=tmp_path / "data", traffic_settle_s=0.0)
    return LiveTrafficPlane(sqlite_store, settings, first_versions_inline=True)


def test_window_edges_follow_the_last_window_and_a_move() -> None:
    assert window_start(10.0, 5.0, []) == 5.0
    assert moved_look(5.0, 7.0, 5.0) == (0.0, 5.0, 7.0)
    assert moved_look(0.0, 100.0, 3600.0) == (40.0, 70.0, 100.0)  # the newest 30 s
    assert follows_a_move(10.0, 8.0, 5.0) and not follows_a_move(10.0, 5.0, 5.0)


def test_a_window_ends_where_its_inputs_moved_and_the_next_is_short(plane: ControlPlane) -> None:
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    spec = DeploymentSpec.model_validate({**SPEC, "window_s": 4.0,
                                          "stream": {**SPEC["stream"], "onset_window": 50}})
    deployment, _ = plane.deployments.create(tenant.id, spec, now=0.0)
    run_windows(plane, tenant.id, 0, 9)  # the first version, and windows of one condition
    current = plane.deployments.get_by_id(deployment.id)
    due, site = current.next_window_at, plane.site()
    start = window_start(due, 4.0, plane.deployments.windows(deployment.id, 1))
    assert due - start == 4.0
    stream = site.stream(spec)
    old, new = stream.window(current.window + 1), stream.window(80)  # 80: fully drifted
    images = np.concatenate([old.images[:48], new.images[:32]])
    labels = np.concatenate([old.labels[:48], new.labels[:32]])
    times = start + 0.02 + 0.025 * np.arange(len(images))  # 80 inputs in 2 s
    samples = [Sample(f"m{i}", float(times[i]), 1, RouteKind.SERVING, 0, images[i])
               for i in range(len(images))]  # fmt: skip
    site.samples.append(deployment.id, samples, Retention(), now=float(times[-1]))
    site.samples.label_many(deployment.id, [(s.request_id, int(y)) for s, y in
                                            zip(samples, labels, strict=True)],
                            FEEDBACK, float(times[-1]))  # fmt: skip
    plane.tick(float(times[-1]) + 0.01)  # still inside the window
    moved = float(times[48])  # the first drifted input
    ended = plane.deployments.windows(deployment.id)[-1]
    assert ended.window == current.window + 1 and ended.due_at == pytest.approx(moved)
    after = plane.deployments.get_by_id(deployment.id)
    assert after.next_window_at == pytest.approx(moved + MOVED_WINDOW_SHARE * 4.0)
    newest = plane.deployments.windows(deployment.id, 1)
    start_next = window_start(after.next_window_at, 4.0, newest)
    assert start_next == pytest.approx(moved)
    assert follows_a_move(after.next_window_at, start_next, 4.0)
    # the next test of the open window (all of it new) splits nothing more
    plane.tick(float(times[-1]) + 0.6)
    assert plane.deployments.windows(deployment.id)[-1].window == ended.window


def test_a_window_new_from_its_start_ends_early_after_a_full_one(plane: ControlPlane) -> None:
    """The condition changed at the window's edge: the open window holds the new one whole.
    Once it has lasted MOVED_WINDOW_SHARE of window_s it ends, and the next is short."""
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    spec = DeploymentSpec.model_validate({**SPEC, "window_s": 4.0,
                                          "stream": {**SPEC["stream"], "onset_window": 50}})
    deployment, _ = plane.deployments.create(tenant.id, spec, now=0.0)
    run_windows(plane, tenant.id, 0, 9)  # windows of one condition, each of full length
    current = plane.deployments.get_by_id(deployment.id)
    site = plane.site()
    start = window_start(current.next_window_at, 4.0, plane.deployments.windows(deployment.id, 1))
    new = site.stream(spec).window(80)  # fully drifted
    times = start + 0.02 + 0.025 * np.arange(80)  # 80 inputs in 2 s
    samples = [Sample(f"n{i}", float(times[i]), 1, RouteKind.SERVING, 0, new.images[i])
               for i in range(80)]  # fmt: skip
    site.samples.append(deployment.id, samples, Retention(), now=float(times[-1]))
    site.samples.label_many(deployment.id, [(s.request_id, int(y)) for s, y in
                                            zip(samples, new.labels[:80], strict=True)],
                            FEEDBACK, float(times[-1]))  # fmt: skip
    plane.tick(start + 1.0)  # new from its start, but not yet MOVED_WINDOW_SHARE long
    assert plane.deployments.windows(deployment.id)[-1].window == current.window
    plane.tick(float(times[-1]) + 0.01)
    ended = plane.deployments.windows(deployment.id)[-1]
    assert ended.window == current.window + 1
    assert ended.due_at == pytest.approx(float(times[-1]) + 0.01)
    after = plane.deployments.get_by_id(deployment.id)
    assert after.next_window_at == pytest.approx(ended.due_at + MOVED_WINDOW_SHARE * 4.0)
