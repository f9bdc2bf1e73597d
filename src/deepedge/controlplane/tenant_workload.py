"""A deployment's user workload, run for the control loop in its tenant's sandbox.

The loop never imports a tenant's code: labelling a window of live traffic, the drift
reference, training and exporting the first version, loading a job's result or an upload
into the workload's model, and exporting a version for serving each run
:mod:`deepedge.controlplane.workload_task` through
:class:`~deepedge.service.sandbox_run.SandboxRunner`, as the deployment's tenant (its uid,
its granted folders, no network, no view of the data folder). Inputs are handed over as
files readable by the sandbox's user; what the task wrote is read back without following a
link, bounded in size, and checked before it is written into the data folder (whole or
absent: :func:`~deepedge.core.durable.write_atomically`).

A failed task raises the typed error it printed (:class:`InvalidInputError` naming the
field, for a workload or model file at fault) or :class:`TenantCodeError` (it crashed or
ran out of time); the loop turns either into a deployment event.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.controlplane.artifacts import served_path
from deepedge.controlplane.records import DeploymentRecord
from deepedge.controlplane.workload_task import (
    FLAT_MODEL,
    IMAGES,
    LABELS,
    MODEL,
    PARENT,
    REFERENCE,
    SERVED,
)
from deepedge.core.durable import write_atomically
from deepedge.core.errors import InvalidInputError, TenantCodeError
from deepedge.core.limits import LearnerLimits
from deepedge.learning.export import ServedModel, sidecar
from deepedge.service.records import Tenant, TenantId
from deepedge.service.sandbox_run import (
    TASK_MAX_PROCESSES,
    ModuleRun,
    SandboxRunner,
    summary_json,
)

TASK_MODULE = "deepedge.controlplane.workload_task"
LABEL_TIMEOUT_S = 120.0  # labelling one window's samples, at most
LABEL_WINDOWS = 4.0  # ... and at most this many of its deployment's windows (at least 20 s)
TRAIN_TIMEOUT_S = 600.0  # the first version (training) or an export
MAX_ARRAY_B = 1 << 30  # labels and reference images read back
MAX_MODEL_B = 4 << 30  # a version's artifact or export read back
LIMITS = LearnerLimits(mem_mb=8192, cpu_time_s=1200, nofile=1024,
                       max_processes=TASK_MAX_PROCESSES, max_file_mb=4096)  # fmt: skip


def label_timeout_s(deployment: DeploymentRecord) -> float:
    """How long a window's labelling may take: a few of the deployment's windows (a
    labeller slower than that leaves its windows unlabelled, said, rather than the
    deployment behind its traffic), at least 20 s (a sandbox's start), at most 2 minutes."""
    return min(LABEL_TIMEOUT_S, max(20.0, LABEL_WINDOWS * deployment.spec.window_s))


@dataclass(frozen=True)
class TenantWorkloads:
    """The control loop's handle on its deployments' user workloads (module docstring)."""

    runner: SandboxRunner
    tenant_of: Callable[[TenantId], Tenant]  # the store's tenant record

    def labels(self, deployment: DeploymentRecord, images: np.ndarray) -> np.ndarray | None:
        """The workload's labeller's labels of ``images`` (None: it has none)."""
        with (
            _staged({IMAGES: _npy(images)}) as inputs,
            self._run(deployment, "label", inputs, label_timeout_s(deployment)) as (run, out),
        ):
            if out.get("labeller") is False:
                return None
            labels = _array(run, LABELS)
        if labels.shape != (len(images),) or labels.dtype.kind not in "iu":
            raise TenantCodeError(
                f"labeller: {labels.shape} {labels.dtype} labels for {len(images)} images"
            )
        return labels.astype(np.int64)

    def reference(self, deployment: DeploymentRecord) -> np.ndarray:
        """The images of the base windows (what severity is measured against)."""
        with self._run(deployment, "reference", {}, TRAIN_TIMEOUT_S) as (run, _):
            return _images(run)

    def first_version(self, deployment: DeploymentRecord, artifact: Path) -> np.ndarray:
        """Train the first version into ``artifact`` and export it beside it (served
        last: a version is servable once its export exists); the base windows' images."""
        with self._run(deployment, "base", {}, TRAIN_TIMEOUT_S) as (run, _):
            images = _images(run)
            _keep_version(run, artifact)
            _keep_served(run, artifact)
        return images

    def version(
        self, deployment: DeploymentRecord, model: Path, artifact: Path, parent: Path | None
    ) -> None:
        """Load the model file ``model`` (a job's result, an upload; flat weights take the
        buffers of ``parent``) into the workload's model and write it as ``artifact``."""
        from deepedge.learning.model_state import ModelFileKind, model_file_kind

        flat = model_file_kind(model) is ModelFileKind.FLAT
        files: dict[str, Path | bytes] = {FLAT_MODEL if flat else MODEL: model}
        if flat and parent is not None:
            files[PARENT] = parent
        with (
            _staged(files) as inputs,
            self._run(deployment, "version", inputs, TRAIN_TIMEOUT_S) as (run, _),
        ):
            _keep_version(run, artifact)

    def shapes(self, deployment: DeploymentRecord, model: Path) -> dict[str, tuple[int, ...]]:
        """The names and shapes of the tensors of the model file ``model`` (a TorchScript
        archive is code: it is opened here, in the sandbox, never by the service)."""
        with (
            _staged({MODEL: model}) as inputs,
            self._run(deployment, "shapes", inputs, LABEL_TIMEOUT_S) as (_, out),
        ):
            raw = out.get("shapes")
        try:
            if not isinstance(raw, dict):
                raise TypeError("not an object")
            return {str(k): tuple(int(d) for d in v) for k, v in raw.items()}
        except (TypeError, ValueError) as exc:
            raise TenantCodeError(f"the model file's tensors are not listed: {exc}") from exc

    def export(self, deployment: DeploymentRecord, artifact: Path) -> None:
        """Export the version at ``artifact`` for serving (:func:`served_path`)."""
        with (
            _staged({MODEL: artifact}) as inputs,
            self._run(deployment, "export", inputs, TRAIN_TIMEOUT_S) as (run, _),
        ):
            _keep_served(run, artifact)

    @contextlib.contextmanager
    def _run(
        self, deployment: DeploymentRecord, task: str, inputs: Mapping[str, Path],
        timeout_s: float,
    ) -> Iterator[tuple[ModuleRun, dict[str, Any]]]:  # fmt: skip
        tenant = self.tenant_of(deployment.tenant_id)
        stdin = deployment.spec.model_dump_json().encode()
        with self.runner.run_module(tenant, TASK_MODULE, [task], inputs=inputs, stdin=stdin,
                                    limits=LIMITS, timeout_s=timeout_s) as run:  # fmt: skip
            out = summary_json(run)
            if run.timed_out:
                raise TenantCodeError(f"the workload's {task} ran out of time "
                                      f"({timeout_s:.0f} s) in the tenant's sandbox")  # fmt: skip
            if run.exit_code == InvalidInputError.exit_code and "error" in out:
                raise InvalidInputError(
                    str(out.get("message")), field=str(out.get("field") or "workload")
                )
            if run.exit_code != 0 or out.get("task") != task:
                message = out.get("message") or run.last_words()
                raise TenantCodeError(f"the workload's {task} failed: {message}")
            yield run, out


@contextlib.contextmanager
def _staged(files: Mapping[str, Path | bytes]) -> Iterator[dict[str, Path]]:
    """Copies of ``files`` (paths or contents) the sandbox's user may read, in a private
    folder of the service's (bound one by one into the sandbox, never the folder)."""
    folder = Path(tempfile.mkdtemp(prefix="deepedge-workload-"))
    try:
        staged: dict[str, Path] = {}
        for name, source in files.items():
            path = folder / name
            if isinstance(source, bytes):
                path.write_bytes(source)
            else:
                shutil.copyfile(source, path)
            path.chmod(0o644)
            staged[name] = path
        yield staged
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _bounded(run: ModuleRun, name: str, limit_b: int) -> bytes:
    try:
        data = run.output(name, limit_b + 1)
    except OSError as exc:  # missing, a link, not a regular file
        raise TenantCodeError(f"the workload's task left no {name}: {exc}") from exc
    if len(data) > limit_b:
        raise TenantCodeError(f"the workload's {name} is over {limit_b >> 20} MiB")
    return data


def _array(run: ModuleRun, name: str) -> np.ndarray:
    try:
        array = np.load(io.BytesIO(_bounded(run, name, MAX_ARRAY_B)), allow_pickle=False)
    except ValueError as exc:
        raise TenantCodeError(f"the workload's {name} is not an array: {exc}") from exc
    if not isinstance(array, np.ndarray):
        raise TenantCodeError(f"the workload's {name} is not an array")
    return array


def _images(run: ModuleRun) -> np.ndarray:
    images = _array(run, REFERENCE)
    if images.ndim < 2 or images.dtype.kind != "f":
        raise TenantCodeError(f"reference: {images.shape} {images.dtype} is not a batch")
    return images.astype(np.float32, copy=False)


def _keep_version(run: ModuleRun, artifact: Path) -> None:
    """The task's ``model.pt`` and its description as the version's (description last: the
    API reads it to check uploads)."""
    meta = _json(run, "model.json")
    if not {"format", "parameters", "buffers"} <= set(meta):
        raise TenantCodeError("the version's description lacks its tensors")
    write_atomically(artifact, _bounded(run, MODEL, MAX_MODEL_B))
    write_atomically(artifact.with_suffix(".json"), json.dumps(meta).encode())


def _keep_served(run: ModuleRun, artifact: Path) -> None:
    """The task's export as the version's, once it passes the serving check (a graph of
    allowed tensor operators with static shapes: :mod:`deepedge.dataplane.served_graph`;
    sidecar first: an export that exists has it)."""
    from deepedge.dataplane.served_graph import check_graph

    served = sidecar(Path(SERVED))
    document = _json(run, served.name)
    try:
        model = ServedModel(tuple(int(d) for d in document["input_shape"]),
                            tuple(str(c) for c in document["class_names"]))  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise TenantCodeError(f"the export's sidecar is not one: {exc}") from exc
    graph = _bounded(run, SERVED, MAX_MODEL_B)
    check_graph(graph, model.input_shape, len(model.class_names))
    target = served_path(artifact)
    write_atomically(sidecar(target), json.dumps(model.document()).encode())
    write_atomically(target, graph)


def _json(run: ModuleRun, name: str) -> dict[str, Any]:
    try:
        value = json.loads(_bounded(run, name, MAX_ARRAY_B))
    except ValueError as exc:
        raise TenantCodeError(f"the workload's {name} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise TenantCodeError(f"the workload's {name} is not a JSON object")
    return value
