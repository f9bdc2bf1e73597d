"""Checking a workload in a process of its own: ``python -m deepedge.workload.check REF``.

``REF`` is a workload file, a bundled name, or ``-`` (the document as JSON on stdin). The
check is :func:`~deepedge.workload.resolve.load_workload` (imports the user's model, builds
it, reads the first and last windows and probes the model and the labeller on a real
batch: :mod:`deepedge.workload.probe`); it prints one JSON line, the workload's summary
(classes, input, parameters and buffers, the training settings with their defaults, the
warnings) or the error (``{"error", "message", "field"}``), and exits 0 or the error's
exit code (2 for a bad spec). :func:`summary` is the same check as a plain function.

The job service runs it at submission (:func:`check_in_subprocess`) so that a bad workload
in a ``model-update`` document is a 422 naming the field, while the user's code is never
imported into the API process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deepedge.core.errors import DeepEdgeError, InvalidInputError
from deepedge.learning.model_state import buffer_arrays, norm_layers

CHECK_TIMEOUT_S = 180.0


def summary(reference: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """Load ``reference`` and describe it (what the check prints on success)."""
    from deepedge.workload.resolve import load_workload

    workload = load_workload(reference)
    model = workload.model_factory()
    training = workload.spec.training
    out: dict[str, Any] = {
        "name": workload.spec.name,
        "classes": list(workload.class_names),
        "input": {"kind": workload.spec.input.kind, "shape": list(workload.input_shape)},
        "parameters": workload.parameters,
        "trainable_parameters": workload.trainable,
        "frozen": list(workload.frozen_names),
        "buffers": sorted(buffer_arrays(model)),
        "norm_layers": len(norm_layers(model)),
        "model_format": "torchscript" if workload.model_factory.torchscript else "state-dict",
        "windows": workload.source.n_windows,
        "training": {**training.model_dump(mode="json"), "lr": training.learning_rate},
        "warnings": list(workload.warnings),
    }
    fitted = getattr(workload.source, "fitted", None)
    if callable(fitted):
        out["features"] = fitted()
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m deepedge.workload.check FILE|NAME|-\n")
        return 2
    try:
        reference: str | dict[str, Any] = args[0]
        if args[0] == "-":
            try:
                reference = json.loads(sys.stdin.read())
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"workload: not JSON: {exc}", field="workload") from exc
        out: dict[str, Any] = summary(reference)
        code = 0
    except DeepEdgeError as exc:
        out, code = exc.to_dict(), exc.exit_code
    sys.stdout.write(json.dumps(out) + "\n")
    return code


def check_in_subprocess(
    document: str | Mapping[str, Any], timeout_s: float = CHECK_TIMEOUT_S
) -> dict[str, Any]:
    """Run the check in a child process; its summary, or its error re-raised here."""
    reference = document if isinstance(document, str) else "-"
    payload = None if isinstance(document, str) else json.dumps(dict(document))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "deepedge.workload.check", reference],
            input=payload,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise InvalidInputError(
            f"workload: checking it took longer than {timeout_s:.0f} s", field="workload"
        ) from exc
    lines = done.stdout.strip().splitlines()
    try:
        out: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        out = {}
    if done.returncode == 0 and "error" not in out:
        return out
    message = out.get("message") or (done.stderr.strip().splitlines() or ["check failed"])[-1]
    raise InvalidInputError(str(message), field=str(out.get("field") or "workload"))


if __name__ == "__main__":
    sys.exit(main())
