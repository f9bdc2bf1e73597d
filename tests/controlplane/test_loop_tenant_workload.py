"""A user workload's code never runs in the control loop's process: its labeller, its model
factory (the first version, a job's result, an upload, the export) run in the tenant's
sandbox (:mod:`deepedge.controlplane.tenant_workload`), and what they do wrong becomes a
deployment event.

The tenant's package (``witnesssite``, a name no other test imports) leaves a witness of
where it ran: a host file outside the tenant's grants (written only where the code runs
unsandboxed), and a labeller that, asked to, raises with its uid, its pid and whether it
sees a file of the service's data folder. The test's process is the loop's own: the package must
never appear in its ``sys.modules``.
"""

from __future__ import annotations

import io
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from _workload_helpers import write_workload
from deepedge.controlplane.artifacts import artifact_path, served_path, version_meta
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.loop import ControlPlane
from deepedge.controlplane.records import DeploymentRecord, EventKind
from deepedge.controlplane.rollout_status import VersionStatus
from deepedge.controlplane.tenant_workload import TenantWorkloads
from deepedge.core.errors import InvalidInputError
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_store import Retention, Sample
from deepedge.dataplane.served_graph import GraphSession
from deepedge.service.config import ServiceSettings
from deepedge.service.records import Tenant
from deepedge.service.sandbox import Isolation
from deepedge.service.sandbox_run import SandboxRunner
from deepedge.service.store import JobStore

pytestmark = pytest.mark.slow  # every step starts a sandboxed Python that imports torch

PACKAGE = "witnesssite"
MODELS = textwrap.dedent(
    """
    import os

    import numpy as np
    import torch
    from torch import nn


    class Tiny(nn.Module):
        def __init__(self, classes, channels):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1), nn.ReLU(),
                                          nn.AdaptiveAvgPool2d(2))
            self.head = nn.Linear(16, classes)

        def forward(self, x):
            return self.head(torch.flatten(self.features(x), 1))


    def leave(path):
        # a host file: out of reach in a sandbox, where the code goes on regardless
        try:
            with open(path, "a") as handle:
                handle.write(f"{os.getpid()}\\n")
        except OSError:
            pass


    def make(classes=2, channels=3, touch=None):
        if touch:
            leave(touch)
        return Tiny(classes, channels)


    def labeller(touch=None, witness=None):
        def label(images):
            if touch:
                leave(touch)
            if witness:
                raise RuntimeError(f"witness uid={os.getuid()} pid={os.getpid()} "
                                   f"data={os.path.exists(witness)}")
            red, blue = images[:, 0].mean(axis=(1, 2)), images[:, 2].mean(axis=(1, 2))
            return (red > blue).astype(np.int64)

        return label
    """
)


def _site(root: Path, host: Path, witness: Path | None = None) -> dict[str, Any]:
    """The tenant's granted folder ``root`` (package, images, document); its model and
    labeller leave ``host`` wherever they run unsandboxed. Returns the workload document
    (inline, absolute paths, as a deployment holds it)."""
    write_workload(root)
    package = root / "site" / PACKAGE
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(MODELS)
    for path in (root, *root.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)  # readable by the tenant's uid
    labeller: dict[str, Any] = {"touch": str(host)}
    if witness is not None:
        labeller["witness"] = str(witness)
    return {
        "name": "witness-cams",
        "python_path": [str(root / "site")],
        "model": {"entry_point": f"{PACKAGE}.models:make",
                  "kwargs": {"classes": 2, "channels": 3, "touch": str(host)}},
        "input": {"size": [12, 12], "channels": 3},
        "data": {"kind": "folder", "root": str(root / "images")},
        "labeller": {"kind": "entry-point", "entry_point": f"{PACKAGE}.models:labeller",
                     "kwargs": labeller},
        "seed": 1,
    }  # fmt: skip


def _plane(tmp_path: Path, store: JobStore, isolation: Isolation) -> ControlPlane:
    settings = ServiceSettings(data_dir=tmp_path / "data", traffic_settle_s=0.0,
                               isolation=isolation)  # fmt: skip
    return ControlPlane(store, settings, first_versions_inline=True)


def _deploy(plane: ControlPlane, tenant: Tenant, document: dict[str, Any]) -> DeploymentRecord:
    spec = {"name": "cams", "window_s": 1.0, "workload": document, "base_windows": 1,
            "base_epochs": 1, "update": {"label_fraction": 1.0},
            "trigger": {"sample_count": None, "accuracy_threshold": 0.0},
            "canary": {"windows": 0}}  # fmt: skip
    deployment, _ = plane.deployments.create(tenant.id, DeploymentSpec.model_validate(spec), 0.0)
    return deployment


