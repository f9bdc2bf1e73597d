"""A model version as the data plane serves it: an ONNX graph, with a sidecar.

The version's model (the user's, in whatever torch form: an entry point's module or a
TorchScript archive) is exported to ONNX by :func:`export_onnx` in the tenant's sandbox
(the export runs the tenant's code); what leaves the sandbox is a graph of tensor
operators, which the service checks (:mod:`deepedge.dataplane.served_graph`) before any of
its processes runs it. The batch dimension is left free; every other dimension is the
example's.

A sidecar JSON beside the file says what the data plane needs to serve it without building
the model: the input shape and the class names.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deepedge.core.errors import InvalidInputError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

OPSET = 17  # ONNX Runtime 1.16 and later run it; every operator the check allows is in it
INPUT_NAME, OUTPUT_NAME = "input", "logits"


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
def _quiet_export() -> Iterator[None]:
    """torch's notices about its exporters (the TorchScript-based one is chosen on purpose:
    it exports TorchScript workloads too, in a fraction of a second) are not news to a
    user."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def export_onnx(model: torch.nn.Module, example: torch.Tensor) -> bytes:
    """``model`` (evaluation mode) as ONNX bytes: one input ``[batch, *example.shape[1:]]``,
    one output, the batch dimension free, constants folded."""
    import torch  # (only an export needs it: the sidecar's readers, the service among them, do not)

    model = model.eval()
    buffer = io.BytesIO()
    try:
        with _quiet_export(), torch.no_grad():
            torch.onnx.export(
                model, (example,), buffer,  # type: ignore[arg-type]
                dynamo=False, opset_version=OPSET,
                input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
                do_constant_folding=True,
            )  # fmt: skip
    except Exception as exc:  # an operator ONNX has no form for, dynamic Python, ...
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise InvalidInputError(
            f"model: cannot be exported for serving ({type(exc).__name__}: {first})",
            field="model",
        ) from exc
    return buffer.getvalue()


def save_served(data: bytes, served: ServedModel, path: Path) -> None:
    """Write the graph ``data`` and its sidecar atomically (sidecar first: a file that
    exists always has its sidecar)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    side = sidecar(path)
    tmp_side = side.with_name(f".{side.name}.{os.getpid()}.tmp")
    tmp_side.write_text(json.dumps(served.document()))
    os.replace(tmp_side, side)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
