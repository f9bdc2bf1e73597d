"""``/v1/deployments/{name}/keys`` and ``/traffic``: a deployment's face to its cameras.

* **Inference keys** (a camera's credential for one deployment's endpoint, not the
  tenant's API token): ``POST`` creates one and returns its secret once, ``GET`` lists them
  (no secrets), ``DELETE .../keys/{id}`` revokes one (by id or shown prefix); the data
  plane refuses a revoked key within one table poll. A key created with a job's token
  (``job_id`` in the listing) is revoked when that job ends, as its token is.
* **Traffic**: the endpoint's address and model name, requests per second and the
  canary's measured share over the ``span_s`` seconds that ended 3 s ago (the newest
  seconds' figures are still on their way), as the data plane's replicas report them; the
  latency of those seconds measured at two places, each named with where
  (``latency_ms.proxy``: at the data plane's ingress, from the request's arrival to the
  answer sent, what a client sees, with how many of the span's seconds its figures cover;
  ``latency_ms.replica``: inside the replicas, their handler only); what the site's sample
  store holds for the deployment (samples kept, evicted by the retention rule); and the
  data plane's health as its host last reported it: ``data_plane`` is true only while it
  is serving, and ``data_plane_health`` says starting, retrying (with the reason of the
  last failure and the next try) or failed (its host not running or silent).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from deepedge.api.dependencies import (
    PrincipalDep,
    TenantDep,
    deployment_store,
    json_response,
    sample_store,
    service_state,
)
from deepedge.controlplane import data_plane_health
from deepedge.controlplane.inference_keys import InferenceKeyStore, JobToken
from deepedge.controlplane.records import DeploymentRecord
from deepedge.dataplane.ingress_traffic import REPORT_LAG_S
from deepedge.dataplane.serving_table import model_name
from deepedge.dataplane.traffic import REPLICA_WHERE

router = APIRouter(prefix="/v1", tags=["serving"])


class KeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field("camera", min_length=1, max_length=64, description="a label for the key")


class KeyView(BaseModel):
    id: str
    name: str
    prefix: str
    created_at: float
    revoked_at: float | None
    active: bool
    job_id: str | None = Field(None, description="the job whose token created it: it ends with it")


class KeyCreated(KeyView):
    key: str = Field(description="the secret: shown once, only its digest is stored")
    model: str
    endpoint: str


class KeyList(BaseModel):
    deployment: str
    keys: list[KeyView]


class DataPlaneView(BaseModel):
    """The data plane as its host last reported it (controlplane.data_plane_health)."""

    state: str = Field(description="off, starting, serving, retrying or failed")
    since: float
    updated_at: float
    attempt: int
    reason: str = Field(description="why it is not serving; empty when it is")
    retry_at: float | None


def data_plane_view(request: Request) -> DataPlaneView:
    settings = service_state(request).settings
    health = data_plane_health.current(settings.data_dir, enabled=settings.serving,
                                       now=time.time())  # fmt: skip
    return DataPlaneView(state=health.state.value, since=health.since,
                         updated_at=health.updated_at, attempt=health.attempt,
                         reason=health.reason, retry_at=health.retry_at)  # fmt: skip


class TrafficView(BaseModel):
    deployment: str
    model: str
    endpoint: str
    data_plane: bool = Field(description="the data plane answers (its state is serving)")
    data_plane_health: DataPlaneView
    traffic: dict[str, Any] = Field(
        description="span_s, requests, images, failed, rps, canary_share (the replicas' "
        "counts) and latency_ms: proxy (at the ingress: what a client sees; state "
        "complete, partial or unavailable, with its reason and covered_s of span_s) and "
        "replica (inside the replicas), each with its requests, p50, p95, p99 and mean, "
        "and where it is measured"
    )
    samples: dict[str, int]


def _model(request: Request, record: DeploymentRecord) -> str:
    return model_name(service_state(request).store.tenant(record.tenant_id).name, record.name)


def _endpoint(request: Request, model: str) -> str:
    settings = service_state(request).settings
    return f"http://{settings.serving_host}:{settings.serving_port}/v2/models/{model}"


@router.post("/deployments/{name}/keys", status_code=201, response_model=KeyCreated)
def create_key(
    request: Request,
    tenant: TenantDep,
    principal: PrincipalDep,
    name: str,
    body: KeyRequest | None = None,
) -> Response:
    record = deployment_store(request).get(tenant.id, name)
    body = body or KeyRequest()
    job = None if principal.job_id is None else JobToken(principal.job_id, principal.token_id)
    key, secret = InferenceKeyStore(service_state(request).store).create(
        record, body.name, job_token=job
    )
    model = _model(request, record)
    view = KeyCreated(**key.document(), key=secret, model=model,
                      endpoint=_endpoint(request, model))  # fmt: skip
    return json_response(view, 201)


@router.get("/deployments/{name}/keys", response_model=KeyList)
def list_keys(request: Request, tenant: TenantDep, name: str) -> Response:
    record = deployment_store(request).get(tenant.id, name)
    keys = InferenceKeyStore(service_state(request).store).of_deployment(record)
    return json_response(KeyList(deployment=name, keys=[KeyView(**k.document()) for k in keys]))


@router.delete("/deployments/{name}/keys/{key_id}", response_model=KeyView)
def revoke_key(request: Request, tenant: TenantDep, name: str, key_id: str) -> Response:
    record = deployment_store(request).get(tenant.id, name)
    key = InferenceKeyStore(service_state(request).store).revoke(record, key_id)
    return json_response(KeyView(**key.document()))


@router.get("/deployments/{name}/traffic", response_model=TrafficView)
def traffic(
    request: Request,
    tenant: TenantDep,
    name: str,
    span_s: Annotated[float, Query(ge=1.0, le=3600.0)] = 10.0,
) -> Response:
    record = deployment_store(request).get(tenant.id, name)
    store = sample_store(request)
    now = time.time()
    # both figures of the same seconds: those ending REPORT_LAG_S ago, handed over by then
    summary = store.traffic(record.id, now - REPORT_LAG_S, span_s)
    usage = store.usage(record.id)
    model = _model(request, record)
    at_ingress = store.ingress_latency(model, now, span_s, since_s=record.created_at)
    latency_ms = {"proxy": at_ingress.document(),
                  "replica": {"measured": REPLICA_WHERE, **summary.latency.document()}}  # fmt: skip
    health = data_plane_view(request)
    return json_response(
        TrafficView(
            deployment=name,
            model=model,
            endpoint=_endpoint(request, model),
            data_plane=health.state == "serving",
            data_plane_health=health,
            traffic={**summary.document(), "latency_ms": latency_ms},
            samples={"stored": usage.samples, "bytes": usage.bytes,
                     "appended": usage.appended, "evicted": usage.evicted},
        )
    )  # fmt: skip
