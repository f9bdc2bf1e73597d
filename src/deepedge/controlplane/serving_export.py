"""Export a user's model version for serving, in a process of its own.

``python -m deepedge.controlplane.serving_export ARTIFACT OUT`` (the deployment's spec as
JSON on stdin) builds the deployment's model with its workload's own factory (the user's
code), loads the version's artifact into it, and writes the frozen TorchScript file ``OUT``
with its sidecar (:mod:`deepedge.learning.export`). It prints one JSON line: the sidecar's
document, or the error (exit status 2 for a model that cannot be served). The control plane
runs it as a child process so that a user's code never runs in the service's own processes;
the data plane and the control plane's scoring then load only the TorchScript file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.core.errors import DeepEdgeError, InvalidInputError, RunFailedError
from deepedge.learning.export import ServedModel, sidecar

EXPORT_TIMEOUT_S = 600.0


def export(spec: DeploymentSpec, artifact: Path, out: Path) -> ServedModel:
    from deepedge.controlplane.artifacts import export_torchscript, load_version
    from deepedge.learning.export import save_served
    from deepedge.workload.resolve import load_workload

    reference = spec.user_workload
    if reference is None:
        raise InvalidInputError("the site's digits are exported in the control loop", "workload")
    workload = load_workload(reference)
    served = ServedModel(workload.input_shape, workload.class_names)
    scripted = export_torchscript(load_version(spec, artifact), workload.example_batch(2))
    save_served(scripted, served, out)
    return served


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.stderr.write("usage: python -m deepedge.controlplane.serving_export ARTIFACT OUT "
                         "< SPEC.json\n")  # fmt: skip
        return 2
    try:
        spec = DeploymentSpec.model_validate_json(sys.stdin.read())
        out: dict[str, Any] = export(spec, Path(args[0]), Path(args[1])).document()
        code = 0
    except DeepEdgeError as exc:
        out, code = exc.to_dict(), exc.exit_code
    sys.stdout.write(json.dumps(out) + "\n")
    return code


def export_in_subprocess(
    spec: DeploymentSpec, artifact: Path, out: Path, timeout_s: float = EXPORT_TIMEOUT_S
) -> ServedModel:
    """Run :func:`export` in a child process; its sidecar, or its error raised here."""
    command = [sys.executable, "-m", "deepedge.controlplane.serving_export", str(artifact),
               str(out)]  # fmt: skip
    try:
        done = subprocess.run(command, input=spec.model_dump_json(), capture_output=True,
                              text=True, timeout=timeout_s, check=False)  # fmt: skip
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
