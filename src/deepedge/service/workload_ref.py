"""The ``workload`` field of job documents: a workload document, a bundled name or a file."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ValidationError

from deepedge.core.errors import describe_validation_error
from deepedge.workload.spec import WorkloadSpec


def _workload_document(value: Any) -> Any:
    """An inline workload is validated here so that its errors name its own fields
    (``model.entry_point: ...``) rather than the union's alternatives."""
    if isinstance(value, dict):
        try:
            return WorkloadSpec.model_validate(value)
        except ValidationError as exc:
            raise ValueError(describe_validation_error(exc)) from None
    return value


WorkloadRef = Annotated[WorkloadSpec | str, BeforeValidator(_workload_document)]


def workload_reference(spec: BaseModel) -> str | dict[str, Any]:
    """A job document's ``workload`` as :func:`deepedge.workload.resolve.load_workload`
    takes it (a name or path, or the document's JSON)."""
    workload = getattr(spec, "workload", None)
    assert workload is not None
    if isinstance(workload, str):
        return workload
    return workload.model_dump(mode="json", exclude_unset=True)
