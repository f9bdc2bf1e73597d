"""Checking a tenant's workload on the service: in the tenant's sandbox, never in the API.

The check imports the tenant's model entry point, builds the model, reads its data and runs
its labeller (:mod:`deepedge.workload.check`): tenant code, so it runs through
:class:`~deepedge.service.sandbox_run.SandboxRunner` like a job, as the tenant's user, with
no network and only the tenant's granted folders to read. Before that, every absolute
path the document names must lie in a folder granted to the tenant (a 422 naming the
field otherwise: the sandbox would not see it, and the tenant learns nothing about the
service's other files either way).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from deepedge.core.errors import InvalidInputError
from deepedge.service.records import Tenant
from deepedge.service.sandbox import grant_problem
from deepedge.service.sandbox_run import SandboxRunner, summary_json

CHECK_TIMEOUT_S = 180.0
CHECK_MODULE = "deepedge.workload.check"

WorkloadChecker = Callable[[str | Mapping[str, Any]], dict[str, Any]]


def document_paths(document: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(field, path)`` for every path a workload document names."""
    model = document.get("model") or {}
    if isinstance(model, Mapping) and isinstance(model.get("torchscript"), str):
        yield "model.torchscript", model["torchscript"]
    data = document.get("data") or {}
    for key in ("root", "manifest"):
        if isinstance(data, Mapping) and isinstance(data.get(key), str):
            yield f"data.{key}", data[key]
    for index, folder in enumerate(document.get("python_path") or []):
        if isinstance(folder, str):
            yield f"python_path.{index}", folder


def _under(path: str, folder: str) -> bool:
    normal, root = os.path.normpath(path), os.path.normpath(folder)
    return normal == root or normal.startswith(root.rstrip("/") + "/")


def granted(path: str, tenant: Tenant, data_dir: Path | None = None) -> bool:
    """``path`` lies in a folder granted to ``tenant`` that its sandboxes are given (with the
    service's ``data_dir``: a grant that is missing or overlaps it is left out of every
    sandbox)."""
    return any(
        _under(path, g) and (data_dir is None or grant_problem(g, data_dir) is None)
        for g in tenant.grants
    )


def ungranted(
    reference: str | Mapping[str, Any], tenant: Tenant, data_dir: Path | None = None
) -> tuple[str, str] | None:
    """The first ``(field, path)`` of the workload outside the tenant's granted folders."""
    if isinstance(reference, str):
        if os.sep not in reference and not reference.endswith((".yaml", ".yml", ".json")):
            return None  # a bundled workload's name
        if not granted(os.path.abspath(reference), tenant, data_dir):
            return "workload", reference
        return None
    for field, path in document_paths(reference):
        if os.path.isabs(path) and not granted(path, tenant, data_dir):
            return field, path
    return None


def ungranted_message(field: str, path: str, tenant: Tenant, data_dir: Path | None) -> str:
    """Why a sandbox of ``tenant`` cannot see ``path``: no grant holds it, or the grant that
    holds it is not given (with that grant's problem)."""
    for grant in tenant.grants:
        if _under(path, grant) and (problem := grant_problem(grant, data_dir)) is not None:
            return (
                f"{field}: {path} is in tenant {tenant.name}'s grant {grant}, which is not "
                f"given to its sandboxes ({problem.removeprefix(grant + ': ')}); the operator "
                "grants a folder that does not hold the service's data"
            )
    return (
        f"{field}: {path} is not in a folder granted to tenant {tenant.name} "
        "(the operator grants folders: deepedge tenants grant)"
    )


def sandboxed_checker(runner: SandboxRunner, tenant: Tenant) -> WorkloadChecker:
    """The check of ``tenant``'s workloads: its summary, or InvalidInputError naming the
    field (``model.entry_point``, ``data.root``, ...)."""

    def check(reference: str | Mapping[str, Any]) -> dict[str, Any]:
        data_dir = runner.runs_dir.parent
        if runner.confinement.sandboxed and (outside := ungranted(reference, tenant, data_dir)):
            field, path = outside
            raise InvalidInputError(ungranted_message(field, path, tenant, data_dir), field=field)
        argument = reference if isinstance(reference, str) else "-"
        stdin = b"" if isinstance(reference, str) else json.dumps(dict(reference)).encode()
        with runner.run_module(
            tenant, CHECK_MODULE, [argument], stdin=stdin, timeout_s=CHECK_TIMEOUT_S
        ) as run:
            out = summary_json(run)
            if run.timed_out:
                raise InvalidInputError(
                    f"checking the workload took longer than {CHECK_TIMEOUT_S:.0f} s",
                    field="workload",
                )
            if run.exit_code == 0 and "error" not in out:
                return out
            message = out.get("message") or run.last_words()
            raise InvalidInputError(str(message), field=str(out.get("field") or "workload"))

    return check
