"""A kept version a few points better than the serving one serves again, told on the
requests the two answer apart (the census), where the window's uniform labels alone
could not tell them: the control loop on a real store, real digits windows and the golden
labeller, with time injected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from _traffic import LiveTrafficPlane
from test_loop import SPEC, run_windows

from deepedge.controlplane.artifacts import artifact_path, load_version, write_version
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.deployments import NewVersion, Step, VersionChange
from deepedge.controlplane.loop import ControlPlane
from deepedge.controlplane.records import EventKind
from deepedge.controlplane.rollout_status import VersionStatus
from deepedge.dataplane.sample_store import GOLDEN, GOLDEN_DISCORDANT
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore

V = VersionStatus


@pytest.fixture
def plane(tmp_path: Path, sqlite_store: JobStore) -> ControlPlane:
    settings = ServiceSettings(data_dir=tmp_path / "data", traffic_settle_s=0.0)
    return LiveTrafficPlane(sqlite_store, settings, first_versions_inline=True)


def _worse_copy(spec: DeploymentSpec, v1: torch.nn.Module, images: np.ndarray,
                share: float) -> torch.nn.Module:  # fmt: skip
    """v1 with its class-0 bias raised so that ``share`` of the inputs it does not call 0
    are called 0 (all but the true zeros among them answered wrong)."""
    with torch.no_grad():
        logits = v1(torch.as_tensor(images)).numpy()
        others = logits.argmax(axis=1) != 0
        gap = logits[others].max(axis=1) - logits[others, 0]
        v1.head.bias[0] += float(np.quantile(gap, share))
    return v1


def test_a_kept_version_a_few_points_better_serves_again_on_its_census(
    plane: ControlPlane,
) -> None:
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    spec = DeploymentSpec.model_validate({
        **SPEC, "labeller": "golden-model", "stream": {"window_size": 120, "onset_window": 50},
        "update": {"label_fraction": 0.25, "hard_fraction": 0.0, "epochs": 6},
    })  # fmt: skip
    plane.site().golden(spec)  # loaded from the machine's cache before the first window
    deployment, _ = plane.deployments.create(tenant.id, spec, now=0.0)
    run_windows(plane, tenant.id, 0, 2)
    current = plane.deployments.get_by_id(deployment.id)
    data_dir = plane.settings.data_dir
    v1 = load_version(spec, artifact_path(data_dir, current, 1))
    images = np.concatenate([plane.site().stream(spec).window(t).images for t in range(2, 8)])
    write_version(artifact_path(data_dir, current, 2), _worse_copy(spec, v1, images, 0.1))
    # v2 serves over v1 (an operator's forced update) and its rollback watch is over: v1 is
    # a kept version, about 9 points better on this scene
    plane.deployments.commit(current, Step(
        deployment={"serving_version": 2, "previous_version": None},
        new_versions=(NewVersion(2, 1, (), "planted", status=V.CANDIDATE),),
        versions=(VersionChange(1, V.RETIRED), VersionChange(2, V.SERVING, replaced=1)),
    ))  # fmt: skip
    run_windows(plane, tenant.id, 2, 6)
    windows = plane.deployments.windows(deployment.id)
    assert [w.served_version for w in windows[:3]] == [1, 1, 2]
    assert windows[-1].served_version == 1  # brought back within three windows
    (restored,) = [e for e in plane.deployments.events(deployment.id)
                   if e.kind is EventKind.PROMOTED and e.detail.get("restored")]  # fmt: skip
    served = restored.window
    assert served is not None
    # decided on the whole serving share (the census), not on the 30 uniform labels
    point = next(w for w in windows if w.window == served)
    assert restored.detail["n"] > point.samples >= 25
    assert restored.detail["low"] > 0.0 and restored.detail["diff"] > 0.0
    sources = plane.site().samples.label_sources(deployment.id)
    assert sources[GOLDEN_DISCORDANT] < sources[GOLDEN]  # the census labels a few
