"""The operator's dashboard: one page served by the API itself (``GET /dashboard``).

The page is static: HTML with its stylesheet and script inlined (``api/static/``), no
external library or CDN, charts drawn as inline SVG. It holds no tenant data: the operator
logs in with a tenant token, which the page keeps in ``sessionStorage`` and sends as
``Authorization: Bearer`` to the same ``/v1`` JSON API as the CLI, so everything it shows is
tenant-scoped by the API. A Content-Security-Policy lets only the page's own inline script
and style run (by their SHA-256) and only same-origin requests leave it.

Besides the page this module adds two read endpoints the page needs:

* ``GET /v1/host``: the service host's measured state and the caller's allocations on it
  (:mod:`deepedge.api.host`);
* ``GET /v1/jobs/{id}/result``: the decision or report a finished job of a deepedge kind
  wrote (``results/result.json``): allocations of an Ekya window, a placement, an update.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Request, Response

from deepedge.api.host import HostView, host_view
from deepedge.core.errors import NotFoundError
from deepedge.service.records import Tenant

DASHBOARD_PATH = "/dashboard"
_STYLE_SLOT = "/* dashboard.css */"
_SCRIPT_SLOT = "/* dashboard.js */"


@dataclass(frozen=True)
class Page:
    """The assembled page and the headers that go with it."""

    body: bytes
    etag: str
    csp: str


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


@cache
def page() -> Page:
    """Inline the stylesheet and the script into the HTML (once per process)."""
    static = resources.files("deepedge.api") / "static"
    html = (static / "dashboard.html").read_text(encoding="utf-8")
    css = (static / "dashboard.css").read_text(encoding="utf-8")
    js = (static / "dashboard.js").read_text(encoding="utf-8")
    if _STYLE_SLOT not in html or _SCRIPT_SLOT not in html:
        raise RuntimeError("dashboard.html lost its style or script slot")
    html = html.replace(_STYLE_SLOT, css).replace(_SCRIPT_SLOT, js)
    csp = (
        f"default-src 'none'; script-src '{_sha256(js)}'; style-src '{_sha256(css)}'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    body = html.encode("utf-8")
    return Page(body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"', csp)


def install_dashboard(app: FastAPI, current_tenant: Callable[..., Any]) -> None:
    """Add the page and its two read endpoints to ``app`` (``current_tenant``: the API's
    bearer-token dependency, so the endpoints are tenant-scoped like every ``/v1`` route)."""
    by_token = Depends(current_tenant)

    @app.get(DASHBOARD_PATH, include_in_schema=False)
    def dashboard(request: Request) -> Response:
        built = page()
        headers = {
            "ETag": built.etag,
            "Cache-Control": "no-cache",
            "Content-Security-Policy": built.csp,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        }
        if request.headers.get("if-none-match") == built.etag:
            return Response(status_code=304, headers=headers)
        return Response(built.body, media_type="text/html; charset=utf-8", headers=headers)

    @app.get("/v1/host", tags=["dashboard"], response_model=HostView)
    async def host(request: Request, tenant: Tenant = by_token) -> Response:
        store = request.app.state.service.store
        view = await anyio.to_thread.run_sync(host_view, store, tenant.id)
        return Response(view.model_dump_json(), media_type="application/json")

    @app.get("/v1/jobs/{job_id}/result", tags=["jobs"])
    def result(request: Request, job_id: str, tenant: Tenant = by_token) -> Response:
        state = request.app.state.service
        job = state.store.get(job_id, tenant_id=tenant.id)
        path = state.manager.job_dir(job).results / "result.json"
        try:
            # Written atomically by the learner (temp file + rename): never half a document.
            raw = path.read_bytes()
        except OSError:
            raise NotFoundError(f"job {job.id} has no result (yet)") from None
        return Response(raw, media_type="application/json")
