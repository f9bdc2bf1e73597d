"""A model version as the data plane serves it: TorchScript, frozen, with a sidecar.

The TorchScript module comes from :func:`deepedge.controlplane.artifacts.export_torchscript`
(scripted, or traced, and checked to answer like the model). Freezing inlines the weights
and buffers as constants (a BatchNorm's running statistics included) and folds what it can
(a convolution's BatchNorm into its weights), so the file holds everything the served
version computes, runs faster, and loading it runs no Python of the model's author
(``torch.jit.load`` interprets TorchScript).

A sidecar JSON beside the file says what the data plane needs to serve it without building
the model: the input shape and the class names.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedModel:
    """What the sidecar says: one input's shape (``(C, H, W)`` for images, ``(F,)`` for a
    table's features) and the class names."""

    input_shape: tuple[int, ...]
    class_names: tuple[str, ...]

    def document(self) -> dict[str, object]:
        return {"input_shape": list(self.input_shape), "class_names": list(self.class_names)}

    @classmethod
    def read(cls, path: Path) -> ServedModel:
        raw = json.loads(path.read_text())
        shape = tuple(int(d) for d in raw["input_shape"])
        return cls(shape, tuple(str(c) for c in raw["class_names"]))


def sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


@contextlib.contextmanager
def _jit() -> Iterator[None]:
    """TorchScript, whose deprecation notices (it is served here on purpose: loading it runs
    no Python of the model's author) are not news to a user."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.jit")
        yield


def save_served(module: torch.jit.ScriptModule, served: ServedModel, path: Path) -> None:
    """Freeze ``module`` (when TorchScript can: a module it cannot freeze is served as it
    is) and write it and its sidecar atomically (sidecar first: a file that exists always
    has its sidecar)."""
    with _jit():
        try:
            module = torch.jit.freeze(module.eval())
        except Exception as exc:  # e.g. attributes the forward pass mutates
            log.info("serving an unfrozen TorchScript module (%s)", exc)
    path.parent.mkdir(parents=True, exist_ok=True)
    side = sidecar(path)
    tmp_side = side.with_name(f".{side.name}.{os.getpid()}.tmp")
    tmp_side.write_text(json.dumps(served.document()))
    os.replace(tmp_side, side)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with _jit():
        module.save(str(tmp))
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def load_served(path: Path | str, device: str = "cpu") -> torch.jit.ScriptModule:
    with _jit():
        module = torch.jit.load(str(path), map_location=device)
    module.eval()
    return module
