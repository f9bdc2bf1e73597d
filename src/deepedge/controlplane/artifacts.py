"""Model-version files on disk: one flat float32 ``.npy`` of weights per version, written
atomically (temporary file, fsync, rename, fsync of the folder) before the version row
that names it is committed, so a committed version always has its weights; beside it the
version's TorchScript export for serving (``.ts``, with its ``.json`` sidecar), written
before the version is registered."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from deepedge.controlplane.records import DeploymentRecord


def artifact_path(data_dir: Path, deployment: DeploymentRecord, number: int) -> Path:
    return data_dir / "deployments" / deployment.tenant_id / deployment.id / f"v{number}.npy"


def served_path(weights: Path) -> Path:
    """A version's TorchScript file, beside its weights."""
    return weights.with_suffix(".ts")


def write_weights(path: Path, weights: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        np.save(handle, np.asarray(weights, dtype=np.float32))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