def _camera(plane: ControlPlane, deployment: DeploymentRecord, n: int = 12) -> None:
    """The due window's requests, answered by the serving version's export (random colour
    images: the camera reads no tenant code either)."""
    current = plane.deployments.get_by_id(deployment.id)
    assert current.serving_version is not None
    end, start = current.next_window_at, current.next_window_at - current.spec.window_s
    if plane.site().samples.window(current.id, start, end):
        return
    images = np.random.default_rng(current.window).uniform(0, 1, (n, 3, 12, 12))
    images = images.astype(np.float32)
    artifact = plane.artifact(current, current.serving_version)
    predictions = plane.site().predictions(current, artifact, images)
    samples = [Sample(f"w{current.window}-{i}", start + (i + 0.5) * (end - start) / n,
                      current.serving_version, RouteKind.SERVING, int(predictions[i]),
                      images[i]) for i in range(n)]  # fmt: skip
    plane.site().samples.append(current.id, samples, Retention(), now=end)


def _tenant(store: JobStore, grant: Path) -> Tenant:
    return store.create_tenant("t", "tok", max_cores=64, grants=[str(grant)])


@pytest.mark.parametrize("isolation", [Isolation.SANDBOX, Isolation.TRUSTED])
def test_the_loop_labels_trains_and_exports_a_user_workload_outside_its_process(
    tmp_path: Path, sqlite_store: JobStore, isolation: Isolation
) -> None:
    """The first version is trained and exported, and every window labelled by the
    workload's labeller, without the loop's process importing the tenant's package; in the
    sandbox the host file stays unwritten, trusted the code ran (in another process)."""
    host = tmp_path / "host" / "pwned"
    host.parent.mkdir()
    document = _site(tmp_path / "grant", host)
    plane = _plane(tmp_path, sqlite_store, isolation)
    deployment = _deploy(plane, _tenant(sqlite_store, tmp_path / "grant"), document)
    plane.tick(0.0)  # the first version, trained in a run of the tenant's
    for now in (1.0, 2.0, 3.0):
        _camera(plane, deployment)
        plane.tick(now)
    current = plane.deployments.get_by_id(deployment.id)
    errors = [e.message for e in plane.deployments.events(current.id) if e.kind is EventKind.ERROR]
    assert errors == []
    assert current.serving_version == 1
    artifact = artifact_path(plane.settings.data_dir, current, 1)
    meta = version_meta(artifact)
    assert meta is not None and meta["parameters"]["head.weight"] == [2, 16]
    served = GraphSession.load(served_path(artifact), (3, 12, 12), 2)
    assert served.run(np.zeros((1, 3, 12, 12), np.float32)).shape == (1, 2)
    scored = [w for w in plane.deployments.windows(current.id) if w.samples]
    # every sample labelled (label_fraction 1): none was picked, so all 12 count
    assert len(scored) >= 2 and all(w.samples == 12 for w in scored)
    assert all(w.accuracy is not None for w in scored)  # labelled by the labeller
    assert all(w.severity > 0.5 for w in scored)  # noise, against the base windows' images
    assert PACKAGE not in sys.modules
    if isolation is Isolation.SANDBOX:
        assert not host.exists()
    else:  # written by the model and the labeller, never from this process
        pids = {int(line) for line in host.read_text().split()}
        assert pids and os.getpid() not in pids


def test_a_labeller_runs_as_the_tenant_without_the_data_folder_and_its_failure_is_an_event(
    tmp_path: Path, sqlite_store: JobStore
) -> None:
    """The labeller raises with where it runs: the tenant's uid, another pid, and no data
    folder in sight; the loop records it as the deployment's error event (once) and goes
    on."""
    plane = _plane(tmp_path, sqlite_store, Isolation.SANDBOX)
    data = plane.settings.data_dir
    data.mkdir(parents=True, exist_ok=True)
    secret = data / "secret.txt"  # (the sandbox sees only its own run's folder in there)
    secret.write_text("the service's")
    secret.chmod(0o644)
    document = _site(tmp_path / "grant", tmp_path / "pwned", witness=secret)
    tenant = _tenant(sqlite_store, tmp_path / "grant")
    deployment = _deploy(plane, tenant, document)
    plane.tick(0.0)  # the first version's base windows are labelled by the labeller
    plane.tick(1.0)
    errors = [e.message for e in plane.deployments.events(deployment.id)
              if e.kind is EventKind.ERROR]  # fmt: skip
    assert len(errors) == 1, errors
    (message,) = errors
    uid = tenant.uid if os.geteuid() == 0 else os.geteuid()
    assert f"witness uid={uid} " in message and "data=False" in message
    pid = int(message.split("pid=")[1].split()[0])
    assert pid != os.getpid()
    current = plane.deployments.get_by_id(deployment.id)
    assert current.serving_version is None
    assert [v.status for v in plane.deployments.versions(current.id)] == [VersionStatus.TRAINING]
    assert not served_path(artifact_path(data, current, 1)).exists()
    assert PACKAGE not in sys.modules


