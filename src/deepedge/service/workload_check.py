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
from typing import Any

from deepedge.core.errors import InvalidInputError
from deepedge.service.records import Tenant
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


def granted(path: str, tenant: Tenant) -> bool:
    normal = os.path.normpath(path)
    return any(
        normal == os.path.normpath(g) or normal.startswith(os.path.normpath(g).rstrip("/") + "/")
        for g in tenant.grants
    )


def ungranted(reference: str | Mapping[str, Any], tenant: Tenant) -> tuple[str, str] | None:
    """The first ``(field, path)`` of the workload outside the tenant's granted folders."""
    if isinstance(reference, str):
        if os.sep not in reference and not reference.endswith((".yaml", ".yml", ".json")):
            return None  # a bundled workload's name
        if not granted(os.path.abspath(reference), tenant):
            return "workload", reference
        return None
    for field, path in document_paths(reference):
        if os.path.isabs(path) and not granted(path, tenant):
            return field, path
    return None


def sandboxed_checker(runner: SandboxRunner, tenant: Tenant) -> WorkloadChecker:
    """The check of ``tenant``'s workloads: its summary, or InvalidInputError naming the
    field (``model.entry_point``, ``data.root``, ...)."""

    def check(reference: str | Mapping[str, Any]) -> dict[str, Any]:
        if runner.confinement.sandboxed and (outside := ungranted(reference, tenant)):
            field, path = outside
            raise InvalidInputError(
                f"{field}: {path} is not in a folder granted to tenant {tenant.name} "
                "(the operator grants folders: deepedge tenants grant)",
                field=field,
            )
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
