"""``/v1/deployments/{name}/samples``: a deployment's sampled requests, exported or deleted.

The site keeps a share of the requests each deployment serves (the inputs its cameras
sent, the answers, their labels: :mod:`deepedge.dataplane.sample_store`). Their tenant may

* **export** them: ``GET .../samples/export[?since=&until=]`` answers one NPZ archive
  (:mod:`deepedge.dataplane.sample_export`), streamed from one snapshot of the store, its
  sample count in ``X-Sample-Count``;
* **delete** them: ``DELETE .../samples`` with a body naming ``request_ids``, a range
  (``since``/``until``) or ``all``, one of them; the samples go in one transaction,
  overwritten in the file, and the answer counts them (and lists the ids that named none).

Times are seconds since the epoch; a range is ``[since, until)``. Tenant-scoped like every
deployment route: another tenant's deployment is 404, as an unknown one is.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from deepedge.api.dependencies import TenantDep, deployment_store, json_response, sample_store
from deepedge.dataplane import sample_export
from deepedge.dataplane.sample_selection import (
    MAX_REQUEST_ID_CHARS,
    MAX_REQUEST_IDS,
    SampleSelection,
    deletion,
)

router = APIRouter(prefix="/v1", tags=["samples"])
Moment = Annotated[float | None, Query(description="seconds since the epoch")]
RequestId = Annotated[str, Field(min_length=1, max_length=MAX_REQUEST_ID_CHARS)]


class SampleDeletion(BaseModel):
    """Which samples to delete: ``request_ids``, a range, or ``all``, one of them."""

    model_config = ConfigDict(extra="forbid")

    request_ids: list[RequestId] | None = Field(
        None, min_length=1, max_length=MAX_REQUEST_IDS,
        description="the answers' request_id of the samples to delete",
    )  # fmt: skip
    since: float | None = Field(None, description="served at or after (seconds since the epoch)")
    until: float | None = Field(None, description="served before (seconds since the epoch)")
    all: bool = Field(False, description="every sample of the deployment")


class DeletedSamplesView(BaseModel):
    deployment: str
    deleted: int = Field(description="samples removed")
    bytes: int = Field(description="bytes of their inputs")
    not_found: list[str] = Field(
        description="the given request ids that named no stored sample (never sampled, "
        "evicted, or deleted before)"
    )


@router.get(
    "/deployments/{name}/samples/export",
    response_class=StreamingResponse,
    responses={200: {"content": {sample_export.MEDIA_TYPE: {}},
                     "description": "an NPZ archive of the samples"}},
)  # fmt: skip
def export_samples(
    request: Request,
    tenant: TenantDep,
    name: str,
    since: Moment = None,
    until: Moment = None,
) -> StreamingResponse:
    """The deployment's samples served in ``[since, until)`` (all when left out), oldest
    first, as one NPZ archive: ``inputs`` and, per sample, ``request_id``, ``client_id``,
    ``at``, ``version``, ``route``, ``prediction``, ``label`` (-1: none), ``label_source``
    and ``labelled_at``."""
    selection = SampleSelection(since, until)
    record = deployment_store(request).get(tenant.id, name)
    export = sample_export.SampleExport(sample_store(request), record.id, selection)
    return StreamingResponse(
        export.chunks(),
        media_type=sample_export.MEDIA_TYPE,
        headers={
            "Content-Disposition": f'attachment; filename="{name}-samples{sample_export.SUFFIX}"',
            "X-Sample-Count": str(export.count),
        },
    )


@router.delete("/deployments/{name}/samples", response_model=DeletedSamplesView)
def delete_samples(
    request: Request, tenant: TenantDep, name: str, body: SampleDeletion
) -> Response:
    """Delete the samples the body names, for good: in one transaction, their inputs
    overwritten in the store's file. The deployment keeps serving and sampling."""
    selection = deletion(body.request_ids, body.since, body.until, body.all)
    record = deployment_store(request).get(tenant.id, name)
    gone = sample_store(request).delete_samples(record.id, selection)
    view = DeletedSamplesView(
        deployment=name, deleted=gone.count, bytes=gone.bytes, not_found=list(gone.not_found)
    )
    return json_response(view)
