"""Versions are whole models in the user's format: written, loaded, exported, uploaded and
deleted without losing a buffer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from _workload_helpers import write_workload
from deepedge.controlplane.artifacts import (
    artifact_path,
    check_upload,
    export_served,
    load_version,
    version_meta,
    write_version,
)
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.deployments import DeploymentStore, Step
from deepedge.controlplane.rollout_status import DeploymentStatus
from deepedge.core.errors import ConflictError, InvalidInputError
from deepedge.dataplane.served_graph import GraphSession
from deepedge.learning.export import ServedModel, export_onnx
from deepedge.learning.model_state import recalibrate_norms
from deepedge.learning.models import get_flat_weights, make_edge_model
from deepedge.learning.small_models import make_bn_cnn
from deepedge.service.store import JobStore

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
SITE = DeploymentSpec.model_validate({"name": "line", "labeller": "ground-truth"})


def _workload_spec(tmp_path: Path, **overrides: Any) -> DeploymentSpec:
    path = write_workload(tmp_path, **overrides)
    return DeploymentSpec.model_validate(
        {"name": "cams", "workload": str(path), "base_windows": 1, "window_s": 3600}
    )


def test_a_version_is_the_state_dict_and_loads_back_identical(tmp_path: Path) -> None:
    model = make_edge_model(seed=5)
    path = tmp_path / "v1.pt"
    assert write_version(path, model).value == "state-dict"
    loaded = load_version(SITE, path)
    x = torch.rand(3, 1, 16, 16)
    assert torch.equal(loaded(x), model.eval()(x))
    assert torch.load(path, weights_only=True).keys() == model.state_dict().keys()
    meta = version_meta(path)
    assert meta is not None and meta["format"] == "state-dict" and meta["buffers"] == {}
    assert meta["parameters"]["head.weight"] == [10, 256]


def test_a_torchscript_workloads_versions_are_torchscript(tmp_path: Path) -> None:
    source = make_bn_cnn(2, 3, width=4, blocks=2)
    recalibrate_norms(source, np.random.default_rng(0).normal(1, 2, (32, 3, 12, 12)).astype("f"))
    write_workload(tmp_path)
    torch.jit.save(torch.jit.script(source), str(tmp_path / "model.pt"))
    spec = _workload_spec(tmp_path, model={"torchscript": "model.pt"}, frozen={})
    path = tmp_path / "versions" / "v1.pt"
    served = load_version(spec, tmp_path / "model.pt")
    assert write_version(path, served).value == "torchscript"
    again = torch.jit.load(str(path))  # what a user, or a data plane, reads
    x = torch.rand(2, 3, 12, 12)
    assert torch.equal(again.eval()(x), source.eval()(x))
    assert torch.equal(load_version(spec, path)(x), source(x))


def test_a_legacy_flat_version_still_loads(tmp_path: Path) -> None:
    from deepedge.controlplane.records import DeploymentRecord

    record = DeploymentRecord.__new__(DeploymentRecord)
    object.__setattr__(record, "tenant_id", "t")
    object.__setattr__(record, "id", "d")
    folder = tmp_path / "deployments" / "t" / "d"
    folder.mkdir(parents=True)
    model = make_edge_model(seed=7)
    np.save(folder / "v1.npy", get_flat_weights(model))
    legacy = artifact_path(tmp_path, record, 1)
    assert legacy.name == "v1.npy"
    assert np.array_equal(get_flat_weights(load_version(SITE, legacy)), get_flat_weights(model))
    write_version(folder / "v1.pt", model)
    assert artifact_path(tmp_path, record, 1).name == "v1.pt"


class _Dynamic(nn.Module):
    """A model TorchScript cannot compile (a Python dict of layers chosen at run time)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleDict({"a": nn.Linear(4, 3), "b": nn.Linear(4, 3)})
        self.choice = {"which": "a"}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[self.choice["which"]](x)


