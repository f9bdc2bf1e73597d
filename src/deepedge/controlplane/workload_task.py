"""What the control loop asks of a deployment's user workload, run in the tenant's sandbox.

``python -m deepedge.controlplane.workload_task TASK`` with the deployment's spec as JSON
on stdin, its inputs read-only at ``../in/<name>`` and its outputs written in its working
directory (:mod:`deepedge.service.sandbox_run`; the loop's side of each task is
:mod:`deepedge.controlplane.tenant_workload`). Every task imports the tenant's code (its
model entry point, data source or labeller), so none runs in a service process:

=========  ==================================  ===========================================
task       reads                               writes
=========  ==================================  ===========================================
label      ``images.npy``                      ``labels.npy`` (the labeller's); nothing
                                               for a ``labels-present`` workload
reference  --                                  ``reference.npy`` (the base windows'
                                               images: the drift reference)
base       --                                  the first version ``model.pt`` (with
                                               ``model.json``) trained on the base
                                               windows' golden labels, ``reference.npy``,
                                               and its export ``served.onnx`` (with
                                               ``served.json``)
version    ``model.pt`` or ``model.npy`` (a    the version ``model.pt`` (with
           job's result, an upload), and for   ``model.json``): the file loaded into the
           flat weights ``parent.pt``          workload's model (flat weights take the
                                               parent's buffers)
export     ``model.pt`` (a version)            ``served.onnx`` (with ``served.json``): the
                                               ONNX graph the data plane serves (checked
                                               again by the service before it is kept)
shapes     ``model.pt`` (a model file)         nothing; the summary lists its tensors'
                                               names and shapes (``"shapes"``)
=========  ==================================  ===========================================

It prints one JSON line, ``{"task": TASK, ...}`` (``label`` adds ``"labeller": false`` when
the workload has none), or the error (``{"error", "message", "field"}``) and exits with
the error's exit code (2 for a workload or model file that is at fault).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.core.errors import DeepEdgeError, InvalidInputError

if TYPE_CHECKING:
    from deepedge.learning.export import ServedModel
    from deepedge.workload.resolve import Workload

TASKS = ("label", "reference", "base", "version", "export", "shapes")
INPUTS = Path("../in")  # where the sandbox binds the inputs (beside the working folder)
IMAGES, LABELS, REFERENCE = "images.npy", "labels.npy", "reference.npy"
MODEL, FLAT_MODEL, PARENT, SERVED = "model.pt", "model.npy", "parent.pt", "served.onnx"


def _workload(spec: DeploymentSpec) -> Workload:
    from deepedge.workload.resolve import load_workload

    reference = spec.user_workload
    if reference is None:
        raise InvalidInputError("the site's digits run in the control loop", "workload")
    return load_workload(reference)


def base_windows(workload: Workload, spec: DeploymentSpec) -> tuple[np.ndarray, np.ndarray]:
    """The base windows (window ``t`` mod the workload's windows): images, golden labels."""
    n = workload.source.n_windows
    images, labels = [], []
    for t in range(spec.base_windows):
        data = workload.window(t % n if n else t)
        images.append(data.images)
        labels.append(workload.label(data.images, data.labels))
    return np.concatenate(images), np.concatenate(labels)


def label(spec: DeploymentSpec) -> dict[str, Any]:
    from deepedge.workload.resolve import labeller_of

    assert spec.user_workload is not None
    labeller = labeller_of(spec.user_workload)
    if labeller is None:
        return {"labeller": False}
    images = np.load(INPUTS / IMAGES, allow_pickle=False)
    np.save(LABELS, np.asarray(labeller(images), dtype=np.int64))
    return {"labeller": True}


def reference(spec: DeploymentSpec) -> dict[str, Any]:
    workload = _workload(spec)
    n = workload.source.n_windows
    windows = [workload.window(t % n if n else t).images for t in range(spec.base_windows)]
    np.save(REFERENCE, np.concatenate(windows))
    return {}


def base(spec: DeploymentSpec) -> dict[str, Any]:
    """The first version: the factory's model (warm-started when its training section says
    so) trained with its training section on the base windows' golden labels."""
    from deepedge.controlplane.artifacts import write_version
    from deepedge.learning.training import train_epochs
    from deepedge.workload.model import local_training

    workload = _workload(spec)
    images, labels = base_windows(workload, spec)
    model = workload.model_factory()
    train_epochs(model, images, labels, spec.base_epochs, local_training(workload.spec.training),
                 seed=spec.stream.seed)  # fmt: skip
    write_version(Path(MODEL), model.eval())
    np.save(REFERENCE, images)
    return {"served": export(spec, Path(MODEL), Path(SERVED), workload).document()}


def version(spec: DeploymentSpec) -> dict[str, Any]:
    from deepedge.controlplane.artifacts import load_version, model_from_file, write_version
    from deepedge.learning.model_state import buffer_arrays, load_buffers

    flat = (INPUTS / FLAT_MODEL).exists()
    model = model_from_file(spec, INPUTS / (FLAT_MODEL if flat else MODEL))
    if flat and (INPUTS / PARENT).exists():
        load_buffers(model, buffer_arrays(load_version(spec, INPUTS / PARENT)))
    return {"format": write_version(Path(MODEL), model).value}


def export(
    spec: DeploymentSpec, artifact: Path, out: Path, workload: Workload | None = None
) -> ServedModel:
    """The version at ``artifact`` built with the workload's factory and written as the
    ONNX graph ``out`` with its sidecar (:mod:`deepedge.learning.export`)."""
    from deepedge.controlplane.artifacts import export_served, load_version
    from deepedge.learning.export import ServedModel, save_served

    workload = workload or _workload(spec)
    served = ServedModel(workload.input_shape, workload.class_names)
    graph = export_served(load_version(spec, artifact), workload.example_batch(2), served)
    save_served(graph, served, out)
    return served


def shapes() -> dict[str, Any]:
    """The tensors of ``model.pt`` (any model file; a TorchScript archive loaded here)."""
    import torch

    from deepedge.learning.model_state import ModelFileKind, model_file_kind, read_state_file

    path = INPUTS / MODEL
    if model_file_kind(path) is ModelFileKind.TORCHSCRIPT:
        try:
            state = torch.jit.load(str(path), map_location="cpu").state_dict()
        except Exception as exc:
            raise InvalidInputError(f"weights: not a TorchScript archive ({exc})",
                                    "weights") from exc  # fmt: skip
        return {"shapes": {k: list(v.shape) for k, v in state.items()}}
    return {"shapes": {k: list(v.shape) for k, v in read_state_file(path).items()}}


def run(task: str, spec: DeploymentSpec) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)  # the service's host is shared with the learners
    if task == "label":
        return label(spec)
    if task == "reference":
        return reference(spec)
    if task == "base":
        return base(spec)
    if task == "version":
        return version(spec)
    if task == "shapes":
        return shapes()
    return {"served": export(spec, INPUTS / MODEL, Path(SERVED)).document()}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in TASKS:
        sys.stderr.write(f"usage: python -m deepedge.controlplane.workload_task "
                         f"{{{','.join(TASKS)}}} < SPEC.json\n")  # fmt: skip
        return 2
    try:
        spec = DeploymentSpec.model_validate_json(sys.stdin.read())
        out: dict[str, Any] = {"task": args[0], **run(args[0], spec)}
        code = 0
    except DeepEdgeError as exc:
        out, code = exc.to_dict(), exc.exit_code
    sys.stdout.write(json.dumps(out) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
