"""The operator's dashboard: one page served by the API itself (``GET /dashboard``).

The page is static: HTML with its stylesheet and script inlined (``api/static/``), no
external library or CDN, charts drawn as inline SVG. It holds no tenant data: the operator
logs in with a tenant token, which the page keeps in ``sessionStorage`` and sends as
``Authorization: Bearer`` to the same ``/v1`` JSON API as the CLI, so everything it shows is
tenant-scoped by the API. A Content-Security-Policy lets only the page's own inline script
and style run (by their SHA-256) and only same-origin requests leave it.

Its data comes from the job, deployment and node routers and from ``GET /v1/host``
(:mod:`deepedge.api.host`); a finished job's decision from ``GET /v1/jobs/{id}/result``.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from fastapi import APIRouter, Request, Response

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


router = APIRouter()


@router.get(DASHBOARD_PATH, include_in_schema=False)
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
