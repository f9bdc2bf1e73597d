"""Model versions on disk: the whole model state, in the format the user gave.

A version's artifact ``v<N>.pt`` holds everything the model's ``state_dict`` holds
(parameters and buffers: BatchNorm's running statistics travel with the weights):

* for a model built by an entry point (and the site's digits CNN): ``torch.save`` of its
  ``state_dict``; ``torch.load(path, weights_only=True)`` reads it back;
* for a TorchScript workload: a TorchScript archive (``torch.jit.save``); ``torch.jit.load``
  reads it back, a whole model with its code, so only the tenant's sandbox ever loads one
  (a service process reads a TorchScript file's tensors through the sandbox too).

Artifacts are written atomically (temporary file, fsync, rename, fsync of the folder)
before the version row that names it is committed, so a committed version always has its
model. A store from before this format keeps its flat float32 ``v<N>.npy`` parameter
vectors, which still load (with the factory's buffers).

The two functions the rest of deepedge calls: :func:`load_version` (a deployment's spec and
an artifact -> the whole ``nn.Module``) and :func:`write_version` (a model -> an artifact);
:func:`export_served` makes the ONNX graph a data plane serves, checked
(:mod:`deepedge.dataplane.served_graph`) and checked to answer like the loaded model.

Beside each artifact, ``v<N>.serve.onnx`` is the version as the data plane serves it (an
ONNX graph with its ``v<N>.serve.json`` sidecar: :func:`served_path`), written before the
version is registered. What a service process runs of a version is only this graph.

Beside each artifact, ``v<N>.json`` describes it (format, the parameters' names and
shapes, the buffers'), so the API can check an upload and answer a download without
loading a model (:func:`version_meta`).

A model uploaded by an operator waits beside the artifacts as ``v<N>.upload.pt`` (or
``.upload.npy``, flat parameters) until the control loop, which runs the workload's code,
loads it into the deployment's model and writes the version (:func:`upload_path`); the API
checks it first against the serving version's state by names and shapes
(:func:`check_upload`), without building any model (a TorchScript upload's tensors are
read in the tenant's sandbox). torch is imported only by the
functions that need it, so the API process loads it only when a model is up- or
downloaded.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deepedge.controlplane.records import DeploymentRecord
from deepedge.core.errors import InvalidInputError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.learning.export import ServedModel
    from deepedge.learning.model_state import ModelFileKind, State

ARTIFACT_SUFFIX, LEGACY_SUFFIX = ".pt", ".npy"
SERVED_SUFFIX = ".serve.onnx"  # the version as the data plane serves it
SITE_CLASSES, SITE_IMAGE_SIZE, SITE_EDGE_WIDTH = 10, 16, 8  # the site's digits edge CNN


def deployment_dir(data_dir: Path, deployment: DeploymentRecord) -> Path:
    """Where a deployment's versions live (removed with it)."""
    return data_dir / "deployments" / deployment.tenant_id / deployment.id


def artifact_path(data_dir: Path, deployment: DeploymentRecord, number: int) -> Path:
    """Version ``number``'s artifact: ``v<N>.pt``, or a legacy ``v<N>.npy`` written by an
    older deepedge when only that one exists."""
    folder = deployment_dir(data_dir, deployment)
    path = folder / f"v{number}{ARTIFACT_SUFFIX}"
    legacy = folder / f"v{number}{LEGACY_SUFFIX}"
    return legacy if not path.exists() and legacy.exists() else path


def served_path(artifact: Path) -> Path:
    """A version's export for serving, beside its artifact: ``v<N>.serve.onnx``."""
    return artifact.with_name(artifact.name.split(".")[0] + SERVED_SUFFIX)


def upload_path(data_dir: Path, deployment: DeploymentRecord, number: int, flat: bool) -> Path:
    """Where an operator's upload of version ``number`` waits for the control loop."""
    suffix = LEGACY_SUFFIX if flat else ARTIFACT_SUFFIX
    return deployment_dir(data_dir, deployment) / f"v{number}.upload{suffix}"


