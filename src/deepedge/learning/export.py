"""A model version as the data plane serves it: TorchScript, traced and frozen.

Tracing runs the model once on an example batch and records its operations; freezing
inlines the weights and buffers as constants (a BatchNorm's running statistics included),
so the file holds everything the served version computes and loading it runs no Python of
the model's author (``torch.jit.load`` interprets TorchScript). Each export is checked: the
traced module must give the eager model's outputs on batches of other sizes too, otherwise
the model is refused for serving with the difference named.

A sidecar JSON beside the file says what the data plane needs to serve it without building
the model: the input shape and the class names.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from deepedge.core.errors import InvalidInputError

CHECK_BATCHES = (1, 3)
TOLERANCE = 1e-4


@dataclass(frozen=True)
class ServedModel:
    """What the sidecar says: the model's input ``(channels, height, width)`` and classes."""

    input_shape: tuple[int, int, int]
    class_names: tuple[str, ...]

    def document(self) -> dict[str, object]:
        return {"input_shape": list(self.input_shape), "class_names": list(self.class_names)}

    @classmethod
    def read(cls, path: Path) -> ServedModel:
        raw = json.loads(path.read_text())
        shape = tuple(int(d) for d in raw["input_shape"])
        if len(shape) != 3:
            raise ValueError(f"{path}: input_shape must be (channels, height, width)")
        return cls((shape[0], shape[1], shape[2]), tuple(str(c) for c in raw["class_names"]))


def sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


@contextlib.contextmanager
def _jit() -> Iterator[None]:
    """TorchScript, whose deprecation notices (it is served here on purpose: loading it runs
    no Python of the model's author) are not news to a user."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.jit")
        yield


def to_torchscript(model: nn.Module, input_shape: Sequence[int]) -> torch.jit.ScriptModule:
    """Trace and freeze ``model`` (in eval mode) for inputs ``(batch, *input_shape)``;
    raises :class:`InvalidInputError` when the traced module disagrees with the model."""
    with _jit():
        return _traced(model, input_shape)


def _traced(model: nn.Module, input_shape: Sequence[int]) -> torch.jit.ScriptModule:
    model = model.eval()
    example = torch.rand(2, *input_shape)
    with torch.no_grad():
        try:
            traced = torch.jit.trace(model, example, check_trace=False)
        except Exception as exc:
            raise InvalidInputError(
                f"model: cannot be traced for serving ({type(exc).__name__}: {exc})",
                field="model",
            ) from exc
        frozen = torch.jit.freeze(traced)
        for batch in CHECK_BATCHES:
            x = torch.rand(batch, *input_shape)
            want, got = model(x), frozen(x)
            if want.shape != got.shape or not torch.allclose(want, got, atol=TOLERANCE, rtol=1e-3):
                raise InvalidInputError(
                    f"model: its TorchScript trace gives other outputs than the model at batch "
                    f"{batch} (data-dependent control flow?); it cannot be served",
                    field="model",
                )
    return frozen


def save_served(module: torch.jit.ScriptModule, served: ServedModel, path: Path) -> None:
    """Write the TorchScript file and its sidecar atomically (sidecar first: a file that
    exists always has its sidecar)."""
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
