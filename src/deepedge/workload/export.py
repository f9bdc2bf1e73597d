"""Export a user's model version for serving, in a process of its own.

``python -m deepedge.workload.export WORKLOAD WEIGHTS OUT`` builds the workload's model with
its own factory (the user's code), loads the version's stored weights, and writes the
TorchScript file ``OUT`` with its sidecar (:mod:`deepedge.learning.export`). It prints one
JSON line: the sidecar's document, or the error (exit status 2 for a model that cannot be
served). The control plane runs it as a child process so that a user's code never runs in
the service's own processes; the data plane and the control plane's scoring then load only
the TorchScript file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.core.errors import DeepEdgeError, InvalidInputError, RunFailedError
from deepedge.learning.export import ServedModel, save_served, sidecar, to_torchscript
from deepedge.learning.models import set_flat_weights

EXPORT_TIMEOUT_S = 300.0


def export(reference: str | Mapping[str, Any], weights: Path, out: Path) -> ServedModel:
    from deepedge.workload.resolve import load_workload

    workload = load_workload(reference)
    model = workload.model_factory()
    set_flat_weights(model, np.load(weights))
    spec = workload.spec.input
    shape = (spec.channels, spec.size[0], spec.size[1])
    served = ServedModel(shape, workload.class_names)
    save_served(to_torchscript(model, shape), served, out)
    return served


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        sys.stderr.write("usage: python -m deepedge.workload.export WORKLOAD|- WEIGHTS OUT\n")
        return 2
    try:
        reference: str | dict[str, Any] = args[0]
        if args[0] == "-":
            reference = json.loads(sys.stdin.read())
        out: dict[str, Any] = export(reference, Path(args[1]), Path(args[2])).document()
        code = 0
    except DeepEdgeError as exc:
        out, code = exc.to_dict(), exc.exit_code
    sys.stdout.write(json.dumps(out) + "\n")
    return code


def export_in_subprocess(
    reference: str | Mapping[str, Any], weights: Path, out: Path,
    timeout_s: float = EXPORT_TIMEOUT_S,
) -> ServedModel:  # fmt: skip
    """Run :func:`export` in a child process; its sidecar, or its error raised here."""
    argument = reference if isinstance(reference, str) else "-"
    payload = None if isinstance(reference, str) else json.dumps(dict(reference))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "deepedge.workload.export", argument, str(weights), str(out)],
            input=payload, capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise RunFailedError(f"exporting the model took longer than {timeout_s:.0f} s") from exc
    lines = done.stdout.strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        result = {}
    if done.returncode == 0 and "error" not in result:
        return ServedModel.read(sidecar(out))
    message = result.get("message") or (done.stderr.strip().splitlines() or ["failed"])[-1]
    if done.returncode == 2:
        raise InvalidInputError(str(message), field=str(result.get("field") or "model"))
    raise RunFailedError(f"exporting the model for serving failed: {message}")


if __name__ == "__main__":
    sys.exit(main())