def test_a_job_result_and_an_upload_are_loaded_into_the_model_in_the_sandbox(
    tmp_path: Path, sqlite_store: JobStore
) -> None:
    """``version`` builds the workload's model in the sandbox: flat weights take the
    parent's buffers and load to the same export; a file of another model is refused
    naming what is wrong (InvalidInputError, which the loop turns into REJECTED)."""
    host = tmp_path / "pwned"
    document = _site(tmp_path / "grant", host)
    plane = _plane(tmp_path, sqlite_store, Isolation.SANDBOX)
    tenant = _tenant(sqlite_store, tmp_path / "grant")
    deployment = _deploy(plane, tenant, document)
    workloads = TenantWorkloads(SandboxRunner.for_service(plane.settings), sqlite_store.tenant)
    data = plane.settings.data_dir
    v1, v2, v3 = (artifact_path(data, deployment, n) for n in (1, 2, 3))
    reference = workloads.first_version(deployment, v1)
    assert reference.shape[1:] == (3, 12, 12) and len(reference) > 0  # window 0
    weights = torch.load(v1, weights_only=True)  # (Tiny has parameters only)
    buffer = io.BytesIO()
    np.save(buffer, np.concatenate([weights[k].numpy().ravel() for k in weights]))
    flat = tmp_path / "upload.npy"
    flat.write_bytes(buffer.getvalue())
    workloads.version(deployment, flat, v2, parent=v1)
    workloads.export(deployment, v2)
    x = np.random.default_rng(0).random((4, 3, 12, 12), dtype=np.float32)
    a, b = (GraphSession.load(served_path(v), (3, 12, 12), 2).run(x) for v in (v2, v1))
    assert np.array_equal(a, b)
    wrong = tmp_path / "wrong.pt"
    torch.save({"head.weight": torch.zeros(3, 16)}, wrong)
    with pytest.raises(InvalidInputError):
        workloads.version(deployment, wrong, v3, parent=v1)
    assert not v3.exists()
    assert not host.exists() and PACKAGE not in sys.modules


class _OpensAFileWhenLoaded(torch.nn.Module):
    """TorchScript runs ``__setstate__`` when an archive is loaded: this one creates (shared
    ``from_file``) the file its state names, wherever it is loaded."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target
        self.weight = torch.nn.Parameter(torch.zeros(2, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t()

    @torch.jit.export
    def __getstate__(self) -> tuple[str, bool, torch.Tensor]:
        return (self.target, self.training, self.weight)

    @torch.jit.export
    def __setstate__(self, state: tuple[str, bool, torch.Tensor]) -> None:
        self.target = state[0]
        self.training = state[1]
        opened = torch.from_file(self.target, shared=True, size=4, dtype=torch.uint8)
        self.weight = state[2] + opened.float().sum() * 0


def test_a_torchscript_uploads_tensors_are_read_in_the_sandbox_only(
    tmp_path: Path, sqlite_store: JobStore
) -> None:
    """The API checks an upload's tensors without opening a TorchScript archive (loading
    one runs its code): ``shapes`` opens it in the tenant's sandbox, where an archive that
    creates a host file when loaded fails to, and is refused."""
    host = tmp_path / "pwned"
    document = _site(tmp_path / "grant", host)
    plane = _plane(tmp_path, sqlite_store, Isolation.SANDBOX)
    deployment = _deploy(plane, _tenant(sqlite_store, tmp_path / "grant"), document)
    workloads = TenantWorkloads(SandboxRunner.for_service(plane.settings), sqlite_store.tenant)
    plain = tmp_path / "plain.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(16, 2)), str(plain))
    assert workloads.shapes(deployment, plain) == {"weight": (2, 16), "bias": (2,)}
    target = tmp_path / "created-on-load"
    evil = tmp_path / "evil.pt"
    torch.jit.save(torch.jit.script(_OpensAFileWhenLoaded(str(target))), str(evil))
    assert not target.exists()  # (scripting and saving it ran nothing)
    with pytest.raises(InvalidInputError):
        workloads.shapes(deployment, evil)
    assert not target.exists()
    torch.jit.load(str(evil))  # the attack is real: loaded here, it creates the file
    assert target.exists()