def pending_upload(data_dir: Path, deployment: DeploymentRecord, number: int) -> Path | None:
    """Version ``number``'s upload still to be loaded, if any."""
    for flat in (False, True):
        path = upload_path(data_dir, deployment, number, flat)
        if path.exists():
            return path
    return None


@functools.lru_cache(maxsize=64)
def _workload_factory(reference: str) -> Callable[[], nn.Module]:
    from deepedge.workload.resolve import model_factory

    return model_factory(json.loads(reference))


def version_factory(spec: DeploymentSpec) -> Callable[[], nn.Module]:
    """``() -> nn.Module``: the deployment's model as its factory builds it (a user's
    workload's, with its frozen layers; else the site's digits edge CNN)."""
    reference = spec.user_workload
    if reference is None:
        from deepedge.learning.models import make_edge_model

        return functools.partial(make_edge_model, SITE_CLASSES, SITE_IMAGE_SIZE, SITE_EDGE_WIDTH)
    return _workload_factory(json.dumps(reference, sort_keys=True))


def load_version(spec: DeploymentSpec, artifact: Path) -> nn.Module:
    """The whole model of a version (parameters and buffers), in evaluation mode.

    A TorchScript workload's artifact is loaded as it is (``torch.jit.load``) after its
    state is checked against the workload's model; every other artifact is loaded into the
    deployment's model factory's model."""
    import torch

    from deepedge.learning.model_state import (
        ModelFileKind,
        load_model_file,
        load_state,
        model_file_kind,
    )

    factory = version_factory(spec)
    if model_file_kind(artifact) is ModelFileKind.TORCHSCRIPT:
        scripted = torch.jit.load(str(artifact), map_location="cpu")
        load_state(factory(), {k: v.numpy() for k, v in scripted.state_dict().items()})
        return scripted.eval()
    return load_model_file(factory(), artifact).eval()


def write_version(artifact: Path, model: nn.Module) -> ModelFileKind:
    """Write ``model`` as a version's artifact (module docstring); a TorchScript model as
    a TorchScript archive, any other as its ``state_dict``."""
    from deepedge.core.durable import write_atomically
    from deepedge.learning.model_state import parameter_names, save_model_file

    if artifact.suffix != ARTIFACT_SUFFIX:
        raise InvalidInputError(f"a version's artifact is a {ARTIFACT_SUFFIX} file", "artifact")
    kind = save_model_file(model, artifact)
    params = parameter_names(model)
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    meta = {
        "format": kind.value,
        "parameters": {k: v for k, v in shapes.items() if k in params},
        "buffers": {k: v for k, v in shapes.items() if k not in params},
    }
    write_atomically(artifact.with_suffix(".json"), json.dumps(meta).encode())
    return kind


