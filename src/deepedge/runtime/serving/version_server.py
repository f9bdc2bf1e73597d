"""The inference service: versioned models, atomic swap and rollback (Deep-Edge, Fig. 1).

:class:`ModelRegistry` keeps every model version on disk (``model-v<N>.npy``, the flat
parameters, and ``model-v<N>.buffers.npz``, the buffers: BatchNorm's running statistics
travel with the weights) with a JSON index (``registry.json``: versions, their validation
accuracy and note, and the serving history) written atomically (temp file +
``os.replace``).

:class:`VersionServer` serves one version at a time. A swap builds and fully loads a *new*
torch module off to the side, then publishes it with one reference assignment of an
immutable ``(version, model)`` pair; a request reads that pair once at its start. So a
request sees either the old model or the new one, never a half-loaded one, even when the
server runs requests on several threads (a threaded Ray actor). :meth:`rollback` swaps
back to the version served before the current one.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from deepedge.core.errors import ConflictError, InvalidInputError, NotFoundError
from deepedge.learning.model_state import State, load_buffers
from deepedge.learning.models import set_flat_weights

INDEX_FILE = "registry.json"


@dataclass(frozen=True)
class RegisteredVersion:
    """One version in the registry's index (a deployment's versions are
    :class:`deepedge.controlplane.records.ModelVersion`)."""

    version: int
    created_at_s: float
    accuracy: float | None  # validation accuracy when registered (golden labels)
    note: str


@dataclass(frozen=True)
class Prediction:
    version: int  # the model version that produced every label of this reply
    labels: np.ndarray


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class ModelRegistry:
    """Versioned flat-weight models in ``root`` (module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        index = self.root / INDEX_FILE
        if index.exists():
            raw = json.loads(index.read_text())
            self.versions = [RegisteredVersion(**v) for v in raw["versions"]]
            self.serving_history: list[int] = list(raw["serving_history"])
        else:
            self.versions = []
            self.serving_history = []

    def _save_index(self) -> None:
        payload = {
            "versions": [asdict(v) for v in self.versions],
            "serving_history": self.serving_history,
        }
        _atomic_write(self.root / INDEX_FILE, json.dumps(payload, indent=2).encode())

    def register(
        self,
        weights: np.ndarray,
        accuracy: float | None,
        note: str,
        buffers: State | None = None,
    ) -> RegisteredVersion:
        """Store ``weights`` (and the model's ``buffers``) as the next version (not yet
        served)."""
        with self._lock:
            version = (self.versions[-1].version + 1) if self.versions else 1
            if buffers:
                packed = io.BytesIO()
                arrays: dict[str, Any] = dict(buffers)
                np.savez(packed, **arrays)
                _atomic_write(self.root / f"model-v{version}.buffers.npz", packed.getvalue())
            buf = io.BytesIO()
            np.save(buf, np.asarray(weights, dtype=np.float32))
            _atomic_write(self.root / f"model-v{version}.npy", buf.getvalue())
            entry = RegisteredVersion(version, time.time(), accuracy, note)
            self.versions.append(entry)
            self._save_index()
            return entry

    def weights(self, version: int) -> np.ndarray:
        path = self.root / f"model-v{version}.npy"
        if not path.exists():
            raise NotFoundError(f"model version {version} is not in the registry")
        return np.load(path)

    def buffers(self, version: int) -> State:
        """The version's buffers (empty: the model keeps none)."""
        path = self.root / f"model-v{version}.buffers.npz"
        if not path.exists():
            return {}
        with np.load(path, allow_pickle=False) as packed:
            return {name: packed[name] for name in packed.files}

    def mark_serving(self, version: int) -> None:
        with self._lock:
            self.serving_history.append(version)
            self._save_index()

    def get(self, version: int) -> RegisteredVersion:
        for v in self.versions:
            if v.version == version:
                return v
        raise NotFoundError(f"model version {version} is not in the registry")


class VersionServer:
    """Serves the registry's models with atomic swaps (module docstring)."""

    def __init__(self, registry_root: str, model_factory: Callable[[], nn.Module]) -> None:
        torch.set_num_threads(1)
        self.registry = ModelRegistry(Path(registry_root))
        self.model_factory = model_factory
        self._serving: tuple[int, nn.Module] | None = None
        self._swap_lock = threading.Lock()
        if self.registry.serving_history:
            self.swap_to(self.registry.serving_history[-1], record=False)

    def _build(self, version: int) -> nn.Module:
        model = self.model_factory()
        set_flat_weights(model, self.registry.weights(version))
        load_buffers(model, self.registry.buffers(version))
        model.eval()
        return model

    def swap_to(self, version: int, record: bool = True) -> int:
        """Load ``version`` off to the side, then publish it in one assignment."""
        with self._swap_lock:
            self.registry.get(version)
            model = self._build(version)
            self._serving = (version, model)  # the single atomic publication
            if record:
                self.registry.mark_serving(version)
            return version

    def deploy(
        self,
        weights: np.ndarray,
        accuracy: float | None,
        note: str,
        buffers: State | None = None,
    ) -> int:
        """Register ``weights`` (and ``buffers``) as a new version and swap to it."""
        entry = self.registry.register(weights, accuracy, note, buffers)
        return self.swap_to(entry.version)

    def rollback(self) -> int:
        """Swap back to the version served before the current one."""
        history = self.registry.serving_history
        if len(history) < 2:
            raise ConflictError("no earlier version to roll back to")
        return self.swap_to(history[-2])

    def current_version(self) -> int | None:
        serving = self._serving
        return serving[0] if serving is not None else None

    def predict(self, images: np.ndarray) -> Prediction:
        """Class labels of ``images`` (N, 1, H, W) and the version that made them."""
        serving = self._serving  # read once: the whole request uses this pair
        if serving is None:
            raise ConflictError("no model is deployed yet")
        if images.ndim != 4:
            raise InvalidInputError("images must have shape (N, 1, H, W)", field="images")
        version, model = serving
        with torch.no_grad():
            out = model(torch.as_tensor(images, dtype=torch.float32))
        return Prediction(version, out.argmax(dim=1).numpy())
