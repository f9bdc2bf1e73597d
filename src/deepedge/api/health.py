"""``GET /healthz``: the API answers and its store is reachable."""

from __future__ import annotations

from fastapi import APIRouter, Request

from deepedge.api.dependencies import service_state

router = APIRouter(tags=["service"])


@router.get("/healthz")
def healthz(request: Request) -> dict[str, str]:
    service_state(request).store.ping()
    return {"status": "ok"}