def version_meta(artifact: Path) -> dict[str, Any] | None:
    """What :func:`write_version` recorded beside ``artifact`` (None: an older version)."""
    try:
        meta = json.loads(artifact.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def write_version_state(spec: DeploymentSpec, artifact: Path, state: State) -> ModelFileKind:
    """Write a version from a :data:`State` (a ``state_dict`` as arrays) of the
    deployment's model."""
    from deepedge.learning.model_state import load_state

    return write_version(artifact, load_state(version_factory(spec)(), state))


def model_from_file(spec: DeploymentSpec, path: Path) -> nn.Module:
    """The deployment's model loaded with the model file at ``path`` (a job's result, an
    operator's upload: any :class:`~deepedge.learning.model_state.ModelFileKind`)."""
    from deepedge.learning.model_state import load_model_file

    return load_model_file(version_factory(spec)(), path)


def model_from_bytes(spec: DeploymentSpec, data: bytes) -> nn.Module:
    """:func:`model_from_file` of a model file's bytes (read safely from a job's results)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="deepedge-model-") as folder:
        path = Path(folder) / "model"
        path.write_bytes(data)
        return model_from_file(spec, path)


def export_served(model: nn.Module, example: torch.Tensor, served: ServedModel) -> bytes:
    """``model`` as the ONNX graph a data plane serves: exported, accepted by the serving
    check (:func:`~deepedge.dataplane.served_graph.check_graph`) and answering ``example``
    like ``model`` (within float tolerance), else :class:`InvalidInputError`."""
    import numpy as np
    import torch

    from deepedge.dataplane.served_graph import GraphSession
    from deepedge.learning.export import export_onnx

    model = model.eval()
    data = export_onnx(model, example)
    session = GraphSession(data, served.input_shape, len(served.class_names))
    with torch.no_grad():
        expected = model(example).float().numpy()
    got = session.run(example.numpy())
    if got.shape != expected.shape or not np.allclose(got, expected, atol=1e-4, rtol=1e-3):
        raise InvalidInputError(
            "model: its export for serving answers differently from the model", field="model"
        )
    return data


def artifact_bytes(artifact: Path) -> tuple[bytes, ModelFileKind]:
    """A version's artifact as it is downloaded, and its format: the whole model in the
    user's format (a legacy version: its flat parameters)."""
    from deepedge.learning.model_state import model_file_kind

    return artifact.read_bytes(), model_file_kind(artifact)


Shapes = dict[str, tuple[int, ...]]


def file_shapes(path: Path, code_shapes: Callable[[Path], Shapes] | None = None) -> Shapes:
    """Names and shapes of the tensors a model file holds, read without building a model
    (a flat vector: one entry named ``""``). A TorchScript archive is code (loading it runs
    its ``__setstate__``): only ``code_shapes``, which reads it in the tenant's sandbox,
    may open one."""
    import numpy as np

    from deepedge.learning.model_state import ModelFileKind, model_file_kind, read_state_file

    kind = model_file_kind(path)
    if kind is ModelFileKind.FLAT:
        return {"": tuple(np.load(path, mmap_mode="r", allow_pickle=False).shape)}
    if kind is ModelFileKind.TORCHSCRIPT:
        if code_shapes is None:
            raise InvalidInputError(
                "weights: a TorchScript archive is read only in its tenant's sandbox",
                field="weights",
            )
        return code_shapes(path)
    return {k: tuple(v.shape) for k, v in read_state_file(path).items()}


def check_upload(
    serving: Path, upload: Path, field: str, code_shapes: Callable[[Path], Shapes] | None = None
) -> None:
    """Refuse an upload whose tensors are not the serving version's (names and shapes);
    a flat upload must hold as many values as the serving model has parameters. A
    TorchScript file's tensors are read by ``code_shapes`` (:func:`file_shapes`)."""
    meta = version_meta(serving)
    theirs = file_shapes(upload, code_shapes)
    if meta is not None:
        ours = {k: tuple(v) for part in ("parameters", "buffers") for k, v in meta[part].items()}
    else:
        ours = file_shapes(serving, code_shapes)
    if set(theirs) == {""}:
        n = _size(theirs[""])
        if meta is not None:
            total = sum(_size(tuple(v)) for v in meta["parameters"].values())
        else:
            total = sum(_size(s) for s in ours.values())
        if n > total or ((meta is not None or set(ours) == {""}) and n != total):
            raise InvalidInputError(
                f"{field}: {n} weights; the deployment's model has {total} values", field=field
            )
        return
    if set(ours) == {""}:
        return  # a legacy flat version: the control loop checks it against the model
    missing, unexpected = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    wrong = sorted(k for k in set(ours) & set(theirs) if ours[k] != theirs[k])
    if missing or unexpected or wrong:
        raise InvalidInputError(
            f"{field}: the model is not the deployment's"
            + (f"; missing {missing[:4]}" if missing else "")
            + (f"; unexpected {unexpected[:4]}" if unexpected else "")
            + (f"; shapes differ for {wrong[:4]}" if wrong else ""),
            field=field,
        )


def _size(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out