@pytest.mark.parametrize(
    ("make", "example"),
    [
        (lambda: make_bn_cnn(3, 3, width=4, blocks=2), torch.rand(2, 3, 12, 12)),
        (_Dynamic, torch.rand(5, 4)),  # scripting fails: traced on the example
    ],
)
def test_the_export_for_serving_answers_like_the_model(make: Any, example: torch.Tensor) -> None:
    model = make().eval()
    classes = model(example).shape[1]
    served = ServedModel(tuple(example.shape[1:]), tuple(map(str, range(classes))))
    graph = GraphSession(export_served(model, example, served), served.input_shape, classes)
    with torch.no_grad():
        assert np.allclose(graph.run(example.numpy()), model(example).numpy(), atol=1e-5)


def test_an_export_that_answers_otherwise_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_edge_model(seed=1).eval()
    other = export_onnx(make_edge_model(seed=2).eval(), torch.rand(2, 1, 16, 16))
    monkeypatch.setattr("deepedge.learning.export.export_onnx", lambda m, x: other)
    served = ServedModel((1, 16, 16), tuple(map(str, range(10))))
    with pytest.raises(InvalidInputError, match="answers differently"):
        export_served(model, torch.rand(2, 1, 16, 16), served)


def test_a_torchscript_upload_is_read_only_through_the_sandbox(tmp_path: Path) -> None:
    serving = tmp_path / "v1.pt"
    write_version(serving, make_edge_model(seed=1))
    upload = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(make_edge_model(seed=2)), str(upload))
    with pytest.raises(InvalidInputError, match="only in its tenant's sandbox"):
        check_upload(serving, upload, "model_b64")
    read: list[Path] = []

    def reader(path: Path) -> dict[str, tuple[int, ...]]:
        read.append(path)
        return {k: tuple(v.shape) for k, v in make_edge_model().state_dict().items()}

    check_upload(serving, upload, "model_b64", reader)
    assert read == [upload]


def test_an_upload_must_be_the_deployments_model(tmp_path: Path) -> None:
    serving = tmp_path / "v1.pt"
    write_version(serving, make_edge_model(seed=1))
    torch.save(make_edge_model(seed=2).state_dict(), tmp_path / "good.pt")
    check_upload(serving, tmp_path / "good.pt", "model_b64")
    np.save(tmp_path / "flat.npy", get_flat_weights(make_edge_model(seed=2)))
    check_upload(serving, tmp_path / "flat.npy", "weights_b64")
    for name, write, message in [
        ("other.pt", lambda p: torch.save(nn.Linear(2, 2).state_dict(), p), "missing"),
        ("short.npy", lambda p: np.save(p, np.zeros(40, np.float32)), "40 weights"),
        ("wide.pt", lambda p: torch.save(make_edge_model(n_classes=3).state_dict(), p),
         "shapes differ"),
    ]:  # fmt: skip
        write(tmp_path / name)
        with pytest.raises(InvalidInputError, match=message):
            check_upload(serving, tmp_path / name, "model_b64")


def test_deleting_needs_a_stopped_deployment_and_removes_every_row(sqlite_store: JobStore) -> None:
    registry = DeploymentStore(sqlite_store)
    tenant = sqlite_store.create_tenant("t", "tok")
    record, _ = registry.create(tenant.id, SITE, now=0.0)
    with pytest.raises(ConflictError, match="stop it first"):
        registry.delete(record)
    registry.commit(record, Step(deployment={"status": DeploymentStatus.STOPPED}))
    stale = record  # the row moved on: a delete from an old read conflicts
    with pytest.raises(ConflictError):
        registry.delete(stale.__class__(**{**stale.__dict__, "status": DeploymentStatus.STOPPED}))
    registry.delete(registry.get(tenant.id, "line"))
    assert registry.of_tenant(tenant.id) == [] and registry.tenant_versions(tenant.id) == []
    assert registry.events(record.id) == [] and registry.windows(record.id) == []
    again, created = registry.create(tenant.id, SITE.model_copy(update={"window_s": 60.0}))
    assert created and again.id != record.id
